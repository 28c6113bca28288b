"""Step 8 of train.py: what a step is logged with (metrics.jsonl, the tracker) and the validation reward.
Every number is over all ranks; nothing here changes what is learned.

    with timed(timings, "generate_s"): ...                      # seconds per phase
    metrics = step_metrics(learner, batch, sequences, stats, timings, step=step)
    metrics.update(validate(learner, val_contexts, args, step, workers))
"""

import contextlib
import math
import time

import torch

from cobalt_min.generation import VAL_SEED_STRIDE, request_seeds
from cobalt_min.graders import grader_of
from cobalt_min.prompts import extract_code
from cobalt_min.rewards import validation_reward
from cobalt_min.sandbox import InfraFailure, pass_rate, run_programs
from cobalt_min.training.learner import Learner, sample_from_policy


@contextlib.contextmanager
def timed(timings: dict, phase: str):
    """Add the seconds the block takes to timings[phase]."""
    start = time.perf_counter()
    yield
    timings[phase] = timings.get(phase, 0.0) + time.perf_counter() - start


def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def step_metrics(learner: Learner, batch, sequences, stats: dict, timings: dict, **extra) -> dict:
    """The step's numbers over all ranks (reward, pass rate, response length, loss statistics, timings,
    what the step cost per program trained on and per problem; a step without rewards, sft's, has no reward
    and pass rate); batch.extra is this rank's."""
    acc = learner.accelerator
    gather, device = acc.gather_for_metrics, acc.device
    lengths = gather(torch.tensor([float(len(c.token_ids)) for c in batch.completions], device=device))
    truncated = gather(torch.tensor([0.0 if c.finished else 1.0 for c in batch.completions], device=device))
    rewarded = {}  # (the numbers of sampled, run and rewarded programs: none under sft)
    if batch.group_rewards is not None:
        # nan: no reward or pass rate (the sandbox failed on the program: batch.infra_errors), left out here
        all_rewards = gather(batch.group_rewards.flatten().float().to(device))
        all_rewards = all_rewards[all_rewards.isfinite()]
        all_rates = gather(torch.tensor([p if p is not None else 0.0 for p in batch.rates], device=device))
        all_rates = all_rates[all_rates.isfinite()]
        zero_std = gather(torch.tensor([float(g[g.isfinite()].numel() > 1 and g[g.isfinite()].std() == 0)
                                        for g in batch.group_rewards.float()], device=device))
        rewarded = {"reward_mean": all_rewards.mean().item(),
                    "reward_std": all_rewards.std().item() if all_rewards.numel() > 1 else 0.0,
                    "pass_rate": all_rates.mean().item(), "all_tests_passed": (all_rates >= 1).float().mean().item(),
                    "zero_std_groups": zero_std.mean().item(), "generated_tokens": int(lengths.sum().item()),
                    "gen_tokens_per_s": float(lengths.sum()) / max(timings["generate_s"], 1e-9)}
    memory = gather(torch.tensor([peak_memory_gb(device)], device=device)).tolist()  # one per rank
    # How far apart the ranks reached the step's first collective (its batch: sampling, the sandbox): the
    # fast ones wait that long, and a wait over --dist-timeout-minutes fails the run.
    batch_s = gather(torch.tensor([timings["batch_s"]], device=device))
    counts = acc.reduce(torch.tensor([len(batch.completions), sum(p is not None for p in batch.rates), batch.problems,
                                      batch.infra_errors], device=device, dtype=torch.float32), "sum").tolist()
    n_tokens = float(sequences.prompt_mask.sum(1)[sequences.prompt_index].sum() + sequences.completion_mask.sum())
    counted = {k: v for k, v in batch.extra.items() if k.startswith("n_")}  # counts (train.feedback_counts): summed
    if counted:
        sums = acc.reduce(torch.tensor(list(counted.values()), device=device, dtype=torch.float32), "sum").tolist()
        counted = {k: int(v) for k, v in zip(counted, sums)}
    return {**extra, **rewarded,
            "rank_spread_s": round((batch_s.max() - batch_s.min()).item(), 3),
            "no_code": sum(extract_code(c.text) is None for c in batch.completions) / len(batch.completions),
            "response_len": lengths.mean().item(), "truncated": truncated.mean().item(),
            "lr": learner.optimizer.param_groups[0]["lr"], **stats,
            **{k: round(v, 3) for k, v in timings.items()},
            "train_tokens_per_s": n_tokens / max(timings["update_s"] + timings["logprob_s"], 1e-9),
            # the cost of a step's training examples: programs trained on (rows), programs the sandbox ran,
            # problems, generated tokens (all ranks)
            "programs_trained": int(counts[0]), "programs_run": int(counts[1]), "problems": int(counts[2]),
            "infra_errors": int(counts[3]),  # programs the sandbox failed on: no reward, advantage 0
            **batch.extra, **counted, "peak_memory_gb": max(memory), "peak_memory_gb_per_rank": [round(m, 3) for m in memory]}


