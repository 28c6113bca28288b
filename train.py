r"""Online contextual bandit learning (COBALT stage 2, paper §3, §5): GRPO on partial trajectories.

Each step takes a batch of contexts (partial trajectories from collect.py), samples G next programs
for each with the current policy, runs them on ALL tests of their problem, scores them with the
staged reward (correctness + improvement over the context's best program + format), and updates the
policy with the clipped GRPO loss under a KL penalty to the frozen initial policy.

    # CPU, small settings (a few minutes; demo.sh holds the demo's own):
    python train.py --model smollm2 --contexts runs/collect/contexts.jsonl --out runs/train \
        --batch-size 2 --group-size 4 --max-new-tokens 128 --max-steps 4 --lr 1e-5
    # one GPU:
    python train.py --model path/to/sft-model --contexts runs/collect/contexts.jsonl \
        --val-contexts runs/collect_val/contexts.jsonl --out runs/train --thinking --gradient-checkpointing
    # several GPUs: DDP (a full copy per GPU), or --fsdp (weights, gradients and optimizer state sharded
    # with FSDP2; see README "Full-scale recipe"):
    accelerate launch --config_file configs/fsdp_8b.yaml train.py --model Qwen/Qwen3-8B ... --fsdp --engine vllm
    # two CPU processes (gloo), as the tests run the multi-rank paths:
    ACCELERATE_USE_CPU=true torchrun --nproc_per_node 2 train.py ... [--fsdp]

Simplifications relative to the authors' veRL setup, each stated where it happens: each batch is
sampled once and used for --mini-batches optimizer steps, then dropped (the paper's "1 epoch over each
batch"; --epochs counts passes over the training contexts); old log-probs recomputed with the policy (not taken from the sampler); the
reference model is the initial policy kept frozen; each rank generates for its own share of the batch
(GRPO groups never span ranks). As the authors (veRL's drop_last), an epoch's last partial batch is
not trained. A run's samples, losses and weights do not depend on the number of ranks (to float
rounding): the seeds, the mini-batches and the loss's normalisation are defined on the global batch.

Outputs in --out: metrics.jsonl (one line per step), checkpoints/step_N (resume with --resume),
final/ (save_pretrained: load it with evaluate.py --model OUT/final; a checkpoint with `python -m
cobalt_min.checkpoint export`), report.html (the run's curves), settings.json (what decides the run: a
--resume must match it).
"""

import argparse
import contextlib
import copy
import dataclasses
import datetime
import functools
import math
import os
import random
import sys
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from torch.distributed.fsdp import FSDPModule
from torch.distributed.device_mesh import init_device_mesh
from accelerate.utils import InitProcessGroupKwargs, set_seed
from tqdm.auto import tqdm

from cobalt_min import cli
from cobalt_min.checkpoint import resume, save_checkpoint, save_final_policy
from cobalt_min.generation import (HFEngine, VLLMEngine, chat_prompt_ids, check_stop_rule, engine_kind, find_smollm2_gguf,
                                   load_model, request_seeds)
from cobalt_min.grpo import AGGREGATIONS, group_advantages, policy_loss
from cobalt_min.logprobs import LogprobModel, SequenceBatch, enable_checkpointing, pack_groups
from cobalt_min.jsonl import append_jsonl, read_jsonl, write_jsonl
from cobalt_min.prompts import extract_code
from cobalt_min.report import write_report
from cobalt_min.rewards import correctness_reward, training_reward, validation_reward
from cobalt_min import grpo_mt, verpo
from cobalt_min.sandbox import pass_rate, require_safe_sandbox, run_programs
from cobalt_min.sharding import full_norm, full_weights, shard_model


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    model_flags(ap)
    method_flags(ap)
    sampling_flags(ap)
    reward_flags(ap)
    loss_flags(ap)
    optimisation_flags(ap)
    output_flags(ap)
    return ap.parse_args(argv)


def model_flags(ap):
    """The policy, its precision and sharding, the sampler."""
    g = ap.add_argument_group("model")
    g.add_argument("--model", type=cli.source, required=True,
                   help="policy to start from: hub id, folder, .gguf, or 'smollm2'")
    g.add_argument("--thinking", action="store_true", help="thinking model: template mode and format reward "
                   "with </think> (otherwise the non-thinking format rules)")
    g.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="dtype of the trained (master) weights and optimizer state (default float32: at lr 1e-6 "
                        "most bfloat16 updates would round to nothing)")
    g.add_argument("--mixed-precision", default=None, choices=["no", "bf16"],
                   help="bf16: compute in bfloat16 with float32 master weights (Accelerate autocast; FSDP2's "
                        "mixed precision under --fsdp) (default: bf16 on GPU, no on CPU; an `accelerate launch` "
                        "config may set it too)")
    g.add_argument("--fsdp", action="store_true",
                   help="shard the policy and the reference over the ranks with FSDP2 (one unit per decoder layer), "
                        "for models whose weights and optimizer state do not fit one device (Qwen3-8B on 80 GB); "
                        "the sampler then holds its own copy, updated after each step. Default: DDP through "
                        "Accelerate (a full copy per rank)")
    g.add_argument("--gradient-checkpointing", action="store_true",
                   help="trade compute for activation memory: each decoder layer keeps its input and runs again in "
                        "backward (a context's prompt is still run once for its G programs)")
    g.add_argument("--engine", default="auto", choices=["auto", "vllm", "hf"],
                   help="sampler: vLLM (weights pushed after each update) or transformers (the policy itself)")
    g.add_argument("--vllm-gpu-memory-utilization", type=cli.probability, default=0.3,
                   help="vLLM's share of GPU memory, colocated with training (default 0.3); on vLLM's CPU build "
                        "its KV cache is VLLM_CPU_KVCACHE_SPACE GiB (default 1)")
    g.add_argument("--gen-batch-size", type=cli.count, default=64, help="transformers engine: sequences per generate")


def method_flags(ap):
    """COBALT or GRPO-MT, and what each trains on."""
    g = ap.add_argument_group("method and data")
    g.add_argument("--method", default="cobalt", choices=["cobalt", "grpo-mt", "verpo-mt"],
                   help="cobalt: one program per offline context, its immediate reward (the paper); grpo-mt: the "
                        "online multi-turn baseline, whole conversations rolled out by the policy (cobalt_min/grpo_mt.py); "
                        "verpo-mt: the same rollouts, VeRPO's per-test weighted turn rewards and outcome advantage "
                        "(cobalt_min/verpo.py)")
    g.add_argument("--contexts", type=cli.source, default=None, help="cobalt: contexts.jsonl from collect.py")
    cli.problem_flags(g, required=False, what="grpo-mt, verpo-mt: the problems to roll out on")
    g.add_argument("--turns", type=cli.count, default=3,
                   help="grpo-mt, verpo-mt: programs per conversation, as collect.py counts them (default 3: the "
                        "paper's training trajectories; VeRPO's own setting is 4)")
    g.add_argument("--credit", default="outcome", choices=["outcome", "reward-to-go"],
                   help="grpo-mt: the return of a turn: the last program's reward (default) or the sum of the "
                        "rewards from that turn on (cobalt_min/grpo_mt.py)")
    g.add_argument("--verpo-alpha", type=cli.number(0), default=verpo.ALPHA,
                   help="verpo-mt: a test's weight is exp(-alpha x its pass rate in the group) (default 2.0, VeRPO's)")
    g.add_argument("--verpo-gamma", type=cli.number(0, 1), default=verpo.GAMMA,
                   help="verpo-mt: a conversation solved at turn L scores gamma^L (default 0.95, VeRPO's)")
    g.add_argument("--verpo-beta", type=cli.number(0), default=verpo.BETA,
                   help="verpo-mt: advantage = outcome advantage + beta x turn advantage (default 1.0, VeRPO's)")
    g.add_argument("--perturbed-contexts", type=cli.source, default=None,
                   help="perturbed contexts (perturb.py augment) added to the training set (paper §7: COBALT-PTB)")
    g.add_argument("--perturbed-fraction", type=cli.number(0, 1, low_open=True, high_open=True), default=None,
                   help="with --perturbed-contexts: their share of the training set, in (0, 1) (default: add them "
                        "all, as the paper)")
    g.add_argument("--val-contexts", type=cli.source, default=None,
                   help="validation contexts (collect.py --split validation)")
    g.add_argument("--max-prompt-tokens", type=cli.count, default=10240,
                   help="longer contexts are skipped (default 10240)")


