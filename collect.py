r"""Offline trajectory collection (COBALT stage 1, paper §4).

A reference model writes `--trajectories` first-turn programs per problem and continues each for
`--turns` programs in all, with public-test feedback between them. The raw trajectories are written
as problems finish (DIR/raw.jsonl; a killed run continues with --resume; on many ranks each appends to
a shard of its own, merged at the end: cobalt_min/problem_shards.py). Then they are filtered,
down-sampled and cut into partial trajectories: DIR/contexts.jsonl, ready for train.py.

    # CPU, demo problems and the demo model (a few minutes):
    python collect.py --model smollm2 --problems demo --out runs/collect --trajectories 4 --turns 3 --max-new-tokens 256
    # GPU, the paper's setting (reference model = FT, the single-turn GRPO model: train.py --method single-turn):
    python collect.py --model runs/ft/final --problems data/taco_train.jsonl --out runs/collect \
        --trajectories 16 --turns 3 --thinking
    python collect.py --model runs/ft/final --problems data/taco_dev.jsonl --split validation --out runs/collect_val
    # many GPUs, one or several nodes: one engine per rank, shards merged by rank 0 (--out on a shared disk):
    torchrun --nproc_per_node 8 [--nnodes 2 --node-rank R --master-addr HOST] collect.py --model M ... --out runs/collect
    # rebuild contexts from existing raw trajectories, without generating anything:
    python collect.py --process-only --out runs/collect --tokenizer path/to/policy

Outputs: DIR/raw.jsonl (one line per problem: tests and trajectories), DIR/contexts.jsonl (one line per
context: problem_id, messages, prev_best, turn, tests), DIR/stats.json, DIR/report.html (one page to look at
the trajectories), DIR/settings.json (what decides the trajectories: a --resume must match it).
"""

import argparse
import json
import os
import sys
from pathlib import Path

from cobalt_min import cli
from cobalt_min.generation import BLOCK_SEED_STRIDE, model_location, prompt_token_counter
from cobalt_min.graders import grader_flags, grader_of
from cobalt_min.jsonl import read_jsonl, write_jsonl
from cobalt_min.metrics import summarize
from cobalt_min.problem_shards import (api_usage_line, check_new_or_resumed, join_launch, roll_out_problems,
                                       shard_files, shard_folder)
from cobalt_min.problems import problem_flags, problems_of
from cobalt_min.report import write_report
from cobalt_min.rollout import rollout, scored_records, set_apart_lost
from cobalt_min.sandbox import require_safe_sandbox
from cobalt_min.trajectories import PROMPT_BUDGET, build_contexts


