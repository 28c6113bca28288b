"""Speed for the transformers engine, out of the reading path: generation.HFEngine's plain decode loop is the
definition, and its fast path (FastSampler, the default on CPUs) samples the same tokens, to float rounding, with
less work. Each piece is tested against the plain loop (tests/test_generation_speed.py):

1. KV reuse across turns (PrefixCache). A feedback turn's prompt is the previous turn's prompt, the response
   sampled to it and the new feedback: the keys and values of all but the feedback were computed last turn.
   Every finished sequence (prompt + sampled tokens) and every prompt is kept, and a new prompt is run only
   from where it stops matching one of them, token id for token id: whatever the chat template writes and
   whatever the history rule of paper §2 keeps of an answer, a match is exact or it ends. Bounded by bytes
   (least recently used out first), emptied when the weights change (train.py's update, load_weights).
2. Continuous batching (Slots). Each row of the decode batch owns a slot of keys and values of its own length;
   a finished row is refilled at once by a waiting request: the batch does not shrink to its slowest rows.
3. The decoder written out (Decoder), for the Llama, Qwen2 and Qwen3 families (checked against the model's own
   forward when the engine starts; any other model samples through the plain loop): q, k and v in one product,
   gate and up in one, every product with its weight reordered once into oneDNN's blocked layout on CPUs;
   attention of one new token per row as two batched products over the slots, the grouped key/value heads
   read where they lie (not copied per query head); bfloat16 products where the CPU multiplies them natively
   (HFEngine's dtype "auto"), with the residual stream, norms, logits and sampling in float32.
4. packed_linears: the plain loop's float32 products with oneDNN-reordered weights (CPU only).

bench/bench_multiturn.py measures the fast path against the plain loop on a multi-turn evaluation
(bench/RESULTS.md, "Generation on CPU").
"""

import collections
import contextlib
import re
import time
from pathlib import Path

import torch
import torch.nn.functional as F

FAMILIES = ("llama", "qwen2", "qwen3")  # decoders that Decoder writes out
ROPE_TYPES = ("default", "linear", "llama3")  # rotary tables that depend on the position alone
SLOT_GROWTH = 64  # the slots' width is a multiple of this
SHARED_AT_LEAST = 32  # a call's prompts that share this many leading tokens or more attend to them once per step


def cpu_multiplies_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX in /proc/cpuinfo): there bf16 products
    run about 2-3x float32's; elsewhere oneDNN emulates them, about 2x slower than float32."""
    try:
        return bool(re.search(r"\b(avx512_bf16|amx_bf16)\b", Path("/proc/cpuinfo").read_text()))
    except OSError:
        return False


def unsupported(model) -> str | None:
    """Why Decoder cannot write this model out (None: it can)."""
    config = model.config
    if config.model_type not in FAMILIES:
        return f"model type {config.model_type!r} (written out: {', '.join(FAMILIES)})"
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) not in ROPE_TYPES:
        return f"rotary embedding {rope.get('rope_type')!r}"
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or []):
        return "sliding-window layers"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r}"
    if not all(hasattr(model, "model") and hasattr(model.model, name) for name in ("embed_tokens", "layers", "norm",
                                                                                   "rotary_emb")):
        return "modules named otherwise"
    return None


class Linear:
    """x -> x @ W.T + b for several nn.Linear layers read as one (q, k and v; gate and up), in `dtype`. On CPUs
    the weight is reordered once into oneDNN's blocked layout: a decode step multiplies a few rows by every weight,
    and the default kernel then costs about twice the time of reading the weights (packed_linears).
    A copy of the weights (the model's stay as they are)."""

    def __init__(self, layers: list, dtype: torch.dtype):
        weight = torch.cat([layer.weight.detach() for layer in layers]).to(dtype)
        biases = [layer.bias.detach() if layer.bias is not None else weight.new_zeros(layer.weight.shape[0])
                  for layer in layers]
        self.bias = None if all(layer.bias is None for layer in layers) else torch.cat(biases).to(dtype)
        self.dtype, self.in_features = dtype, weight.shape[1]
        ops = getattr(torch.ops, "mkldnn", None)
        self.onednn = weight.device.type == "cpu" and torch.backends.mkldnn.is_available() and \
            hasattr(ops, "_linear_pointwise") and hasattr(ops, "_reorder_linear_weight")
        self.weight = ops._reorder_linear_weight(weight) if self.onednn else weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # (N, in) -> (N, out), in self.dtype
        x = x.to(self.dtype)
        if self.onednn:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