def sampling_flags(ap):
    """How programs are sampled (the paper's §5 defaults)."""
    g = ap.add_argument_group("sampling (paper §5 defaults)")
    g.add_argument("--batch-size", type=cli.count, default=128, help="contexts per step (default 128)")
    g.add_argument("--group-size", type=cli.integer(2), default=16, help="programs sampled per context, G (default 16)")
    g.add_argument("--temperature", type=cli.positive, default=1.0, help="default 1.0")
    g.add_argument("--top-p", type=cli.probability, default=1.0, help="default 1.0")
    g.add_argument("--max-new-tokens", type=cli.count, default=6144, help="max response tokens (default 6144)")
    cli.stop_after_code_flag(g)


def reward_flags(ap):
    """How they are run and rewarded."""
    g = ap.add_argument_group("reward and execution")
    cli.grader_flags(g)
    g.add_argument("--workers", type=cli.count, default=None, help="sandbox workers per rank (default: CPUs / ranks)")
    g.add_argument("--sanity-reward-tokens", default=None,
                   help="comma-separated token ids: replace the COBALT reward by the share of completion tokens "
                        "among them, a quick check that the GRPO machinery learns (no execution); unset for real runs")


def loss_flags(ap):
    """The clipped GRPO loss (the paper's §5 defaults)."""
    g = ap.add_argument_group("GRPO loss (paper §5 defaults)")
    g.add_argument("--clip-low", type=cli.number(0, 1, high_open=True), default=0.2, help="default 0.2")
    g.add_argument("--clip-high", type=cli.non_negative, default=0.4, help="clip-higher, default 0.4")
    g.add_argument("--dual-clip", type=cli.number(1, low_open=True), default=3.0,
                   help="dual-clip c for negative advantages (default 3)")
    g.add_argument("--kl-coef", type=cli.non_negative, default=1e-4,
                   help="KL penalty coefficient (default 1e-4; 0 skips ref)")
    g.add_argument("--kl-estimator", default="k2", choices=["k1", "k2", "k3"], help="default k2 (veRL 'mse')")
    g.add_argument("--agg", default="token-mean", choices=AGGREGATIONS,
                   help="how per-token losses become the loss: token-mean over the whole mini-batch (the paper's), or "
                        "micro-token-mean, veRL's token mean per micro-batch as the authors' runs had it "
                        "(cobalt_min/grpo.aggregate; default token-mean)")
    g.add_argument("--adv-eps", type=cli.positive, default=1e-6, help="advantage = (r - mean) / (std + eps)")
    g.add_argument("--logprob-chunk", type=cli.count, default=256,
                   help="tokens per LM-head chunk in log-probs (default 256)")


def optimisation_flags(ap):
    """AdamW, batches and steps (the paper's §5 defaults)."""
    g = ap.add_argument_group("optimisation (paper §5 defaults)")
    g.add_argument("--lr", type=cli.positive, default=1e-6, help="constant learning rate (default 1e-6)")
    g.add_argument("--weight-decay", type=cli.non_negative, default=0.01, help="AdamW weight decay (default 0.01)")
    g.add_argument("--grad-clip", type=cli.positive, default=1.0, help="max gradient norm (default 1.0)")
    g.add_argument("--mini-batches", type=cli.count, default=2,
                   help="optimizer steps per batch (default 2: mini-batch 64)")
    g.add_argument("--micro-batch-size", type=cli.count, default=4,
                   help="sequences per forward/backward (accumulation; default 4)")
    g.add_argument("--micro-batch-tokens", type=cli.count, default=None,
                   help="instead of --micro-batch-size: micro-batches of whole contexts up to this many tokens (a "
                        "context's prompt counted once: its G rows share it in the forward, whatever the size)")
    g.add_argument("--epochs", type=cli.count, default=2, help="passes over the contexts (default 2)")
    g.add_argument("--max-steps", type=cli.count, default=None, help="stop after this many steps")
    g.add_argument("--max-nonfinite-steps", type=cli.count, default=5,
                   help="an optimizer step whose gradient norm is not finite is skipped (all ranks agree: the norm is "
                        "global); stop the run after this many in a row (default 5)")
    g.add_argument("--seed", type=int, default=0)


def output_flags(ap):
    """Validation, logging, checkpoints, the output folder."""
    g = ap.add_argument_group("validation, logging, checkpoints")
    g.add_argument("--val-every", type=cli.count, default=10, help="validate every N steps (default 10)")
    g.add_argument("--val-limit", type=cli.count, default=None, help="validate on the first K validation contexts")
    g.add_argument("--val-temperature", type=cli.non_negative, default=0.6, help="default 0.6 (the paper's evaluation)")
    g.add_argument("--save-every", type=cli.count, default=10, help="checkpoint every N steps (default 10)")
    g.add_argument("--keep-checkpoints", type=cli.count, default=2, help="most recent checkpoints kept (default 2)")
    cli.tracker_flag(g, "train/, val/, time/ (seconds)")
    g.add_argument("--dist-timeout-minutes", type=cli.positive, default=180,
                   help="how long a rank waits for the others in a collective before the run fails (default 180; "
                        "torch's default of 10 is shorter than a slow rank's generation and sandbox work at the "
                        "paper's scale; metrics.jsonl's rank_spread_s shows how far apart the ranks come)")
    g.add_argument("--out", type=cli.output_folder, required=True, help="output folder")
    g.add_argument("--save-dtype", default=None, choices=["float32", "bfloat16"],
                   help="dtype of the final policy in --out/final (default: the training's compute dtype: bfloat16 "
                        "under --mixed-precision bf16, else --dtype)")
    g.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")


# ----------------------------------------------------------------------------- data


def load_contexts(path, what="contexts", may_be_empty=False) -> list[dict]:
    """Contexts from collect.py / perturb.py, checked: each needs messages, prev_best and tests."""
    if not Path(path).exists():
        raise SystemExit(f"error: {what} file {path} does not exist")
    rows = read_jsonl(path)
    if not rows and not may_be_empty:
        raise SystemExit(f"error: {path} holds no contexts")
    for n, c in enumerate(rows, 1):
        missing = {"messages", "prev_best", "tests"} - c.keys()
        if missing:
            raise SystemExit(f"error: {path} line {n} lacks {sorted(missing)}")
        t = c["tests"]
        if not isinstance(t, dict) or not t.get("inputs") or len(t["inputs"]) != len(t.get("outputs", [])):
            raise SystemExit(f"error: {path} line {n} (problem {c.get('problem_id')}) has no usable tests")
    return rows


