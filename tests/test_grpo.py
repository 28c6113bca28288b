"""GRPO core (grpo.py): advantages and loss against hand-computed values, KL estimators, aggregation, the
gradient's direction, and a small model that must learn from a synthetic reward. (Log-probs:
test_logprobs.py.)"""
import math

import pytest
import torch

from cobalt_min.grpo import aggregate, group_advantages, kl_penalty, policy_loss
from conftest import rows_logprobs, tiny_lm


def test_group_advantages():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 0.0, 0.0]])
    a = group_advantages(r)
    s = math.sqrt(1 / 3)  # unbiased std of (1, 0, 0, 1)
    assert torch.allclose(a[0], torch.tensor([0.5, -0.5, -0.5, 0.5]) / (s + 1e-6))
    assert torch.equal(a[1], torch.zeros(4))  # zero variance: no signal
    s2 = torch.tensor([1.0, 0, 0, 0]).std().item()
    assert torch.allclose(a[2], torch.tensor([0.75, -0.25, -0.25, -0.25]) / (s2 + 1e-6))
    assert torch.equal(group_advantages(torch.tensor([[3.0], [1.0]])), torch.zeros(2, 1))



def test_group_advantages_with_a_std_floor_or_without_the_std():
    # a group whose programs all fail alike, told apart only by the format bonus: rewards 0.001 apart
    r = torch.tensor([[-0.100, -0.099, -0.100, -0.099], [1.0, 0.0, 0.0, 1.0], [0.2, 0.2, 0.2, 0.2]])
    paper = group_advantages(r)
    assert torch.allclose(paper[0].abs(), torch.full((4,), 0.0005 / (0.001 * math.sqrt(1 / 3) + 1e-6)))  # +-0.86
    floored = group_advantages(r, std_floor=0.1)
    assert torch.allclose(floored[0], torch.tensor([-0.0005, 0.0005, -0.0005, 0.0005]) / 0.1, atol=1e-5)
    assert torch.allclose(floored[1], paper[1])  # a std above the floor: the paper's rule
    plain = group_advantages(r, scale=False)
    assert torch.allclose(plain[0], torch.tensor([-0.0005, 0.0005, -0.0005, 0.0005]), atol=1e-6)
    assert torch.allclose(plain[1], torch.tensor([0.5, -0.5, -0.5, 0.5]))
    assert torch.equal(plain[2], torch.zeros(4)) and torch.equal(floored[2], torch.zeros(4))
    valid = torch.tensor([[True] * 4, [True, True, False, True], [True] * 4])  # the same rules over the valid programs
    assert torch.allclose(group_advantages(r, valid=valid, scale=False)[1], torch.tensor([1 / 3, -2 / 3, 0, 1 / 3]))


# Two sequences, three tokens; seq 0 has A = +1 (last token masked), seq 1 has A = -2.
RATIOS = torch.tensor([[1.0, 1.5, 0.5], [0.7, 4.0, 1.0]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])
ADV = torch.tensor([1.0, -2.0])
D = torch.tensor([[0.1, -0.2, 0.3], [0.0, 0.5, -1.0]])  # logp - ref_logp


def _loss(**kw):
    logp = torch.log(RATIOS)
    old = torch.zeros_like(logp)
    return policy_loss(logp, old, logp - D, ADV, MASK, **kw)


def test_policy_loss_hand_values():
    # Per token pg: seq 0: max(-1, -1) = -1, max(-1.5, -1.4) = -1.4 (clip-high at 1.4);
    # seq 1: max(1.4, 1.6) = 1.6 (clip-low at 0.8), max(8, 2.8) = 8 -> dual clip min(8, 6) = 6, 2.0.
    loss, m = _loss(kl_coef=0.0)
    assert loss.item() == pytest.approx((-1 - 1.4 + 1.6 + 6 + 2) / 5)
    assert _loss(kl_coef=0.0, agg="seq-mean-token-mean")[0].item() == pytest.approx((-2.4 / 2 + 9.6 / 3) / 2)
    assert _loss(kl_coef=0.0, agg="seq-mean-token-sum")[0].item() == pytest.approx((-2.4 + 9.6) / 2)
    assert _loss(kl_coef=0.0, minibatch_tokens=10)[0].item() == pytest.approx(7.2 / 10)
    # a micro-batch of a 4-sequence mini-batch: sequence means divide by 4
    assert _loss(kl_coef=0.0, agg="seq-mean-token-sum", minibatch_sequences=4)[0].item() == pytest.approx((-2.4 + 9.6) / 4)
    # veRL's token mean per micro-batch (the authors' runs): this micro-batch's token mean over 3 micro-batches
    assert _loss(kl_coef=0.0, agg="micro-token-mean", micro_batches=3)[0].item() == pytest.approx(7.2 / 5 / 3)
    assert m["clip_frac_high"] == pytest.approx(0.2) and m["clip_frac_low"] == pytest.approx(0.2)
    assert m["clip_frac_dual"] == pytest.approx(0.2)
    assert m["ratio"] == pytest.approx((1 + 1.5 + 0.7 + 4 + 1) / 5)
    # No clipping at all with huge bounds; no dual clip with c = inf.
    loss, _ = _loss(kl_coef=0.0, clip_low=0.99, clip_high=100, dual_clip=float("inf"))
    assert loss.item() == pytest.approx((-1 - 1.5 + 1.4 + 8 + 2) / 5)


