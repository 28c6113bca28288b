"""GRPO, written out: group advantages and the clipped policy loss (token log-probs: logprobs.py).

COBALT trains each context as a one-step bandit (paper §1, §5): for a context s, sample G programs
a_1..a_G from the policy, score each with the immediate reward r_i, and push the policy towards the
programs that beat their group:

    A_i = (r_i - mean(r)) / (std(r) + eps)                                   group_advantages
    L   = agg_t[ max(-A ratio_t, -A clip(ratio_t, 1 - eps_low, 1 + eps_high)) (dual-clipped for A < 0)
                 + kl_coef * KL_t(pi || pi_ref) ]                             policy_loss

with ratio_t = pi(y_t | ...) / pi_old(y_t | ...). The authors' settings (veRL): eps_low = 0.2,
eps_high = 0.4 ("clip-higher"), dual clip c = 3, KL coefficient 1e-4 with the k2 estimator, token-mean
aggregation, no entropy bonus. Shapes use the letters of train.py's glossary (B contexts, G group, R rows,
C completion width).
"""

import torch


# ----------------------------------------------------------------------------- advantages


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6, valid: torch.Tensor | None = None,
                     std_floor: float = 0.0, scale: bool = True) -> torch.Tensor:
    """rewards (B, G): B contexts (or problems), G samples each -> advantages (B, G).

    (r - group mean) / (group std + eps): each program against the mean of all G programs of its group,
    itself included (not a leave-one-out baseline), std unbiased as torch.std. A group whose rewards are
    all equal carries no learning signal and gets 0 (also for G = 1, where the std is undefined).
    valid (B, G), optional: the programs that have a reward (the sandbox failed on the others: no verdict);
    each group's mean and std are then over its valid programs, and the others get 0.

    Not the paper's, for small models whose groups often differ by little (train.py --adv-std-floor,
    --adv-scale): std_floor divides by max(std, std_floor) instead, so that rewards 0.001 apart stay 0.001 /
    std_floor apart rather than becoming +-1; scale=False leaves the std out, A_i = r_i - mean(r) (Dr. GRPO,
    arXiv 2503.20783)."""
    if valid is not None and not bool(valid.all()):
        out = torch.zeros(rewards.shape)
        for b in range(rewards.shape[0]):
            out[b, valid[b]] = group_advantages(rewards[b, valid[b]][None], eps, std_floor=std_floor, scale=scale)[0]
        return out
    rewards = rewards.float()
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if rewards.shape[1] < 2:
        return torch.zeros_like(rewards)
    std = rewards.std(dim=1, keepdim=True)  # unbiased (divides by G - 1)
    adv = centred / (std.clamp(min=std_floor) + eps) if scale else centred
    return torch.where(std > 0, adv, torch.zeros_like(adv))


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


AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "micro-token-mean")


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, agg: str, minibatch_tokens: float | None = None,
              minibatch_sequences: int | None = None, micro_batches: int = 1):
    """Reduce an (R, C) per-token loss (R rows, C completion tokens each) to a scalar.

    token-mean: sum over all masked tokens / their number (every token weighs the same, so long
      responses weigh more; the paper's).
    seq-mean-token-mean: mean over sequences of each sequence's token mean (GRPO's original).
    seq-mean-token-sum: mean over sequences of each sequence's token sum (Dr. GRPO-style).
    micro-token-mean: this micro-batch's token mean divided by the number of micro-batches the mini-batch
      is accumulated from (`micro_batches`): veRL's token-mean with fixed micro-batches, as the authors
      trained (their 2 sequences per micro-batch: close to a mean over pairs of sequences).
    When a mini-batch is split into gradient-accumulation micro-batches, minibatch_tokens (token-mean)
    and minibatch_sequences (the sequence means) replace this micro-batch's counts in the division, so
    that the accumulated gradient equals the whole mini-batch's."""
    mask = mask.to(per_token.dtype)
    if agg == "micro-token-mean":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0) / micro_batches
    if agg == "token-mean":
        denom = mask.sum() if minibatch_tokens is None else torch.as_tensor(minibatch_tokens, dtype=per_token.dtype)
        return (per_token * mask).sum() / denom.clamp(min=1.0)
    seq_sum = (per_token * mask).sum(1)
    if agg == "seq-mean-token-mean":
        per_seq = seq_sum / mask.sum(1).clamp(min=1.0)
    elif agg == "seq-mean-token-sum":
        per_seq = seq_sum
    else:
        raise ValueError(f"agg must be one of {', '.join(AGGREGATIONS)}, not {agg!r}")
    return per_seq.sum() / (minibatch_sequences or per_seq.shape[0])


def policy_loss(logp, old_logp, ref_logp, advantages, mask, *, clip_low: float = 0.2, clip_high: float = 0.4,
                dual_clip: float = 3.0, kl_coef: float = 1e-4, kl_estimator: str = "k2", agg: str = "token-mean",
                minibatch_tokens: float | None = None, minibatch_sequences: int | None = None, micro_batches: int = 1):
    """The clipped GRPO surrogate with clip-higher, dual clip and a KL penalty -> (loss, metrics).

    logp, old_logp, ref_logp, mask: (R, C); advantages: (R,). ref_logp may be None when kl_coef = 0.
    Per token, with ratio = exp(logp - old_logp) and A the sequence's advantage:
      pg = max(-A ratio, -A clip(ratio, 1 - clip_low, 1 + clip_high))
        PPO's pessimistic bound: once the ratio has moved past the trust region in the direction
        the advantage rewards, the gradient stops. clip_high > clip_low ("clip-higher", DAPO) lets
        low-probability tokens with A > 0 grow further, which keeps exploration alive.
      for A < 0: pg = min(pg, -A dual_clip)
        with A < 0 the max above is unbounded as the ratio grows (a token the policy now likes far
        more than when it was sampled); dual clip caps that term at c |A| (Ye et al., 2020).
      loss_t = pg + kl_coef * KL_t (kl_penalty), reduced by aggregate(agg) over the mini-batch
      (minibatch_tokens / minibatch_sequences / micro_batches: its size when this call sees one
      micro-batch of it).
    With a single optimizer step per batch old_logp == logp.detach() and ratio == 1: the loss is
    then the plain policy gradient -A * logp in value of gradient.
    Metrics (means over masked tokens): clip_frac_high (A > 0, ratio above 1 + clip_high),
    clip_frac_low (A < 0, ratio below 1 - clip_low), clip_frac_dual (dual clip active), kl, ratio, logp (the
    policy's log-prob per trained token: under train.py --method sft, minus the negative log-likelihood)."""
    mask_f = mask.to(logp.dtype)
    n_tok = mask_f.sum().clamp(min=1.0)
    adv = advantages.to(logp.dtype)[:, None]  # (R, 1)
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
    loss = aggregate(per_token, mask, agg, minibatch_tokens, minibatch_sequences, micro_batches)
    with torch.no_grad():
        m = mask.bool()
        metrics = {
            "clip_frac_high": (((adv > 0) & (ratio > 1.0 + clip_high)) & m).sum().item() / n_tok.item(),
            "clip_frac_low": (((adv < 0) & (ratio < 1.0 - clip_low)) & m).sum().item() / n_tok.item(),
            "clip_frac_dual": (dual & m).sum().item() / n_tok.item(),
            "ratio": (ratio * mask_f).sum().item() / n_tok.item(),
            "kl": (kl * mask_f).sum().item() / n_tok.item() if kl is not None else 0.0,
            "logp": (logp * mask_f).sum().item() / n_tok.item(),
        }
    return loss, metrics
