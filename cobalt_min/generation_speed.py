"""Speed for the transformers engine on CPUs (and GPUs), out of the reading path: generation.HFEngine samples
the same tokens without any of it. Each piece computes the same numbers as the plain path (to float
rounding; tests/test_generation.py checks each against it) and leans on transformers or torch internals,
checked where used with a plain fallback said once:

- packed_linears: float32 linears with oneDNN-reordered weights while sampling (CPU only);
- roomy_cache: a KV cache that writes each decode step's keys and values in place (transformers'
  DynamicLayer);
- shared_prefix_prefill: the prompts' prefix that all share run once, the rest in groups of similar length.

bench/RESULTS.md ("Generation on CPU") has what each saves.
"""

import contextlib

import torch

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


def common_prefix_length(token_lists: list[list[int]]) -> int:
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
        print(f"note: transformers {transformers.__version__} has no DynamicLayer as generation_speed.roomy_cache expects: "
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


def shared_prefix_prefill(engine, prompts: list[list[int]], extra_tokens: int):
    """generation.HFEngine's prefill with less work: (logits of each prompt's last token (U, V), the KV cache
    with room for extra_tokens more, attention mask (U, W), position of each last token (U,)), or None
    where this transformers version or the model's cache (sliding-window layers) does not allow it.

    The same numbers as the left-padded batch: (1) the prefix that all prompts share (the system prompt
    and the instructions: most of a first-turn prompt) is run once; (2) the rest of each prompt runs in
    groups of similar length, so that little padding is computed; (3) the pieces are put in place, the
    padding of each row sitting between the shared prefix and its own tokens (attention masks it,
    positions skip it)."""
    DynamicLayer = dynamic_layer_class()
    if DynamicLayer is None:
        return None
    cache = roomy_cache(engine.model.config, extra_tokens)
    if not all(isinstance(layer, DynamicLayer) and not layer.is_sliding for layer in getattr(cache, "layers", [None])):
        return None
    lengths = [len(p) for p in prompts]
    shared = common_prefix_length(prompts) if len(prompts) > 1 else 0
    shared = min(shared, min(lengths) - 1)  # every prompt keeps a token of its own: its logits
    width = max(lengths)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    mask[:, :shared] = 1
    for u, n in enumerate(lengths):
        mask[u, width - (n - shared):] = 1
    mask = mask.to(engine.device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (U, W): real tokens count from 0
    prefix = prefix_kv(engine, prompts[0][:shared]) if shared else None  # (1)
    logits, keys, values = groups_kv(engine, prompts, lengths, shared, width, mask, positions, prefix)  # (2)
    for layer, k, v, pre in zip(cache.layers, keys, values, prefix or [None] * len(keys)):  # (3)
        if pre is not None:
            k[:, :, :shared], v[:, :, :shared] = pre[0], pre[1]
        layer.update(k, v)
    return logits, {engine._cache_arg: cache}, mask, positions[:, -1]


def prefix_kv(engine, prefix: list[int]) -> list:
    """Keys and values of the shared prefix, per layer: [(k, v)], each (1, H, len(prefix), D)."""
    from transformers import DynamicCache
    prefix_cache = DynamicCache(config=engine.model.config)
    engine.model(input_ids=torch.tensor([prefix], device=engine.device), use_cache=True, logits_to_keep=1,
                 **{engine._cache_arg: prefix_cache})
    return [(layer.keys, layer.values) for layer in prefix_cache.layers]


def groups_kv(engine, prompts, lengths, shared, width, mask, positions, prefix):
    """Run each prompt's own tokens (after the shared prefix) in groups of PREFILL_GROUP prompts of
    similar length, attending to the prefix: (last-token logits (U, V), per layer the keys and values
    laid out as the left-padded batch (U, heads, W, head size), the prefix columns still empty)."""
    from transformers import DynamicCache
    keys = values = logits = None
    order = sorted(range(len(prompts)), key=lambda u: lengths[u])
    for start in range(0, len(order), PREFILL_GROUP):
        group = order[start:start + PREFILL_GROUP]
        w = max(lengths[u] for u in group) - shared
        ids = torch.full((len(group), w), engine.tokenizer.pad_token_id, dtype=torch.long)
        for k, u in enumerate(group):
            ids[k, w - (lengths[u] - shared):] = torch.tensor(prompts[u][shared:])
        index = torch.tensor(group, device=engine.device)
        group_mask = torch.cat([mask[index, :shared], mask[index, width - w:]], 1)  # (g, shared + w)
        group_cache = DynamicCache(config=engine.model.config)
        for layer, (k, v) in zip(group_cache.layers, prefix or []):
            layer.update(k.expand(len(group), -1, -1, -1), v.expand(len(group), -1, -1, -1))
        out = engine.model(input_ids=ids.to(engine.device), attention_mask=group_mask,
                           position_ids=positions[index, width - w:], use_cache=True, logits_to_keep=1,
                           **{engine._cache_arg: group_cache}).logits[:, -1]  # (g, V)
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
