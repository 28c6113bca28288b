r"""Offline trajectory collection (COBALT stage 1, paper §4).

A reference model writes `--trajectories` first-turn programs per problem and continues each for
`--turns` programs in all, with public-test feedback between them. The raw trajectories are written
as problems finish (DIR/raw.jsonl; a killed run continues with --resume). Then they are filtered,
down-sampled and cut into partial trajectories: DIR/contexts.jsonl, ready for train.py.

    # CPU, demo problems and the demo model (a few minutes):
    python collect.py --model smollm2 --problems demo --out runs/collect --trajectories 4 --turns 3 --max-new-tokens 256
    # GPU, the paper's setting (reference model = the fine-tuned policy you start RL from):
    python collect.py --model path/to/sft-model --problems data/taco_train.jsonl --out runs/collect \
        --trajectories 16 --turns 3 --thinking
    python collect.py --model path/to/sft-model --problems data/taco_dev.jsonl --split validation --out runs/collect_val
    # rebuild contexts from existing raw trajectories, without generating anything:
    python collect.py --process-only --out runs/collect --tokenizer path/to/policy

Outputs: DIR/raw.jsonl (one line per problem: tests and trajectories), DIR/contexts.jsonl (one line per
context: problem_id, messages, prev_best, turn, tests), DIR/stats.json, DIR/report.html (one page to look at
the trajectories), DIR/settings.json (what decides the trajectories: a --resume must match it).
"""

import argparse
import json
import sys
from pathlib import Path

from tqdm.auto import tqdm

from cobalt_min import cli
from cobalt_min.generation import find_smollm2_gguf, make_engine
from cobalt_min.jsonl import append_jsonl, read_jsonl, write_jsonl
from cobalt_min.metrics import summarize
from cobalt_min.report import write_report
from cobalt_min.rollout import pending_batches, rollout
from cobalt_min.sandbox import require_safe_sandbox
from cobalt_min.trajectories import PROMPT_BUDGET, build_contexts


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("model")
    g.add_argument("--model", type=cli.source, default=None,
                   help="reference model: hub id, folder, .gguf file or 'smollm2'")
    g.add_argument("--engine", default="auto", choices=["auto", "vllm", "hf"], help="default auto")
    g.add_argument("--thinking", action="store_true", help="thinking model (template mode, history after </think>)")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="model dtype (default auto: the checkpoint's)")
    g.add_argument("--gen-batch-size", type=cli.count, default=64,
                   help="transformers engine: sequences per generate call (default 64)")
    cli.renamed(g, "--batch-size", "is now --gen-batch-size (train.py's --batch-size counts contexts per step)")
    g.add_argument("--tensor-parallel-size", type=cli.count, default=1, help="vLLM tensor parallel size (default 1)")
    g.add_argument("--vllm-gpu-memory-utilization", type=cli.probability, default=0.9,
                   help="vLLM's share of the GPU's memory (default 0.9)")
    cli.renamed(g, "--gpu-memory-utilization", "is now --vllm-gpu-memory-utilization (as in train.py)")
    g = ap.add_argument_group("problems")
    cli.problem_flags(g, required=False, what="the problems to collect on")
    g = ap.add_argument_group("collection (paper §4 defaults)")
    g.add_argument("--trajectories", type=cli.count, default=16, help="trajectories per problem (default 16)")
    g.add_argument("--turns", type=cli.count, default=3,
                   help="programs per trajectory, feedback between them (default 3)")
    g.add_argument("--temperature", type=cli.non_negative, default=0.6, help="default 0.6")
    g.add_argument("--top-p", type=cli.probability, default=0.95, help="default 0.95")
    g.add_argument("--max-new-tokens", type=cli.count, default=8192, help="default 8192")
    cli.stop_after_code_flag(g)
    g.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    cli.grader_flags(g)
    g.add_argument("--workers", type=cli.count, default=None, help="sandbox workers (default: one per CPU)")
    g.add_argument("--batch-problems", type=cli.count, default=8, help="problems rolled out together (default 8)")
    g = ap.add_argument_group("contexts (paper §4 defaults)")
    g.add_argument("--split", default="train", choices=["train", "validation"],
                   help="train: keep diff > 0 and max == 1, down-sample to --m; validation: the one trajectory "
                        "with the smallest diff > 0 (default train)")
    g.add_argument("--m", type=cli.count, default=4, help="trajectories kept per problem (default 4)")
    g.add_argument("--prompt-budget", type=cli.count, default=PROMPT_BUDGET, help="max context tokens (default 10000)")
    g.add_argument("--tokenizer", type=cli.source, default=None,
                   help="tokenizer for the budget (default: --model; the policy's)")
    g.add_argument("--process-only", action="store_true", help="only rebuild contexts from DIR/raw.jsonl")
    g = ap.add_argument_group("output")
    g.add_argument("--out", type=cli.output_folder, required=True, help="output folder")
    g.add_argument("--resume", action="store_true", help="continue DIR/raw.jsonl, skipping finished problems")
    cli.tracker_flag(g, "collect/ (the contexts' counts; the reference model's Pass@1 by turn)")
    return ap.parse_args(argv)


