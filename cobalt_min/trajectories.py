"""From offline trajectories to the contexts of online bandit learning (paper §4).

A raw record holds, for one problem, the reference model's multi-turn trajectories (rollout.py):
each program's pass rate over ALL tests (public + hidden) and the conversation. Then:

1. Dynamic sampling: a problem whose first-turn programs ALL pass all tests teaches nothing: dropped.
   Otherwise its first-turn context [system, problem] is emitted once, with prev_best = 0.
2. Trajectory filter on diff = max - min of a trajectory's pass rates: training keeps diff > 0 and
   max == 1 (the trajectory reaches a full solution); validation keeps diff > 0 and then only the
   single trajectory with the smallest diff.
3. Max-variance down-sampling to m = 4 trajectories per problem (max_variance_downsample).
4. Partial trajectories: each kept trajectory is cut after each feedback message; a context carries
   prev_best, the best pass rate among the programs it already contains (the reward's baseline).
   Cutting stops when the context's last two feedback messages both say that all public tests
   passed, or when the context exceeds the prompt budget (10,000 tokens, policy tokenizer + template).

The paper's first stage, single-step fine-tuning ("FT", the authors' train_grpo_single_turn.sh), trains on
first turns only: first_turn_contexts gives every problem's context s_0 with prev_best = 0, no collection,
no dynamic sampling. COBALT on those contexts alone IS single-turn GRPO (train.py --method single-turn).
"""

import random

import numpy as np

from cobalt_min.prompts import first_turn_messages, says_all_public_passed

PROMPT_BUDGET = 10_000  # tokens, as the authors (their max prompt length in training is 10,240)


def turn_pass_rates(traj: dict) -> list[float]:
    """Per program of a trajectory: pass rate on all tests, public and hidden together."""
    return [t["pass_rate"] for t in traj["turns"]]


def first_turn_all_pass(samples: list[dict]) -> bool:
    """Dynamic sampling: True when every first-turn program passes every test."""
    return all(s["turns"] and s["turns"][0]["pass_rate"] >= 1.0 for s in samples)


def trajectory_diffs(samples: list[dict]) -> list[tuple[int, float, float]]:
    """(index, diff = max - min, max) of each trajectory's pass rates."""
    out = []
    for i, s in enumerate(samples):
        rates = turn_pass_rates(s)
        if rates:
            out.append((i, max(rates) - min(rates), max(rates)))
    return out


def max_variance_downsample(diffs: list[float], m: int = 4) -> list[int]:
    """The authors' greedy down-sampling (after Tang et al., 2025): indices into `diffs` of at most m
    trajectories whose diffs are spread out (high variance), favouring informative trajectories.

    Sort the candidates by diff, ascending (the paper has at most 16: one per sampled trajectory);
    start from the m lowest; for k = 0..m-1 try the first m - k of the current subset plus the k
    highest; keep the try when the variance of its diffs is strictly larger (k = 0 tries the subset
    itself, so it never changes anything; kept to mirror the authors' loop). With m or fewer
    candidates, keep them all."""
    order = sorted(range(len(diffs)), key=lambda i: diffs[i])  # stable: ties keep their original order
    if len(order) <= m:
        return order
    subset = order[:m]
    for k in range(m):
        trial = subset[:m - k] + order[len(order) - k:]
        if np.var([diffs[i] for i in trial]) > np.var([diffs[i] for i in subset]):
            subset = trial
    return subset


def select_trajectories(samples: list[dict], split: str = "train", m: int = 4) -> list[int]:
    """Indices of the trajectories of one problem that become contexts (filter, then down-sample)."""
    cands = trajectory_diffs(samples)
    if split == "validation":
        cands = [c for c in cands if c[1] > 0]
        return [min(cands, key=lambda c: c[1])[0]] if cands else []
    cands = [c for c in cands if c[1] > 0 and c[2] >= 1.0]
    picked = max_variance_downsample([c[1] for c in cands], m)
    return [cands[j][0] for j in picked]


def cut_contexts(traj: dict, *, count_prompt_tokens=None, budget: int = PROMPT_BUDGET) -> list[dict]:
    """Partial trajectories of one trajectory: the conversation cut after each feedback message.

    Returns dicts with messages, prev_best (max pass rate of the programs inside) and turn (the index
    of the program the policy will write next). Stops at the first context whose last two feedbacks
    both report all public tests passed, or whose prompt exceeds `budget` tokens.
    (The authors' code has one more stop, when the programs of turns 0 and 2 both pass everything;
    the paper does not describe it and we leave it out.)"""
    messages, rates = traj["messages"], turn_pass_rates(traj)
    out = []
    for k in range(1, len(rates) + 1):
        context = messages[:2 + 2 * k]  # system, problem, then k (program, feedback) pairs
        if k >= 2 and says_all_public_passed(context[-1]) and says_all_public_passed(context[-3]):
            break
        if count_prompt_tokens is not None and count_prompt_tokens(context) > budget:
            break
        out.append({"messages": context, "prev_best": max(rates[:k]), "turn": k})
    return out


def build_contexts(records: list[dict], tests_by_id: dict, *, split: str = "train", m: int = 4,
                   count_prompt_tokens=None, budget: int = PROMPT_BUDGET, seed: int = 0):
    """All contexts from raw per-problem records, shuffled (seeded), plus statistics.

    records: {"problem_id", "samples": [trajectory, ...]} (collect.py's raw file); tests_by_id: the
    problem's tests (all of them: the reward's pass rate is over public + hidden)."""
    stats = {"problems": 0, "dropped_all_pass": 0, "no_usable_trajectory": 0, "trajectories_kept": 0,
             "contexts_per_turn": {}}
    contexts = []
    for rec in records:
        stats["problems"] += 1
        samples, pid = rec["samples"], rec["problem_id"]
        if first_turn_all_pass(samples):
            stats["dropped_all_pass"] += 1
            continue
        first = samples[0]["messages"][:2]
        new = [{"messages": first, "prev_best": 0.0, "turn": 0}]  # emitted once per problem
        chosen = select_trajectories(samples, split, m)
        if not chosen:
            stats["no_usable_trajectory"] += 1
        stats["trajectories_kept"] += len(chosen)
        for i in chosen:
            new += cut_contexts(samples[i], count_prompt_tokens=count_prompt_tokens, budget=budget)
        for c in new:
            c.update(problem_id=pid, tests=tests_by_id[pid])
            stats["contexts_per_turn"][c["turn"]] = stats["contexts_per_turn"].get(c["turn"], 0) + 1
        contexts += new
    random.Random(seed).shuffle(contexts)
    stats["contexts"] = len(contexts)
    return contexts, stats


def first_turn_contexts(problems: list) -> list[dict]:
    """Single-turn GRPO's training set (the paper's FT stage): for every problem its opening context
    s_0 = [system, problem], prev_best = 0, and all its tests (public + hidden, as every reward). Unlike
    build_contexts nothing was collected, so nothing is filtered: a problem the policy always solves
    gives a group of equal rewards, advantage 0 (veRL's GRPO, which the authors ran, keeps such groups)."""
    return [{"problem_id": p.id, "messages": first_turn_messages(p.question, p.starter_code, p.fn_name),
             "prev_best": 0.0, "turn": 0, "tests": p.all_tests()} for p in problems]
