"""Where train.py's weights go: checkpoints and exact resume, and the final policy. Plumbing: nothing
here changes what is learned.

A checkpoint (out/checkpoints/step_N) holds the policy's weights and the optimizer's state, written with
torch.distributed.checkpoint: each rank writes its own shard under FSDP, rank 0 the one copy under DDP
or in one process, and any number of ranks can read it back. Plus train_state.json {step, epoch}.
Nothing else is needed to continue exactly: the data order of a step is a function of the step number
(data.epoch_order), every random draw of a step comes from a generator seeded by (seed, step), and
the learning rate is constant. The frozen reference policy is not saved: it is the initial model.

A checkpoint becomes a model folder (evaluate.py --model FOLDER) in one process, without the ranks:
    python -m cobalt_min.training.checkpoint export runs/train/checkpoints/step_20 --model BASE_MODEL --out runs/step_20
"""

import contextlib
import json
import os
import shutil
import warnings
from pathlib import Path

import torch

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_state_dict,
                                                     set_model_state_dict, set_state_dict)


@contextlib.contextmanager
def one_process_is_expected():
    """torch.distributed.checkpoint warns that it saves "in a single process" when a run has one: expected."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def checkpoints(out: Path) -> list[Path]:
    """The complete checkpoint folders in --out, oldest first (a folder without train_state.json was cut
    short while being written)."""
    found = [p for p in (Path(out) / "checkpoints").glob("step_*") if (p / "train_state.json").exists()]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def save_checkpoint(accelerator, model, optimizer, out: Path, step: int, epoch: int, keep: int) -> None:
    """Save the policy and optimizer as out/checkpoints/step_N (every rank takes part) and keep only the
    `keep` newest. train_state.json is written last: it marks the checkpoint complete."""
    folder = Path(out) / "checkpoints" / f"step_{step}"
    model_state, optimizer_state = get_state_dict(model, optimizer)
    with one_process_is_expected():
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(folder))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        tmp = folder / "train_state.json.tmp"  # written then renamed: a run killed mid-write leaves no half file
        tmp.write_text(json.dumps({"step": step, "epoch": epoch}))
        os.replace(tmp, folder / "train_state.json")
        for old in checkpoints(out)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


def resume(accelerator, model, optimizer, out: Path) -> tuple[int, Path | None]:
    """Load the newest checkpoint in out, if any, into model and optimizer: (the step it ended, its
    folder), else (0, None)."""
    found = checkpoints(out)
    if not found:
        return 0, None
    if not (found[-1] / ".metadata").exists():
        raise SystemExit(f"error: {found[-1]} is not a checkpoint this version of train.py can read (no "
                         ".metadata file); start a new --out")
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    with one_process_is_expected():
        dcp.load(state, checkpoint_id=str(found[-1]))  # in place, each rank its own part
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    accelerator.wait_for_everyone()
    return json.loads((found[-1] / "train_state.json").read_text())["step"], found[-1]


def save_final_policy(accelerator, model, tokenizer, folder: Path, dtype: torch.dtype | None = None) -> None:
    """The trained policy as a plain Hugging Face folder (evaluate.py --model FOLDER loads it). `model`
    is train.py's LogprobModel (under DDP or FSDP, or neither): its full weights are gathered on the
    main process's CPU (under FSDP from every rank's shard), which writes them, in `dtype` (default: as
    they are: float32 master weights are 33 GB for an 8B model, bf16 half that)."""
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if accelerator.is_main_process:
        lm = accelerator.unwrap_model(model).lm
        lm.config.use_cache = True
        if dtype is not None:
            state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
            lm.config.dtype = dtype
        # A tied weight (the LM head that is the embedding) comes back as its own copy: save it once.
        first_name, tied = {}, set()
        for name, p in lm.named_parameters(remove_duplicate=False):
            if first_name.setdefault(id(p), name) != name:
                tied.add(name)
        lm.save_pretrained(folder, state_dict={k.removeprefix("lm."): v for k, v in state.items()
                                               if k.removeprefix("lm.") not in tied})
        tokenizer.save_pretrained(folder)
    accelerator.wait_for_everyone()


def export(checkpoint: Path, base_model: str, out: Path, dtype: str = "bfloat16") -> None:
    """A checkpoint's policy as a plain Hugging Face folder, in one process: the base model (train.py's
    --model: the architecture and the tokenizer) with the checkpoint's weights (whichever number of ranks
    wrote it), saved in `dtype`."""
    from cobalt_min.generation import load_model
    from cobalt_min.logprobs import LogprobModel
    if not (Path(checkpoint) / ".metadata").exists():
        raise SystemExit(f"error: {checkpoint} is not a train.py checkpoint (no .metadata file)")
    tokenizer, lm = load_model(base_model, dtype=torch.float32, trainable=True)
    model = LogprobModel(lm)
    state = {"model": get_model_state_dict(model)}
    with one_process_is_expected():
        dcp.load(state, checkpoint_id=str(checkpoint))  # (the policy's part only; the optimizer stays on disk)
    set_model_state_dict(model, state["model"])
    lm.to(getattr(torch, dtype))
    lm.config.use_cache = True
    lm.save_pretrained(out)
    tokenizer.save_pretrained(out)


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python -m cobalt_min.training.checkpoint",
                                 description="Turn a train.py checkpoint into a model folder evaluate.py can load.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="a checkpoint's policy as a Hugging Face folder")
    e.add_argument("checkpoint", help="a checkpoint folder, e.g. runs/train/checkpoints/step_20")
    e.add_argument("--model", required=True, help="the base model train.py started from (its --model)")
    e.add_argument("--out", required=True, help="the folder to write")
    e.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="default bfloat16")
    args = ap.parse_args(argv)
    export(Path(args.checkpoint), args.model, Path(args.out), args.dtype)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
