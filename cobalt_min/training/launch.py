"""How train.py starts and resumes: every check that can refuse a run before anything loads, Accelerate
and the process group, the recorded settings, and --resume from the newest checkpoint. Plumbing:
nothing here changes what is learned.

    accelerator, mixed, model_path, use_vllm, log = start_run(args, SETTINGS)
    step = resume_run(args, learner, log)    # 0 without --resume or checkpoint
"""

import datetime
import os
import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs, set_seed

from cobalt_min import cli
from cobalt_min.engines import engine_kind
from cobalt_min.generation import model_location
from cobalt_min.jsonl import read_jsonl, write_jsonl
from cobalt_min.sandbox import require_safe_sandbox
from cobalt_min.training.checkpoint import resume
from cobalt_min.training.learner import Learner, sync_sampler


def check_method(args) -> None:
    """Each method's data, before anything loads."""
    if args.engine == "api":
        raise SystemExit("error: train.py cannot learn from a model behind an API (--engine api): GRPO needs the "
                         "log-probs of the weights it updates; use --engine hf or vllm (collect.py and evaluate.py "
                         "take --engine api)")
    if args.method == "cobalt" and not args.contexts:
        raise SystemExit("error: --method cobalt needs --contexts (collect.py's contexts.jsonl)")
    if args.method == "sft" and (not args.demonstrations or args.contexts or args.perturbed_contexts or args.problems):
        raise SystemExit("error: --method sft trains on --demonstrations only (no --contexts, --perturbed-contexts or "
                         "--problems)")
    if args.method != "sft" and args.demonstrations:
        raise SystemExit(f"error: --demonstrations are --method sft's, not --method {args.method}'s")
    if args.method in ("single-turn", "grpo-mt", "verpo-mt"):
        what = "the first turns of" if args.method == "single-turn" else "whole conversations on"
        if not args.problems:
            raise SystemExit(f"error: --method {args.method} needs --problems: it trains on {what} them")
        if args.contexts or args.perturbed_contexts:
            raise SystemExit(f"error: --method {args.method} trains on {what} --problems, rolled out by the policy: "
                             "no --contexts or --perturbed-contexts (it needs no offline data)")
    if args.method not in ("cobalt", "single-turn") and (args.adv_std_floor or args.adv_scale != "std"):
        raise SystemExit(f"error: --adv-std-floor and --adv-scale shape the group advantages of --method cobalt and "
                         f"single-turn, not of --method {args.method}")
    if args.method in ("grpo-mt", "verpo-mt"):
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


def start_run(args, settings: tuple):
    """Everything that can refuse a run before anything loads, then Accelerate: (accelerator, compute
    precision, model path, whether vLLM samples, log function). `settings`: the flags a --resume must keep."""
    if args.sanity_reward_tokens is None and (args.method != "sft" or args.val_contexts):
        require_safe_sandbox()  # (sft runs nothing, but its validation does)
    mixed = args.mixed_precision or os.environ.get("ACCELERATE_MIXED_PRECISION") or \
        ("bf16" if torch.cuda.is_available() else "no")
    check_method(args)
    check_launch(args, mixed)
    model_path = model_location(args.model)
    use_vllm = engine_kind(args.engine, model_path) == "vllm"  # (checked before anything loads)
    if args.vllm_sleep_mode and not use_vllm:
        raise SystemExit("error: --vllm-sleep-mode is vLLM's: it needs --engine vllm (or auto, choosing vLLM)")
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
    log(cli.settings_line("train.py", args))
    if main_process:
        out.mkdir(parents=True, exist_ok=True)
        if (out / "metrics.jsonl").exists() and not args.resume:
            raise SystemExit(f"error: {out} already holds a run: pass --resume to continue it, or choose another --out")
        cli.record_settings(out, args, settings, args.resume)
    world = accelerator.num_processes
    log(f"on {world} process(es){' (FSDP)' if args.fsdp else ''}, mixed precision {mixed}")
    if args.batch_size % (args.mini_batches * world):
        raise SystemExit(f"error: --batch-size {args.batch_size} must be divisible by --mini-batches x processes = "
                         f"{args.mini_batches} x {world} (each rank takes an equal share of every mini-batch)")
    return accelerator, mixed, model_path, use_vllm, log


def kept_checkpoint(out: Path) -> str:
    """What a stopped run keeps, said as it is: its latest checkpoint, or none yet."""
    steps = sorted(int(d.name.removeprefix("step_")) for d in (out / "checkpoints").glob("step_*")
                   if (d / "train_state.json").exists())
    if not steps:
        return "no checkpoint was written yet (the first comes after --save-every steps): the run starts over"
    return f"the run keeps its checkpoint of step {steps[-1]} in {out / 'checkpoints'}"


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
