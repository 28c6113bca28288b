"""GRPO, written out: group advantages, memory-lean token log-probs, and the clipped policy loss.

COBALT trains each context as a one-step bandit (paper §1, §5): for a context s, sample G programs
a_1..a_G from the policy, score each with the immediate reward r_i, and push the policy towards the
programs that beat their group:

    A_i = (r_i - mean(r)) / (std(r) + eps)                                   group_advantages
    L   = agg_t[ max(-A ratio_t, -A clip(ratio_t, 1 - eps_low, 1 + eps_high)) (dual-clipped for A < 0)
                 + kl_coef * KL_t(pi || pi_ref) ]                             policy_loss

with ratio_t = pi(y_t | ...) / pi_old(y_t | ...). The authors' settings (veRL): eps_low = 0.2,
eps_high = 0.4 ("clip-higher"), dual clip c = 3, KL coefficient 1e-4 with the k2 estimator, token-mean
aggregation, no entropy bonus.
"""

import torch
import torch.nn.functional as F


# ----------------------------------------------------------------------------- advantages


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6, scale: bool = True) -> torch.Tensor:
    """rewards (P, G): P prompts (contexts), G samples each -> advantages (P, G).

    (r - group mean) / (group std + eps), std unbiased as torch.std. A group whose rewards are all
    equal carries no learning signal and gets 0 (also for G = 1, where the std is undefined).
    scale=False keeps only the mean baseline (Dr. GRPO's choice; not the paper's)."""
    rewards = rewards.float()
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if rewards.shape[1] < 2:
        return torch.zeros_like(rewards)
    if not scale:
        return centred
    std = rewards.std(dim=1, keepdim=True)  # unbiased (divides by G - 1)
    adv = centred / (std + eps)
    return torch.where(std > 0, adv, torch.zeros_like(adv))


# ----------------------------------------------------------------------------- log-probs


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
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
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
                grad_w += grad_logits.t() @ h.float()
            if grad_b is not None:
                grad_b += grad_logits.sum(0)
        grad_w = grad_w.to(weight.dtype) if grad_w is not None else None
        grad_b = grad_b.to(bias.dtype) if grad_b is not None else None
        return grad_h, grad_w, grad_b, None, None, None


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_mask: torch.Tensor,
                   *, temperature: float = 1.0, chunk_tokens: int = 256) -> torch.Tensor:
    """Log-probabilities of the completion tokens under a causal LM -> (B, T) float32.

    input_ids, attention_mask, completion_mask: (B, T). Entry [b, t] is log p(input_ids[b, t] |
    input_ids[b, :t]) where completion_mask[b, t] is 1, and 0 elsewhere. Only completion positions
    go through the LM head (prompts are often longer than completions, and their logits are not
    needed), in chunks of `chunk_tokens`, so the (B, T, V) logits and their float32 log-softmax are
    never materialised (see _ChunkedTokenLogprob). Equals naive_token_logprobs.

    `model` is a Hugging Face causal LM whose logits are lm_head(final hidden state) (Llama, Qwen,
    Mistral, SmolLM, ...). Under DDP/FSDP call it through the wrapped module's forward: see
    LogprobModel."""
    if getattr(model.config, "final_logit_softcapping", None) or getattr(model.config, "logits_scaling", None):
        raise ValueError(f"{type(model).__name__} post-processes its logits; use naive_token_logprobs")
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
    # Position t is predicted from the hidden state at t - 1.
    predict = completion_mask[:, 1:].bool()  # (B, T-1)
    h = hidden[:, :-1][predict]  # (N, H), N = number of completion tokens
    targets = input_ids[:, 1:][predict]  # (N,)
    head = model.get_output_embeddings()
    logp = _ChunkedTokenLogprob.apply(h, head.weight, head.bias, targets, float(temperature), int(chunk_tokens))
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    out[:, 1:] = out[:, 1:].masked_scatter(predict, logp)
    return out


def naive_token_logprobs(model, input_ids, attention_mask, completion_mask, *, temperature: float = 1.0):
    """Reference: full logits, float32 log-softmax over the vocabulary, gather. Same layout as
    token_logprobs. Memory: B x T x V floats (~9.7 GB for 8 x 2048 tokens at V = 151,936)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float() / temperature
    logp = logits.log_softmax(-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    out[:, 1:] = logp * completion_mask[:, 1:]
    return out


class LogprobModel(torch.nn.Module):
    """A causal LM whose forward returns token_logprobs. Wrap THIS with DDP/FSDP (accelerator.prepare)
    so that the log-prob computation runs inside the wrapper's forward (gradient sync, parameter
    gathering), while the chunked LM head stays outside Hugging Face's own forward."""

    def __init__(self, lm, chunk_tokens: int = 256):
        super().__init__()
        self.lm = lm
        self.chunk_tokens = chunk_tokens

    def forward(self, input_ids, attention_mask, completion_mask, temperature: float = 1.0):
        return token_logprobs(self.lm, input_ids, attention_mask, completion_mask, temperature=temperature,
                              chunk_tokens=self.chunk_tokens)