def mix_perturbed(clean: list, perturbed: list, fraction: float | None, seed: int) -> list:
    """The training set with perturbed contexts added (paper §7: augmentation against in-context reward
    hacking). fraction None: all of them (the paper adds the perturbed examples; it states no ratio).
    Otherwise fraction is their share: n_p = fraction / (1 - fraction) * n_clean, capped by what exists."""
    if fraction is None:
        return clean + perturbed
    if not 0 < fraction < 1:
        raise SystemExit(f"error: --perturbed-fraction must be in (0, 1), not {fraction}: 0 would add nothing")
    n = min(len(perturbed), round(fraction / (1 - fraction) * len(clean)))
    if n == 0:
        raise SystemExit(f"error: --perturbed-fraction {fraction} adds no perturbed context to {len(clean)} clean ones")
    return clean + random.Random(seed).sample(perturbed, n)


def drop_long_contexts(contexts: list, count_prompt_tokens, max_prompt_tokens: int) -> tuple[list, int]:
    """(contexts whose prompt fits max_prompt_tokens, how many were dropped). Done once at load, the same
    on every rank: were it done per step, ranks could run different numbers of micro-batches and a
    collective would wait forever."""
    kept = [c for c in contexts if count_prompt_tokens(c["messages"]) <= max_prompt_tokens]
    return kept, len(contexts) - len(kept)


def epoch_order(n: int, epoch: int, seed: int) -> list[int]:
    """The data order of an epoch: a permutation seeded by (seed, epoch), so a step number alone says
    exactly which contexts come next (what makes --resume exact)."""
    order = list(range(n))
    random.Random(seed * 1000 + epoch).shuffle(order)
    return order


# ----------------------------------------------------------------------------- set-up


@dataclasses.dataclass
class Learner:
    """What a training run holds: the policy being trained (DDP through Accelerate, or FSDP2 shards),
    the frozen reference policy (None without a KL term), the optimizer, the sampler and the reward
    function."""
    accelerator: Accelerator
    policy: torch.nn.Module   # LogprobModel around the language model, wrapped for the ranks
    ref: torch.nn.Module | None
    optimizer: torch.optim.Optimizer
    tokenizer: object
    engine: object            # HFEngine or VLLMEngine
    engine_has_copy: bool     # the engine samples from its own copy of the weights (vLLM; --fsdp): push them each step
    score: object             # (contexts, completions) -> (rewards (B, G), pass rates (B*G,)): cobalt_scores / sanity_scores
    compute_dtype: torch.dtype = torch.float32  # what forwards and backwards compute in
    nonfinite_in_a_row: int = 0  # optimizer steps skipped for a non-finite gradient norm, in a row


def load_training_contexts(args, log) -> tuple[list, list]:
    """(training contexts, validation contexts): the clean contexts plus the perturbed ones (paper §7),
    every record checked."""
    contexts = load_contexts(args.contexts)
    if args.perturbed_contexts:
        # (perturb.py augment writes no context when no collected trajectory had feedback to perturb)
        perturbed = load_contexts(args.perturbed_contexts, "perturbed contexts", may_be_empty=True)
        if perturbed:
            contexts = mix_perturbed(contexts, perturbed, args.perturbed_fraction, args.seed)
        else:
            log(f"warning: {args.perturbed_contexts} holds no perturbed contexts: training on the clean ones only")
    elif args.perturbed_fraction is not None:
        raise SystemExit("error: --perturbed-fraction needs --perturbed-contexts")
    val_contexts = load_contexts(args.val_contexts, "validation contexts")[:args.val_limit] if args.val_contexts else []
    return contexts, val_contexts


def fit_prompt_budget(contexts: list, val_contexts: list, count_prompt_tokens, args, log) -> tuple[list, list, int]:
    """Drop the contexts longer than --max-prompt-tokens, here, once (drop_long_contexts says why):
    (training contexts, validation contexts, how many training contexts were dropped)."""
    contexts, too_long = drop_long_contexts(contexts, count_prompt_tokens, args.max_prompt_tokens)
    val_contexts, val_too_long = drop_long_contexts(val_contexts, count_prompt_tokens, args.max_prompt_tokens)
    if not contexts:
        raise SystemExit(f"error: every training context is longer than --max-prompt-tokens {args.max_prompt_tokens}")
    log(f"{len(contexts)} training contexts, {len(val_contexts)} validation contexts; dropped as longer than "
        f"{args.max_prompt_tokens} prompt tokens: {too_long} training, {val_too_long} validation")
    return contexts, val_contexts, too_long


def token_counter(tokenizer):
    """Tokens of a text under the policy's tokenizer (the format reward's lengths)."""
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def cobalt_scores(args, count_tokens, workers):
    """The paper's reward (§3): run each sampled program on ALL tests of its problem, then
    r = correctness against the context's prev_best + improvement + format (rewards.training_reward)."""
    def score(contexts, completions):
        samples = [(c, comp) for c, comps in zip(contexts, completions) for comp in comps]  # B*G, by context
        results = run_programs([extract_code(comp.text) for _, comp in samples], [c["tests"] for c, _ in samples],
                               grader=cli.grader_of(args), workers=workers)
        rates = [None if r is None else pass_rate(r) for r in results]  # None: no code block
        rewards = [training_reward(comp.text, pr, c["prev_best"], count_tokens=count_tokens, thinking=args.thinking)
                   for (c, comp), pr in zip(samples, rates)]
        return torch.tensor(rewards).view(len(contexts), -1), rates
    return score


def sanity_scores(token_ids: str):
    """--sanity-reward-tokens: the share of completion tokens among the given ids, no execution. A quick
    check that rewards, advantages, loss and optimizer fit together into something that learns."""
    targets = {int(x) for x in token_ids.split(",")}

    def score(contexts, completions):
        rewards = [[sum(t in targets for t in comp.token_ids) / max(1, len(comp.token_ids)) for comp in comps]
                   for comps in completions]
        return torch.tensor(rewards), [None] * sum(map(len, completions))
    return score


