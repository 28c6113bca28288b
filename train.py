r"""Online contextual bandit learning (COBALT stage 2, paper §3, §5): GRPO on partial trajectories.

Each step takes a batch of contexts (partial trajectories from collect.py), samples G next programs
for each with the current policy, runs them on ALL tests of their problem, scores them with the
staged reward (correctness + improvement over the context's best program + format), and updates the
policy with the clipped GRPO loss under a KL penalty to the frozen initial policy. More methods of the
same loop (steps 1-4 differ, nothing else): `--method single-turn` is the paper's first stage ("FT",
single-step fine-tuning): the same steps on every problem's first turn only, no offline data;
`--method grpo-mt` and `--method verpo-mt` are the paper's online multi-turn baselines: whole
conversations rolled out by the policy instead of offline contexts; `--method sft` is the repair
warm-up of the self-repair demo (not in the paper: docs/departures.md): supervised fine-tuning on
demonstrations (cobalt_min/warmup.py), no sampling, no reward.

    # CPU, small settings (a few minutes; demo.sh holds the demo's own):
    python train.py --model smollm2 --contexts runs/collect/contexts.jsonl --out runs/train \
        --batch-size 2 --group-size 4 --max-new-tokens 128 --max-steps 4 --lr 1e-5
    # one GPU, the paper's pipeline (docs/full_scale.md): base -> FT (single-turn GRPO) -> collect.py with FT
    # -> COBALT from base ("COBALT") or from FT ("FT-COBALT"; with --perturbed-contexts: "-PTB")
    python train.py --method single-turn --model Qwen/Qwen3-8B --problems data/taco_train.jsonl --out runs/ft \
        --thinking --gradient-checkpointing
    python train.py --model runs/ft/final --contexts runs/collect/contexts.jsonl \
        --val-contexts runs/collect_val/contexts.jsonl --out runs/ft_cobalt --thinking --gradient-checkpointing
    # several GPUs: DDP (a full copy per GPU), or --fsdp (FSDP2 shards; docs/full_scale.md); two CPU ranks:
    accelerate launch --config_file configs/fsdp_8b.yaml train.py --model Qwen/Qwen3-8B ... --fsdp --engine vllm
    ACCELERATE_USE_CPU=true torchrun --nproc_per_node 2 train.py ... [--fsdp]

Simplifications relative to the authors' veRL setup (docs/departures.md): a batch is sampled once and
used for --mini-batches optimizer steps, then dropped (the paper's "1 epoch over each batch"); old log-probs
are recomputed with the policy; the reference is the initial policy, frozen; each rank samples its own share
(groups never span ranks); an epoch's last partial batch is not trained (veRL's drop_last). Samples, losses
and weights do not depend on the number of ranks (to float rounding): seeds, mini-batches and the loss's
normalisation are defined on the global batch. Plumbing: cobalt_min/training/ (launch.py, data.py, learner.py,
monitoring.py, checkpoint.py, sharding.py).

Outputs in --out: metrics.jsonl (one line per step), checkpoints/step_N (resume with --resume),
final/ (load it with evaluate.py --model OUT/final; a checkpoint with `python -m cobalt_min.training.checkpoint
export`), report.html (the run's curves), settings.json (what decides the run: --resume must match it).

Shape letters, here and in every shape comment of cobalt_min/ (grpo.py, logprobs.py, grpo_mt.py, verpo.py, ...):
    B  contexts (COBALT, FT) or problems (GRPO-MT, VeRPO-MT) of a batch    G  programs sampled for each (the group)
    T  turns of a conversation (the paper's t)    U  distinct prompts of a batch (a prompt is stored once)
    R  rows: sampled programs (completions), the unit of the loss    P  prompt width, C completion width (tokens)
    L  a whole row's width (prompt + completion)    W  attention width while sampling (prompt + tokens so far)
    N  tokens, flattened    V  vocabulary    H  hidden size    m  tests of a problem (VeRPO's)
"""

import argparse
import dataclasses
import math
import os
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from cobalt_min import cli, grpo_mt, verpo
from cobalt_min.generation import STEP_SEED_STRIDE, Completion, load_tokenizer
from cobalt_min.graders import grader_flags, grader_of
from cobalt_min.grpo import AGGREGATIONS, group_advantages, policy_loss
from cobalt_min.jsonl import append_jsonl
from cobalt_min.logprobs import SequenceBatch, pack_groups
from cobalt_min.problems import problem_flags
from cobalt_min.prompts import extract_code, says_all_public_passed
from cobalt_min.report import write_report
from cobalt_min.rewards import correctness_reward, token_counter, training_reward
from cobalt_min.rollout import rollout
from cobalt_min.sandbox import pass_rate, run_programs
from cobalt_min.training.checkpoint import save_checkpoint, save_final_policy
from cobalt_min.training.data import batch_for_step, load_training_data
from cobalt_min.training.launch import kept_checkpoint, resume_run, start_run
from cobalt_min.training.learner import (Learner, batched_logprobs, count_nonfinite, load_policy, make_learner,
                                         micro_batches, optimizer_step, policy_sampling, sample_from_policy,
                                         seeds_of_share, sync_sampler)