# ----------------------------------------------------------------------------- loss


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k2") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi, with d = log pi - log pi_ref:
    k1 = d (unbiased, high variance, can be negative); k2 = d^2 / 2 (veRL "mse"; the paper's; its
    gradient is d * grad log pi, i.e. a reverse-KL gradient for small d); k3 = exp(-d) + d - 1
    (unbiased, always >= 0; "low_var_kl")."""
    d = logp - ref_logp
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d * d
    if estimator == "k3":
        return torch.expm1(-d) + d
    raise ValueError(f"kl_estimator must be k1, k2 or k3, not {estimator!r}")


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, agg: str, denominator: float | None = None):
    """Reduce a (B, T) per-token loss to a scalar.

    token-mean: sum over all masked tokens / their number (every token weighs the same, so long
      responses weigh more; the paper's). `denominator` replaces that number, e.g. the token count of
      the whole mini-batch when it is split into gradient-accumulation micro-batches, so that the
      accumulated gradient equals the full mini-batch's.
    seq-mean-token-mean: mean over sequences of each sequence's token mean (GRPO's original).
    seq-mean-token-sum: mean over sequences of each sequence's token sum (Dr. GRPO-style)."""
    mask = mask.to(per_token.dtype)
    if agg == "token-mean":
        denom = mask.sum() if denominator is None else torch.as_tensor(denominator, dtype=per_token.dtype)
        return (per_token * mask).sum() / denom.clamp(min=1.0)
    seq_sum = (per_token * mask).sum(1)
    if agg == "seq-mean-token-mean":
        return (seq_sum / mask.sum(1).clamp(min=1.0)).mean()
    if agg == "seq-mean-token-sum":
        return seq_sum.mean()
    raise ValueError(f"agg must be token-mean, seq-mean-token-mean or seq-mean-token-sum, not {agg!r}")


def policy_loss(logp, old_logp, ref_logp, advantages, mask, *, clip_low: float = 0.2, clip_high: float = 0.4,
                dual_clip: float = 3.0, kl_coef: float = 1e-4, kl_estimator: str = "k2", agg: str = "token-mean",
                denominator: float | None = None):
    """The clipped GRPO surrogate with clip-higher, dual clip and a KL penalty -> (loss, metrics).

    logp, old_logp, ref_logp, mask: (B, T); advantages: (B,). ref_logp may be None when kl_coef = 0.
    Per token, with ratio = exp(logp - old_logp) and A the sequence's advantage:
      pg = max(-A ratio, -A clip(ratio, 1 - clip_low, 1 + clip_high))
        PPO's pessimistic bound: once the ratio has moved past the trust region in the direction
        the advantage rewards, the gradient stops. clip_high > clip_low ("clip-higher", DAPO) lets
        low-probability tokens with A > 0 grow further, which keeps exploration alive.
      for A < 0: pg = min(pg, -A dual_clip)
        with A < 0 the max above is unbounded as the ratio grows (a token the policy now likes far
        more than when it was sampled); dual clip caps that term at c |A| (Ye et al., 2020).
      loss_t = pg + kl_coef * KL_t (kl_penalty), reduced by aggregate(agg).
    With a single optimizer step per batch old_logp == logp.detach() and ratio == 1: the loss is
    then the plain policy gradient -A * logp in value of gradient.
    Metrics (means over masked tokens): clip_frac_high (A > 0, ratio above 1 + clip_high),
    clip_frac_low (A < 0, ratio below 1 - clip_low), clip_frac_dual (dual clip active), kl, ratio."""
    mask_f = mask.to(logp.dtype)
    n_tok = mask_f.sum().clamp(min=1.0)
    adv = advantages.to(logp.dtype)[:, None]  # (B, 1)
    ratio = torch.exp(logp - old_logp)
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    pg = torch.maximum(-adv * ratio, -adv * clipped)
    dual = (adv < 0) & (pg > -adv * dual_clip)
    pg = torch.where(adv < 0, torch.minimum(pg, -adv * dual_clip), pg)
    per_token = pg
    kl = None
    if kl_coef != 0.0:
        kl = kl_penalty(logp, ref_logp, kl_estimator)
        per_token = per_token + kl_coef * kl
    loss = aggregate(per_token, mask, agg, denominator)
    with torch.no_grad():
        m = mask.bool()
        metrics = {
            "clip_frac_high": (((adv > 0) & (ratio > 1.0 + clip_high)) & m).sum().item() / n_tok.item(),
            "clip_frac_low": (((adv < 0) & (ratio < 1.0 - clip_low)) & m).sum().item() / n_tok.item(),
            "clip_frac_dual": (dual & m).sum().item() / n_tok.item(),
            "ratio": (ratio * mask_f).sum().item() / n_tok.item(),
            "kl": (kl * mask_f).sum().item() / n_tok.item() if kl is not None else 0.0,
            "pg_loss": (pg * mask_f).sum().item() / n_tok.item(),
        }
    return loss, metrics


# ----------------------------------------------------------------------------- batching


def pack_sequences(prompts: list[list[int]], completions: list[list[int]], pad_id: int, device=None):
    """Right-pad prompt + completion token lists -> (input_ids, attention_mask, completion_mask), each (B, T).

    The completion mask comes from the lengths, never from comparing tokens with pad_id: many
    tokenizers use the EOS token as padding, and masking "pad" tokens would then also mask the EOS
    that ends each completion, which must be learned like any other token (it decides when to stop)."""
    lengths = [len(p) + len(c) for p, c in zip(prompts, completions)]
    T = max(lengths)
    B = len(prompts)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, T), dtype=torch.long)
    completion_mask = torch.zeros((B, T), dtype=torch.long)
    for b, (p, c) in enumerate(zip(prompts, completions)):
        input_ids[b, :len(p) + len(c)] = torch.tensor(list(p) + list(c), dtype=torch.long)
        attention_mask[b, :len(p) + len(c)] = 1
        completion_mask[b, len(p):len(p) + len(c)] = 1
    return input_ids.to(device), attention_mask.to(device), completion_mask.to(device)