@pytest.mark.parametrize("estimator,per_token", [
    ("k1", lambda d: d), ("k2", lambda d: 0.5 * d * d), ("k3", lambda d: math.exp(-d) + d - 1)])
def test_kl_estimators(estimator, per_token):
    values = [per_token(d) for d, m in zip(D.flatten().tolist(), MASK.flatten().tolist()) if m]
    expected_kl = sum(values) / 5
    loss, m = _loss(kl_coef=0.1, kl_estimator=estimator)
    assert m["kl"] == pytest.approx(expected_kl, abs=1e-6)
    assert loss.item() == pytest.approx(7.2 / 5 + 0.1 * expected_kl, abs=1e-6)
    assert torch.allclose(kl_penalty(D, torch.zeros_like(D), estimator)[0, 0], torch.tensor(per_token(0.1)))


def test_micro_token_mean_is_the_mean_of_the_micro_batches_token_means():
    per_token = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [4.0, 5.0, 6.0], [7.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0]])
    parts = [aggregate(per_token[i:i + 2], mask[i:i + 2], "micro-token-mean", micro_batches=2) for i in (0, 2)]
    assert sum(parts).item() == pytest.approx(((1 + 2 + 3) / 3 + (4 + 5 + 6 + 7) / 4) / 2)
    assert aggregate(per_token, mask, "token-mean").item() == pytest.approx(28 / 7)  # (not the same weighting)


def test_aggregate_rejects_unknown():
    with pytest.raises(ValueError):
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), "mean")


def test_positive_advantage_raises_logp_negative_lowers_it():
    model = tiny_lm()
    prompts, completions = [[1, 2, 3], [1, 2, 3]], [[4, 5, 6], [7, 8, 9]]
    before, comp = rows_logprobs(model, prompts, completions)
    logp, _ = rows_logprobs(model, prompts, completions)
    loss, _ = policy_loss(logp, logp.detach(), None, torch.tensor([1.0, -1.0]), comp, kl_coef=0.0)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.05 * p.grad
    after, _ = rows_logprobs(model, prompts, completions)
    gain = ((after - before.detach()).detach() * comp).sum(1)
    assert gain[0] > 0 and gain[1] < 0


def test_grpo_learns_a_synthetic_reward():
    """Reward = fraction of completion tokens equal to TARGET. A random tiny model starts near 1/V."""
    torch.manual_seed(0)
    V, TARGET, G, P, L = 16, 5, 8, 4, 6
    model = tiny_lm(vocab=V, seed=1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    prompts = [[1 + i, 2 + i] for i in range(P)]

    def sample():
        with torch.no_grad():
            seqs = torch.tensor([p for p in prompts for _ in range(G)])
            for _ in range(L):
                logits = model(input_ids=seqs).logits[:, -1]
                seqs = torch.cat([seqs, torch.multinomial(logits.softmax(-1), 1)], 1)
        return seqs[:, 2:].tolist()

    history = []
    for step in range(30):
        completions = sample()
        rewards = torch.tensor([sum(t == TARGET for t in c) / L for c in completions]).view(P, G)
        history.append(rewards.mean().item())
        adv = group_advantages(rewards).flatten()
        logp, comp = rows_logprobs(model, [p for p in prompts for _ in range(G)], completions)
        loss, _ = policy_loss(logp, logp.detach(), None, adv, comp, kl_coef=0.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    start, end = sum(history[:5]) / 5, sum(history[-5:]) / 5
    assert end > start + 0.3, history