def cost_per_example(metrics: dict) -> dict:
    """Seconds, generated tokens and sandbox seconds per program trained on, and seconds per problem."""
    n = max(metrics["programs_trained"], 1)
    out = {"s_per_program": metrics["step_s"] / n, "s_per_problem": metrics["step_s"] / max(metrics["problems"], 1)}
    if "generated_tokens" in metrics:  # (sft samples and runs nothing)
        out.update(tokens_per_program=metrics["generated_tokens"] / n, sandbox_s_per_program=metrics["execute_s"] / n)
    return out


def peak_memory_gb(device) -> float:
    """This process's peak memory so far: what torch allocated on the GPU (vLLM's engine included when
    colocated), or the resident set on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 30
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB on Linux


def validate(learner: Learner, val_contexts: list, args, step: int, workers) -> dict:
    """One sample per validation context at the evaluation temperature; the mean validation reward.
    Each rank takes every world-th context; shares are padded to equal length (the padding is scored and
    left out of the mean) so that every rank gathers the same shape. A program the sandbox failed on (no
    verdict) is left out of the mean too, and counted (val_infra_errors)."""
    start = time.perf_counter()
    acc = learner.accelerator
    rank, world = acc.process_index, acc.num_processes
    positions = list(range(rank, len(val_contexts), world))
    real = len(positions)
    positions += [positions[0] if positions else 0] * (math.ceil(len(val_contexts) / world) - real)
    share = [val_contexts[i] for i in positions]
    seeds = [request_seeds(args.seed + VAL_SEED_STRIDE * step, len(val_contexts), 1)[i] for i in positions]
    outs = sample_from_policy(learner, [learner.engine.prompt_ids(c["messages"]) for c in share], n=1,
                              temperature=args.val_temperature, top_p=0.95, max_new_tokens=args.max_new_tokens,
                              seed=seeds)
    results = run_programs([extract_code(o[0].text) for o in outs], [c["tests"] for c in share],
                           grader=grader_of(args), workers=workers)
    lost = [isinstance(r, InfraFailure) for r in results]  # no verdict: left out of the mean, counted
    rewards = [0.0 if no else validation_reward(None if r is None else pass_rate(r)) for r, no in zip(results, lost)]
    kept = [float(k < real and not lost[k]) for k in range(len(share))]
    both = acc.gather(torch.tensor([rewards, kept], device=acc.device, dtype=torch.float32).T)  # (n, 2)
    scored = both[:, 1].sum().item()
    return {"val_reward": (both[:, 0] * both[:, 1]).sum().item() / scored if scored else math.nan,
            "val_infra_errors": len(val_contexts) - int(scored), "val_s": round(time.perf_counter() - start, 3)}


def tracker_tag(name: str) -> str:
    """A metric's name for a tracker, grouped: val/..., time/... (seconds), train/... (the rest)."""
    if name.startswith("val_"):
        return "val/" + name.removeprefix("val_")
    return ("time/" if name.endswith("_s") else "train/") + name