from cobalt_min.training.monitoring import cost_per_example, mean, step_metrics, timed, tracker_tag, validate

# ----------------------------------------------------------------------------- flags (defaults: the paper's §5)
ap = argparse.ArgumentParser(description=__doc__, formatter_class=cli.HelpFormatter)
g = ap.add_argument_group("model")
g.add_argument("--model", type=cli.source, required=True,
               help="policy to start from: hub id, folder, .gguf, or 'smollm2'")
g.add_argument("--thinking", action="store_true", help="thinking model: template mode and format reward with </think>")
g.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
               help="dtype of the master weights and optimizer state (at lr 1e-6 most bf16 updates round to nothing)")
g.add_argument("--mixed-precision", default=None, choices=["no", "bf16"],
               help="compute in bf16 with float32 master weights (default: bf16 on GPU, no on CPU, or the launch's)")
g.add_argument("--fsdp", action="store_true",
               help="shard policy and reference over the ranks with FSDP2 (default: DDP)")
g.add_argument("--gradient-checkpointing", action="store_true", help="recompute each decoder layer in backward")
g.add_argument("--engine", default="auto", choices=["auto", "vllm", "hf", "api"],
               help="sampler: vLLM (weights pushed each step) or transformers (auto: vLLM when installed with a GPU); "
                    "not api (refused: collect.py and evaluate.py take it)")
g.add_argument("--vllm-gpu-memory-utilization", type=cli.probability, default=0.3,
               help="vLLM's share of the GPU, colocated with training (CPU build: VLLM_CPU_KVCACHE_SPACE GiB)")
g.add_argument("--vllm-max-num-seqs", type=cli.count, default=None, help="vLLM: sequences in flight at most")
g.add_argument("--vllm-sleep-mode", action="store_true", help="vLLM (CUDA): no memory held outside sampling")
g.add_argument("--gen-batch-size", type=cli.count, default=64, help="transformers engine: sequences decoded together")
cli.hf_engine_flags(g)
g.add_argument("--sample-dtype", default="auto", choices=["auto", "float32", "bfloat16"],
               help="transformers engine, fast path: the dtype it samples in (auto: bfloat16 on a CPU that multiplies "
                    "it natively, else float32; on a GPU the policy's); the update's log-probs are not affected")
g = ap.add_argument_group("method and data")
g.add_argument("--method", default="cobalt", choices=["cobalt", "single-turn", "grpo-mt", "verpo-mt", "sft"],
               help="cobalt: one program per offline context (the paper); single-turn: GRPO on first turns (the "
                    "paper's FT stage); grpo-mt, verpo-mt: the online multi-turn baselines; sft: supervised "
                    "fine-tuning on --demonstrations (the self-repair demo's warm-up, not the paper's)")
g.add_argument("--contexts", type=cli.source, default=None, help="cobalt: contexts.jsonl from collect.py")
g.add_argument("--demonstrations", type=cli.source, default=None,
               help="sft: conversations whose last (assistant) message is the target (python -m cobalt_min.warmup)")
problem_flags(g, required=False, what="single-turn, grpo-mt, verpo-mt: the problems to train on")
g.add_argument("--turns", type=cli.count, default=3, help="grpo-mt, verpo-mt: programs per conversation (VeRPO's: 4)")
g.add_argument("--credit", default="outcome", choices=["outcome", "reward-to-go"],
               help="grpo-mt: a turn's return: the last program's reward, or the sum from that turn on")
g.add_argument("--verpo-alpha", type=cli.number(0), default=verpo.ALPHA,
               help="verpo-mt: a test's weight is exp(-alpha x its pass rate in the group)")
g.add_argument("--verpo-gamma", type=cli.number(0, 1), default=verpo.GAMMA,
               help="verpo-mt: a conversation solved at turn L scores gamma^L")
g.add_argument("--verpo-beta", type=cli.number(0), default=verpo.BETA,
               help="verpo-mt: advantage = outcome advantage + beta x turn advantage")
g.add_argument("--perturbed-contexts", type=cli.source, default=None,
               help="perturbed contexts (perturb.py augment) added to the training set (paper §7: COBALT-PTB)")
g.add_argument("--perturbed-fraction", type=cli.number(0, 1, low_open=True, high_open=True), default=None,
               help="their share of the training set, in (0, 1) (default: add them all, as the paper)")
g.add_argument("--val-contexts", type=cli.source, default=None,
               help="validation contexts (collect.py --split validation)")