class Decoder:
    """The forward pass of a Llama / Qwen2 / Qwen3 decoder written out for sampling: prefill one sequence after
    cached keys and values, or one decode step for every row of the slots. Products in `dtype` (float32, or
    bfloat16 where the CPU multiplies it natively), keys and values stored in it; the residual stream, the norms,
    the softmax and the logits in float32. Built from the model's current weights (a copy, in `dtype`)."""

    def __init__(self, model, dtype: torch.dtype):
        config = model.config
        self.dtype = dtype
        self.n_heads, self.n_kv = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.eps = config.rms_norm_eps
        self.embed = model.model.embed_tokens.weight.detach()  # (V, H): rows are looked up, then made float32
        self.rotary = model.model.rotary_emb
        self.norm = model.model.norm.weight.detach().float()
        self.lm_head = Linear([model.lm_head], torch.float32)  # logits in float32
        self.layers = []
        for layer in model.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append(dict(
                norm_in=layer.input_layernorm.weight.detach().float(),
                qkv=Linear([attn.q_proj, attn.k_proj, attn.v_proj], dtype), o=Linear([attn.o_proj], dtype),
                q_norm=attn.q_norm.weight.detach().float() if hasattr(attn, "q_norm") else None,  # Qwen3
                k_norm=attn.k_norm.weight.detach().float() if hasattr(attn, "k_norm") else None,
                norm_post=layer.post_attention_layernorm.weight.detach().float(),
                gate_up=Linear([mlp.gate_proj, mlp.up_proj], dtype), down=Linear([mlp.down_proj], dtype)))
        self.device = self.norm.device
        self._cos = self._sin = torch.empty(0, self.head_dim, device=self.device)

    def kv_shape(self, n: int) -> tuple:
        """The keys and values of n tokens: (layers, 2, kv heads, n, head size)."""
        return len(self.layers), 2, self.n_kv, n, self.head_dim

    def rope(self, positions: torch.Tensor):
        """cos, sin (N, D) of the model's rotary embedding at these positions (a table grown as needed)."""
        need = int(positions.max()) + 1
        if need > len(self._cos):
            grown = torch.arange(max(need, 2 * len(self._cos)), device=self.device)
            cos, sin = self.rotary(self.norm, grown[None])  # (1, n, D): the model's own tables
            self._cos, self._sin = cos[0].float(), sin[0].float()
        return self._cos[positions], self._sin[positions]

    def _qkv(self, layer: dict, x: torch.Tensor, cos, sin):
        """The attention's inputs for the tokens x (N, H): q (N, heads, D), k and v (N, kv heads, D), q and k rotated
        (together: the product lays out q's heads, then k's, then v's)."""
        h = F.rms_norm(x, x.shape[-1:], layer["norm_in"], self.eps)
        heads = layer["qkv"](h).float().view(len(x), -1, self.head_dim)  # (N, heads + 2 kv heads, D)
        nq, nqk = self.n_heads, self.n_heads + self.n_kv
        if layer["q_norm"] is not None:  # Qwen3: each head of q and k normalised before the rotation
            heads = torch.cat([F.rms_norm(heads[:, :nq], (self.head_dim,), layer["q_norm"], self.eps),
                               F.rms_norm(heads[:, nq:nqk], (self.head_dim,), layer["k_norm"], self.eps),
                               heads[:, nqk:]], dim=1)
        qk = rotate(heads[:, :nqk], cos[:, None], sin[:, None])
        return qk[:, :nq], qk[:, nq:], heads[:, nqk:]

    def _rest(self, layer: dict, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """After attention: the output product and the residual, then the SwiGLU MLP and its residual."""
        x = x + layer["o"](attended.reshape(len(x), -1)).float()
        h = F.rms_norm(x, x.shape[-1:], layer["norm_post"], self.eps)
        gate, up = layer["gate_up"](h).chunk(2, dim=-1)
        return x + layer["down"](F.silu(gate) * up).float()

    def logits(self, x: torch.Tensor) -> torch.Tensor:  # (N, H) -> (N, V), float32
        return self.lm_head(F.rms_norm(x, x.shape[-1:], self.norm, self.eps))

    @torch.no_grad()
    def prefill(self, ids: list[int], prefix: torch.Tensor | None):
        """Run the tokens `ids` after the cached keys and values `prefix` (kv_shape(c), or None: c = 0) ->
        (the logits of the last token (V,), the keys and values of the whole sequence, kv_shape(c + len(ids)))."""
        c, n = (prefix.shape[3] if prefix is not None else 0), len(ids)
        kv = torch.empty(self.kv_shape(c + n), dtype=self.dtype, device=self.device)
        if c:
            kv[:, :, :, :c] = prefix
        positions = torch.arange(c, c + n, device=self.device)
        cos, sin = self.rope(positions)
        causal = torch.arange(c + n, device=self.device)[None, :] <= positions[:, None]  # (n, c + n)
        x = self.embed[torch.tensor(ids, device=self.device)].float()  # (n, H)
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, x, cos, sin)
            kv[i, 0, :, c:], kv[i, 1, :, c:] = k.transpose(0, 1), v.transpose(0, 1)
            attended = F.scaled_dot_product_attention(q.transpose(0, 1)[None].to(self.dtype), kv[i, 0][None],
                                                      kv[i, 1][None], attn_mask=causal, enable_gqa=True)
            x = self._rest(layer, x, attended[0].transpose(0, 1).float())  # (1, heads, n, D) -> (n, heads, D)
        return self.logits(x[-1:])[0], kv

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, slots: "Slots", shared: torch.Tensor | None = None) -> torch.Tensor:
        """One decode step: each of the first R rows of the slots takes its token (R,) at the position after its
        cached ones, stores that token's keys and values there, and attends to all of its own -> logits (R, V).
        shared: the keys and values of the P tokens that every row's sequence begins with (kv_shape(P)); the slots
        then hold each row's tokens after them. Attention for one query token per row: q of the g query heads that
        share a key/value head (R, kv, g, D) times that head's keys, softmax over the row's columns, times its
        values; the shared columns as one product for all rows (read once, not once per row)."""
        r, g, p = len(tokens), self.n_heads // self.n_kv, (shared.shape[3] if shared is not None else 0)
        lengths = slots.lengths[:r]  # (R,) cached tokens per row after the shared ones: the new one goes there
        slots.room(int(lengths.max()) + 1)
        rows = torch.arange(r, device=self.device)
        cos, sin = self.rope(p + lengths)
        # The columns read: float32 products take the first `width` columns where they lie; 16-bit batched products
        # would copy such a view first, so they read every column of the slots (one contiguous block). Columns
        # beyond a row's own are masked out.
        width = int(lengths.max()) + 1 if self.dtype == torch.float32 else slots.k.shape[3]
        beyond = torch.arange(width, device=self.device)[None, :] > lengths[:, None]  # (R, W)
        bias = torch.zeros(beyond.shape, device=self.device).masked_fill_(beyond, float("-inf"))[:, None, None]
        x = self.embed[tokens].float()  # (R, H)
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, x, cos, sin)
            keys, values = slots.k[i, :r, :, :width], slots.v[i, :r, :, :width]  # (R, kv, W, D)
            keys[rows, :, lengths], values[rows, :, lengths] = k.to(self.dtype), v.to(self.dtype)
            q = (q * self.head_dim ** -0.5).view(r, self.n_kv, g, -1).to(self.dtype)  # (R, kv, g, D), scaled
            scores = torch.matmul(q, keys.transpose(-1, -2)) + bias  # (R, kv, g, W), float32
            if p:  # every row's queries at once against the shared keys: (kv, R g, D) x (kv, D, P)
                by_head = q.transpose(0, 1).reshape(self.n_kv, r * g, -1)
                shared_scores = torch.matmul(by_head, shared[i, 0].transpose(-1, -2))  # (kv, R g, P)
                scores = torch.cat([shared_scores.view(self.n_kv, r, g, p).transpose(0, 1), scores], dim=-1)
            weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(self.dtype)  # (R, kv, g, P + W)
            attended = torch.matmul(weights[..., p:], values)  # (R, kv, g, D)
            if p:
                by_head = weights[..., :p].transpose(0, 1).reshape(self.n_kv, r * g, p)
                attended += torch.matmul(by_head, shared[i, 1]).view(self.n_kv, r, g, -1).transpose(0, 1)
            x = self._rest(layer, x, attended.float())
        slots.lengths[:r] += 1
        return self.logits(x)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The rotary embedding as transformers' Llama applies it: x cos + rotate_half(x) sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class Slots:
    """The keys and values of the decode batch's rows, each of its own length: k, v (layers, S, kv heads, Wcap,
    head size) and lengths (S,). Rows 0..R-1 are the live ones; a finished row is filled by the last live row
    (move), and new rows are added after them (put). Made as wide as a call needs (its longest prompt and its
    new tokens): widening later copies them all."""

    def __init__(self, decoder: Decoder, rows: int, width: int):
        shape = (len(decoder.layers), rows, decoder.n_kv, 0, decoder.head_dim)
        self.k = torch.zeros(shape, dtype=decoder.dtype, device=decoder.device)
        self.v = torch.zeros_like(self.k)
        self.lengths = torch.zeros(rows, dtype=torch.long, device=decoder.device)
        self.room(width)

    def room(self, width: int) -> None:
        """Make the slots at least `width` tokens wide."""
        if width > self.k.shape[3]:
            wider = SLOT_GROWTH * -(-width // SLOT_GROWTH)
            for name in ("k", "v"):
                old = getattr(self, name)
                new = old.new_zeros(*old.shape[:3], wider, old.shape[4])  # (zeros: masked columns stay finite)
                new[:, :, :, :old.shape[3]] = old
                setattr(self, name, new)

    def put(self, row: int, kv: torch.Tensor) -> None:
        """Row `row` holds the sequence whose keys and values are kv (layers, 2, kv heads, n, D)."""
        n = kv.shape[3]
        self.room(n)
        self.k[:, row, :, :n], self.v[:, row, :, :n] = kv[:, 0], kv[:, 1]
        self.lengths[row] = n

    def kv_of(self, row: int, shared: torch.Tensor | None) -> torch.Tensor:
        """A copy of the keys and values of row `row`'s sequence, the shared ones it begins with (kv_shape(P), or
        None) and the n it holds: (layers, 2, kv heads, P + n, D)."""
        n, p = int(self.lengths[row]), (shared.shape[3] if shared is not None else 0)
        kv = self.k.new_empty(self.k.shape[0], 2, self.k.shape[2], p + n, self.k.shape[4])
        if p:
            kv[:, :, :, :p] = shared
        kv[:, 0, :, p:], kv[:, 1, :, p:] = self.k[:, row, :, :n], self.v[:, row, :, :n]
        return kv

    def move(self, source: int, target: int) -> None:
        """Row `target` takes over what row `source` holds."""
        n = int(self.lengths[source])
        self.k[:, target, :, :n], self.v[:, target, :, :n] = self.k[:, source, :, :n], self.v[:, source, :, :n]
        self.lengths[target] = n


class PrefixCache:
    """Keys and values of earlier sequences, found by the longest run of leading token ids a new sequence shares
    with one of them. An index maps the chained hash of every whole block of BLOCK leading tokens to the entries
    that begin with those blocks; the match found at the deepest block is then measured token by token. At most
    max_bytes, the least recently used entries out first; an entry that a newer one extends entirely (a prompt,
    once its response is added) leaves when the newer one comes."""

    BLOCK = 16

    def __init__(self, max_bytes: int):
        self.max_bytes, self.bytes = max_bytes, 0
        self.entries: collections.OrderedDict = collections.OrderedDict()  # id -> (tokens, kv), oldest first
        self.index: dict = {}  # hash of the first k * BLOCK tokens -> {ids of the entries that begin with them}
        self._next_id = 0

    def _block_hashes(self, tokens: list[int]) -> list[int]:
        hashes, h = [], 0
        for start in range(0, len(tokens) - self.BLOCK + 1, self.BLOCK):
            h = hash((h, tuple(tokens[start:start + self.BLOCK])))
            hashes.append(h)
        return hashes

    def _longest(self, tokens: list[int]):
        """(entry id, shared leading tokens) of the entry found for tokens, or (None, 0)."""
        found = None
        for h in self._block_hashes(tokens):
            if h not in self.index:
                break
            found = max(self.index[h])  # (any of them shares these blocks: the newest)
        if found is None:
            return None, 0
        return found, common_prefix_length([self.entries[found][0], tokens])

    def find(self, tokens: list[int]):
        """(m, keys and values of tokens[:m] (layers, 2, kv heads, m, D), a view) for the longest cached run m of
        leading tokens; (0, None) when none is cached."""
        found, m = self._longest(tokens)
        if not m:
            return 0, None
        self.entries.move_to_end(found)
        return m, self.entries[found][1][:, :, :, :m]

    def add(self, tokens: list[int], kv: torch.Tensor) -> None:
        """Keep kv (layers, 2, kv heads, len(tokens), D), the keys and values of tokens."""
        if len(tokens) < self.BLOCK or self.max_bytes <= 0:
            return
        found, m = self._longest(tokens)
        if found is not None and m == len(self.entries[found][0]):  # the new sequence extends it: it adds nothing
            self._drop(found)
        size = kv.numel() * kv.element_size()
        while self.entries and self.bytes + size > self.max_bytes:
            self._drop(next(iter(self.entries)))
        if size > self.max_bytes:
            return
        key, self._next_id = self._next_id, self._next_id + 1
        self.entries[key] = (list(tokens), kv)
        self.bytes += size
        for h in self._block_hashes(tokens):
            self.index.setdefault(h, set()).add(key)

    def _drop(self, key: int) -> None:
        tokens, kv = self.entries.pop(key)
        self.bytes -= kv.numel() * kv.element_size()
        for h in self._block_hashes(tokens):
            self.index[h].discard(key)
            if not self.index[h]:
                del self.index[h]

    def clear(self) -> None:
        self.entries.clear()
        self.index.clear()
        self.bytes = 0


def weights_version(model) -> int:
    """A number that changes whenever a weight of the model is written in place (an optimizer step,
    load_weights' copy_): the sum of the parameters' version counters."""
    return sum(p._version for p in model.parameters())


class FastSampler:
    """HFEngine.sample's fast path: continuous batching over Slots with the Decoder, prompts run after what the
    PrefixCache holds of them. Samples as the plain loop does: request j of a prompt draws one uniform per token
    from its own generator (seeds), sample_tokens picks the token, a row ends at EOS, at the end of its first code
    block (stop_after_code) or at max_new_tokens. stats: tokens and seconds of prefill and decoding."""

    def __init__(self, engine, pick, dtype: torch.dtype, cache_bytes: int):
        self.engine, self.pick, self.dtype = engine, pick, dtype  # pick: generation.sample_tokens
        self.cache = PrefixCache(cache_bytes)
        self.decoder, self.version, self.slots = None, None, None
        self.stats = engine.stats  # (HFEngine's: the same counts as the plain loop's)

    def current_decoder(self) -> Decoder:
        """The decoder of the model's current weights; a change of weights also empties the prefix cache."""
        version = weights_version(self.engine.model)
        if self.decoder is None or version != self.version:
            self.decoder, self.version, self.slots = None, version, None  # (the old copies freed first)
            self.cache.clear()
            self.decoder = Decoder(self.engine.model, self.dtype)
        return self.decoder

    def slots_for(self, decoder: Decoder, rows: int, width: int) -> "Slots":
        """Slots for a call: the last call's when they are large enough (allocating and zeroing gigabytes costs
        about a second), else new ones. They are the decode batch's memory, kept until the weights change."""
        if self.slots is None or self.slots.k.shape[1] < rows or self.slots.k.shape[3] < width:
            self.slots = None  # (freed before the new ones are made)
            self.slots = Slots(decoder, rows, width)
        self.slots.lengths.zero_()
        return self.slots

    def prefill(self, decoder: Decoder, prompt: list[int]):
        """(logits of the prompt's last token (V,), its keys and values), run after what the cache holds of it."""
        start = time.perf_counter()
        m, prefix = self.cache.find(prompt)
        m = min(m, len(prompt) - 1)  # the last token is always run: its logits are the first sample's
        logits, kv = decoder.prefill(prompt[m:], prefix[:, :, :, :m] if m else None)
        self.cache.add(prompt, kv)
        self.stats["prefill_tokens"] += len(prompt) - m
        self.stats["reused_tokens"] += m
        self.stats["prefill_s"] += time.perf_counter() - start
        return logits, kv

    def shared_kv(self, decoder: Decoder, tokens: list[int]) -> torch.Tensor:
        """The keys and values of the tokens a call's prompts all begin with: the cache's when it holds them all
        (as from the second turn on), else run as a prompt of their own (and counted as one)."""
        m, kv = self.cache.find(tokens)
        return kv if m == len(tokens) else self.prefill(decoder, tokens)[1]

    def sample(self, prompts: list[list[int]], seeds: list[int], n: int, temperature: float, top_p: float,
               max_new_tokens: int) -> dict:
        """{request: sampled tokens} for request r = (prompt i, sample j) = i * n + j, seeded seeds[i] + j."""
        decoder = self.current_decoder()
        waiting = collections.deque(sorted(range(len(prompts) * n), key=lambda r: len(prompts[r // n])))
        # the tokens every prompt begins with (the system prompt, the instructions): run once, read once per step
        p = common_prefix_length(prompts) if len(prompts) > 1 else 0
        p = min(p, min(map(len, prompts)) - 1) if p >= SHARED_AT_LEAST else 0
        shared = self.shared_kv(decoder, prompts[0][:p]) if p else None
        slots = self.slots_for(decoder, min(self.engine.batch_size, len(waiting)),
                               max(map(len, prompts)) - p + max_new_tokens)
        rows: list[dict] = []  # live rows, in slot order: request, generator, prompt, sampled tokens
        prefilled: dict = {}  # prompt i -> (logits, kv, samples still to place)
        done: dict = {}
        logits = None  # (R, V): the next token's logits of every live row
        while waiting or rows:
            # ---- fill free rows with waiting requests (their prompts run once for all their samples)
            fresh = []
            while waiting and len(rows) < len(slots.lengths):
                r = waiting.popleft()
                i = r // n
                if i not in prefilled:
                    prefilled[i] = [*self.prefill(decoder, prompts[i]), n]
                first, kv, left = prefilled[i]
                prefilled[i][2] -= 1
                if left == 1:
                    del prefilled[i]
                slots.put(len(rows), kv[:, :, :, p:])  # (the slots hold what follows the shared tokens)
                rows.append(dict(request=r, prompt=prompts[i], tokens=[],
                                 generator=torch.Generator().manual_seed(seeds[i] + r % n)))
                fresh.append(first)
            if fresh:
                logits = torch.cat([logits, torch.stack(fresh)]) if logits is not None else torch.stack(fresh)
            # ---- one token for every row, each from its own random stream
            uniforms = torch.tensor([torch.rand((), generator=row["generator"]).item() for row in rows]) \
                if temperature > 0 else torch.zeros(len(rows))
            picked = self.pick(logits, uniforms, temperature, top_p).tolist()
            ended = []
            for k, (row, token) in enumerate(zip(rows, picked)):
                row["tokens"].append(token)
                if len(row["tokens"]) >= max_new_tokens or token in self.engine.eos_ids or \
                        self.engine._closes_code_block(row["tokens"]):
                    ended.append(k)
            # ---- finished rows: keep what they computed (for the next turn); the last live row takes their slot
            for k in ended:
                row = rows[k]
                done[row["request"]] = row["tokens"]
                if len(row["tokens"]) > 1:  # the cache holds the prompt and every sampled token but the last
                    self.cache.add(row["prompt"] + row["tokens"][:-1], slots.kv_of(k, shared))
            for k in reversed(ended):
                if k != len(rows) - 1:
                    slots.move(len(rows) - 1, k)
                    rows[k] = rows[-1]
                rows.pop()
            if not rows:
                logits = None
                continue
            # ---- the next token's logits of the rows still going
            start = time.perf_counter()
            last = torch.tensor([row["tokens"][-1] for row in rows], device=decoder.device)
            logits = decoder.step(last, slots, shared)
            self.stats["decode_s"] += time.perf_counter() - start
            self.stats["decode_steps"] += 1
            self.stats["decode_tokens"] += len(rows)
        return done


def plan_fast_path(model, decode: str, dtype, kv_cache_gb: float | None) -> tuple[dict | None, str]:
    """HFEngine's choice: (FastSampler's dtype and cache_bytes, or None for the plain loop; one sentence that says
    which and why). decode: auto (the fast path on CPUs, for the models Decoder writes out), fast (required), plain.
    dtype: the engine's (--dtype): auto samples in bfloat16 on a CPU that multiplies it natively, else in float32
    (on a GPU: the model's dtype). kv_cache_gb: the prefix cache's bound (None: a quarter of the memory free now)."""
    if decode not in ("auto", "fast", "plain"):
        raise ValueError(f"decode must be auto, fast or plain, not {decode!r}")
    device = next(model.parameters()).device
    plain = "transformers engine: the plain decode loop"
    if decode == "plain":
        return None, f"{plain} (--hf-decode plain)"
    if decode == "auto" and device.type != "cpu":
        return None, f"{plain} (the fast one is checked on CPUs so far: --hf-decode fast to use it on {device.type})"
    why = unsupported(model) or check_decoder(model)
    if why:
        if decode == "fast":
            raise SystemExit(f"error: --hf-decode fast cannot run this model: {why}; use --hf-decode auto or plain")
        return None, f"{plain} (the fast one does not run this model: {why})"
    if isinstance(dtype, torch.dtype) or dtype != "auto":
        compute, reason = (dtype if isinstance(dtype, torch.dtype) else getattr(torch, dtype)), "as asked"
    elif device.type != "cpu":
        compute, reason = next(model.parameters()).dtype, "the model's"
    elif cpu_multiplies_bf16():
        compute, reason = torch.bfloat16, "this CPU multiplies bfloat16 natively"
    else:
        compute, reason = torch.float32, "this CPU has no native bfloat16 products"
    cache_bytes = int((kv_cache_gb if kv_cache_gb is not None else free_memory(device) / 4 / 2**30) * 2**30)
    return dict(dtype=compute, cache_bytes=cache_bytes), (
        f"transformers engine: the fast decoder ({model.config.model_type}), products in "
        f"{str(compute).removeprefix('torch.')} ({reason}), keys and values kept across turns up to "
        f"{cache_bytes / 2**30:.1f} GiB")


def free_memory(device: torch.device) -> int:
    """Bytes free now: the GPU's, or the machine's available memory (/proc/meminfo; 16 GiB when unknown)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        return int(re.search(r"MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text())[1]) * 1024
    except (OSError, TypeError):
        return 16 * 2**30


def check_decoder(model) -> str | None:
    """Run a few tokens through the model's own forward and through Decoder (a prefill, then decode steps), both
    in the model's dtype: None when the logits agree (to 1e-3 of their scale in float32, 5e-2 in 16 bits), else
    what differs. Catches a model of a written-out family that computes something else."""
    dtype = next(model.parameters()).dtype
    ids = torch.randint(0, model.config.vocab_size, (1, 10), generator=torch.Generator().manual_seed(0))
    ids = ids.to(next(model.parameters()).device)
    with torch.no_grad():
        expected = model(input_ids=ids).logits[0, 5:].float()  # (5, V): after tokens 6..10
        decoder = Decoder(model, dtype)
        first, kv = decoder.prefill(ids[0, :6].tolist(), None)
        slots = Slots(decoder, 1, 16)
        slots.put(0, kv)
        got = torch.stack([first] + [decoder.step(ids[0, t:t + 1], slots)[0] for t in range(6, 10)])
    error = float((got - expected).abs().max() / expected.abs().max().clamp(min=1e-6))
    return None if error < (1e-3 if dtype == torch.float32 else 5e-2) else \
        f"its logits differ from the model's by {error:.1e} of their scale"


def common_prefix_length(token_lists: list[list[int]]) -> int:
    """How many leading tokens all the lists share."""
    first = token_lists[0]
    n = min(len(t) for t in token_lists)
    for other in token_lists[1:]:
        n = next((i for i in range(n) if other[i] != first[i]), n)
    return n


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
