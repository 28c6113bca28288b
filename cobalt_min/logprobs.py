"""Token log-probabilities of sampled completions: what GRPO's ratio and KL are made of.

Definition (naive_token_logprobs): run the model on prompt + completion, take the float32
log-softmax of the logits over the whole vocabulary at each completion position, pick the sampled
token. Everything else here computes exactly that, with less memory and less work:
- memory: the (tokens, vocabulary) logits and their float32 log-softmax are never stored
  (_ChunkedTokenLogprob: one chunk of tokens at a time, forward and backward; 151,936 x 4 bytes per
  token for Qwen3's vocabulary would otherwise dominate a long completion's memory);
- work: a GRPO batch holds G completions of each prompt. completion_logprobs runs each prompt once
  and lets its G completions attend to that prompt's keys and values (the same attention, so the same
  numbers up to float rounding), instead of running the prompt G times: for multi-turn contexts longer
  than their completions that is most of the forward and backward. Under gradient checkpointing too
  (the 8B recipe): each layer's replay in backward reads the stored prompt keys and values again.
Shapes use the letters of train.py's glossary: R rows (sampled completions), L their full width (prompt +
completion), U distinct prompts, P prompt width, C completion width, N tokens, V vocabulary, H hidden size.
"""

import contextlib
import dataclasses
import inspect
import logging

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.modeling_layers import GradientCheckpointingLayer


# ----------------------------------------------------------------------------- the definition: full sequences


