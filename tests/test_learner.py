"""training/learner.py: the frozen reference keeps the policy's buffers, a non-finite gradient skips the optimizer step,
micro-batches by tokens keep a context's rows together and every rank runs as many."""
import torch


def test_the_frozen_reference_keeps_the_policys_buffers(tiny_model_dir):
    # Parameters in the compute dtype, buffers (the rotary inv_freq, float32) exactly as the policy's.
    from cobalt_min.generation import load_model
    from cobalt_min.training.learner import frozen
    _, policy = load_model(tiny_model_dir, dtype=torch.float32, trainable=True)
    ref = frozen(policy, torch.bfloat16)
    buffers = dict(policy.named_buffers())
    assert buffers and any(b.is_floating_point() for b in buffers.values())
    for name, b in ref.named_buffers():
        assert b.dtype == buffers[name].dtype and torch.equal(b, buffers[name]), name
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in ref.parameters())
    assert all(p.dtype == torch.float32 and p.requires_grad for p in policy.parameters())  # untouched


def test_an_optimizer_step_with_a_non_finite_gradient_is_skipped():
    # One NaN in a gradient would make every weight NaN for good: the step is skipped, the gradients cleared,
    # the weights and the optimizer's state untouched; a finite gradient steps as usual.
    from cobalt_min.training.learner import optimizer_step
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.ones(1, 3)).sum().backward()
    model.weight.grad[0, 0] = float("nan")
    assert optimizer_step(model, opt, 1.0) is None
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters()) and not opt.state
    model(torch.ones(1, 3)).sum().backward()
    norm = optimizer_step(model, opt, 1.0)
    assert norm is not None and norm > 0 and not torch.equal(before[0], model.weight)


def test_micro_batches_by_tokens_keep_a_contexts_rows_together():
    import types
    from cobalt_min.training.learner import micro_batches
    from cobalt_min.logprobs import pack_groups
    prompts = [[5] * 10, [6] * 3, [7] * 50]
    lengths = [5, 5, 5, 2, 2, 4, 4, 4]  # contexts 0, 0, 0, 1, 1, 2, 2, 2
    seq = pack_groups(prompts, [[9] * n for n in lengths], [0, 0, 0, 1, 1, 2, 2, 2], pad_id=0)

    class OneRank:
        device = torch.device("cpu")

        def __init__(self, counts=None):
            self.counts = counts

        def gather(self, t):
            return torch.tensor(self.counts) if self.counts else t

    args = types.SimpleNamespace(micro_batch_tokens=30, micro_batch_size=4)
    plan = [p.tolist() for p in micro_batches(seq, torch.arange(8), args, OneRank())]
    # context 0 (10 + 15 tokens) fits; context 1 (3 + 4) does not fit beside it; context 2 (50 + 12) is over
    # the budget alone: its rows one by one, each with the prompt.
    assert plan == [[0, 1, 2], [3, 4], [5], [6], [7]], plan
    # Another rank has 7: this one halves its largest micro-batches until it has 7 too.
    plan = [p.tolist() for p in micro_batches(seq, torch.arange(8), args, OneRank([5, 7]))]
    assert len(plan) == 7 and sorted(r for p in plan for r in p) == list(range(8)), plan
    args.micro_batch_tokens = None
    assert [p.tolist() for p in micro_batches(seq, torch.arange(8), args, OneRank())] == [[0, 1, 2, 3], [4, 5, 6, 7]]