def token_counter(path: str, thinking: bool):
    """count(messages) -> prompt tokens with the tokenizer and chat template of `path`."""
    from transformers import AutoTokenizer

    from cobalt_min.generation import chat_prompt_ids, gguf_location, hub_options, load_error
    folder, gguf_file = gguf_location(path, None)
    options = hub_options(folder)
    try:
        tok = AutoTokenizer.from_pretrained(folder, **({"gguf_file": gguf_file} if gguf_file else {}), **options)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: could not load the tokenizer of {path}: {load_error(path, options, e)}") from None

    return lambda messages: len(chat_prompt_ids(tok, messages, thinking))


# What decides the trajectories a collection writes: a --resume must keep them (cli.record_settings);
# --batch-problems among them: each batch is seeded by its position.
SETTINGS = ("model", "thinking", *cli.PROBLEM_SETTINGS, "trajectories", "turns", "temperature", "top_p",
            "max_new_tokens", "stop_after_code", "seed", "grader", "timeout", "batch_problems")


def main(argv=None):
    args = parse_args(argv)
    with cli.interrupt_message("every finished problem is in --out's raw.jsonl", cli.command_line(__file__, argv)):
        collect(args)


def collect(args):
    print("collect.py", " ".join(f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()), file=sys.stderr)
    cli.check_tracker(args.log_with)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    raw_path = out / "raw.jsonl"
    model = find_smollm2_gguf() if args.model == "smollm2" else args.model

    # ------------------------------------------------------------------ roll out the reference model
    if not args.process_only:
        if not model or not args.problems:
            raise SystemExit("error: --model and --problems are required (or use --process-only)")
        require_safe_sandbox()
        if raw_path.exists() and raw_path.stat().st_size and not args.resume:
            raise SystemExit(f"error: {raw_path} exists: pass --resume to continue it, or --process-only")
        cli.record_settings(out, args, SETTINGS, args.resume)
        problems = cli.problems_of(args)
        done = {r["problem_id"] for r in read_jsonl(raw_path, repair=True)}
        todo_ids = {p.id for p in problems} - done
        if done:
            print(f"resuming: {len(done)} problems already collected, {len(todo_ids)} to go", file=sys.stderr)
        if todo_ids:
            engine = make_engine(args.engine, model, thinking=args.thinking, dtype=args.dtype,
                                 batch_size=args.gen_batch_size, tensor_parallel_size=args.tensor_parallel_size,
                                 gpu_memory_utilization=args.vllm_gpu_memory_utilization, seed=args.seed,
                             stop_after_code=args.stop_after_code)
            bar = tqdm(total=len(problems), initial=len(problems) - len(todo_ids), desc="problems", unit="problem")
            for start, batch in pending_batches(problems, todo_ids, args.batch_problems):
                trajs, _ = rollout(batch, engine, samples=args.trajectories, feedback_turns=args.turns - 1,
                                   temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                                   seed=args.seed + 1000 * start, thinking=args.thinking, grader=cli.grader_of(args),
                                   workers=args.workers)
                for p, samples in zip(batch, trajs):
                    append_jsonl(raw_path, {"problem_id": p.id, "tests": p.all_tests(), "samples": samples})
                    bar.update(1)
            bar.close()

    # ------------------------------------------------------------------ contexts
    records = read_jsonl(raw_path)
    if not records:
        raise SystemExit(f"error: no raw trajectories in {raw_path}")
    tok_path = args.tokenizer or model
    count = token_counter(tok_path, args.thinking) if tok_path else None
    if count is None:
        print("warning: no --tokenizer: the prompt budget is not checked", file=sys.stderr)
    contexts, stats = build_contexts(records, {r["problem_id"]: r["tests"] for r in records}, split=args.split,
                                     m=args.m, count_prompt_tokens=count, budget=args.prompt_budget, seed=args.seed)
    ctx_path = out / "contexts.jsonl"
    write_jsonl(ctx_path, contexts)
    stats.update(split=args.split, source=str(raw_path))
    (out / "stats.json").write_text(json.dumps(stats, indent=2))
    print(f"problems seen: {stats['problems']}, dropped by dynamic sampling (all first programs pass): "
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
