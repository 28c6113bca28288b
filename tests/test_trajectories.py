"""Offline data (paper §4): dynamic sampling, the trajectory filter, max-variance down-sampling,
partial trajectories with their stops. (collect.py end to end: test_collect.py.)"""
import random

import numpy as np

from cobalt_min import prompts as PR
from cobalt_min.trajectories import build_contexts, cut_contexts, max_variance_downsample, select_trajectories

PASSED = PR.FEEDBACK_HEADER.format(feedback=PR.ALL_PUBLIC_PASSED)
FAILED = PR.FEEDBACK_HEADER.format(feedback="Input:\n1\nYour output:\n2\nExpected output:\n3")


def traj(rates, feedbacks=None):
    feedbacks = feedbacks or [FAILED] * len(rates)
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "problem"}]
    for k, fb in enumerate(feedbacks):
        msgs += [{"role": "assistant", "content": f"program {k}"}, {"role": "user", "content": fb}]
    return {"turns": [{"pass_rate": r} for r in rates], "messages": msgs}


def test_dynamic_sampling_and_first_turn_context():
    all_pass = {"problem_id": "a", "samples": [traj([1.0, 1.0, 1.0]), traj([1.0, 0.5, 1.0])]}
    mixed = {"problem_id": "b", "samples": [traj([1.0, 1.0, 1.0]), traj([0.0, 0.0, 0.0])]}  # none usable
    ctx, stats = build_contexts([all_pass, mixed], {"a": {"t": 1}, "b": {"t": 2}})
    assert stats["dropped_all_pass"] == 1 and stats["no_usable_trajectory"] == 1
    assert len(ctx) == 1 and ctx[0]["turn"] == 0 and ctx[0]["prev_best"] == 0.0
    assert ctx[0]["messages"] == mixed["samples"][0]["messages"][:2] and ctx[0]["tests"] == {"t": 2}


def test_training_and_validation_filters():
    samples = [traj([0.0, 0.5, 1.0]),   # diff 1.0, max 1
               traj([0.5, 0.5, 0.5]),   # diff 0
               traj([0.2, 0.6, 0.4]),   # diff 0.4, max < 1
               traj([0.8, 1.0, 1.0]),   # diff 0.2, max 1
               traj([1.0, 0.9, 1.0])]   # diff 0.1, max 1
    assert sorted(select_trajectories(samples, "train")) == [0, 3, 4]
    assert select_trajectories(samples, "validation") == [4]  # smallest diff > 0 (max may be < 1)
    assert select_trajectories([traj([0.3, 0.3])], "validation") == []
    tie = [traj([0.0, 1.0]), traj([0.5, 1.0]), traj([0.5, 1.0])]
    assert select_trajectories(tie, "validation") == [1]  # ties: the first one


def restated_downsample(diffs, m=4):
    """Plain re-statement of paper §4 for the comparison below."""
    idx = sorted(range(len(diffs)), key=lambda i: (diffs[i], i))
    if len(idx) <= m:
        return idx
    best = idx[:m]
    for k in range(1, m):
        cand = best[:m - k] + idx[-k:]
        if np.var([diffs[i] for i in cand]) > np.var([diffs[i] for i in best]):
            best = cand
    return best


def test_max_variance_downsample_against_restatement():
    rng = random.Random(0)
    for _ in range(500):
        n = rng.randint(0, 16)
        diffs = [rng.choice([0.1, 0.2, 0.25, 0.5, 0.75, 1.0]) if rng.random() < 0.5 else rng.random() for _ in range(n)]
        assert max_variance_downsample(diffs) == restated_downsample(diffs), diffs
    assert max_variance_downsample([0.5, 0.1, 0.9]) == [1, 0, 2]  # fewer than m: all, sorted by diff
    d = [0.1, 0.1, 0.1, 0.1, 0.2, 1.0, 1.0]
    picked = max_variance_downsample(d)
    assert len(picked) == 4 and sorted(d[i] for i in picked) == [0.1, 0.1, 1.0, 1.0]


def test_cut_contexts_prev_best_and_stops():
    t = traj([0.25, 0.5, 1.0])
    ctx = cut_contexts(t)
    assert [c["turn"] for c in ctx] == [1, 2, 3] and [c["prev_best"] for c in ctx] == [0.25, 0.5, 1.0]
    assert [len(c["messages"]) for c in ctx] == [4, 6, 8] and ctx[0]["messages"][-1]["content"] == FAILED
    # Two consecutive "all public tests passed" feedbacks end the cutting.
    t = traj([0.5, 0.75, 0.75], [PASSED, PASSED, FAILED])
    assert [c["turn"] for c in cut_contexts(t)] == [1]
    t = traj([0.5, 0.75, 0.75], [PASSED, FAILED, PASSED])
    assert [c["turn"] for c in cut_contexts(t)] == [1, 2, 3]
    # Token budget: stop at the first context over it.
    count = lambda msgs: 100 * len(msgs)  # noqa: E731
    assert [c["turn"] for c in cut_contexts(traj([0.1, 0.2, 0.3]), count_prompt_tokens=count, budget=650)] == [1, 2]


def test_contexts_are_shuffled_with_a_seed():
    recs = [{"problem_id": str(i), "samples": [traj([0.0, 1.0, 1.0]), traj([0.5, 1.0, 1.0])]} for i in range(5)]
    tests = {str(i): {} for i in range(5)}
    a, stats = build_contexts(recs, tests, seed=3)
    b, _ = build_contexts(recs, tests, seed=3)
    c, _ = build_contexts(recs, tests, seed=4)
    assert a == b and a != c and len(a) == stats["contexts"] == 5 * (1 + 2 * 3)
    assert stats["contexts_per_turn"] == {0: 5, 1: 10, 2: 10, 3: 10}