def frozen(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A frozen copy of `model` with its PARAMETERS in `dtype` and its buffers exactly as they are: a
    module's .to(dtype) would also cast floating buffers, such as the rotary inv_freq that Llama and Qwen
    keep in float32, and the copy would then not compute the policy's function (its KL to the policy at
    step 1, where they are the same weights, must be exactly 0). As from_pretrained(dtype=...) loads."""
    # Each parameter copied straight into `dtype` (deepcopy's memo): no transient full copy in the policy's
    # float32 (33 GB of host memory for an 8B model, per rank).
    memo = {id(p): torch.nn.Parameter(p.detach().to(dtype, copy=True), requires_grad=False)
            for p in model.parameters()}
    return copy.deepcopy(model, memo).requires_grad_(False).eval()


def make_learner(args, accelerator, model_path: str, use_vllm: bool, tokenizer, policy, compute_dtype,
                 workers) -> Learner:
    """Wrap the policy for the ranks (DDP through Accelerate, or FSDP2 shards with --fsdp), make the frozen
    reference, AdamW at a constant learning rate (as the paper), the sampler, and choose the reward once."""
    if args.gradient_checkpointing:
        enable_checkpointing(policy)
    policy.config.use_cache = False
    # The reference policy (only with a KL term): the initial weights, frozen, computing exactly the policy's
    # function. Under --fsdp both run in the compute dtype (FSDP2 casts the policy's weights to it), so the
    # reference is stored in it; otherwise the policy runs under Accelerate's autocast with float32 weights
    # (a float32 residual stream), and so does the reference: same weights, same arithmetic.
    ref_lm = frozen(policy, compute_dtype if args.fsdp else policy.dtype) if args.kl_coef != 0.0 else None
    # Under --fsdp the policy's weights are shards: the transformers engine samples from a full copy.
    sampler_lm = frozen(policy, compute_dtype).to(accelerator.device) if args.fsdp and not use_vllm else None
    if args.fsdp:
        mesh = init_device_mesh(accelerator.device.type, (accelerator.num_processes,))
        wrapped = shard_model(LogprobModel(policy, args.logprob_chunk), mesh,
                              compute_dtype if compute_dtype != policy.dtype else None)
        ref = shard_model(LogprobModel(ref_lm, args.logprob_chunk), mesh) if ref_lm is not None else None
    else:
        wrapped = accelerator.prepare(LogprobModel(policy, args.logprob_chunk))  # DDP across ranks
        # (not prepared: a frozen model needs no gradient sync, and is then not saved in checkpoints)
        ref = LogprobModel(ref_lm, args.logprob_chunk).to(accelerator.device) if ref_lm is not None else None
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    thinking = args.thinking
    if use_vllm:
        check_stop_rule(args.stop_after_code)
        engine = VLLMEngine(model_path, thinking=thinking, seed=args.seed, dtype=compute_dtype,
                            gpu_memory_utilization=args.vllm_gpu_memory_utilization,
                            max_model_len=args.max_prompt_tokens + args.max_new_tokens)
    else:
        engine = HFEngine(model_path, model=sampler_lm if args.fsdp else accelerator.unwrap_model(wrapped).lm,
                          tokenizer=tokenizer, device=accelerator.device, thinking=thinking,
                          batch_size=args.gen_batch_size, stop_after_code=args.stop_after_code)
    accelerator.wait_for_everyone()  # every rank's engine is up before the first collective
    score = sanity_scores(args.sanity_reward_tokens) if args.sanity_reward_tokens else \
        cobalt_scores(args, token_counter(tokenizer), workers)
    return Learner(accelerator, wrapped, ref, optimizer, tokenizer, engine, use_vllm or args.fsdp, score, compute_dtype)


# ----------------------------------------------------------------------------- the phases of a step


@contextlib.contextmanager
def timed(timings: dict, phase: str):
    """Add the seconds the block takes to timings[phase]."""
    start = time.perf_counter()
    yield
    timings[phase] = timings.get(phase, 0.0) + time.perf_counter() - start


def contexts_for_step(contexts: list, step: int, steps_per_epoch: int, args, rank: int, world: int):
    """(epoch, this rank's share of the step's batch of contexts). The order is a function of the step
    number alone, so a resumed run sees exactly the contexts an uninterrupted one would."""
    epoch, position = divmod(step, steps_per_epoch)
    order = epoch_order(len(contexts), epoch, args.seed)
    batch_ids = order[position * args.batch_size:(position + 1) * args.batch_size]
    return epoch, [contexts[i] for i in batch_ids[rank::world]]


@contextlib.contextmanager
def policy_sampling(learner: Learner):
    """The engine samples with the current policy's weights: the policy in eval mode, in the update's
    autocast on GPUs. On a CPU the sampler keeps float32 under --mixed-precision bf16: a decode step
    multiplies a few rows by every weight, and there oneDNN's packed float32 kernels (packed_linears) are
    about twice as fast as its bfloat16 ones, while the update's long matrices run 1.5x faster in bf16."""
    lm = learner.accelerator.unwrap_model(learner.policy).lm
    lm.eval()
    cpu = learner.accelerator.device.type == "cpu"
    with learner.accelerator.autocast() if not cpu else contextlib.nullcontext():
        yield
    lm.train()


def sample_from_policy(learner: Learner, prompts: list, **sampling) -> list:
    """engine.sample with the current policy's weights: completions[b][k]."""
    with policy_sampling(learner):
        return learner.engine.sample(prompts, **sampling)


def seeds_of_share(call_seed: int, n_global: int, n: int, rank: int, world: int) -> list[int]:
    """This rank's request seeds: those of its positions (rank, rank + world, ...) in the global batch of
    n_global requests. A context's samples then depend on where it stands in the batch, not on the
    number of ranks (one process draws exactly what two would)."""
    return request_seeds(call_seed, n_global, n)[rank::world]


@dataclasses.dataclass
class StepBatch:
    """What one step trains on, whichever the method: U prompts and R sampled programs (rows), row r
    continuing prompts[prompt_of[r]] with the advantage advantages[r]; for the metrics, the rewards of
    the step's groups (B, G), the pass rate of every program run (None: no code block) and extras."""
    prompts: list              # U token lists
    rows: list                 # R Completions: the sampled tokens, text, finished
    prompt_of: list            # R ints
    advantages: torch.Tensor   # (R,)
    group_rewards: torch.Tensor  # (B, G)
    rates: list                # pass rates of the programs run
    epoch: int
    problems: int              # distinct problems in this rank's share
    extra: dict                # method-specific numbers for metrics.jsonl