g.add_argument("--max-prompt-tokens", type=cli.count, default=None,
               help="longer contexts are skipped (default: 10240, the authors' training limit, veRL's "
                    "max_prompt_length; collect.py's --prompt-budget 10,000 is their cut of the contexts; "
                    "single-turn: 2048, the authors')")
g = ap.add_argument_group("sampling")
g.add_argument("--batch-size", type=cli.count, default=128, help="contexts (problems) per step")
g.add_argument("--group-size", type=cli.integer(2), default=16,
               help="programs (conversations) per context (problem), G")
g.add_argument("--temperature", type=cli.positive, default=1.0, help="sampling temperature")
g.add_argument("--top-p", type=cli.probability, default=1.0, help="nucleus sampling")
g.add_argument("--max-new-tokens", type=cli.count, default=6144, help="max response tokens")
cli.stop_after_code_flag(g)
g = ap.add_argument_group("reward and execution")
grader_flags(g)
g.add_argument("--workers", type=cli.count, default=None, help="sandbox workers per rank (default: CPUs / ranks)")
g.add_argument("--sanity-reward-tokens", default=None, help="comma-separated token ids: reward = their share of the "
               "completion, no execution (a check that the machinery learns; unset for real runs)")
g = ap.add_argument_group("GRPO loss")
g.add_argument("--clip-low", type=cli.number(0, 1, high_open=True), default=0.2, help="ratio clip below 1")
g.add_argument("--clip-high", type=cli.non_negative, default=0.4, help="ratio clip above 1 (clip-higher)")
g.add_argument("--dual-clip", type=cli.number(1, low_open=True), default=3.0,
               help="dual-clip c for negative advantages")
g.add_argument("--kl-coef", type=cli.non_negative, default=None,
               help="KL penalty coefficient, 0: no reference model (default: 1e-4; sft: 0)")
g.add_argument("--kl-estimator", default="k2", choices=["k1", "k2", "k3"], help="k2 is veRL's 'mse'")
g.add_argument("--agg", default="token-mean", choices=AGGREGATIONS,
               help="token mean over the mini-batch (the paper's) or per micro-batch (the authors' veRL runs)")
g.add_argument("--adv-eps", type=cli.positive, default=1e-6, help="advantage = (r - mean) / (std + eps)")
g.add_argument("--adv-std-floor", type=cli.non_negative, default=0.0,
               help="not the paper's: divide by max(std, this) (grpo.group_advantages; 0: the paper's rule; cobalt, single-turn)")
g.add_argument("--adv-scale", default="std", choices=["std", "none"],
               help="not the paper's: none leaves the std out, advantage = r - mean (Dr. GRPO; cobalt, single-turn)")
g.add_argument("--logprob-chunk", type=cli.count, default=256, help="tokens per LM-head chunk in log-probs")
g = ap.add_argument_group("optimisation")
g.add_argument("--lr", type=cli.positive, default=None, help="constant learning rate, AdamW (default: 1e-6; sft: 1e-5)")
g.add_argument("--weight-decay", type=cli.non_negative, default=0.01, help="AdamW weight decay")
g.add_argument("--grad-clip", type=cli.positive, default=1.0, help="max gradient norm")
g.add_argument("--mini-batches", type=cli.count, default=None,
               help="optimizer steps per batch (default: 2, mini-batches of 64; sft: 1)")
g.add_argument("--micro-batch-size", type=cli.count, default=4, help="sequences per forward/backward")
g.add_argument("--micro-batch-tokens", type=cli.count, default=None,
               help="instead: micro-batches of whole contexts up to this many tokens (a prompt counted once)")
g.add_argument("--epochs", type=cli.count, default=None,
               help="passes over the contexts or problems (default: 2; single-turn: 4, the authors'; sft: 3)")
g.add_argument("--max-steps", type=cli.count, default=None, help="stop after this many steps")
g.add_argument("--max-nonfinite-steps", type=cli.count, default=5,
               help="stop after this many optimizer steps in a row skipped for a NaN/inf gradient norm")
g.add_argument("--seed", type=int, default=0, help="every random draw of a step is seeded by (seed, step)")
g = ap.add_argument_group("validation, logging, checkpoints")
g.add_argument("--val-every", type=cli.count, default=10, help="validate every N steps")
g.add_argument("--val-limit", type=cli.count, default=None, help="validate on the first K validation contexts")
g.add_argument("--val-temperature", type=cli.non_negative, default=0.6, help="the paper's evaluation temperature")
g.add_argument("--save-every", type=cli.count, default=10, help="checkpoint every N steps")
g.add_argument("--keep-checkpoints", type=cli.count, default=2, help="most recent checkpoints kept")
cli.tracker_flag(g, "train/, val/, time/ (seconds)")
g.add_argument("--dist-timeout-minutes", type=cli.positive, default=180,
               help="how long a rank waits in a collective (torch's 10 is shorter than a slow rank's sampling)")
