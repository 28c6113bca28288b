"""collect.py and evaluate.py on one process or many (torchrun / accelerate launch, one node or several):
the shared loop that rolls out blocks of problems, each rank's share of them, its shard file, and the
merge into the outputs one process writes.

    ranks = join_launch(args)                          # rank 0 of 1 without a distributed launch
    check_new_or_resumed(ranks, args, settings, path, "or choose another --out")
    records, timings, engine = roll_out_problems(args, ranks, problems, path, roll_out_block)
    # records: rank 0, the merged file's records of `problems` in problem order; other ranks: None

The problems are cut into blocks of --batch-problems at fixed positions; a block is seeded by its position
(never by a rank), so which rank rolls it out changes nothing it samples. The blocks not finished yet are
dealt round-robin to the ranks; each rank builds its own engine on its own device (the transformers
engine, or vLLM with one GPU per rank) and grades with its share of the node's cores. In one process
records are appended to PATH itself; on N ranks each rank appends to DIR/shards/NAME.rank-R.jsonl and,
once all are done, rank 0 merges PATH and the shards into PATH (written beside and renamed: never half a
file) and removes the shards. A run killed anywhere keeps every finished problem (in PATH or a shard) and
continues with --resume on any number of ranks: a block with a problem left is rolled out again whole (its
seeds stay those of the uninterrupted run) and only its missing problems are written.
"""

import dataclasses
import datetime
import os
import sys
from pathlib import Path

from tqdm.auto import tqdm

from cobalt_min import cli
from cobalt_min.engines import make_engine
from cobalt_min.generation import model_location
from cobalt_min.jsonl import append_jsonl, read_jsonl, write_jsonl


@dataclasses.dataclass
class Ranks:
    """This process's place in the launch: rank `rank` of `world`, `local_world` ranks on this node (each
    with its own engine: under a launch, --tensor-parallel-size is 1)."""
    rank: int = 0
    world: int = 1
    local_world: int = 1
    device: str | None = None  # None: the engine's default (one process)
    state: object = None  # Accelerate's PartialState under a distributed launch

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.state is not None:
            self.state.wait_for_everyone()

    def shard(self, path: Path) -> Path:
        """Where this rank appends: PATH itself in one process, else its own shard file."""
        return path if self.world == 1 else shard_folder(path) / f"{path.stem}.rank-{self.rank}.jsonl"

    def total(self, numbers: dict) -> dict:
        """{key: sum over ranks} of each rank's numbers."""
        if self.state is None:
            return dict(numbers)
        from accelerate.utils import gather_object
        every = gather_object([numbers])
        keys = dict.fromkeys(k for n in every for k in n)  # (a rank without blocks has none)
        return {k: sum(n.get(k, 0.0) for n in every) for k in keys}

    def close(self) -> None:
        """Leave the process group (a rank that exits inside it may abort at exit)."""
        if self.state is not None:
            self.state.destroy_process_group()


def join_launch(args) -> Ranks:
    """One process, or this rank of a torchrun / accelerate launch (WORLD_SIZE > 1): the process group
    (gloo on CPUs, NCCL on GPUs; --dist-timeout-minutes bounds a wait at a barrier), this rank's device,
    and the checks a launch must pass."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Ranks()
    if args.tensor_parallel_size != 1:
        raise SystemExit("error: under a distributed launch each rank runs its own engine on its own GPU "
                         "(--tensor-parallel-size 1); a model that needs several GPUs: run one process with "
                         "--tensor-parallel-size N")
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"),
                         timeout=datetime.timedelta(minutes=args.dist_timeout_minutes))
    if state.num_processes != world:
        raise SystemExit(f"error: {world} processes were launched but Accelerate sees {state.num_processes}: they "
                         "would all roll out every problem. On CPUs launch with `ACCELERATE_USE_CPU=true torchrun "
                         "--nproc_per_node N ...`.")
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return Ranks(state.process_index, world, local_world, str(state.device), state)


def check_new_or_resumed(ranks: Ranks, args, settings: tuple, path: Path, otherwise: str) -> None:
    """Rank 0, before anything is rolled out: refuse to add to an earlier run's PATH without --resume, and
    record the settings a --resume must keep (cli.record_settings)."""
    if not ranks.main:
        return
    if finished_records(path) and not args.resume:
        raise SystemExit(f"error: {path} (or its shards) exists: pass --resume to continue it, {otherwise}")
    cli.record_settings(path.parent, args, settings, args.resume)


def roll_out_problems(args, ranks: Ranks, problems: list, path: Path, roll_out_block) -> tuple:
    """collect.py's and evaluate.py's loop, whole: problems an earlier run finished are skipped (a --resume),
    the others rolled out a block at a time on this rank's engine (roll_out_block(engine, workers, position,
    problems) -> (one record per problem, {seconds: ...})) and appended as each block ends, then merged.
    Returns (rank 0: the records of `problems` in problem order, other ranks: None; the seconds spent,
    summed over ranks; the engine, None when nothing was left to roll out)."""
    done = finished_ids(ranks, path)
    if done and ranks.main:
        print(f"resuming: {len(done)} problems already done, {len(problems) - len(done)} to go", file=sys.stderr)
    engine = make_script_engine(args, ranks) if len(done) < len(problems) else None
    workers = sandbox_workers(args, ranks)
    timings = roll_out_share(ranks, problems, done, args.batch_problems, path,
                             lambda start, block: roll_out_block(engine, workers, start, block))
    return finish(ranks, path, problems, engine), timings, engine


def make_script_engine(args, ranks: Ranks):
    """collect.py's and evaluate.py's engine, from their model flags, on this rank's device."""
    if args.engine == "api" and ranks.world > 1:
        raise SystemExit("error: --engine api runs in one process (the server does the work; --api-concurrency "
                         "sets the requests in flight): launch without torchrun / accelerate")
    engine = make_engine(args.engine, model_location(args.model), thinking=args.thinking, dtype=args.dtype,
                         batch_size=args.gen_batch_size, decode=args.hf_decode, kv_cache_gb=args.kv_cache_gb,
                         tensor_parallel_size=args.tensor_parallel_size, device=ranks.device,
                         gpu_memory_utilization=args.vllm_gpu_memory_utilization, seed=args.seed,
                         max_num_seqs=args.vllm_max_num_seqs, stop_after_code=args.stop_after_code,
                         api_base=args.api_base, key_env=args.api_key_env, concurrency=args.api_concurrency,
                         retries=args.api_retries, timeout=args.api_timeout)
    if ranks.main and getattr(engine, "description", None):
        print(engine.description, file=sys.stderr)  # (the transformers engine: which path samples, in which dtype)
    return engine


