"""Where train.py's weights go: checkpoints and exact resume, the final policy, and the whole policy
gathered on one rank for the sampler. Plumbing: nothing here changes what is learned.

A checkpoint is Accelerate's full state (model, optimizer, scheduler, RNGs) plus train_state.json
{step, epoch}: the data order of a step is a function of the step number alone (train.epoch_order),
so resuming from step N continues exactly as an uninterrupted run would.
"""

import contextlib
import json
import shutil
from pathlib import Path

from accelerate.utils import DistributedType


def checkpoints(out: Path) -> list[Path]:
    """The checkpoint folders in --out, oldest first."""
    return sorted((Path(out) / "checkpoints").glob("step_*"), key=lambda p: int(p.name.split("_")[1]))


def save_checkpoint(accelerator, out: Path, step: int, epoch: int, keep: int) -> None:
    """Save the full training state as out/checkpoints/step_N and keep only the `keep` newest."""
    folder = Path(out) / "checkpoints" / f"step_{step}"
    accelerator.save_state(str(folder))
    if accelerator.is_main_process:
        (folder / "train_state.json").write_text(json.dumps({"step": step, "epoch": epoch}))
        for old in checkpoints(out)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


def resume(accelerator, out: Path) -> tuple[int, Path | None]:
    """Load the newest checkpoint in out, if any: (the step it ended, its folder), else (0, None)."""
    found = checkpoints(out)
    if not found:
        return 0, None
    accelerator.load_state(str(found[-1]))
    return json.loads((found[-1] / "train_state.json").read_text())["step"], found[-1]


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


def save_final_policy(accelerator, wrapped, tokenizer, folder: Path) -> None:
    """The trained policy as a plain Hugging Face folder (evaluate.py --model FOLDER loads it). The full
    weights are gathered first (under FSDP / ZeRO-3 each rank holds a shard); the main process writes."""
    accelerator.wait_for_everyone()
    state = accelerator.get_state_dict(wrapped)
    if accelerator.is_main_process:
        final = accelerator.unwrap_model(wrapped).lm
        final.config.use_cache = True
        final.save_pretrained(folder, state_dict={k.removeprefix("lm."): v for k, v in state.items()})
        tokenizer.save_pretrained(folder)