def parser() -> argparse.ArgumentParser:
    """collect.py's flags, grouped by phase; defaults are the paper's (§4)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=cli.HelpFormatter)
    g = ap.add_argument_group("model")
    g.add_argument("--model", default=None,
                   help="reference model: hub id, folder, .gguf file or 'smollm2'; with --engine api its name on the "
                        "server")
    g.add_argument("--engine", default="auto", choices=["auto", "vllm", "hf", "api"],
                   help="sampler: vLLM or transformers (auto: vLLM when installed with a GPU)"
                        "; api: a model behind an OpenAI-compatible server (--api-base; --model: its name there)")
    cli.api_flags(g)
    g.add_argument("--thinking", action="store_true", help="thinking model (template mode, history after </think>)")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="model dtype (default auto: the checkpoint's; the transformers engine's fast path on a CPU "
                        "then samples in bfloat16 where the CPU multiplies it natively, else in float32)")
    g.add_argument("--gen-batch-size", type=cli.count, default=64,
                   help="transformers engine: sequences decoded together")
    cli.hf_engine_flags(g)
    cli.renamed(g, "--batch-size", "is now --gen-batch-size (train.py's --batch-size counts contexts per step)")
    cli.vllm_flags(g)
    g = ap.add_argument_group("problems")
    problem_flags(g, required=False, what="the problems to collect on")
    g = ap.add_argument_group("collection (paper §4 defaults)")
    g.add_argument("--trajectories", type=cli.count, default=16, help="trajectories per problem")
    g.add_argument("--turns", type=cli.count, default=3,
                   help="programs per trajectory, feedback between them")
    g.add_argument("--temperature", type=cli.non_negative, default=0.6, help="sampling temperature (the paper's)")
    g.add_argument("--top-p", type=cli.probability, default=0.95, help="nucleus sampling (the paper's)")
    g.add_argument("--max-new-tokens", type=cli.count, default=8192, help="max response tokens")
    cli.stop_after_code_flag(g)
    g.add_argument("--seed", type=int, default=0, help="sampling seed")
    grader_flags(g)
    cli.sandbox_flags(g, "trajectory")
    g.add_argument("--batch-problems", type=cli.count, default=8, help="problems rolled out together")
    g = ap.add_argument_group("contexts (paper §4 defaults)")
    g.add_argument("--split", default="train", choices=["train", "validation"],
                   help="train: keep diff > 0 and max == 1, down-sample to --m; validation: the one trajectory "
                        "with the smallest diff > 0")
    g.add_argument("--m", type=cli.count, default=4, help="trajectories kept per problem")
    g.add_argument("--prompt-budget", type=cli.count, default=PROMPT_BUDGET,
                   help="a context longer than this ends its trajectory's cut (the authors' 10,000; train.py's "
                        "--max-prompt-tokens 10,240 is their training limit, a little above it)")
    g.add_argument("--tokenizer", type=cli.source, default=None,
                   help="tokenizer for the budget (default: --model; the policy's)")
    g.add_argument("--process-only", action="store_true", help="only rebuild contexts from DIR/raw.jsonl")
    g = ap.add_argument_group("output")
    g.add_argument("--out", type=cli.output_folder, required=True, help="output folder")
    g.add_argument("--resume", action="store_true",
                   help="continue DIR/raw.jsonl (and its shards), skipping finished problems, on any number of ranks")
    g.add_argument("--dist-timeout-minutes", type=cli.positive, default=180,
                   help="how long a rank waits for the others (torchrun launches)")
    cli.tracker_flag(g, "collect/ (the contexts' counts; the reference model's Pass@1 by turn)")
    return ap


def parse_args(argv=None):
    ap = parser()
    args = ap.parse_args(argv)
    cli.check_model_flags(ap, args)
    return args


# What decides the trajectories a collection writes (a --resume must keep it, cli.record_settings): every flag
# but these (how fast, where, and how raw.jsonl becomes contexts, which --process-only redoes). --batch-problems
# is a setting: each batch is seeded by its position.
SETTINGS = cli.settings_of(parser(), besides={
    "api_base", "api_concurrency", "api_key_env", "api_retries", "api_timeout",  # (--engine api: how, not what)
    "dist_timeout_minutes", "dtype", "engine", "gen_batch_size", "hf_decode", "kv_cache_gb", "log_with", "m", "out",
    "process_only", "prompt_budget", "resume", "split", "tensor_parallel_size", "tokenizer", "vllm_gpu_memory_utilization",
    "vllm_max_num_seqs", "workers"})


def main(argv=None):
    """collect.py's command line: parse the flags, then collect; Ctrl-C says what the run keeps."""
    args = parse_args(argv)
    kept = "every finished problem is in --out's raw.jsonl or its shards"
    with cli.interrupt_message(kept, cli.command_line(__file__, argv)):
        collect(args)


def collect(args):
    """Offline collection (paper §4): the reference model rolls out --trajectories conversations of --turns
    programs per problem (raw.jsonl, appended per batch, resumable), then the trajectory filter, max-variance
    down-sampling and the cut into contexts (contexts.jsonl, stats.json, report.html)."""
    if os.environ.get("RANK", "0") == "0":
        print(cli.settings_line("collect.py", args), file=sys.stderr)
        if budget_tokenizer(args) is None:  # (said before the sampling, not after it)
            print("warning: no --tokenizer (an API model's name is not one): the contexts' prompt budget "
                  f"(--prompt-budget {args.prompt_budget}) will not be checked", file=sys.stderr)
    cli.check_tracker(args.log_with)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    raw_path = out / "raw.jsonl"
    ranks = join_launch(args)  # one process, or this rank's share of the problems (problem_shards.py)
    usage = None
    if not args.process_only:  # roll out the reference model
        usage = collect_trajectories(args, ranks, raw_path)
    elif shard_files(raw_path):
        raise SystemExit(f"error: {shard_folder(raw_path)} holds unmerged shards of a killed run: finish it with "
                         "--resume (and its --problems) first")
    ranks.close()  # (roll_out_problems has left the process group already; --process-only leaves it here)
    if ranks.main:  # rank 0 cuts the contexts
        write_contexts(args, out, raw_path, usage)