g.add_argument("--out", type=cli.output_folder, required=True, help="output folder")
g.add_argument("--save-dtype", default=None, choices=["float32", "bfloat16"],
               help="dtype of --out/final (default: the compute dtype: bfloat16 under --mixed-precision bf16)")
g.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
SETTINGS = cli.settings_of(ap, besides={
    "engine", "vllm_gpu_memory_utilization", "gen_batch_size", "hf_decode", "kv_cache_gb", "sample_dtype",
    "gradient_checkpointing", "workers", "logprob_chunk",
    "micro_batch_size", "micro_batch_tokens", "max_steps", "max_nonfinite_steps", "val_contexts", "val_every",
    "val_limit", "val_temperature", "save_every", "keep_checkpoints", "log_with", "dist_timeout_minutes", "out",
    "save_dtype", "resume", "vllm_max_num_seqs", "vllm_sleep_mode"})  # (what does not decide the run: settings.json)
# The flags whose default depends on the method. The authors' single-turn run (scripts/train_grpo_single_turn.sh)
# differs from their COBALT run in two numbers only: prompts are first turns (max 2,048 tokens), and it makes 4
# passes over the problems. The warm-up (sft, ours) takes a usual supervised fine-tuning setting.
PAPER = {"epochs": 2, "max_prompt_tokens": 10240, "lr": 1e-6, "mini_batches": 2, "kl_coef": 1e-4}
DEFAULTS = {"cobalt": PAPER, "grpo-mt": PAPER, "verpo-mt": PAPER,
            "single-turn": {**PAPER, "epochs": 4, "max_prompt_tokens": 2048},
            "sft": {**PAPER, "epochs": 3, "lr": 1e-5, "mini_batches": 1, "kl_coef": 0.0}}


def parse_args(argv=None):
    """The flags, with each method's defaults where the flag was not given (DEFAULTS)."""
    args = ap.parse_args(argv)
    for name, value in DEFAULTS[args.method].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


@dataclasses.dataclass
class StepBatch:
    """What one step trains on, whichever the method: U prompts and R sampled programs (rows), row r continuing
    prompts[prompt_of[r]] with the advantage advantages[r]; for the metrics, rewards, pass rates, extras."""
    prompts: list              # U token lists
    completions: list          # R Completions (the rows): the sampled tokens, text, finished
    prompt_of: list            # R ints
    advantages: torch.Tensor   # (R,)
    group_rewards: torch.Tensor | None  # (B, G); None: no reward (sft)
    rates: list                # pass rates of the programs run (None: no code block; nan: no verdict)
    problems: int              # distinct problems in this rank's share
    extra: dict                # method-specific numbers for metrics.jsonl
    infra_errors: int = 0      # programs the sandbox failed on (no reward: advantage 0, left out of the metrics)


# ----------------------------------------------------------------------------- steps 1-4: COBALT


def cobalt_batch(learner: Learner, contexts: list, step: int, args, timings: dict, workers: int) -> StepBatch:
    """COBALT's steps 1-4. This IS the bandit reduction of multi-turn code generation (paper §3): a
    context s_t is a partial trajectory of the reference policy pi_ref (collect.py, offline); online, the
    policy takes ONE action per context (the next program), gets its immediate reward against the
    context's prev_best, and that is all: no return over later turns, no value function, GRPO's group
    baseline instead. `contexts`: this rank's share of the step's batch (B of them)."""
    acc, count_tokens = learner.accelerator, token_counter(learner.tokenizer)
    prompts = [learner.engine.prompt_ids(c["messages"]) for c in contexts]
    # 2. sample G next programs per context from the current policy
    with timed(timings, "generate_s"):
        seeds = seeds_of_share(args.seed * STEP_SEED_STRIDE + step, args.batch_size, args.group_size, acc.process_index,
                               acc.num_processes)
        completions = sample_from_policy(learner, prompts, n=args.group_size, temperature=args.temperature,
                                         top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=seeds)
    samples = [(c, comp) for c, comps in zip(contexts, completions) for comp in comps]  # B*G, by context
    # 3. run them on ALL tests of their problem; the immediate reward r(s_t, a) of each (rewards.training_reward)
    with timed(timings, "execute_s"):
        if args.sanity_reward_tokens:  # (no execution: the share of completion tokens among the given ids)
            targets = {int(x) for x in args.sanity_reward_tokens.split(",")}
            rates = [None] * len(samples)
            rewards = [sum(t in targets for t in comp.token_ids) / max(1, len(comp.token_ids)) for _, comp in samples]
        else:
            results = run_programs([extract_code(comp.text) for _, comp in samples], [c["tests"] for c, _ in samples],
                                   grader=grader_of(args), workers=workers)
            rates = [None if r is None else pass_rate(r) for r in results]  # None: no code; nan: no verdict
            rewards = [training_reward(comp.text, pr, c["prev_best"], count_tokens=count_tokens, thinking=args.thinking)
                       for (c, comp), pr in zip(samples, rates)]  # nan: the sandbox failed on it (no verdict)
    rewards = torch.tensor(rewards).view(len(contexts), args.group_size)  # (B, G)
    # 4. group advantages: (r - mean of the G programs of the context) / (their std + eps), over the programs
    #    with a reward (all of them, unless the sandbox failed on one: that one gets 0)
    advantages = group_advantages(rewards, eps=args.adv_eps, valid=rewards.isfinite(), std_floor=args.adv_std_floor,
                                  scale=args.adv_scale == "std").flatten()  # (B*G,)
    correctness = [correctness_reward(p, c["prev_best"]) for (c, _), p in zip(samples, rates)
                   if p is not None and not math.isnan(p)]
    return StepBatch(prompts, [comp for _, comp in samples], [b for b, comps in enumerate(completions) for _ in comps],
                     advantages, rewards, rates, len({c.get("problem_id") for c in contexts}),
                     {"correctness_mean": mean(correctness), **feedback_counts(contexts, rates, args.group_size)},
                     int((~rewards.isfinite()).sum()))


