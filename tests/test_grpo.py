"""GRPO core: advantages and loss against hand-computed values, log-probs against the naive
full-vocabulary computation (values and gradients), gradient direction, EOS masking, and a small
model that must learn from a synthetic reward."""
import math

import pytest
import torch

from cobalt_min.grpo import aggregate, group_advantages, kl_penalty, policy_loss
from cobalt_min.logprobs import (completion_logprobs, enable_checkpointing, naive_token_logprobs, pack_groups,
                                 pack_sequences)


def tiny_lm(vocab=64, tie=False, seed=0):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=tie,
                      max_position_embeddings=256)
    return Qwen3ForCausalLM(cfg).float()


def test_group_advantages():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 0.0, 0.0]])
    a = group_advantages(r)
    s = math.sqrt(1 / 3)  # unbiased std of (1, 0, 0, 1)
    assert torch.allclose(a[0], torch.tensor([0.5, -0.5, -0.5, 0.5]) / (s + 1e-6))
    assert torch.equal(a[1], torch.zeros(4))  # zero variance: no signal
    s2 = torch.tensor([1.0, 0, 0, 0]).std().item()
    assert torch.allclose(a[2], torch.tensor([0.75, -0.25, -0.25, -0.25]) / (s2 + 1e-6))
    assert torch.equal(group_advantages(torch.tensor([[3.0], [1.0]])), torch.zeros(2, 1))


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


def rows_logprobs(model, prompts, completions, **kw):
    """completion_logprobs of one completion per prompt -> ((R, C) log-probs, (R, C) completion mask)."""
    batch = pack_groups(prompts, completions, list(range(len(prompts))), pad_id=0)
    return completion_logprobs(model, batch, **kw), batch.completion_mask


@pytest.mark.parametrize("tie,temperature", [(False, 1.0), (True, 1.0), (False, 0.7)])
def test_chunked_head_equals_naive_values_and_gradients(tie, temperature):
    model = tiny_lm(tie=tie)
    prompts, completions = [[1, 2, 3, 4], [5, 6]], [[7, 8, 9], [10, 11, 12, 13, 0]]
    ids, att, comp = pack_sequences(prompts, completions, pad_id=0)
    weights = torch.randn(2, 5)

    def grads():
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    fast, mask = rows_logprobs(model, prompts, completions, temperature=temperature, chunk_tokens=3)  # chunks < tokens
    (fast * weights).sum().backward()
    g_fast = grads()
    model.zero_grad()
    slow = naive_token_logprobs(model, ids, att, comp, temperature=temperature)
    slow = torch.stack([slow[r, len(p):len(p) + 5] if len(p) + 5 <= slow.shape[1] else
                        torch.nn.functional.pad(slow[r, len(p):], (0, len(p) + 5 - slow.shape[1]))
                        for r, p in enumerate(prompts)])  # (R, C): the completion positions of each row
    (slow * weights).sum().backward()
    g_slow = grads()
    assert torch.allclose(fast.detach(), slow.detach(), atol=1e-5)
    assert (fast[mask == 0] == 0).all() and (fast[mask == 1] < 0).all()
    assert g_fast.keys() == g_slow.keys()
    for name in g_slow:
        assert torch.allclose(g_fast[name], g_slow[name], atol=1e-5, rtol=1e-4), name


