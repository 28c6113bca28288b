"""What the scripts share on their command lines: argument types that refuse a bad value when the
arguments are parsed, before any model loads (argparse then prints one line naming the flag, the value
and what is allowed, and exits with status 2); a check that outputs overwrite neither inputs nor each
other; local paths told apart from hub ids; Ctrl-C turned into one line saying what was kept; and how a rank
of a distributed launch ends."""

import argparse
import contextlib
import json
import math
import os
import shlex
import sys
from pathlib import Path

LOCAL_SUFFIXES = (".jsonl", ".json", ".gguf", ".arrow", ".safetensors", ".txt", ".py")


def integer(low: int | None = None, high: int | None = None):
    """An argparse type: an integer in [low, high] (either end may be open-ended: None)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is not in {_range(low, high, False, False)}")
        return value
    return parse


def number(low: float = -math.inf, high: float = math.inf, *, low_open: bool = False, high_open: bool = False):
    """An argparse type: a finite number in the interval from low to high (open or closed at each end)."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < low or value > high or (low_open and value == low) or \
                (high_open and value == high):
            raise argparse.ArgumentTypeError(f"{text} is not in {_range(low, high, low_open, high_open)}")
        return value
    return parse


def _range(low, high, low_open, high_open) -> str:
    if high is None or high == math.inf:
        return f"{'(' if low_open else '['}{low}, infinity)" if low is not None else "the integers"
    if low is None or low == -math.inf:
        return f"(-infinity, {high}{')' if high_open else ']'}"
    return f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


positive = number(0, low_open=True)  # > 0
non_negative = number(0)  # >= 0
probability = number(0, 1, low_open=True)  # top-p: (0, 1]
count = integer(1)  # >= 1


def looks_local(text: str) -> bool:
    """Whether a model or data argument is meant as a local path rather than a hub id: it names a file
    type, starts like a path (/, ., ~), has more than one '/', or its first folder exists here."""
    if text.endswith(LOCAL_SUFFIXES) or text.startswith(("/", ".", "~")) or text.count("/") > 1:
        return True
    return "/" in text and Path(text.split("/")[0]).is_dir()


def source(text: str) -> str:
    """An argparse type for --model / --problems / --tokenizer: a local path must exist (a mistyped one
    would otherwise be tried as a hub id: a minute of network retries, then an unrelated error)."""
    if looks_local(text) and not Path(text).expanduser().exists():
        raise argparse.ArgumentTypeError(f"{text} does not exist (no such file or folder here)")
    return text


def output_folder(text: str) -> str:
    """An argparse type for --out: a folder, or one that can be made (nothing on the way is a file)."""
    path = Path(text)
    for p in [path, *path.parents]:
        if p.exists() and not p.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: {p} is a file, not a folder")
    return text