def feedback_counts(contexts: list, rates: list, group_size: int) -> dict:
    """What a step offers to learn repair from (summed over the ranks: the n_ prefix): the contexts whose last
    feedback shows a failing public test, their programs that pass every test (repairs) and the contexts where
    some but not all of the G programs repair (only there do the advantages favour repairing); the contexts whose
    feedback says every public test passed, and their programs that still pass every test (kept)."""
    out = dict.fromkeys(("n_failing_feedback_contexts", "n_failing_feedback_repairs", "n_failing_feedback_mixed",
                         "n_passing_feedback_contexts", "n_passing_feedback_kept"), 0)
    for b, c in enumerate(contexts):
        if c.get("turn", 0) == 0:
            continue
        solved = [r is not None and r >= 1.0 for r in rates[b * group_size:(b + 1) * group_size]]
        if says_all_public_passed(c["messages"][-1]):
            out["n_passing_feedback_contexts"] += 1
            out["n_passing_feedback_kept"] += sum(solved)
        else:
            out["n_failing_feedback_contexts"] += 1
            out["n_failing_feedback_repairs"] += sum(solved)
            out["n_failing_feedback_mixed"] += 0 < sum(solved) < len(solved)
    return out


# ----------------------------------------------------------------------------- steps 1-4: GRPO-MT, VeRPO-MT


def multi_turn_batch(learner: Learner, problems: list, step: int, args, timings: dict, workers: int) -> StepBatch:
    """GRPO-MT's and VeRPO-MT's steps 1-4 (cobalt_min/grpo_mt.py says what GRPO-MT is, cobalt_min/verpo.py
    VeRPO-MT's rewards): whole conversations by the current policy, every turn a row trained in its own
    context; the two differ only in step 4. `problems`: this rank's share of the step's batch (B)."""
    acc, count_tokens = learner.accelerator, token_counter(learner.tokenizer)
    # 2-3. G conversations of T programs per problem (seeded by its position in the global batch), feedback
    #      after each; every program run on all tests
    seeds = seeds_of_share(args.seed * STEP_SEED_STRIDE + step, args.batch_size, args.group_size * args.turns,
                           acc.process_index, acc.num_processes)
    with policy_sampling(learner):
        trajs, t = rollout(problems, learner.engine, samples=args.group_size, feedback_turns=args.turns - 1,
                           temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                           seed=seeds, thinking=args.thinking, grader=grader_of(args), workers=workers, progress=False,
                           keep_tokens=True)  # trajs[b][g]
    timings.update(t)
    # r_t of every turn: rewards.training_reward against the best program before it in the conversation (a
    # problem the sandbox failed on, without a verdict on a program: rewards nan, advantages 0, left out)
    rewards, kept = grpo_mt.reward_tensor(trajs, count_tokens, args.thinking)  # (B, G, T)
    advantages = torch.zeros_like(rewards)  # (B, G, T)
    extra = {f"pass_rate_turn{k}": mean([tr["turns"][k]["pass_rate"] for b in kept for tr in trajs[b]])
             for k in range(args.turns)}
    if args.method == "verpo-mt" and kept:
        # 4'. VeRPO-MT: each turn's tests weighted by their difficulty in the group, plus the outcome
        v = verpo.batch_advantages([trajs[b] for b in kept], args.verpo_alpha, args.verpo_gamma, args.verpo_beta)
        advantages[kept] = v["advantages"]
        extra.update(verpo_turn_reward_mean=v["turn_rewards"].mean().item(),
                     verpo_outcome_mean=v["outcomes"].mean().item(),
                     verpo_flat_groups=(v["advantages"].flatten(1).abs().amax(1) == 0).float().mean().item())
    elif kept:  # 4. advantages from the returns (--credit), normalised over the G conversations of each problem
        advantages[kept] = grpo_mt.advantages(rewards[kept], args.credit, args.adv_eps)
    # (B, G), reported per step: each conversation's return from its first turn (--credit outcome: its last
    # program's staged reward; reward-to-go: the sum of its programs' rewards); VeRPO-MT: its last program's
    group_rewards = rewards[:, :, -1] if args.method == "verpo-mt" else grpo_mt.returns(rewards, args.credit)[:, :, 0]
    prompts, completions, prompt_of = grpo_mt.turn_rows(trajs)  # one row per turn, (b, g, t) order
    rates = [None if turn["program"] is None else math.nan if b not in kept else turn["pass_rate"]
             for b, trs in enumerate(trajs) for tr in trs for turn in tr["turns"]]
    return StepBatch(prompts, completions, prompt_of, advantages.flatten(), group_rewards, rates, len(problems),
                     {**extra, "final_reward_mean": mean(rewards[kept][:, :, -1].flatten().tolist())},
                     sum("infra_error" in turn for trs in trajs for tr in trs for turn in tr["turns"]))