def collect_trajectories(args, ranks, raw_path: Path) -> dict | None:
    """The reference model's conversations on every problem, appended to raw.jsonl a block at a time. Returns the
    API engine's usage (None with the other engines)."""
    if not args.model or not args.problems:
        raise SystemExit("error: --model and --problems are required (or use --process-only)")
    require_safe_sandbox()
    check_new_or_resumed(ranks, args, SETTINGS, raw_path, "or --process-only")
    problems = problems_of(args)

    def roll_out_block(engine, workers, start, block):
        """The trajectories of a block of --batch-problems problems, seeded by its position."""
        trajs, seconds = rollout(block, engine, samples=args.trajectories, feedback_turns=args.turns - 1,
                                 temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                                 seed=args.seed + BLOCK_SEED_STRIDE * start, thinking=args.thinking,
                                 grader=grader_of(args), workers=workers, reuse_verdicts=args.reuse_verdicts)
        return [set_apart_lost({"problem_id": p.id, "tests": p.all_tests(), "samples": samples})
                for p, samples in zip(block, trajs)], seconds

    _, _, engine = roll_out_problems(args, ranks, problems, raw_path, roll_out_block)
    return getattr(engine, "usage", None)


def budget_tokenizer(args) -> str | None:
    """The tokenizer that counts the contexts' prompt tokens: --tokenizer, else the model's (not an API model's:
    its name on a server is no tokenizer); None: the budget is not checked."""
    if args.tokenizer:
        return args.tokenizer
    return model_location(args.model) if args.model and args.engine != "api" else None


def write_contexts(args, out: Path, raw_path: Path, usage: dict | None) -> None:
    """§4 after the roll-outs: the trajectory filter, max-variance down-sampling and the cut into contexts
    (contexts.jsonl), their counts (stats.json, printed, to the tracker) and report.html. Trajectories the
    sandbox failed on (no verdict on a program: rollout.set_apart_lost) are left out and counted apart; a
    problem left with none is left out."""
    records = read_jsonl(raw_path)
    if not records:
        raise SystemExit(f"error: no raw trajectories in {raw_path}")
    records, infra_errors = scored_records(records)
    tok_path = budget_tokenizer(args)
    count = prompt_token_counter(tok_path, args.thinking) if tok_path else None
    contexts, stats = build_contexts(records, {r["problem_id"]: r["tests"] for r in records}, split=args.split,
                                     m=args.m, count_prompt_tokens=count, budget=args.prompt_budget, seed=args.seed)
    ctx_path = out / "contexts.jsonl"
    write_jsonl(ctx_path, contexts)
    stats.update(split=args.split, source=str(raw_path), infra_errors=infra_errors)
    (out / "stats.json").write_text(json.dumps({**stats, **({"api_usage": usage} if usage else {})}, indent=2))
    if usage:
        print(api_usage_line(usage))
    print(f"problems seen: {stats['problems']}, trajectories left out (the sandbox failed on them): {infra_errors}, "
          f"dropped by dynamic sampling (all first programs pass): "
          f"{stats['dropped_all_pass']}, without a usable trajectory: {stats['no_usable_trajectory']}")
    print(f"trajectories kept: {stats['trajectories_kept']}; contexts: {stats['contexts']} "
          f"(per turn: {dict(sorted(stats['contexts_per_turn'].items()))})")
    reference = summarize(records, max(len(s["turns"]) for r in records for s in r["samples"]))  # (--process-only: raw's)
    rows = {t: {"collect/reference_pass@1": p, "collect/contexts": stats["contexts_per_turn"].get(t, 0)}
            for t, p in enumerate(reference["pass@1"])}
    rows.setdefault(0, {}).update({f"collect/{k}": v for k, v in stats.items()})
    cli.log_to_tracker(args, rows)
    print(f"wrote {ctx_path}, {out / 'stats.json'} and {write_report(out)}")


if __name__ == "__main__":
    main()
    cli.end_rank()  # a rank of a distributed launch: leave the process group, exit (cli.py says why)