def sandbox_workers(args, ranks: Ranks) -> int | None:
    """--workers, or this rank's share of the node's cores (None in one process: one per CPU)."""
    if args.workers or ranks.local_world == 1:
        return args.workers
    from cobalt_min.sandbox import default_workers
    return max(1, default_workers() // ranks.local_world)


def shard_folder(path: Path) -> Path:
    return path.parent / "shards"


def shard_files(path: Path) -> list[Path]:
    """The shard files of PATH, rank order."""
    found = shard_folder(path).glob(f"{path.stem}.rank-*.jsonl")
    return sorted(found, key=lambda p: int(p.stem.rsplit("-", 1)[1]))


def finished_records(path: Path, repair: bool = False) -> list[dict]:
    """The records in PATH and in its shards, first of each problem kept (a kill between a merge's rename
    and the shards' removal leaves a problem in both, the same record)."""
    seen, out = set(), []
    for file in [path, *shard_files(path)]:
        for record in read_jsonl(file, repair=repair):
            if record["problem_id"] not in seen:
                seen.add(record["problem_id"])
                out.append(record)
    return out


def finished_ids(ranks: Ranks, path: Path) -> set:
    """The problems finished by earlier runs. Rank 0 repairs the files (drops a last line half written
    by a kill) before any rank reads them, and no rank writes before every rank has read them."""
    repaired = finished_records(path, repair=True) if ranks.main else None
    ranks.barrier()
    done = {r["problem_id"] for r in (repaired if repaired is not None else finished_records(path))}
    ranks.barrier()
    return done


def blocks(problems: list, size: int) -> list[tuple[int, list]]:
    """(position, problems) for each block of `size` problems at its fixed position."""
    return [(start, problems[start:start + size]) for start in range(0, len(problems), size)]


def roll_out_share(ranks: Ranks, problems: list, done: set, size: int, path: Path, roll_out_block) -> dict:
    """Roll out this rank's share of the blocks with a problem not done: roll_out_block(position, problems)
    returns (one record per problem, {seconds: ...}); the records of problems not done are appended (and
    flushed) to this rank's file as their block finishes. Returns the seconds spent, summed over ranks.
    A failure on one rank is reported with its rank and shard before it ends the launch."""
    pending = [(start, block) for start, block in blocks(problems, size) if any(p.id not in done for p in block)]
    mine = pending[ranks.rank::ranks.world]
    target = ranks.shard(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    todo = sum(p.id not in done for _, block in mine for p in block)
    label = "problems" if ranks.world == 1 else f"problems (rank {ranks.rank})"
    bar = tqdm(total=todo, desc=label, unit="problem")
    timings: dict = {}
    written = 0
    try:
        for start, block in mine:
            records, seconds = roll_out_block(start, block)
            for k, v in seconds.items():
                timings[k] = timings.get(k, 0.0) + v
            for problem, record in zip(block, records):
                if problem.id not in done:
                    append_jsonl(target, record)
                    written += 1
                    bar.update(1)
    except Exception as e:
        if ranks.world > 1:
            print(f"error: rank {ranks.rank} of {ranks.world} failed on its shard {target} ({written} of its "
                  f"{todo} problems written and kept; --resume continues): {type(e).__name__}: {e}", file=sys.stderr)
        raise
    bar.close()
    ranks.barrier()
    return ranks.total(timings)


def api_usage_line(usage: dict) -> str:
    """--engine api's closing line: what the run asked of the server."""
    return (f"API usage: {usage['requests']} requests, {usage['prompt_tokens']:,} prompt tokens, "
            f"{usage['completion_tokens']:,} completion tokens, {usage['retries']} retries, "
            f"{usage['failed_requests']} requests failed after their retries (infrastructure failures)")


def finish(ranks: Ranks, path: Path, problems: list, engine=None) -> list[dict] | None:
    """Every rank shuts its vLLM engine down (it must leave its process groups first) and leaves the
    launch's process group. Rank 0: PATH and its shards merged into PATH in problem order (records of other
    problems after them, as they were), shards removed; returns the records of `problems`. Others: None."""
    if ranks.world > 1 and hasattr(engine, "close"):
        engine.close()
    ranks.close()
    if not ranks.main:
        return None
    records = finished_records(path)
    if shard_files(path):
        position = {p.id: k for k, p in enumerate(problems)}
        records.sort(key=lambda r: position.get(r["problem_id"], len(position)))
        write_jsonl(path, records)
        for shard in shard_files(path):
            shard.unlink()
        if not any(shard_folder(path).iterdir()):
            shard_folder(path).rmdir()
    wanted = {p.id for p in problems}
    return [r for r in records if r["problem_id"] in wanted]