def cobalt_batch(learner: Learner, contexts: list, step: int, steps_per_epoch: int, args, timings: dict) -> StepBatch:
    """COBALT's steps 1-4. This IS the bandit reduction of multi-turn code generation (paper §3): a
    context s_t is a partial trajectory of the reference policy pi_ref (collect.py, offline); online, the
    policy takes ONE action per context (the next program), gets its immediate reward against the
    context's prev_best, and that is all: no return over later turns, no value function, GRPO's group
    baseline instead."""
    acc = learner.accelerator
    # 1. a batch of contexts s_t (this rank's share: B of them)
    epoch, batch = contexts_for_step(contexts, step, steps_per_epoch, args, acc.process_index, acc.num_processes)
    prompts = [learner.engine.prompt_ids(c["messages"]) for c in batch]
    # 2. sample G next programs per context from the current policy
    with timed(timings, "generate_s"):
        seeds = seeds_of_share(args.seed * 100003 + step, args.batch_size, args.group_size, acc.process_index,
                               acc.num_processes)
        completions = sample_from_policy(learner, prompts, n=args.group_size, temperature=args.temperature,
                                         top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=seeds)
    # 3. run them on all tests of their problem; the immediate reward r(s_t, a) of each
    with timed(timings, "execute_s"):
        rewards, rates = learner.score(batch, completions)  # (B, G); B*G pass rates (None: no code)
    # 4. group advantages: (r - mean of the G programs of the context) / (their std + eps)
    advantages = group_advantages(rewards, eps=args.adv_eps).flatten()  # (B*G,)
    correctness = [correctness_reward(p, batch[k // args.group_size]["prev_best"]) for k, p in enumerate(rates)
                   if p is not None]
    return StepBatch(prompts, [c for cs in completions for c in cs], [b for b, cs in enumerate(completions) for _ in cs],
                     advantages, rewards, rates, epoch, len({c.get("problem_id") for c in batch}),
                     {"correctness_mean": mean(correctness)})


def grpo_mt_batch(learner: Learner, problems: list, step: int, steps_per_epoch: int, args, timings: dict,
                  count_tokens, workers) -> StepBatch:
    """GRPO-MT's and VeRPO-MT's steps 1-4 (cobalt_min/grpo_mt.py says what GRPO-MT is and why it lives here,
    cobalt_min/verpo.py VeRPO-MT's rewards): whole conversations by the current policy, every turn a row; the
    two differ only in step 4."""
    acc = learner.accelerator
    # 1. a batch of problems (this rank's share: B of them)
    epoch, batch = contexts_for_step(problems, step, steps_per_epoch, args, acc.process_index, acc.num_processes)
    # 2-3. G conversations of T programs per problem, feedback after each; every program run and scored
    with policy_sampling(learner):
        trajs, t = grpo_mt.rollouts(batch, learner.engine, args, args.seed * 100003 + step * acc.num_processes
                                    + acc.process_index, workers)
    timings.update(t)
    rewards = torch.tensor([[grpo_mt.turn_rewards(tr, count_tokens, args.thinking) for tr in trs]
                            for trs in trajs])  # (B, G, T): r_t of every turn
    extra = {f"pass_rate_turn{k}": mean([tr["turns"][k]["pass_rate"] for trs in trajs for tr in trs])
             for k in range(args.turns)}
    if args.method == "verpo-mt":
        # 4'. VeRPO-MT: each turn's tests weighted by their difficulty in the group, plus the outcome
        v = verpo.batch_advantages(trajs, args.verpo_alpha, args.verpo_gamma, args.verpo_beta)
        advantages = v["advantages"]  # (B, G, T)
        group_rewards = rewards[:, :, -1]  # (B, G): reported as GRPO-MT's are (the last program's staged reward)
        extra.update(verpo_turn_reward_mean=v["turn_rewards"].mean().item(), verpo_outcome_mean=v["outcomes"].mean().item(),
                     verpo_flat_groups=(advantages.flatten(1).abs().amax(1) == 0).float().mean().item())
    else:
        # 4. advantages from the returns (--credit), normalised over the G conversations of each problem
        advantages = grpo_mt.advantages(rewards, args.credit, args.adv_eps)  # (B, G, T)
        group_rewards = grpo_mt.returns(rewards, args.credit)[:, :, 0]
    prompts, rows, prompt_of = grpo_mt.rows(trajs)  # one row per turn, (b, g, t) order
    rates = [None if turn["program"] is None else turn["pass_rate"] for trs in trajs for tr in trs for turn in tr["turns"]]
    final = rewards[:, :, -1]  # (B, G): each conversation's last reward (the outcome)
    return StepBatch(prompts, rows, prompt_of, advantages.flatten(), group_rewards,
                     rates, epoch, len(batch), {**extra, "final_reward_mean": final.mean().item()})


def sequence_logprobs(learner: Learner, batch: StepBatch, args):
    """Pack the batch's prompts and rows (each prompt stored once, its rows attending to it) and compute
    the log-probs the loss compares against: the sampling policy's (only when a batch gets several
    optimizer steps; with one, the ratio is 1) and the reference policy's (only with a KL term).
    Returns (sequences, old log-probs or None, reference log-probs or None), log-probs (R, C)."""
    eos = learner.tokenizer.eos_token_id
    sequences = pack_groups(batch.prompts, [row.token_ids or [eos] for row in batch.rows], batch.prompt_of,
                            learner.tokenizer.pad_token_id, device=learner.accelerator.device)  # prompts (U, P); rows (R, C)
    old_logp = ref_logp = None
    plan = micro_batches(sequences, torch.arange(len(batch.rows), device=learner.accelerator.device), args,
                         learner.accelerator) if args.mini_batches > 1 or learner.ref is not None else []
    if args.mini_batches > 1:
        old_logp = batched_logprobs(learner.policy, sequences, args.temperature, plan)
    if learner.ref is not None:
        with learner.accelerator.autocast():  # (as the policy's forward runs; a no-op under --fsdp)
            ref_logp = batched_logprobs(learner.ref, sequences, args.temperature, plan)
    return sequences, old_logp, ref_logp


def batched_logprobs(model, batch: SequenceBatch, temperature, plan: list) -> torch.Tensor:
    """Completion token log-probs of every row, one forward per micro-batch of `plan` (no gradient) -> (R, C)."""
    out = torch.zeros(batch.completion_ids.shape, dtype=torch.float32, device=batch.completion_ids.device)
    with torch.no_grad():
        for rows in plan:
            logp = model(*batch.rows(rows).fields(), temperature)
            out[rows, :logp.shape[1]] = logp
    if isinstance(model, FSDPModule):
        model.reshard()  # FSDP2 keeps its root unit (embeddings, LM head) gathered after a forward, for the
        # backward it expects: a no-gradient pass has none (the reference's would stay gathered all run long)
    return out


def micro_batches(sequences: SequenceBatch, rows: torch.Tensor, args, accelerator) -> list:
    """`rows` in micro-batches (index tensors): --micro-batch-size rows each, or with --micro-batch-tokens as
    many whole contexts as fit in that many tokens, a context's prompt counted once (its rows share it in
    the forward); a context larger than the budget is split into runs of rows. Every rank gets as many
    micro-batches (under FSDP each forward is a collective): one with fewer halves its largest until it has
    as many. Rows are in context order (a context's rows are consecutive)."""
    if args.micro_batch_tokens is None:
        return [rows[i:i + args.micro_batch_size] for i in range(0, len(rows), args.micro_batch_size)]
    budget, index = args.micro_batch_tokens, sequences.prompt_index.tolist()
    prompt_len, row_len = sequences.prompt_mask.sum(1).tolist(), sequences.completion_mask.sum(1).tolist()
    contexts = []  # runs of consecutive rows continuing one prompt
    for r in rows.tolist():
        if contexts and index[contexts[-1][-1]] == index[r]:
            contexts[-1].append(r)
        else:
            contexts.append([r])
    plan, cost = [], 0
    for ctx in contexts:
        prompt = prompt_len[index[ctx[0]]]
        if not plan or cost + prompt + sum(row_len[r] for r in ctx) > budget:
            plan.append([])  # the whole context in a micro-batch of its own when it does not fit this one
            cost = 0
        for k, r in enumerate(ctx):
            add = row_len[r] + (prompt if k == 0 else 0)
            if plan[-1] and cost + add > budget:  # a context over the budget: a new run of its rows
                plan.append([])
                cost, add = 0, row_len[r] + prompt
            plan[-1].append(r)
            cost += add
    plan = [p for p in plan if p]
    most = int(accelerator.gather(torch.tensor([len(plan)], device=accelerator.device)).max())
    while len(plan) < most:
        k = max(range(len(plan)), key=lambda i: len(plan[i]))
        plan[k:k + 1] = [plan[k][:len(plan[k]) // 2], plan[k][len(plan[k]) // 2:]]
    return [torch.tensor(p, device=rows.device) for p in plan]


def update_policy(learner: Learner, sequences: SequenceBatch, advantages, old_logp, ref_logp, args) -> dict:
    """The clipped GRPO update: the batch in --mini-batches mini-batches of whole contexts (all G programs
    of a context in the same one, as veRL splits the batch), one optimizer step each, gradients
    accumulated over micro-batches of --micro-batch-size sequences. The batch's contexts are already in
    random order (epoch_order), so mini-batch k is the k-th block of each rank's contexts, and together
    the k-th block of the global batch, whatever the number of ranks; every rank runs the same number of
    micro-batches (a collective per backward). Returns the step's loss statistics, means over ranks."""
    accelerator, world = learner.accelerator, learner.accelerator.num_processes
    token_stats = ("clip_frac_high", "clip_frac_low", "clip_frac_dual", "kl", "ratio")
    sums = dict.fromkeys(("loss",) + token_stats + ("tokens",), 0.0)  # this rank's; token_stats weighted by tokens
    grad_norms, skipped = [], 0
    advantages = advantages.to(accelerator.device)
    per_mini_batch = len(advantages) // args.mini_batches  # rows: (contexts per rank / mini-batches) x G
    for k in range(args.mini_batches):
        rows = torch.arange(k * per_mini_batch, (k + 1) * per_mini_batch, device=accelerator.device)
        # token-mean over the whole mini-batch on all ranks: DDP and FSDP average gradients over the
        # ranks, so each rank divides by (the mini-batch's tokens on all ranks / ranks).
        tokens = accelerator.reduce(sequences.completion_mask[rows].sum().float(), "sum")
        plan = micro_batches(sequences, rows, args, accelerator)
        for idx in plan:
            micro = sequences.rows(idx)
            width = micro.completion_ids.shape[1]
            logp = learner.policy(*micro.fields(), args.temperature)  # (micro-batch, width)
            loss, loss_stats = policy_loss(logp, old_logp[idx, :width] if old_logp is not None else logp.detach(),
                                           ref_logp[idx, :width] if ref_logp is not None else None, advantages[idx],
                                           micro.completion_mask, clip_low=args.clip_low, clip_high=args.clip_high,
                                           dual_clip=args.dual_clip, kl_coef=args.kl_coef,
                                           kl_estimator=args.kl_estimator, agg=args.agg,
                                           minibatch_tokens=max(1.0, tokens.item() / world),
                                           minibatch_sequences=len(rows),
                                           micro_batches=len(plan))
            loss.backward()
            tokens_here = micro.completion_mask.sum().item()
            sums["loss"] += loss.item() / args.mini_batches  # this rank's part of the mini-batches' mean loss
            sums["tokens"] += tokens_here
            for name in token_stats:
                sums[name] += loss_stats[name] * tokens_here
        norm = optimizer_step(learner.policy, learner.optimizer, args.grad_clip)
        if norm is None:
            skipped += 1
            learner.nonfinite_in_a_row += 1
            if learner.nonfinite_in_a_row >= args.max_nonfinite_steps:
                raise SystemExit(f"error: {learner.nonfinite_in_a_row} optimizer steps in a row had a non-finite "
                                 "gradient norm (NaN or inf) and were skipped: the run stops (its last checkpoint "
                                 "is kept). Lower --lr, check the data, or raise --max-nonfinite-steps.")
        else:
            grad_norms.append(norm)
            learner.nonfinite_in_a_row = 0
    # Over ranks: the loss is the mean of the ranks' parts (the objective that the averaged gradients
    # descend), the other statistics means over all completion tokens; the gradient norm is already global.
    totals = dict(zip(sums, accelerator.reduce(torch.tensor(list(sums.values()), device=accelerator.device),
                                               "sum").tolist()))
    return {"loss": totals["loss"] / world, **{k: totals[k] / max(totals["tokens"], 1.0) for k in token_stats},
            "grad_norm": mean(grad_norms) if grad_norms else float("nan"), "skipped_nonfinite_steps": skipped}


def optimizer_step(policy: torch.nn.Module, optimizer, grad_clip: float) -> float | None:
    """Clip the gradients to grad_clip and take the optimizer step; the gradient norm, or None when it is
    not finite (one NaN or inf anywhere would make every weight NaN for the rest of the run): then the
    step is skipped, as the authors' veRL does. The norm is the global one on every rank (DDP's gradients
    are already averaged, FSDP2's clip_grad_norm_ reduces it), so the ranks agree without a collective."""
    norm = full_norm(torch.nn.utils.clip_grad_norm_(policy.parameters(), grad_clip))
    finite = math.isfinite(norm)
    if finite:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm if finite else None


def sync_sampler(learner: Learner) -> None:
    """The engine samples from its own copy of the weights (vLLM; the transformers engine under --fsdp):
    push the updated policy to it, one parameter at a time (every rank takes part: under FSDP each
    parameter is gathered from the shards)."""
    learner.engine.load_weights(full_weights(learner.accelerator.unwrap_model(learner.policy).lm))


# ----------------------------------------------------------------------------- log, validate


def step_metrics(learner: Learner, batch: StepBatch, sequences, stats: dict, timings: dict, **extra) -> dict:
    """The step's numbers over all ranks (reward, pass rate, response length, loss statistics, timings,
    what the step cost per program trained on and per problem); batch.extra is this rank's."""
    acc = learner.accelerator
    gather, device = acc.gather_for_metrics, acc.device
    lengths = gather(torch.tensor([float(len(c.token_ids)) for c in batch.rows], device=device))
    truncated = gather(torch.tensor([0.0 if c.finished else 1.0 for c in batch.rows], device=device))
    all_rewards = gather(batch.group_rewards.flatten().float().to(device))
    all_rates = gather(torch.tensor([p if p is not None else 0.0 for p in batch.rates], device=device))
    zero_std = gather((batch.group_rewards.std(1) == 0).float().to(device))
    memory = gather(torch.tensor([peak_memory_gb(device)], device=device)).tolist()  # one per rank
    # How far apart the ranks reached the step's first collective (its batch: sampling, the sandbox): the
    # fast ones wait that long, and a wait over --dist-timeout-minutes fails the run.
    batch_s = gather(torch.tensor([timings["batch_s"]], device=device))
    counts = acc.reduce(torch.tensor([len(batch.rows), sum(p is not None for p in batch.rates), batch.problems],
                                     device=device, dtype=torch.float32), "sum").tolist()
    n_tokens = float(sequences.prompt_mask.sum(1)[sequences.prompt_index].sum() + sequences.completion_mask.sum())
    return {**extra, "reward_mean": all_rewards.mean().item(),
            "reward_std": all_rewards.std().item() if all_rewards.numel() > 1 else 0.0,
            "pass_rate": all_rates.mean().item(), "all_tests_passed": (all_rates >= 1).float().mean().item(),
            "zero_std_groups": zero_std.mean().item(),
            "rank_spread_s": round((batch_s.max() - batch_s.min()).item(), 3),
            "no_code": sum(extract_code(c.text) is None for c in batch.rows) / len(batch.rows),
            "response_len": lengths.mean().item(), "truncated": truncated.mean().item(),
            "lr": learner.optimizer.param_groups[0]["lr"], **stats,
            **{k: round(v, 3) for k, v in timings.items()},
            "gen_tokens_per_s": float(lengths.sum()) / max(timings["generate_s"], 1e-9),
            "train_tokens_per_s": n_tokens / max(timings["update_s"] + timings["logprob_s"], 1e-9),
            # the cost of a step's training examples: programs trained on (rows), programs the sandbox ran,
            # problems, generated tokens (all ranks)
            "programs_trained": int(counts[0]), "programs_run": int(counts[1]), "problems": int(counts[2]),
            "generated_tokens": int(lengths.sum().item()),
            **batch.extra, "peak_memory_gb": max(memory), "peak_memory_gb_per_rank": [round(m, 3) for m in memory]}


def cost_per_example(metrics: dict) -> dict:
    """Seconds, generated tokens and sandbox seconds per program trained on, and seconds per problem."""
    n = max(metrics["programs_trained"], 1)
    return {"s_per_program": metrics["step_s"] / n, "tokens_per_program": metrics["generated_tokens"] / n,
            "sandbox_s_per_program": metrics["execute_s"] / n,
            "s_per_problem": metrics["step_s"] / max(metrics["problems"], 1)}


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
    left out of the mean) so that every rank gathers the same shape."""
    start = time.perf_counter()
    acc = learner.accelerator
    rank, world = acc.process_index, acc.num_processes
    positions = list(range(rank, len(val_contexts), world))
    real = len(positions)
    positions += [positions[0] if positions else 0] * (math.ceil(len(val_contexts) / world) - real)
    share = [val_contexts[i] for i in positions]
    seeds = [request_seeds(args.seed + 7 * step, len(val_contexts), 1)[i] for i in positions]
    outs = sample_from_policy(learner, [learner.engine.prompt_ids(c["messages"]) for c in share], n=1,
                              temperature=args.val_temperature, top_p=0.95, max_new_tokens=args.max_new_tokens,
                              seed=seeds)
    results = run_programs([extract_code(o[0].text) for o in outs], [c["tests"] for c in share],
                           grader=cli.grader_of(args), workers=workers)
    rewards = [validation_reward(None if r is None else pass_rate(r)) for r in results]
    kept = [1.0] * real + [0.0] * (len(share) - real)
    both = acc.gather(torch.tensor([rewards, kept], device=acc.device, dtype=torch.float32).T)  # (n, 2)
    return {"val_reward": (both[:, 0] * both[:, 1]).sum().item() / len(val_contexts),
            "val_s": round(time.perf_counter() - start, 3)}


def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


# ----------------------------------------------------------------------------- main


def check_method(args) -> None:
    """Each method's data, before anything loads."""
    if args.method == "cobalt" and not args.contexts:
        raise SystemExit("error: --method cobalt needs --contexts (collect.py's contexts.jsonl)")
    if args.method in ("grpo-mt", "verpo-mt"):
        if not args.problems or args.contexts or args.perturbed_contexts:
            raise SystemExit(f"error: --method {args.method} trains on --problems (no --contexts or "
                             "--perturbed-contexts): it rolls out whole conversations itself")
        if args.turns < 1 or args.sanity_reward_tokens:
            raise SystemExit(f"error: --method {args.method} needs --turns >= 1 and the real reward (no "
                             "--sanity-reward-tokens)")


def check_launch(args, mixed: str) -> None:
    """Refuse launches train.py cannot honour, before anything loads."""
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        raise SystemExit("error: this launch asks Accelerate for FSDP; train.py shards with FSDP2 itself: launch with "
                         "a multi-process config (configs/fsdp_8b.yaml, configs/ddp.yaml) or torchrun, and pass --fsdp")
    if mixed not in ("no", "bf16"):
        raise SystemExit(f"error: mixed precision {mixed!r} is not supported: use bf16 or no")


# What decides the run: a --resume must keep them (cli.record_settings). Not here: --max-steps (a run may be
# extended), --micro-batch-size (only the order of a sum), validation, checkpoint and logging settings.
SETTINGS = ("method", "model", "thinking", "dtype", "mixed_precision", "fsdp", "contexts", "perturbed_contexts", "perturbed_fraction",
            *cli.PROBLEM_SETTINGS, "turns", "credit", "verpo_alpha", "verpo_gamma", "verpo_beta", "max_prompt_tokens", "batch_size", "group_size", "temperature", "top_p",
            "max_new_tokens", "stop_after_code", "grader", "timeout", "sanity_reward_tokens", "clip_low", "clip_high", "dual_clip", "kl_coef",
            "kl_estimator", "agg", "adv_eps", "lr", "weight_decay", "grad_clip", "mini_batches", "epochs", "seed")


def main(argv=None):
    args = parse_args(argv)
    # Before CUDA starts: freed blocks of varying sizes (micro-batches of varying lengths) are reused instead
    # of fragmenting the allocator's segments.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    with cli.interrupt_message(lambda: kept_checkpoint(Path(args.out)), cli.command_line(__file__, argv)):
        train(args)


def tracker_tag(name: str) -> str:
    """A metric's name for a tracker, grouped: val/..., time/... (seconds), train/... (the rest)."""
    if name.startswith("val_"):
        return "val/" + name.removeprefix("val_")
    return ("time/" if name.endswith("_s") else "train/") + name


def kept_checkpoint(out: Path) -> str:
    """What a stopped run keeps, said as it is: its latest checkpoint, or none yet."""
    steps = sorted(int(d.name.removeprefix("step_")) for d in (out / "checkpoints").glob("step_*")
                   if (d / "train_state.json").exists())
    if not steps:
        return "no checkpoint was written yet (the first comes after --save-every steps): the run starts over"
    return f"the run keeps its checkpoint of step {steps[-1]} in {out / 'checkpoints'}"


def start_run(args):
    """Everything that can refuse a run before anything loads, then Accelerate: (accelerator, compute
    precision, model path, whether vLLM samples, log function)."""
    if args.sanity_reward_tokens is None:
        require_safe_sandbox()
    mixed = args.mixed_precision or os.environ.get("ACCELERATE_MIXED_PRECISION") or \
        ("bf16" if torch.cuda.is_available() else "no")
    check_method(args)
    check_launch(args, mixed)
    model_path = find_smollm2_gguf() if args.model == "smollm2" else args.model
    use_vllm = engine_kind(args.engine, model_path) == "vllm"  # (checked before anything loads)
    # Under --fsdp, FSDP2's own mixed precision casts the weights; Accelerate's autocast stays off.
    cli.check_tracker(args.log_with)
    accelerator = Accelerator(log_with=None if args.log_with == "none" else args.log_with, project_dir=args.out,
                              mixed_precision="no" if args.fsdp else mixed,
                              kwargs_handlers=[InitProcessGroupKwargs(timeout=datetime.timedelta(
                                  minutes=args.dist_timeout_minutes))])
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched != accelerator.num_processes:
        raise SystemExit(f"error: {launched} processes were launched but Accelerate sees a run of "
                         f"{accelerator.num_processes} ({accelerator.distributed_type.value}): they would train "
                         "unsynchronised copies and write the same files. On CPUs launch with "
                         "`ACCELERATE_USE_CPU=true torchrun --nproc_per_node N train.py ...`.")
    set_seed(args.seed)
    out, main_process = Path(args.out), accelerator.is_main_process
    log = (lambda *a: print(*a, file=sys.stderr)) if main_process else (lambda *a: None)
    log("train.py", " ".join(f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()))
    if main_process:
        out.mkdir(parents=True, exist_ok=True)
        if (out / "metrics.jsonl").exists() and not args.resume:
            raise SystemExit(f"error: {out} already holds a run: pass --resume to continue it, or choose another --out")
        cli.record_settings(out, args, SETTINGS, args.resume)
    world = accelerator.num_processes
    log(f"on {world} process(es){' (FSDP)' if args.fsdp else ''}, mixed precision {mixed}")
    if args.batch_size % (args.mini_batches * world):
        raise SystemExit(f"error: --batch-size {args.batch_size} must be divisible by --mini-batches x processes = "
                         f"{args.mini_batches} x {world} (each rank takes an equal share of every mini-batch)")
    return accelerator, mixed, model_path, use_vllm, log


def training_data(args, tokenizer, log) -> tuple[list, list, int, int, int]:
    """(what the steps draw from: contexts for COBALT, problems for GRPO-MT; validation contexts; contexts
    dropped as too long; steps per epoch; steps in all)."""
    if args.method == "cobalt":
        data, val_contexts = load_training_contexts(args, log)
        prompt_tokens = lambda messages: len(chat_prompt_ids(tokenizer, messages, args.thinking))  # noqa: E731
        data, val_contexts, too_long = fit_prompt_budget(data, val_contexts, prompt_tokens, args, log)
    else:
        data, too_long = cli.problems_of(args), 0
        val_contexts = load_contexts(args.val_contexts, "validation contexts")[:args.val_limit] if args.val_contexts else []
    # As the authors (veRL's drop_last): only full batches; the last len % batch contexts of an epoch's
    # order are not trained in that epoch (each epoch's order differs, so no context is always left out).
    unit = "contexts" if args.method == "cobalt" else "problems"
    steps_per_epoch = len(data) // args.batch_size
    if steps_per_epoch == 0:
        raise SystemExit(f"error: {len(data)} training {unit} are fewer than --batch-size {args.batch_size}")
    total_steps = min(args.max_steps or 10 ** 9, args.epochs * steps_per_epoch)
    per_item = {"cobalt": f"{args.group_size} programs",
                "grpo-mt": f"{args.group_size} conversations of {args.turns} programs (GRPO-MT, credit: {args.credit})",
                "verpo-mt": f"{args.group_size} conversations of {args.turns} programs (VeRPO-MT, alpha "
                            f"{args.verpo_alpha:g}, gamma {args.verpo_gamma:g}, beta {args.verpo_beta:g})"}[args.method]
    log(f"{total_steps} steps of {args.batch_size} {unit} x {per_item}; each epoch leaves out "
        f"{len(data) % args.batch_size} {unit} (the last partial batch, as the authors)")
    return data, val_contexts, too_long, steps_per_epoch, total_steps


def resume_run(args, learner: Learner, log) -> int:
    """With --resume, the newest checkpoint's weights and optimizer state; the step it ended (0: none).
    Metrics rows logged after it are dropped: those steps run again."""
    if not args.resume:
        return 0
    out = Path(args.out)
    step, folder = resume(learner.accelerator, learner.policy, learner.optimizer, out)
    if folder is not None:
        log(f"resumed from {folder} (step {step})")
        if learner.engine_has_copy:
            sync_sampler(learner)
    if learner.accelerator.is_main_process:
        rows = read_jsonl(out / "metrics.jsonl", repair=True)
        if any(r["step"] > step for r in rows):
            write_jsonl(out / "metrics.jsonl", [r for r in rows if r["step"] <= step])
    return step


def train(args):
    accelerator, mixed, model_path, use_vllm, log = start_run(args)
    out, main_process, world = Path(args.out), accelerator.is_main_process, accelerator.num_processes
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    tokenizer, policy = load_model(model_path, dtype=dtype, trainable=True)
    data, val_contexts, too_long, steps_per_epoch, total_steps = training_data(args, tokenizer, log)
    workers = args.workers or max(1, (os.cpu_count() or 1) // world)
    learner = make_learner(args, accelerator, model_path, use_vllm, tokenizer, policy,
                           torch.bfloat16 if mixed == "bf16" else dtype, workers)
    if args.method == "cobalt":  # (step, timings) -> StepBatch
        make_batch = functools.partial(cobalt_batch, learner, data, steps_per_epoch=steps_per_epoch, args=args)
    else:
        make_batch = functools.partial(grpo_mt_batch, learner, data, steps_per_epoch=steps_per_epoch, args=args,
                                       count_tokens=token_counter(tokenizer), workers=workers)
    step = resume_run(args, learner, log)
    if main_process:
        accelerator.init_trackers("cobalt-min", config=cli.tracker_config(args))

    # ------------------------------------------------------------------ one GRPO step at a time
    bar = tqdm(total=total_steps, initial=step, desc="GRPO steps", unit="step", disable=not main_process)
    while step < total_steps:
        timings, start = {}, time.perf_counter()
        # 1-4. the step's batch: programs sampled by the current policy, run, rewarded, their advantages.
        #      COBALT (cobalt_batch, the contextual bandit): a batch of offline contexts s_t, G next programs
        #      each, immediate rewards. GRPO-MT (grpo_mt_batch): G whole conversations per problem.
        with timed(timings, "batch_s"):
            batch = make_batch(step=step, timings=timings)
        # 5. log-probs of the sampling and reference policies where the loss needs them
        with timed(timings, "logprob_s"):
            sequences, old_logp, ref_logp = sequence_logprobs(learner, batch, args)
        # 6. the clipped GRPO update
        with timed(timings, "update_s"):
            stats = update_policy(learner, sequences, batch.advantages, old_logp, ref_logp, args)
        # 7. the sampler follows the policy
        if learner.engine_has_copy:
            with timed(timings, "sync_s"):
                sync_sampler(learner)
        step += 1
        # 8. log, validate, checkpoint
        metrics = step_metrics(learner, batch, sequences, stats, timings, step=step, epoch=batch.epoch,
                               method=args.method, dropped_long_contexts=too_long)
        if metrics["zero_std_groups"] == 1.0:
            log(f"step {step}: every group's rewards are equal, so every advantage is 0: nothing was learned "
                "from this batch")
        metrics["step_s"] = round(time.perf_counter() - start, 3)
        metrics.update(cost_per_example(metrics))
        if val_contexts and (step % args.val_every == 0 or step == total_steps):
            metrics.update(validate(learner, val_contexts, args, step, workers))
        if main_process:
            append_jsonl(out / "metrics.jsonl", metrics)
            accelerator.log({tracker_tag(k): v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)
            bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", pass_rate=f"{metrics['pass_rate']:.2f}")
            bar.update(1)
        if step % args.save_every == 0 or step == total_steps:
            save_checkpoint(accelerator, learner.policy, learner.optimizer, out, step, batch.epoch, args.keep_checkpoints)
    bar.close()

    save_final_policy(accelerator, learner.policy, tokenizer, out / "final",
                      dtype=getattr(torch, args.save_dtype) if args.save_dtype else learner.compute_dtype)
    if main_process:
        log(f"wrote {out / 'metrics.jsonl'}, {write_report(out)} and the final policy to {out / 'final'}")
    if hasattr(learner.engine, "close"):
        learner.engine.close()
    accelerator.end_training()


if __name__ == "__main__":
    main()