def naive_token_logprobs(model, input_ids, attention_mask, completion_mask, *, temperature: float = 1.0):
    """The definition: full logits, float32 log-softmax over the vocabulary, gather -> (R, L): entry [r, l]
    is log p(input_ids[r, l] | input_ids[r, :l]) where completion_mask[r, l] is 1, else 0 (pack_sequences
    builds such rows). completion_logprobs computes the same numbers for train.py without the (R, L, V)
    tensors. Memory: R x L x V floats (~9.7 GB for 8 x 2048 tokens at V = 151,936)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float() / temperature
    logp = logits.log_softmax(-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # (R, L-1)
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    out[:, 1:] = logp * completion_mask[:, 1:]
    return out


def pack_sequences(prompts: list[list[int]], completions: list[list[int]], pad_id: int, device=None):
    """Right-pad prompt + completion token lists -> (input_ids, attention_mask, completion_mask), each (R, L).

    The completion mask comes from the lengths, never from comparing tokens with pad_id: many
    tokenizers use the EOS token as padding, and masking "pad" tokens would then also mask the EOS
    that ends each completion, which must be learned like any other token (it decides when to stop)."""
    lengths = [len(p) + len(c) for p, c in zip(prompts, completions)]
    L = max(lengths)
    R = len(prompts)
    input_ids = torch.full((R, L), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((R, L), dtype=torch.long)
    completion_mask = torch.zeros((R, L), dtype=torch.long)
    for r, (p, c) in enumerate(zip(prompts, completions)):
        input_ids[r, :len(p) + len(c)] = torch.tensor(list(p) + list(c), dtype=torch.long)
        attention_mask[r, :len(p) + len(c)] = 1
        completion_mask[r, len(p):len(p) + len(c)] = 1
    return input_ids.to(device), attention_mask.to(device), completion_mask.to(device)


# ----------------------------------------------------------------------------- train.py's pass: shared prompts


@dataclasses.dataclass
class SequenceBatch:
    """Completions and the prompts they continue, each prompt stored once.

    prompt_ids, prompt_mask: (U, P), left-padded (every prompt ends at column P - 1);
    completion_ids, completion_mask: (R, C), right-padded; prompt_index: (R,), the prompt of each row.
    The masks come from lengths, never from comparing tokens with the pad id: many tokenizers pad with
    EOS, and the EOS that ends a completion must be learned like any other token (it decides when to stop)."""
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    prompt_index: torch.Tensor

    def select(self, row_ids: torch.Tensor) -> "SequenceBatch":
        """The sub-batch of these completion rows, with only the prompts they use (a micro-batch)."""
        used, index = torch.unique(self.prompt_index[row_ids], return_inverse=True)
        pmask = self.prompt_mask[used]
        cmask = self.completion_mask[row_ids]
        p_width = int(pmask.sum(1).max())  # drop columns that are padding in every kept row
        c_width = max(1, int(cmask.sum(1).max()))
        return SequenceBatch(self.prompt_ids[used][:, -p_width:], pmask[:, -p_width:],
                             self.completion_ids[row_ids][:, :c_width], cmask[:, :c_width], index)

    def fields(self):
        return self.prompt_ids, self.prompt_mask, self.completion_ids, self.completion_mask, self.prompt_index


def pack_groups(prompts: list[list[int]], completions: list[list[int]], prompt_index: list[int], pad_id: int,
                device=None) -> SequenceBatch:
    """Token lists -> SequenceBatch. prompts: the U distinct prompts; completions: R token lists;
    prompt_index[r]: which prompt completion r continues (GRPO: the G samples of a context)."""
    P, C = max(len(p) for p in prompts), max(1, max(len(c) for c in completions))
    prompt_ids = torch.full((len(prompts), P), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(prompts), P), dtype=torch.long)
    for u, p in enumerate(prompts):
        prompt_ids[u, P - len(p):] = torch.tensor(p, dtype=torch.long)
        prompt_mask[u, P - len(p):] = 1
    completion_ids = torch.full((len(completions), C), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((len(completions), C), dtype=torch.long)
    for r, c in enumerate(completions):
        completion_ids[r, :len(c)] = torch.tensor(c, dtype=torch.long)
        completion_mask[r, :len(c)] = 1
    return SequenceBatch(prompt_ids.to(device), prompt_mask.to(device), completion_ids.to(device),
                         completion_mask.to(device), torch.tensor(prompt_index, dtype=torch.long, device=device))


def completion_logprobs(model, batch: SequenceBatch, *, temperature: float = 1.0, chunk_tokens: int = 256,
                        share_prompts: bool | None = None) -> torch.Tensor:
    """log p(completion token | prompt, earlier completion tokens) -> (R, C) float32, 0 at padding.

    share_prompts (default: wherever the model allows it, see _why_not_shared): one decoder pass over the
    U prompts, then one pass over the R completions, row r attending to the keys and values of its
    prompt (batch.prompt_index[r]) and then to its own. Otherwise one pass over each row's prompt +
    completion. Both give the logits of the same positions with the same attention, then the chunked LM
    head (_ChunkedTokenLogprob). `model` is a Hugging Face causal LM whose logits are lm_head(final hidden).

    Under gradient checkpointing each decoder layer keeps only its input (U x P prompt tokens and R x C
    completion tokens, fewer than the R x (P + C) of one pass per row) and runs again in backward; the
    caches below make that replay read exactly what the first run read (_PromptCache, _SharedPromptCache)."""
    if getattr(model.config, "final_logit_softcapping", None) or getattr(model.config, "logits_scaling", None):
        raise ValueError(f"{type(model).__name__} post-processes its logits; use naive_token_logprobs")
    reason = _why_not_shared(model)
    if share_prompts and reason:
        raise ValueError(f"cannot share prompts: {reason}")
    if share_prompts is None:
        share_prompts = reason is None
        if reason and reason not in _WARNED:
            _WARNED.add(reason)
            print(f"warning: completion_logprobs runs each row's prompt again ({reason})", flush=True)
    decoder = model.get_decoder()
    cache_arg = _cache_argument(decoder)
    pmask, cmask, index = batch.prompt_mask, batch.completion_mask, batch.prompt_index
    P = pmask.shape[1]
    if share_prompts:
        with _layers_keep_cache(decoder):
            prompts = _PromptCache()
            prompt_pos = (pmask.cumsum(1) - 1).clamp(min=0)  # (U, P)
            prompt_hidden = decoder(input_ids=batch.prompt_ids, attention_mask=pmask, position_ids=prompt_pos,
                                    use_cache=True, **{cache_arg: prompts}).last_hidden_state  # (U, P, H)
            completion_pos = pmask.sum(1)[index][:, None] + torch.arange(cmask.shape[1], device=cmask.device)  # (R, C)
            hidden = decoder(input_ids=batch.completion_ids, attention_mask=torch.cat([pmask[index], cmask], 1),
                             position_ids=completion_pos, use_cache=True,
                             **{cache_arg: _SharedPromptCache(prompts, index)}).last_hidden_state  # (R, C, H)
        # Token t of a completion is predicted from the hidden state before it: the prompt's last for t = 0.
        hidden = torch.cat([prompt_hidden[index, -1:], hidden[:, :-1]], 1)  # (R, C, H)
    else:
        mask = torch.cat([pmask[index], cmask], 1)  # (R, P + C)
        hidden = decoder(input_ids=torch.cat([batch.prompt_ids[index], batch.completion_ids], 1), attention_mask=mask,
                         position_ids=(mask.cumsum(1) - 1).clamp(min=0)).last_hidden_state[:, P - 1:-1]  # (R, C, H)
    valid = cmask.bool()
    head = model.get_output_embeddings()
    logp = _ChunkedTokenLogprob.apply(hidden[valid], head.weight, head.bias, batch.completion_ids[valid],
                                      float(temperature), int(chunk_tokens))  # (N,) N = completion tokens
    return torch.zeros(cmask.shape, dtype=torch.float32, device=cmask.device).masked_scatter(valid, logp)


class LogprobModel(torch.nn.Module):
    """A causal LM whose forward returns completion_logprobs. Wrap THIS with DDP/FSDP
    (accelerator.prepare) so that the log-prob computation runs inside the wrapper's forward (gradient
    sync, parameter gathering), while the chunked LM head stays outside Hugging Face's own forward."""

    def __init__(self, lm, chunk_tokens: int = 256):
        super().__init__()
        self.lm = lm
        self.chunk_tokens = chunk_tokens

    def forward(self, prompt_ids, prompt_mask, completion_ids, completion_mask, prompt_index, temperature: float = 1.0):
        batch = SequenceBatch(prompt_ids, prompt_mask, completion_ids, completion_mask, prompt_index)
        return completion_logprobs(self.lm, batch, temperature=temperature, chunk_tokens=self.chunk_tokens)


