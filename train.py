"""Online contextual bandit learning (COBALT stage 2, paper §3, §5): GRPO on partial trajectories.

Each step takes a batch of contexts (partial trajectories from collect.py), samples G next programs
for each with the current policy, runs them on ALL tests of their problem, scores them with the
staged reward (correctness + improvement over the context's best program + format), and updates the
policy with the clipped GRPO loss under a KL penalty to the frozen initial policy.

    # CPU, the demo (tiny settings; a few minutes):
    python train.py --model smollm2 --contexts runs/collect/contexts.jsonl --out runs/train \
        --batch-size 2 --group-size 4 --max-new-tokens 128 --max-steps 4 --lr 1e-5
    # one GPU:
    python train.py --model path/to/sft-model --contexts runs/collect/contexts.jsonl \
        --val-contexts runs/collect_val/contexts.jsonl --out runs/train --thinking --gradient-checkpointing
    # several GPUs (DDP, or FSDP / DeepSpeed through an accelerate config; see README "Full-scale recipe"):
    accelerate launch --config_file configs/fsdp_8b.yaml train.py --model Qwen/Qwen3-8B ... --engine vllm

Simplifications relative to the authors' veRL setup, each stated where it happens: one epoch over each
batch (as the paper); old log-probs recomputed with the policy (not taken from the sampler); the
reference model is the initial policy kept frozen; each rank generates for its own share of the batch
(GRPO groups never span ranks).

Outputs in --out: metrics.jsonl (one line per step), checkpoints/step_N (resume with --resume),
final/ (save_pretrained: load it with evaluate.py --model OUT/final).
"""

import argparse
import contextlib
import copy
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, set_seed
from tqdm.auto import tqdm