# ----------------------------------------------------------------------------- steps 1-4: the warm-up (sft)


def demonstration_batch(learner: Learner, demonstrations: list) -> StepBatch:
    """The repair warm-up's steps 1-4 (--method sft; not the paper's: docs/departures.md): nothing is sampled
    or run. Each demonstration's last message (the assistant's) is the target, the messages before it the
    prompt, so the loss is on the target's tokens only. Every advantage is 1 and the ratio stays 1 (the old
    log-probs are the current ones, old_and_ref_logprobs): the clipped loss -A ratio then has the gradient
    -grad log pi(target): supervised fine-tuning (token-mean negative log-likelihood) through the same update.
    The target's tokens are its text's followed by EOS, as a sampled response that ended by itself."""
    tok = learner.tokenizer
    prompts = [learner.engine.prompt_ids(d["messages"][:-1]) for d in demonstrations]
    targets = [d["messages"][-1]["content"] for d in demonstrations]
    completions = [Completion(text, tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id], True)
                   for text in targets]
    return StepBatch(prompts, completions, list(range(len(completions))), torch.ones(len(completions)), None,
                     [None] * len(completions),
                     len({d.get("problem_id") for d in demonstrations}), {})


# ----------------------------------------------------------------------------- steps 5-6: the GRPO update


def old_and_ref_logprobs(learner: Learner, batch: StepBatch, args):
    """Pack the batch's prompts and rows (each prompt stored once, its rows attending to it) and compute the
    log-probs the loss compares against: the sampling policy's (only when a batch gets several optimizer
    steps; with one, the ratio is 1) and the reference's (only with a KL term): (sequences, (R, C) or None x2)."""
    acc, eos = learner.accelerator, learner.tokenizer.eos_token_id
    sequences = pack_groups(batch.prompts, [c.token_ids or [eos] for c in batch.completions], batch.prompt_of,
                            learner.tokenizer.pad_token_id, device=acc.device)  # prompts (U, P); rows (R, C)
    old_logp = ref_logp = None
    several = args.mini_batches > 1 and args.method != "sft"  # (sft: the ratio stays 1, demonstration_batch)
    plan = micro_batches(sequences, torch.arange(len(batch.completions), device=acc.device), args, acc) \
        if several or learner.ref is not None else []
    if several:
        old_logp = batched_logprobs(learner.policy, sequences, args.temperature, plan)  # (R, C)
    if learner.ref is not None:
        with acc.autocast():  # (as the policy's forward runs; a no-op under --fsdp)
            ref_logp = batched_logprobs(learner.ref, sequences, args.temperature, plan)  # (R, C)
    return sequences, old_logp, ref_logp