@pytest.mark.parametrize("share_prompts,checkpointing", [(True, False), (False, False), (True, True), (False, True)])
def test_completion_logprobs_with_shared_prompts_equal_the_definition(share_prompts, checkpointing):
    # Two prompts of different lengths, three completions each (ragged), EOS = pad = 0: values and
    # gradients equal the full-sequence naive computation, for the whole batch and for a sub-batch of rows,
    # with and without gradient checkpointing (the 8B recipe's setting: each layer replayed in backward).
    model = tiny_lm(vocab=64)
    if checkpointing:
        enable_checkpointing(model)
        model.train()
    prompts = [[1, 2, 3, 4, 5], [6, 7]]
    completions = [[8, 9, 0], [10, 0], [11, 12, 13, 0], [14, 15], [16, 0], [17, 18, 19, 20, 0]]
    index = [0, 0, 0, 1, 1, 1]
    batch = pack_groups(prompts, completions, index, pad_id=0)
    assert batch.prompt_mask.tolist() == [[1] * 5, [0, 0, 0, 1, 1]]  # prompts left-padded
    for rows in (torch.arange(6), torch.tensor([4, 1, 5])):
        sub = batch.rows(rows)
        weights = torch.randn(sub.completion_ids.shape) * sub.completion_mask  # (r, C)
        ids, att, comp = pack_sequences([prompts[index[r]] for r in rows], [completions[r] for r in rows], pad_id=0)

        def grads(loss):
            model.zero_grad()
            loss.backward()
            return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        fast = completion_logprobs(model, sub, temperature=0.8, chunk_tokens=3, share_prompts=share_prompts)
        g_fast = grads((fast * weights).sum())
        full = naive_token_logprobs(model, ids, att, comp, temperature=0.8)  # (r, T): completion tokens in place
        slow = torch.zeros_like(fast)
        for k in range(len(rows)):  # the same tokens, moved to the completion-only layout
            slow[k, :int(comp[k].sum())] = full[k][comp[k].bool()]
        g_slow = grads((slow * weights).sum())
        assert torch.allclose(fast.detach(), slow.detach(), atol=1e-5), (fast, slow)
        assert (fast[sub.completion_mask == 0] == 0).all() and (fast[sub.completion_mask == 1] < 0).all()
        assert g_fast.keys() == g_slow.keys()
        for name in g_slow:
            assert torch.allclose(g_fast[name], g_slow[name], atol=1e-5, rtol=1e-4), name


def test_checkpointed_shared_prompts_run_each_prompt_once_and_replay_each_layer(monkeypatch):
    # Under gradient checkpointing the prompt pass still runs each prompt once (U rows, not R), the
    # completion pass attends to it, and backward replays every layer of both passes once, reading
    # the stored prompt keys and values again (nothing appended twice: values and gradients are checked
    # against the definition in the test above).
    from cobalt_min import logprobs
    model = tiny_lm(vocab=64)
    enable_checkpointing(model)
    model.train()
    batch = pack_groups([[1, 2, 3, 4, 5], [6, 7]], [[8, 9, 0], [10, 0], [11, 12, 13, 0], [14, 15]], [0, 0, 1, 1], pad_id=0)
    calls = []
    for cls, name in ((logprobs._PromptCache, "prompt"), (logprobs._SharedPromptCache, "completion")):
        def update(self, k, v, layer, *a, _name=name, _orig=cls.update, **kw):
            calls.append((_name, layer, k.shape[0], k.shape[-2]))
            return _orig(self, k, v, layer, *a, **kw)
        monkeypatch.setattr(cls, "update", update)
    logp = completion_logprobs(model, batch)
    passes = [("prompt", 0, 2, 5), ("prompt", 1, 2, 5), ("completion", 0, 4, 4), ("completion", 1, 4, 4)]
    assert calls == passes
    calls.clear()
    logp.sum().backward()
    assert sorted(calls) == sorted(passes)  # the backward's replay of each checkpointed layer
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_prompts_not_shared_where_the_model_cannot(capsys):
    # Reentrant checkpointing passes no gradient through the KV cache: asked to share, it refuses;
    # by default it runs each row's prompt again and says so once (same numbers, more work).
    from cobalt_min import logprobs
    model = tiny_lm(vocab=64)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.train()
    batch = pack_groups([[1, 2, 3]], [[4, 5], [6, 0]], [0, 0], pad_id=0)
    with pytest.raises(ValueError, match="reentrant"):
        completion_logprobs(model, batch, share_prompts=True)
    logprobs._WARNED.clear()
    completion_logprobs(model, batch)
    completion_logprobs(model, batch)
    assert capsys.readouterr().out.count("runs each row's prompt again") == 1


def test_eos_used_as_pad_is_still_trained():
    eos = 0
    ids, att, comp = pack_sequences([[3, 4], [5]], [[6, eos], [7, eos]], pad_id=eos)
    assert ids.tolist() == [[3, 4, 6, eos], [5, 7, eos, eos]]
    assert comp.tolist() == [[0, 0, 1, 1], [0, 1, 1, 0]]  # the EOS that ends a completion counts, pad not
    assert att.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]


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