# ----------------------------------------------------------------------------- tied to library internals
# Below, the pieces tied to torch and transformers internals: a hand-written autograd function, DynamicCache
# subclasses, checkpointed layers that keep a cache; each checked against the installed version where it is
# used (_why_not_shared), with the plain path and a warning otherwise.


def _chunk_logits(h, weight, bias, temperature):
    """float32 logits of one chunk, divided by the sampling temperature, without extra copies."""
    logits = F.linear(h, weight, bias)
    logits = logits.float() if logits.dtype != torch.float32 else logits
    return logits.div_(temperature) if temperature != 1.0 else logits


class _ChunkedTokenLogprob(torch.autograd.Function):
    """log p(y) = (h W^T)[y] / tau - logsumexp(h W^T / tau), computed a chunk of tokens at a time.

    Forward keeps only one (chunk, V) float32 block of logits alive; backward recomputes each block
    and applies d logp / d logits = onehot(y) - softmax(logits) directly, so neither the (N, V)
    logits nor their float32 log-softmax are ever stored. The price is one extra h W^T per chunk in
    backward (the LM head only, not the transformer)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk):
        # hidden (N, H), weight (V, H), targets (N,) -> logp (N,) float32
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        for s in range(0, hidden.shape[0], chunk):
            logits = _chunk_logits(hidden[s:s + chunk], weight, bias, temperature)  # (c, V) float32
            out[s:s + chunk] = logits.gather(1, targets[s:s + chunk, None]).squeeze(1) - logits.logsumexp(1)
        ctx.save_for_backward(hidden, weight, bias, targets)
        ctx.temperature, ctx.chunk = temperature, chunk
        return out

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, bias, targets = ctx.saved_tensors
        tau, chunk = ctx.temperature, ctx.chunk
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if need_h else None
        # The LM head's gradient in the weight's own dtype (bf16 under FSDP's compute dtype, as FSDP keeps every
        # other layer's), each chunk's product added in place: no float32 vocabulary x hidden buffer (2.5 GB
        # for Qwen3-8B) and no temporary of that size per chunk.
        grad_w = torch.zeros_like(weight) if need_w else None
        grad_b = torch.zeros_like(bias, dtype=torch.float32) if (need_b and bias is not None) else None
        for s in range(0, hidden.shape[0], chunk):
            h = hidden[s:s + chunk]
            logits = _chunk_logits(h, weight, bias, tau)
            g = grad_out[s:s + chunk, None]  # (c, 1)
            # d/dlogits of g * (logits[y] - logsumexp) = g * (onehot(y) - softmax), then the 1/tau.
            # Computed in place in the logits buffer: one (c, V) float32 block alive at a time.
            grad_logits = logits.sub_(logits.logsumexp(1, keepdim=True)).exp_().mul_(-g)
            grad_logits.scatter_add_(1, targets[s:s + chunk, None], g)
            if tau != 1.0:
                grad_logits.div_(tau)
            if need_h:
                grad_h[s:s + chunk] = (grad_logits.to(weight.dtype) @ weight).to(hidden.dtype)
            if need_w:
                grad_w.addmm_(grad_logits.t().to(weight.dtype), h.to(weight.dtype))
            if grad_b is not None:
                grad_b += grad_logits.sum(0)
        grad_b = grad_b.to(bias.dtype) if grad_b is not None else None
        return grad_h, grad_w, grad_b, None, None, None


class _PromptCache(DynamicCache):
    """The prompt pass's cache. Each layer stores its prompt keys and values once: a checkpointed layer
    runs again in backward, and a second update must not append them a second time (the replay
    attends to the keys it has just recomputed, equal to the stored ones)."""

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if layer_idx < len(self.layers) and self.layers[layer_idx].get_seq_length() > 0:
            return key_states, value_states
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


class _SharedPromptCache(DynamicCache):
    """The completion pass's cache: row r attends to the stored keys and values of prompt index[r], then
    to its completion's own (torch.cat, differentiable: the completions' gradient reaches the prompt
    pass). It stores nothing, so a checkpointed layer's replay in backward sees the same states."""

    def __init__(self, prompts: _PromptCache, index: torch.Tensor):
        super().__init__()
        self.layers, self.index = prompts.layers, index  # the prompt lengths the attention mask is built from

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        layer = self.layers[layer_idx]
        return (torch.cat([layer.keys[self.index], key_states], -2),
                torch.cat([layer.values[self.index], value_states], -2))