def update_policy(learner: Learner, sequences: SequenceBatch, advantages, old_logp, ref_logp, args) -> dict:
    """The clipped GRPO update: the batch in --mini-batches mini-batches of whole contexts (all G programs of
    a context in the same one, as veRL splits the batch), one optimizer step each, gradients accumulated
    over micro-batches. The contexts are already in random order (epoch_order), so mini-batch k is the k-th
    block of each rank's contexts and of the global batch, whatever the number of ranks; every rank runs the
    same number of micro-batches (a collective per backward). Returns loss statistics, means over ranks."""
    accelerator, world = learner.accelerator, learner.accelerator.num_processes
    token_stats = ("clip_frac_high", "clip_frac_low", "clip_frac_dual", "kl", "ratio", "logp")
    sums = dict.fromkeys(("loss",) + token_stats + ("tokens",), 0.0)  # this rank's; token_stats weighted by tokens
    grad_norms, skipped = [], 0
    advantages = advantages.to(accelerator.device)  # (R,)
    per_mini_batch = len(advantages) // args.mini_batches  # rows: (contexts per rank / mini-batches) x G
    for k in range(args.mini_batches):
        row_ids = torch.arange(k * per_mini_batch, (k + 1) * per_mini_batch, device=accelerator.device)
        # token-mean over the whole mini-batch on all ranks: DDP and FSDP average gradients over the
        # ranks, so each rank divides by (the mini-batch's tokens on all ranks / ranks).
        tokens = accelerator.reduce(sequences.completion_mask[row_ids].sum().float(), "sum")
        plan = micro_batches(sequences, row_ids, args, accelerator)
        for idx in plan:
            micro = sequences.select(idx)
            width = micro.completion_ids.shape[1]
            logp = learner.policy(*micro.fields(), args.temperature)  # (micro-batch, width)
            loss, loss_stats = policy_loss(logp, old_logp[idx, :width] if old_logp is not None else logp.detach(),
                                           ref_logp[idx, :width] if ref_logp is not None else None, advantages[idx],
                                           micro.completion_mask, clip_low=args.clip_low, clip_high=args.clip_high,
                                           dual_clip=args.dual_clip, kl_coef=args.kl_coef,
                                           kl_estimator=args.kl_estimator, agg=args.agg,
                                           minibatch_tokens=max(1.0, tokens.item() / world),
                                           minibatch_sequences=len(row_ids), micro_batches=len(plan))
            loss.backward()
            tokens_here = micro.completion_mask.sum().item()
            sums["loss"] += loss.item() / args.mini_batches  # this rank's part of the mini-batches' mean loss
            sums["tokens"] += tokens_here
            for name in token_stats:
                sums[name] += loss_stats[name] * tokens_here
        norm = optimizer_step(learner.policy, learner.optimizer, args.grad_clip)  # None: not finite, skipped
        count_nonfinite(learner, norm, args.max_nonfinite_steps)
        grad_norms += [norm] if norm is not None else []
        skipped += norm is None
    # Over ranks: the loss is the mean of the ranks' parts (the objective that the averaged gradients
    # descend), the other statistics means over all completion tokens; the gradient norm is already global.
    totals = dict(zip(sums, accelerator.reduce(torch.tensor(list(sums.values()), device=accelerator.device),
                                               "sum").tolist()))
    return {"loss": totals["loss"] / world, **{k: totals[k] / max(totals["tokens"], 1.0) for k in token_stats},
            "grad_norm": mean(grad_norms) if grad_norms else float("nan"), "skipped_nonfinite_steps": skipped}


# ----------------------------------------------------------------------------- the loop