def output_file(text: str) -> str:
    """An argparse type for a file written by a script: not a folder, and its folder is not a file."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: give a file name")
    for p in path.parents:
        if p.exists() and not p.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: {p} is a file, not a folder")
    return text


def distinct(parser: argparse.ArgumentParser, **paths) -> None:
    """Exit (argparse's way) if two of these paths name the same file: an output would overwrite an
    input, or two outputs each other. paths: flag name -> path (None: not given)."""
    seen = {}
    for flag, value in paths.items():
        if value is None:
            continue
        key = os.path.realpath(value)
        if key in seen:
            parser.error(f"{seen[key]} and {flag} are the same file ({value}): one would overwrite the other")
        seen[key] = flag


@contextlib.contextmanager
def interrupt_message(kept, again: str):
    """Ctrl-C: one line saying what is kept (a str, or a function returning one, asked at that moment) and
    the command that continues, exit status 130."""
    try:
        yield
    except KeyboardInterrupt:
        print(f"\ninterrupted: {kept() if callable(kept) else kept}; continue with: {again}", file=sys.stderr)
        sys.exit(130)


def end_rank() -> None:
    """The last call of a script run as one rank of a launch (torchrun / accelerate launch: WORLD_SIZE > 1),
    after its outputs are written: wait for the other ranks, leave the process group, run the exit handlers,
    then exit (status 0) without Python's interpreter shutdown. In one process: nothing.

    Why: torch's gloo backend (CPU ranks) frees a finished collective on a thread of its own, a moment after
    the rank that waited for it has moved on (a barrier frees the collectives before it with it). When the
    collective's tensors are Python objects, that thread needs the GIL; if the interpreter is shutting down
    by then, the thread is stopped inside a C++ destructor and the rank aborts ("terminate called without
    an active exception", exit status -6) after a run that finished (how often: bench/RESULTS.md). The
    process group's threads outlive destroy_process_group once FSDP2 has used it (a reference is kept
    outside Python), so nothing short of skipping the shutdown waits for them."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    import atexit

    import torch.distributed as dist
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    atexit._run_exitfuncs()  # what a normal exit runs first (log handlers, pools, temporary folders)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def command_line(script: str, argv=None) -> str:
    """The command that continues this run, for Ctrl-C messages: `python SCRIPT ARGS --resume` (under a
    distributed launch `torchrun --nproc_per_node=N SCRIPT ...`: --resume continues on any number of
    ranks), quoted for a shell (argv: the arguments main() got; None: this process's own)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--resume" not in args:
        args.append("--resume")
    launcher = ["python"]
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # (a torchrun / accelerate launch: the same launch again)
        launcher = ["torchrun", f"--nproc_per_node={os.environ.get('LOCAL_WORLD_SIZE', os.environ['WORLD_SIZE'])}"]
    return shlex.join(launcher + [os.path.relpath(script)] + args)


def settings_line(script: str, args) -> str:
    """The run's flags, all of them, as one line (every script prints it first)."""
    return script + " " + " ".join(f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items())


def record_settings(out, args, keys: tuple, resume: bool) -> None:
    """The settings that decide what a run writes, kept in OUT/settings.json. A --resume with other values
    is refused, naming each difference (the finished rows of two settings would otherwise be mixed and
    the summary claim one of them); a new run records them. keys: the argparse names that must match."""
    path = Path(out) / "settings.json"
    now = {k: getattr(args, k) for k in keys}
    if resume and path.exists():
        before = json.loads(path.read_text())
        diff = [f"--{k.replace('_', '-')} {before.get(k)!r} there, {v!r} now" for k, v in now.items() if before.get(k) != v]
        if diff:
            raise SystemExit(f"error: {out} holds a run with other settings ({'; '.join(diff)}): resume it with its "
                             "own settings, or choose another --out")
        return
    path.write_text(json.dumps({**now, "_provenance": provenance(args, keys)}, indent=1))


def provenance(args, keys: tuple) -> dict:
    """What a run cannot be repeated without, beside its flags (kept in settings.json, not compared on
    --resume): the code's git commit, the versions of the packages it runs on, and a hash of every local
    file a setting names (a problem or context file edited later would otherwise go unnoticed)."""
    import hashlib
    import importlib.metadata
    import platform
    import subprocess
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10).stdout.strip()) if commit else None
    except (OSError, subprocess.SubprocessError):
        commit = dirty = None
    versions = {"python": platform.python_version()}
    for name in ("torch", "transformers", "accelerate", "numpy", "vllm"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    inputs = {}
    for k in keys:
        value = getattr(args, k)
        if isinstance(value, str) and Path(value).is_file():
            digest = hashlib.sha256()
            with open(value, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            inputs[value] = "sha256:" + digest.hexdigest()
    return {"git_commit": commit, "uncommitted_changes": dirty, "versions": versions, "input_files": inputs}


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help as the scripts show it: the docstring's own layout, and each flag's default added to its help
    (unless the help already says what the default is, or there is none)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def settings_of(parser, besides: set) -> tuple:
    """The flags that decide what a run writes (cli.record_settings: a --resume must keep them): every
    flag of `parser` except those named in `besides` (what only says how fast, where, or how often to
    log, validate or save). A new flag is thus a setting unless said otherwise: a resume refused by
    mistake is safer than two settings mixed in one output."""
    flags = [a.dest for a in parser._actions if a.default is not argparse.SUPPRESS]
    unknown = besides - set(flags)
    if unknown:
        raise ValueError(f"not flags of this parser: {sorted(unknown)}")
    return tuple(f for f in flags if f not in besides)


class _Renamed(argparse.Action):
    def __init__(self, option_strings, dest, message, **kwargs):
        super().__init__(option_strings, dest, nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        self.message = message

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} {self.message}")


def stop_after_code_flag(group) -> None:
    """--stop-after-code, the same flag in collect.py, evaluate.py and train.py (generation.HFEngine)."""
    group.add_argument("--stop-after-code", action="store_true",
                       help="end a response with the token that closes its first complete fenced code block "
                            "(the transformers engine; the API engine cuts the text there; not vLLM; the demo's "
                            "setting: a small model's text after the code fills the token limit); default: until "
                            "EOS or --max-new-tokens")


def hf_engine_flags(group) -> None:
    """The transformers engine's fast path, the same flags in collect.py, evaluate.py and train.py (generation.HFEngine,
    generation_speed.py): how it samples, not what (the same tokens, to float rounding)."""
    group.add_argument("--hf-decode", default="auto", choices=["auto", "fast", "plain"],
                       help="transformers engine: fast (keys and values kept across turns, continuous batching, the "
                            "decoder written out: Llama, Qwen2, Qwen3), plain (the reference loop), auto (fast on "
                            "CPUs where it runs the model, checked at start; plain elsewhere)")
    group.add_argument("--kv-cache-gb", type=number(0), default=None,
                       help="transformers engine, fast path: GiB of keys and values kept across turns (0: none; "
                            "default: a quarter of the memory free at start)")


def vllm_flags(group) -> None:
    """vLLM's flags, the same in collect.py and evaluate.py (engines/vllm_engine.py)."""
    group.add_argument("--tensor-parallel-size", type=count, default=1, help="vLLM tensor parallel size")
    group.add_argument("--vllm-gpu-memory-utilization", type=probability, default=0.9,
                       help="vLLM's share of the GPU's memory")
    group.add_argument("--vllm-max-num-seqs", type=count, default=None, help="vLLM: sequences in flight at most")
    renamed(group, "--gpu-memory-utilization", "is now --vllm-gpu-memory-utilization (as in train.py)")


def sandbox_flags(group, sample: str) -> None:
    """--workers and --reuse-verdicts, the same in collect.py and evaluate.py (rollout.execute_turn). sample:
    what the script calls one conversation of a problem."""
    group.add_argument("--workers", type=count, default=None, help="sandbox workers (default: one per CPU)")
    group.add_argument("--reuse-verdicts", action="store_true",
                       help=f"a program already run in the same block on the same problem (resubmitted unchanged, or "
                            f"another {sample}'s identical program) takes that verdict instead of running again: the "
                            "same verdict for a deterministic program; for one whose verdict varies (random, timing), "
                            "each verdict is still one of its verdicts, no longer drawn apart from the earlier one. "
                            "Default: every program runs, as in the paper")


def check_model_flags(parser: argparse.ArgumentParser, args) -> None:
    """--model and --engine together, one convention in collect.py, evaluate.py and perturb.py judge: with --engine
    api, --model is the model's name on the --api-base server, taken as it is (served names may look like paths:
    openrouter/meta-llama/llama-3-8b, /models/x.gguf); with the other engines it is a hub id or a local path that
    must exist, and --api-base would be ignored: refused."""
    if args.engine == "api":
        if not args.api_base:
            parser.error("--engine api needs --api-base URL (the server's OpenAI-compatible base URL, e.g. "
                         "http://127.0.0.1:8000/v1)")
        return
    if args.api_base:
        parser.error(f"--api-base is --engine api's: add --engine api to sample from the server (--model: its name "
                     f"there), or drop --api-base to load --model here with --engine {args.engine}")
    if args.model is not None:
        try:
            source(args.model)
        except argparse.ArgumentTypeError as e:
            parser.error(f"argument --model: {e}")


def api_flags(group) -> None:
    """--engine api's server flags, the same in collect.py, evaluate.py and perturb.py judge (engines/api.py);
    --model names the model as the server lists it (check_model_flags)."""
    group.add_argument("--api-base", default=None,
                       help="API engine: the server's OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    group.add_argument("--api-key-env", default="OPENAI_API_KEY",
                       help="API engine: the environment variable that holds the key (never written anywhere)")
    group.add_argument("--api-concurrency", type=count, default=16, help="API engine: requests in flight")
    group.add_argument("--api-retries", type=integer(0), default=6,
                       help="API engine: retries of a request (429, 5xx, timeouts, dropped connections), with "
                            "backoff; then its conversation is an infrastructure failure")
    group.add_argument("--api-timeout", type=positive, default=600.0, help="API engine: seconds per request")


TRACKERS = ("none", "tensorboard", "wandb")


def tracker_flag(group, tags: str) -> None:
    """--log-with, the same flag in collect.py, evaluate.py and train.py."""
    group.add_argument("--log-with", default="none", choices=TRACKERS,
                       help=f"a tracker that also gets this run's figures (its package must be installed: pip install "
                            f"tensorboard / wandb; tensorboard writes under --out; tags {tags})")


def check_tracker(name: str) -> None:
    """Stop before any work when --log-with names a tracker whose package is not installed."""
    import importlib.util
    if name != "none" and importlib.util.find_spec(name) is None:
        raise SystemExit(f"error: --log-with {name} needs the {name} package: pip install {name}")


def tracker_config(args) -> dict:
    """The flags as a tracker's run configuration (trackers take numbers, strings and booleans)."""
    return {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in vars(args).items()
            if v is not None and not k.startswith("_")}


def log_to_tracker(args, rows: dict) -> None:
    """Send a finished collection's or evaluation's figures to the --log-with tracker: rows maps a step (a
    turn) to {tag: value}. (train.py logs each step as it goes, through its own Accelerator.)"""
    if args.log_with == "none":
        return
    from accelerate import Accelerator
    accelerator = Accelerator(log_with=args.log_with, project_dir=args.out, cpu=True)
    accelerator.init_trackers("cobalt-min", config=tracker_config(args))
    for step, values in sorted(rows.items()):
        accelerator.log({k: v for k, v in values.items() if isinstance(v, (int, float))}, step=step)
    accelerator.end_training()


def renamed(parser, old: str, message: str) -> None:
    """A flag that was renamed or changed: using it stops with `message` (the new name and why), never
    with a silently different meaning."""
    parser.add_argument(old, action=_Renamed, message=message, dest=f"_renamed_{old.strip('-').replace('-', '_')}")