from cobalt_min.generation import HFEngine, chat_prompt_ids, find_smollm2_gguf, load_model, vllm_usable
from cobalt_min.grpo import group_advantages, policy_loss
from cobalt_min.logprobs import LogprobModel, SequenceBatch, pack_groups
from cobalt_min.jsonl import append_jsonl, read_jsonl
from cobalt_min.prompts import extract_code
from cobalt_min.report import write_report
from cobalt_min.rewards import correctness_reward, training_reward, validation_reward
from cobalt_min.sandbox import pass_rate, require_safe_sandbox, run_batch


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("model")
    g.add_argument("--model", required=True, help="policy to start from: hub id, folder, .gguf, or 'smollm2'")
    g.add_argument("--thinking", action="store_true", help="thinking model: template mode and format reward "
                   "with </think> (otherwise the non-thinking format rules)")
    g.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="dtype of the trained (master) weights and optimizer state (default float32: at lr 1e-6 "
                        "most bfloat16 updates would round to nothing)")
    g.add_argument("--mixed-precision", default=None, choices=["no", "bf16", "fp16"],
                   help="compute dtype through Accelerate autocast (default: bf16 on GPU, no on CPU; an "
                        "`accelerate launch` config may set it too)")
    g.add_argument("--gradient-checkpointing", action="store_true", help="trade compute for activation memory")
    g.add_argument("--engine", default="auto", choices=["auto", "vllm", "hf"],
                   help="sampler: vLLM (weights pushed after each update) or transformers (the policy itself)")
    g.add_argument("--vllm-gpu-memory-utilization", type=float, default=0.3,
                   help="vLLM's share of GPU memory, colocated with training (default 0.3)")
    g.add_argument("--gen-batch-size", type=int, default=64, help="transformers engine: sequences per generate")
    g = ap.add_argument_group("data")
    g.add_argument("--contexts", required=True, help="contexts.jsonl from collect.py")
    g.add_argument("--perturbed-contexts", default=None,
                   help="perturbed contexts (perturb.py augment) added to the training set (paper §7: COBALT-PTB)")
    g.add_argument("--perturbed-fraction", type=float, default=None,
                   help="with --perturbed-contexts: their share of the training set, in (0, 1) (default: add them "
                        "all, as the paper)")
    g.add_argument("--val-contexts", default=None, help="validation contexts (collect.py --split validation)")
    g.add_argument("--max-prompt-tokens", type=int, default=10240, help="longer contexts are skipped (default 10240)")
    g = ap.add_argument_group("sampling (paper §5 defaults)")
    g.add_argument("--batch-size", type=int, default=128, help="contexts per step (default 128)")
    g.add_argument("--group-size", type=int, default=16, help="programs sampled per context, G (default 16)")
    g.add_argument("--temperature", type=float, default=1.0, help="default 1.0")
    g.add_argument("--top-p", type=float, default=1.0, help="default 1.0")
    g.add_argument("--max-new-tokens", type=int, default=6144, help="max response tokens (default 6144)")
    g = ap.add_argument_group("reward and execution")
    g.add_argument("--timeout", type=float, default=4.0, help="seconds per test (default 4)")
    g.add_argument("--workers", type=int, default=None, help="sandbox workers per rank (default: CPUs / ranks)")
    g.add_argument("--sanity-reward-tokens", default=None,
                   help="comma-separated token ids: replace the COBALT reward by the share of completion tokens "
                        "among them, a quick check that the GRPO machinery learns (no execution); unset for real runs")
    g = ap.add_argument_group("GRPO loss (paper §5 defaults)")
    g.add_argument("--clip-low", type=float, default=0.2, help="default 0.2")
    g.add_argument("--clip-high", type=float, default=0.4, help="clip-higher, default 0.4")
    g.add_argument("--dual-clip", type=float, default=3.0, help="dual-clip c for negative advantages (default 3)")
    g.add_argument("--kl-coef", type=float, default=1e-4, help="KL penalty coefficient (default 1e-4; 0 skips ref)")
    g.add_argument("--kl-estimator", default="k2", choices=["k1", "k2", "k3"], help="default k2 (veRL 'mse')")
    g.add_argument("--agg", default="token-mean", choices=["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
    g.add_argument("--adv-eps", type=float, default=1e-6, help="advantage = (r - mean) / (std + eps)")
    g.add_argument("--logprob-chunk", type=int, default=256, help="tokens per LM-head chunk in log-probs (default 256)")
    g = ap.add_argument_group("optimisation (paper §5 defaults)")
    g.add_argument("--lr", type=float, default=1e-6, help="constant learning rate (default 1e-6)")
    g.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay (default 0.01)")
    g.add_argument("--grad-clip", type=float, default=1.0, help="max gradient norm (default 1.0)")
    g.add_argument("--mini-batches", type=int, default=2, help="optimizer steps per batch (default 2: mini-batch 64)")
    g.add_argument("--micro-batch-size", type=int, default=4, help="sequences per forward/backward (accumulation)")
    g.add_argument("--epochs", type=int, default=2, help="passes over the contexts (default 2)")
    g.add_argument("--max-steps", type=int, default=None, help="stop after this many steps")
    g.add_argument("--seed", type=int, default=0)
    g = ap.add_argument_group("validation, logging, checkpoints")
    g.add_argument("--val-every", type=int, default=10, help="validate every N steps (default 10)")
    g.add_argument("--val-limit", type=int, default=None, help="validate on the first K validation contexts")
    g.add_argument("--val-temperature", type=float, default=0.6, help="default 0.6 (the paper's evaluation)")
    g.add_argument("--save-every", type=int, default=10, help="checkpoint every N steps (default 10)")
    g.add_argument("--keep-checkpoints", type=int, default=2, help="most recent checkpoints kept (default 2)")
    g.add_argument("--log-with", default=None, choices=[None, "tensorboard", "wandb"], help="extra tracker")
    g.add_argument("--out", required=True, help="output folder")
    g.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    return ap.parse_args(argv)


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


# ----------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def gathered_policy(accelerator, wrapped):
    """The unwrapped policy with all of its weights on this rank, for generation and weight sync.
    DDP and single device: the model itself. FSDP (v1) and DeepSpeed ZeRO-3 shard the weights: they are
    gathered for the duration (untested here: no multi-GPU machine in CI)."""
    lm = accelerator.unwrap_model(wrapped).lm
    if accelerator.distributed_type == DistributedType.FSDP:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        with FSDP.summon_full_params(wrapped, writeback=False):
            yield lm
    elif accelerator.distributed_type == DistributedType.DEEPSPEED and \
            accelerator.state.deepspeed_plugin.zero_stage == 3:
        import deepspeed
        with deepspeed.zero.GatheredParameters(list(lm.parameters()), modifier_rank=None):
            yield lm
    else:
        yield lm


def pass_rates(programs: list, tests: list, *, timeout_s: float, workers) -> list:
    """Pass rate of each program on its tests (None where the response had no code), one sandbox batch."""
    jobs = [(p, t) for p, t in zip(programs, tests) if p is not None]
    results = iter(run_batch(jobs, timeout_s=timeout_s, workers=workers) if jobs else [])
    return [None if p is None else pass_rate(next(results)) for p in programs]


def checkpoints(out: Path) -> list[Path]:
    """The checkpoint folders in --out, oldest first."""
    return sorted((out / "checkpoints").glob("step_*"), key=lambda p: int(p.name.split("_")[1]))


def batched_logprobs(model, batch: SequenceBatch, temperature, micro_batch) -> torch.Tensor:
    """Completion token log-probs of every row, `micro_batch` rows per forward (no gradient) -> (R, C)."""
    out = torch.zeros(batch.completion_ids.shape, dtype=torch.float32, device=batch.completion_ids.device)
    with torch.no_grad():
        for i in range(0, out.shape[0], micro_batch):
            rows = torch.arange(i, min(i + micro_batch, out.shape[0]), device=out.device)
            logp = model(*batch.rows(rows).fields(), temperature)
            out[rows, :logp.shape[1]] = logp
    return out


def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def main(argv=None):
    args = parse_args(argv)
    if args.sanity_reward_tokens is None:
        require_safe_sandbox()
    mixed = args.mixed_precision or os.environ.get("ACCELERATE_MIXED_PRECISION") or \
        ("bf16" if torch.cuda.is_available() else "no")
    accelerator = Accelerator(log_with=args.log_with, project_dir=args.out, mixed_precision=mixed)
    set_seed(args.seed)
    out = Path(args.out)
    main_proc = accelerator.is_main_process
    log = (lambda *a: print(*a, file=sys.stderr)) if main_proc else (lambda *a: None)
    log("train.py", " ".join(f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()))
    if main_proc:
        out.mkdir(parents=True, exist_ok=True)
        if (out / "metrics.jsonl").exists() and not args.resume:
            raise SystemExit(f"error: {out} already holds a run: pass --resume to continue it, or choose another --out")

    # ------------------------------------------------------------------ data
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
    W, rank = accelerator.num_processes, accelerator.process_index
    if args.batch_size % W:
        raise SystemExit(f"error: --batch-size {args.batch_size} must be divisible by the {W} processes")

    # ------------------------------------------------------------------ models
    model_path = find_smollm2_gguf() if args.model == "smollm2" else args.model
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    tokenizer, policy = load_model(model_path, dtype=dtype, trainable=True)
    prompt_tokens = lambda messages: len(chat_prompt_ids(tokenizer, messages, args.thinking or None))  # noqa: E731
    contexts, too_long = drop_long_contexts(contexts, prompt_tokens, args.max_prompt_tokens)
    val_contexts, val_too_long = drop_long_contexts(val_contexts, prompt_tokens, args.max_prompt_tokens)
    if not contexts:
        raise SystemExit(f"error: every training context is longer than --max-prompt-tokens {args.max_prompt_tokens}")
    steps_per_epoch = math.ceil(len(contexts) / args.batch_size)
    total_steps = min(args.max_steps or 10 ** 9, args.epochs * steps_per_epoch)
    log(f"{len(contexts)} training contexts, {len(val_contexts)} validation contexts, {total_steps} steps; "
        f"dropped as longer than {args.max_prompt_tokens} prompt tokens: {too_long} training, {val_too_long} validation")
    if args.gradient_checkpointing:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy.config.use_cache = False
    ref = None
    if args.kl_coef != 0.0:  # the reference policy: the initial weights, frozen (in the compute dtype)
        ref_lm = copy.deepcopy(policy).eval().requires_grad_(False)
        if mixed == "bf16":
            ref_lm.to(torch.bfloat16)
        ref = LogprobModel(ref_lm, args.logprob_chunk)
    wrapped = LogprobModel(policy, args.logprob_chunk)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)  # constant, as the paper
    wrapped, optimizer, scheduler = accelerator.prepare(wrapped, optimizer, scheduler)
    if ref is not None:
        ref = accelerator.prepare_model(ref, evaluation_mode=True)
    use_vllm = args.engine == "vllm" or (args.engine == "auto" and vllm_usable() and not model_path.endswith(".gguf"))
    if use_vllm:
        from cobalt_min.generation import VLLMEngine, require_vllm
        require_vllm()
        engine = VLLMEngine(model_path, thinking=args.thinking or None, seed=args.seed,
                            gpu_memory_utilization=args.vllm_gpu_memory_utilization)
    else:
        engine = HFEngine(model_path, model=accelerator.unwrap_model(wrapped).lm, tokenizer=tokenizer,
                          device=accelerator.device, thinking=args.thinking or None, batch_size=args.gen_batch_size)
    count_tokens = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    workers = args.workers or max(1, (os.cpu_count() or 1) // accelerator.num_processes)

    # ------------------------------------------------------------------ resume
    step = 0
    if args.resume:
        ckpt = (checkpoints(out) or [None])[-1]
        if ckpt is not None:
            accelerator.load_state(str(ckpt))
            step = json.loads((ckpt / "train_state.json").read_text())["step"]
            log(f"resumed from {ckpt} (step {step})")
            if use_vllm:
                with gathered_policy(accelerator, wrapped) as lm:
                    engine.load_weights(lm)
    if main_proc:
        accelerator.init_trackers("cobalt-min", config={k: v for k, v in vars(args).items() if v is not None})

    bar = tqdm(total=total_steps, initial=step, desc="GRPO steps", unit="step", disable=not main_proc)
    while step < total_steps:
        timings = {}
        t0 = time.perf_counter()
        # ============================================================== 1. a batch of contexts (this rank's share)
        epoch, pos = divmod(step, steps_per_epoch)
        order = epoch_order(len(contexts), epoch, args.seed)
        batch_ids = order[pos * args.batch_size:(pos + 1) * args.batch_size]
        batch = [contexts[i] for i in batch_ids[rank::W]]
        prompts = [engine.prompt_ids(c["messages"]) for c in batch]
        G = args.group_size

        # ============================================================== 2. generate G programs per context
        t = time.perf_counter()
        unwrapped = accelerator.unwrap_model(wrapped).lm
        unwrapped.eval()
        with gathered_policy(accelerator, wrapped), accelerator.autocast():
            completions = engine.sample(prompts, n=G, temperature=args.temperature, top_p=args.top_p,
                                        max_new_tokens=args.max_new_tokens, seed=args.seed * 100003 + step * W + rank)
        unwrapped.train()
        timings["generate_s"] = time.perf_counter() - t
        flat = [(b, comp) for b, comps in enumerate(completions) for comp in comps]  # B*G, grouped by context

        # ============================================================== 3. execute on all tests of the problem
        t = time.perf_counter()
        programs = [extract_code(comp.text) for _, comp in flat]
        if args.sanity_reward_tokens is None:
            rates = pass_rates(programs, [batch[b]["tests"] for b, _ in flat], timeout_s=args.timeout, workers=workers)
        else:
            rates = [None] * len(programs)  # the sanity-check reward needs no execution
        timings["execute_s"] = time.perf_counter() - t

        # ============================================================== 4. rewards and advantages
        if args.sanity_reward_tokens is None:
            rewards = torch.tensor([training_reward(comp.text, pr, batch[b]["prev_best"], count_tokens=count_tokens,
                                                    thinking=args.thinking) for (b, comp), pr in zip(flat, rates)])
        else:  # sanity check of the GRPO machinery: share of completion tokens among the given ids
            targets = {int(x) for x in args.sanity_reward_tokens.split(",")}
            rewards = torch.tensor([sum(t in targets for t in comp.token_ids) / max(1, len(comp.token_ids))
                                    for _, comp in flat])
        rewards = rewards.view(len(batch), G)
        advantages = group_advantages(rewards, eps=args.adv_eps).flatten()  # (B*G,)

        # ============================================================== 5. sequences, old and reference log-probs
        t = time.perf_counter()
        # Each context's prompt is stored once; its G completions attend to it (logprobs.completion_logprobs).
        completions_ids = [comp.token_ids if comp.token_ids else [tokenizer.eos_token_id] for _, comp in flat]
        batch_seqs = pack_groups(prompts, completions_ids, [b for b, _ in flat], tokenizer.pad_token_id,
                                 device=accelerator.device)  # prompts (B, P); completions (B*G, C)
        n_seq, mb = len(flat), args.micro_batch_size
        old_logp = ref_logp = None
        if args.mini_batches > 1:  # more than one optimizer step per batch: ratios need the sampling policy
            old_logp = batched_logprobs(wrapped, batch_seqs, args.temperature, mb)  # (B*G, C)
        if ref is not None:
            ref_logp = batched_logprobs(ref, batch_seqs, args.temperature, mb)  # (B*G, C)
        timings["logprob_s"] = time.perf_counter() - t

        # ============================================================== 6. mini-batch updates
        t = time.perf_counter()
        perm = torch.randperm(n_seq, generator=torch.Generator().manual_seed(args.seed + step))
        minis = [perm[i::args.mini_batches] for i in range(args.mini_batches)]
        stats = {"loss": [], "clip_frac_high": [], "clip_frac_low": [], "clip_frac_dual": [], "kl": [], "ratio": [],
                 "grad_norm": []}
        adv_dev = advantages.to(accelerator.device)
        for mini in minis:
            # token-mean over the whole mini-batch on all ranks: DDP averages gradients over W ranks,
            # so each rank divides by (global tokens / W).
            n_tok = batch_seqs.completion_mask[mini.to(accelerator.device)].sum().float()
            global_tok = accelerator.reduce(n_tok.clone(), reduction="sum").item()
            denom = max(1.0, global_tok / W)
            # Rows of one context next to each other, so that a micro-batch runs each prompt once (the
            # mini-batch's gradient is the same sum whatever the order of its micro-batches).
            mini = mini[torch.argsort(batch_seqs.prompt_index.cpu()[mini], stable=True)]
            for i in range(0, len(mini), mb):
                idx = mini[i:i + mb].to(accelerator.device)
                micro = batch_seqs.rows(idx)
                width = micro.completion_ids.shape[1]
                logp = wrapped(*micro.fields(), args.temperature)  # (mb, width)
                old = old_logp[idx, :width] if old_logp is not None else logp.detach()
                loss, m = policy_loss(logp, old, ref_logp[idx, :width] if ref_logp is not None else None, adv_dev[idx],
                                      micro.completion_mask, clip_low=args.clip_low, clip_high=args.clip_high,
                                      dual_clip=args.dual_clip, kl_coef=args.kl_coef, kl_estimator=args.kl_estimator,
                                      agg=args.agg, denominator=denom if args.agg == "token-mean" else None)
                if args.agg != "token-mean":  # sequence means: weight each micro-batch by its share of sequences
                    loss = loss * len(idx) / len(mini)
                accelerator.backward(loss)
                for k in ("clip_frac_high", "clip_frac_low", "clip_frac_dual", "kl", "ratio"):
                    stats[k].append(m[k])
                stats["loss"].append(loss.item())
            grad_norm = accelerator.clip_grad_norm_(wrapped.parameters(), args.grad_clip)
            stats["grad_norm"].append(float(grad_norm))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        timings["update_s"] = time.perf_counter() - t

        # ============================================================== 7. sync the sampler's weights
        if use_vllm:
            t = time.perf_counter()
            with gathered_policy(accelerator, wrapped) as lm:
                engine.load_weights(lm)
            timings["sync_s"] = time.perf_counter() - t
        step += 1

        # ============================================================== 8. log (all ranks' numbers, main process writes)
        lengths = torch.tensor([float(len(c.token_ids)) for _, c in flat], device=accelerator.device)
        truncated = torch.tensor([0.0 if c.finished else 1.0 for _, c in flat], device=accelerator.device)
        r_all = accelerator.gather_for_metrics(rewards.flatten().to(accelerator.device))
        pr_all = accelerator.gather_for_metrics(torch.tensor([p if p is not None else 0.0 for p in rates],
                                                             device=accelerator.device))
        zero_std = accelerator.gather_for_metrics((rewards.std(1) == 0).float().to(accelerator.device))
        len_all, trunc_all = accelerator.gather_for_metrics(lengths), accelerator.gather_for_metrics(truncated)
        n_tokens = float(batch_seqs.prompt_mask.sum(1)[batch_seqs.prompt_index].sum() + batch_seqs.completion_mask.sum())
        metrics = {"step": step, "epoch": epoch, "reward_mean": r_all.mean().item(), "reward_std": r_all.std().item()
                   if r_all.numel() > 1 else 0.0, "pass_rate": pr_all.mean().item(),
                   "all_tests_passed": (pr_all >= 1).float().mean().item(), "zero_std_groups": zero_std.mean().item(),
                   "no_code": sum(p is None for p in programs) / len(programs),
                   "response_len": len_all.mean().item(), "truncated": trunc_all.mean().item(),
                   "lr": scheduler.get_last_lr()[0], "dropped_long_contexts": too_long,
                   **{k: mean(v) for k, v in stats.items()}, **{k: round(v, 3) for k, v in timings.items()},
                   "gen_tokens_per_s": float(lengths.sum()) / max(timings["generate_s"], 1e-9),
                   "train_tokens_per_s": n_tokens / max(timings["update_s"] + timings["logprob_s"], 1e-9),
                   "step_s": round(time.perf_counter() - t0, 3)}
        metrics["correctness_mean"] = mean([correctness_reward(p, batch[b]["prev_best"])
                                            for (b, _), p in zip(flat, rates) if p is not None])

        # ============================================================== 9. validate
        if val_contexts and (step % args.val_every == 0 or step == total_steps):
            t = time.perf_counter()
            mine = val_contexts[rank::W]
            unwrapped.eval()
            with gathered_policy(accelerator, wrapped), accelerator.autocast():
                outs = engine.sample([engine.prompt_ids(c["messages"]) for c in mine], n=1,
                                     temperature=args.val_temperature, top_p=0.95, max_new_tokens=args.max_new_tokens,
                                     seed=args.seed + 7 * step)
            unwrapped.train()
            vals = [validation_reward(r) for r in pass_rates([extract_code(o[0].text) for o in outs],
                                                             [c["tests"] for c in mine], timeout_s=args.timeout,
                                                             workers=workers)]
            v = accelerator.gather_for_metrics(torch.tensor(vals, device=accelerator.device, dtype=torch.float32))
            metrics["val_reward"] = v.mean().item()
            metrics["val_s"] = round(time.perf_counter() - t, 3)
        if main_proc:
            append_jsonl(out / "metrics.jsonl", metrics)
            accelerator.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)
            bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", pass_rate=f"{metrics['pass_rate']:.2f}")
            bar.update(1)

        # ============================================================== 10. checkpoint
        if step % args.save_every == 0 or step == total_steps:
            ckpt = out / "checkpoints" / f"step_{step}"
            accelerator.save_state(str(ckpt))
            if main_proc:
                (ckpt / "train_state.json").write_text(json.dumps({"step": step, "epoch": epoch}))
                for old_ckpt in checkpoints(out)[:-args.keep_checkpoints]:
                    shutil.rmtree(old_ckpt, ignore_errors=True)
            accelerator.wait_for_everyone()
    bar.close()

    # ------------------------------------------------------------------ final policy, loadable by evaluate.py
    accelerator.wait_for_everyone()
    state = accelerator.get_state_dict(wrapped)  # full weights (gathered under FSDP / ZeRO-3)
    if main_proc:
        final = accelerator.unwrap_model(wrapped).lm
        final.config.use_cache = True
        final.save_pretrained(out / "final", state_dict={k.removeprefix("lm."): v for k, v in state.items()})
        tokenizer.save_pretrained(out / "final")
        log(f"wrote {out / 'metrics.jsonl'}, {write_report(out)} and the final policy to {out / 'final'}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