def train(args):
    """Set up (cobalt_min/training/: launch.py, data.py, learner.py), then steps 1-8 until --max-steps or
    --epochs, a checkpoint every --save-every steps, and the final policy in --out/final."""
    accelerator, mixed, model_path, use_vllm, log = start_run(args, SETTINGS)
    out, main_process, world = Path(args.out), accelerator.is_main_process, accelerator.num_processes
    # the data first, with the policy's tokenizer: a bad file stops the run before minutes of loading an 8B model
    data, val_contexts, too_long, steps_per_epoch, total_steps = \
        load_training_data(args, load_tokenizer(model_path), log)
    dtype = getattr(torch, args.dtype)  # the master weights'
    tokenizer, policy_lm = load_policy(accelerator, model_path, dtype, args.fsdp)  # (--fsdp: rank 0 reads the weights)
    workers = args.workers or max(1, (os.cpu_count() or 1) // world)
    learner = learner_of(args, accelerator, model_path, use_vllm, tokenizer, policy_lm,
                         torch.bfloat16 if mixed == "bf16" else dtype)
    step = resume_run(args, learner, log)
    if main_process:
        accelerator.init_trackers("cobalt-min", config=cli.tracker_config(args))
    bar = tqdm(total=total_steps, initial=step, desc="SFT steps" if args.method == "sft" else "GRPO steps", unit="step",
               disable=not main_process)
    while step < total_steps:
        timings, start = {}, time.perf_counter()
        with timed(timings, "batch_s"):
            # 1. this rank's share of the step's batch: contexts s_t (COBALT; single-turn: first turns s_0 of
            #    the problems, trajectories.first_turn_contexts) or problems (GRPO-MT, VeRPO-MT)
            epoch, share = batch_for_step(data, step, steps_per_epoch, batch_size=args.batch_size, seed=args.seed,
                                          rank=accelerator.process_index, world=world)
            # 2-4. programs sampled by the current policy, run, rewarded; their advantages
            batch = step_batch(learner, share, step, args, timings, workers)
        # 5. log-probs of the sampling and reference policies where the loss needs them
        with timed(timings, "logprob_s"):
            sequences, old_logp, ref_logp = old_and_ref_logprobs(learner, batch, args)
        # 6. the clipped GRPO update
        with timed(timings, "update_s"):
            stats = update_policy(learner, sequences, batch.advantages, old_logp, ref_logp, args)
        # 7. the sampler follows the policy (when it holds its own copy of the weights)
        if learner.engine_has_copy:
            with timed(timings, "sync_s"):
                sync_sampler(learner)
        step += 1
        # 8. log, validate, checkpoint
        metrics = step_metrics(learner, batch, sequences, stats, timings, step=step, epoch=epoch,
                               method=args.method, dropped_long_contexts=too_long)
        if metrics.get("zero_std_groups") == 1.0:
            log(f"step {step}: every group's rewards are equal, so every advantage is 0: nothing was learned")
        metrics["step_s"] = round(time.perf_counter() - start, 3)
        metrics.update(cost_per_example(metrics))
        if val_contexts and (step % args.val_every == 0 or step == total_steps):
            metrics.update(validate(learner, val_contexts, args, step, workers))
        if main_process:
            record_step(accelerator, out, metrics, step, bar, sft=batch.group_rewards is None)
        if step % args.save_every == 0 or step == total_steps:
            save_checkpoint(accelerator, learner.policy, learner.optimizer, out, step, epoch, args.keep_checkpoints)
    bar.close()
    save_final_policy(accelerator, learner.policy, tokenizer, out / "final",
                      dtype=getattr(torch, args.save_dtype) if args.save_dtype else learner.compute_dtype)
    if main_process:
        log(f"wrote {out / 'metrics.jsonl'}, {write_report(out)} and the final policy to {out / 'final'}")
    if hasattr(learner.engine, "close"):
        learner.engine.close()
    accelerator.end_training()


def learner_of(args, accelerator, model_path: str, use_vllm: bool, tokenizer, policy_lm, compute_dtype) -> Learner:
    """learner.make_learner with train.py's flags: the policy for the ranks, the reference, AdamW, the sampler."""
    if use_vllm:
        options = dict(seed=args.seed, gpu_memory_utilization=args.vllm_gpu_memory_utilization,
                       max_model_len=args.max_prompt_tokens + args.max_new_tokens, max_num_seqs=args.vllm_max_num_seqs,
                       sleep_mode=args.vllm_sleep_mode)
    else:
        options = dict(batch_size=args.gen_batch_size, decode=args.hf_decode, kv_cache_gb=args.kv_cache_gb,
                       dtype=args.sample_dtype)
    return make_learner(accelerator, model_path, tokenizer, policy_lm, compute_dtype, lr=args.lr,
                        weight_decay=args.weight_decay, kl_coef=args.kl_coef, fsdp=args.fsdp,
                        logprob_chunk=args.logprob_chunk, gradient_checkpointing=args.gradient_checkpointing,
                        engine="vllm" if use_vllm else "hf",
                        engine_options=dict(options, thinking=args.thinking, stop_after_code=args.stop_after_code))


def step_batch(learner: Learner, share: list, step: int, args, timings: dict, workers: int) -> StepBatch:
    """Steps 2-4 of the chosen method on this rank's share of the batch: the programs the current policy
    samples, run and rewarded, and their advantages (sft: the demonstrations, advantage 1, nothing sampled)."""
    if args.method in ("cobalt", "single-turn"):
        return cobalt_batch(learner, share, step, args, timings, workers)
    if args.method == "sft":
        return demonstration_batch(learner, share)
    return multi_turn_batch(learner, share, step, args, timings, workers)


def record_step(accelerator, out: Path, metrics: dict, step: int, bar, sft: bool) -> None:
    """Rank 0: the step's line in metrics.jsonl, the tracker's values, the progress bar's figures (sft: the
    demonstrations' negative log-likelihood; else the mean reward and pass rate)."""
    append_jsonl(out / "metrics.jsonl", metrics)
    accelerator.log({tracker_tag(k): v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)
    if sft:
        bar.set_postfix(nll=f"{-metrics['logp']:.3f}")
    else:
        bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", pass_rate=f"{metrics['pass_rate']:.2f}")
    bar.update(1)


def main(argv=None):
    """train.py's command line: parse the flags, then train; Ctrl-C says what the run keeps."""
    args = parse_args(argv)
    # Before CUDA starts: blocks of varying sizes (micro-batches) are reused instead of fragmenting memory.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    with cli.interrupt_message(lambda: kept_checkpoint(Path(args.out)), cli.command_line(__file__, argv)):
        train(args)


if __name__ == "__main__":
    main()
    cli.end_rank()  # a rank of a distributed launch: leave the process group, exit (cli.py says why)
