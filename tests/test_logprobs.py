"""Token log-probs (logprobs.py) against the definition, the naive full-vocabulary computation: values and
gradients of the chunked LM head, prompts shared by their completions (with and without checkpointing), where
they cannot be shared, and EOS used as padding still trained."""
import pytest
import torch

from cobalt_min.logprobs import (completion_logprobs, enable_checkpointing, naive_token_logprobs, pack_groups,
                                 pack_sequences)
from conftest import rows_logprobs, tiny_lm


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
        sub = batch.select(rows)
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