_WARNED = set()


def _why_not_shared(model) -> str | None:
    """Why the prompt cannot be shared by its completions in this model, or None when it can."""
    layer_types = getattr(model.config, "layer_types", None) or []
    if any(kind != "full_attention" for kind in layer_types):
        return f"{type(model).__name__} has {sorted(set(layer_types) - {'full_attention'})} layers"
    if not (_checkpointing(model) and model.training and torch.is_grad_enabled()):
        return None
    if not hasattr(GradientCheckpointingLayer, "_can_checkpoint_with_cache"):
        return "this transformers version drops the KV cache under gradient checkpointing"
    layer = next((m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)), None)
    func = getattr(layer, "_gradient_checkpointing_func", None)
    if getattr(func, "keywords", {}).get("use_reentrant", True) is not False:
        return "reentrant gradient checkpointing passes no gradient through the KV cache: enable it with " \
               "gradient_checkpointing_kwargs={'use_reentrant': False}"
    return None


@contextlib.contextmanager
def _layers_keep_cache(decoder):
    """Let checkpointed decoder layers take the KV cache (transformers drops it from layers that do not
    declare they can: a replay of a layer that appends to its cache would append twice; ours do not)."""
    layers = [m for m in decoder.modules() if isinstance(m, GradientCheckpointingLayer)]
    # transformers' notice that it sets use_cache=False under checkpointing: the caches given are used all the same
    notices = [logging.getLogger(f"transformers.{name}") for name in ("modeling_layers", "utils.generic")]
    levels = [n.level for n in notices]
    for n in notices:
        n.setLevel(logging.ERROR)
    for layer in layers:
        layer._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for n, level in zip(notices, levels):
            n.setLevel(level)
        for layer in layers:
            del layer._can_checkpoint_with_cache  # back to the class's value


def enable_checkpointing(model) -> None:
    """Activation (gradient) checkpointing of every decoder layer, non-reentrant: the kind whose replay
    passes gradients through the KV cache that completion_logprobs shares (transformers 5 renamed the
    method; the old name warns)."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _checkpointing(model) -> bool:
    """Whether the model trains with activation (gradient) checkpointing (transformers 5 renamed the flag)."""
    if hasattr(type(model), "is_activation_checkpointing"):
        return bool(model.is_activation_checkpointing)
    return bool(getattr(model, "is_gradient_checkpointing", False))


def _cache_argument(module) -> str:
    """The name of a forward's KV-cache argument: transformers renamed past_key_values to cache."""
    return "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"
