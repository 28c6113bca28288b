r"""Perturbed feedback (paper §7): perturbed test sets, training augmentation, reward-hacking analysis.

    # a perturbed problem set, like TACO-Dev-PTB (public tests with two expected outputs swapped):
    python perturb.py tests --problems data/taco_dev.jsonl --out data/taco_dev_ptb.jsonl
    # evaluate with perturbed feedback, then find the hacking candidates:
    python evaluate.py --model M --problems data/taco_dev_ptb.jsonl --perturbed --out runs/ptb
    python perturb.py analyze --run runs/ptb
    # classify them with an LLM judge (a local model, or any OpenAI-compatible server):
    python perturb.py judge --cases runs/ptb/hacking_candidates.jsonl --model Qwen/Qwen3-8B
    python perturb.py judge --cases runs/ptb/hacking_candidates.jsonl --engine api --api-base http://localhost:8000/v1 \
        --model M
    # perturbed training contexts from collected trajectories (no model calls), for train.py:
    python perturb.py augment --trajectories runs/collect/raw.jsonl --problems data/taco_train.jsonl \
        --out runs/collect/perturbed_contexts.jsonl
    python train.py ... --perturbed-contexts runs/collect/perturbed_contexts.jsonl --perturbed-fraction 0.2
"""

import argparse
import collections
import dataclasses
import json
import sys
from pathlib import Path

from tqdm.auto import tqdm

from cobalt_min import cli
from cobalt_min.graders import grader_flags, grader_of
from cobalt_min.jsonl import append_jsonl, read_jsonl, write_jsonl
from cobalt_min.report import run_kind, write_report


def cmd_tests(args):
    """perturb.py tests: the problems with perturbed public tests (two expected outputs swapped; paper §7)."""
    from cobalt_min.perturbation import perturb_public_tests, problem_rng
    from cobalt_min.problems import load_problems, save_problems
    problems = load_problems(args.problems, split=args.problem_split, limit=args.limit)
    out, dropped = [], 0
    for p in problems:
        made = perturb_public_tests(p.public_tests, problem_rng(args.perturb_seed, p.id))
        if made is None:
            dropped += 1
            continue
        out.append(dataclasses.replace(p, feedback_tests=made[0]))  # true public and hidden tests are kept
    if not out:
        raise SystemExit(f"error: no problem of {args.problems} has two public tests with distinct outputs")
    save_problems(out, args.out)
    print(f"wrote {len(out)} perturbed problems to {args.out} ({dropped} with fewer than 2 distinct outputs dropped)")


def cmd_augment(args):
    """perturb.py augment: perturbed training contexts from collected trajectories, no model calls (§7)."""
    from cobalt_min.perturbation import perturbed_contexts
    from cobalt_min.problems import load_problems
    from cobalt_min.sandbox import require_safe_sandbox
    require_safe_sandbox()
    records = read_jsonl(args.trajectories)
    if not records:
        raise SystemExit(f"error: no trajectories in {args.trajectories}")
    require_fields(records, args.trajectories, {"problem_id", "samples"}, "collect.py's raw.jsonl")
    problems = {p.id: p for p in load_problems(args.problems, split=args.problem_split)}
    unmatched = sorted({r["problem_id"] for r in records} - set(problems))
    if len(unmatched) == len({r["problem_id"] for r in records}):
        raise SystemExit(f"error: no problem of {args.trajectories} is in {args.problems} (first id: "
                         f"{unmatched[0]!r}): pass the problem file the trajectories were collected on")
    if unmatched:
        print(f"warning: {len(unmatched)} problems of {args.trajectories} are not in {args.problems} and are left "
              f"out (first: {unmatched[0]!r})", file=sys.stderr)
    count = None
    if args.tokenizer:
        from cobalt_min.generation import prompt_token_counter
        count = prompt_token_counter(args.tokenizer, args.thinking)
    contexts, stats = perturbed_contexts(records, problems, seed=args.perturb_seed, fraction=args.fraction, m=args.m,
                                         count_prompt_tokens=count, grader=grader_of(args), workers=args.workers)
    write_jsonl(args.out, contexts)
    print(f"{stats['problems']} problems perturbed ({stats['without_two_distinct_outputs']} without 2 distinct "
          f"outputs); {stats['contexts']} perturbed contexts (per turn: {dict(sorted(stats['contexts_per_turn'].items()))})")
    print(f"{stats['said_all_passed']} of {stats['feedback_messages']} rebuilt feedback messages say every public test "
          f"passed, {stats['said_all_passed_after_correct']} of them after a program that passes every true test")
    print(f"wrote {args.out}")


def cmd_analyze(args):
    """perturb.py analyze: the hacking candidates of an evaluate.py --perturbed run and what wrong feedback did."""
    from cobalt_min.metrics import format_table, summarize
    from cobalt_min.perturbation import hacking_candidates, wrong_feedback_per_turn, wrong_feedback_text
    run = Path(args.run)
    records = read_jsonl(run / "trajectories.jsonl")
    if not records:
        raise SystemExit(f"error: no trajectories in {run / 'trajectories.jsonl'}")
    if not any("perturbed" in r for r in records):
        raise SystemExit(f"error: {run} is not a perturbed run (evaluate.py --perturbed)")
    cases = [c for r in records for c in hacking_candidates(r)]
    n_turns = max(len(s["turns"]) for r in records for s in r["samples"])
    per_turn = collections.Counter(c["turn"] for c in cases)
    per_problem = collections.Counter(c["problem_id"] for c in cases)
    n_samples = sum(len(r["samples"]) for r in records)
    summary = summarize(records, n_turns)
    write_jsonl(run / "hacking_candidates.jsonl", cases)
    report = {"candidates": len(cases), "per_turn": {t: per_turn.get(t, 0) for t in range(1, n_turns)},
              "problems_with_candidates": len(per_problem), "problems": len(records),
              "rate_per_problem": {pid: per_problem.get(pid, 0) / len(r["samples"]) for pid, r in
                                   ((r["problem_id"], r) for r in records)},
              "candidates_per_trajectory": len(cases) / max(1, n_samples), "pass@1_true_tests": summary,
              "wrong_feedback": wrong_feedback_per_turn(records, n_turns)}
    (run / "hacking_report.json").write_text(json.dumps(report, indent=2))
    print(format_table(summary, title=f"{run}: Pass@1 on the true hidden tests, with perturbed feedback"))
    print(f"hacking candidates: {len(cases)} in {len(per_problem)}/{len(records)} problems "
          f"({report['candidates_per_trajectory']:.3f} per trajectory)")
    print("per turn: " + ", ".join(f"t={t}: {n}" for t, n in report["per_turn"].items()))
    print(wrong_feedback_text(report["wrong_feedback"]))
    print(f"wrote {run / 'hacking_candidates.jsonl'}, {run / 'hacking_report.json'} and {write_report(run)}")


# What `judge` reads of each hacking candidate (perturbation.judge_messages, and the resume key).
CASE_FIELDS = {"problem_id", "sample", "turn", "problem", "feedback", "previous_program", "new_program", "diff"}


def require_fields(records: list, path, fields: set, what: str) -> None:
    """Exit with one line if a record lacks what this stage reads (a file from another stage, say)."""
    for n, record in enumerate(records, 1):
        missing = fields - set(record) if isinstance(record, dict) else fields
        if missing:
            raise SystemExit(f"error: {path} line {n} lacks {sorted(missing)}: is it {what}?")


def cmd_judge(args):
    """perturb.py judge: each hacking candidate classified by an LLM judge into the paper's four categories."""
    from cobalt_min.perturbation import CATEGORIES, judge_messages, parse_verdict
    cases = read_jsonl(args.cases)
    if not cases:
        raise SystemExit(f"error: no cases in {args.cases}")
    require_fields(cases, args.cases, CASE_FIELDS, "`perturb.py analyze`'s hacking_candidates.jsonl")
    out = Path(args.out or Path(args.cases).with_name("judgements.jsonl"))
    done = {(j["problem_id"], j["sample"], j["turn"]) for j in read_jsonl(out, repair=True)}
    todo = [c for c in cases if (c["problem_id"], c["sample"], c["turn"]) not in done]
    from cobalt_min.engines import make_engine
    engine = make_engine(args.engine, args.model, thinking=args.thinking, api_base=args.api_base,
                         key_env=args.api_key_env, concurrency=args.api_concurrency, retries=args.api_retries,
                         timeout=args.api_timeout)  # (--engine api: the same engine as collect.py's and evaluate.py's)
    failed = 0
    for start in tqdm(range(0, len(todo), args.cases_at_once), desc="judging", unit="batch"):
        batch = todo[start:start + args.cases_at_once]
        answers = engine.sample([engine.prompt_ids(judge_messages(c)) for c in batch], n=1, temperature=0.0,
                                top_p=1.0, max_new_tokens=args.max_new_tokens, seed=0)
        for case, (answer,) in zip(batch, answers):
            if answer.error:  # the server failed on it after its retries: not a judgement; a rerun asks again
                failed += 1
                continue
            answer = answer.text
            label, rationale = parse_verdict(answer)
            append_jsonl(out, {"problem_id": case["problem_id"], "sample": case["sample"], "turn": case["turn"],
                               "label": label, "rationale": rationale, "answer": answer})
    if failed:
        print(f"warning: {failed} cases not judged: the server failed on them after their retries; run the same "
              "command again to judge them", file=sys.stderr)
    if getattr(engine, "usage", None):
        from cobalt_min.problem_shards import api_usage_line
        print(api_usage_line(engine.usage))
    judged = read_jsonl(out)
    if not judged:
        raise SystemExit(f"error: no case judged ({failed} failed)")
    shares = collections.Counter(j["label"] for j in judged)
    table = {c: shares.get(c, 0) / len(judged) for c in CATEGORIES + ["unparsed"]}
    out.with_suffix(".summary.json").write_text(json.dumps({"cases": len(judged), "shares": table}, indent=2))
    print(f"{'category':<20} share")
    for c, v in table.items():
        print(f"{c:<20} {100 * v:5.1f}%")
    print(f"wrote {out} and {out.with_suffix('.summary.json')}")
    if out.name == "judgements.jsonl" and run_kind(out.parent) == "evaluate":  # the run's report shows the labels
        print(f"wrote {write_report(out.parent)}")


def parser() -> argparse.ArgumentParser:
    """perturb.py's flags: one subcommand per step of the paper's §7."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=cli.HelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    tests = sub.add_parser("tests", formatter_class=cli.HelpFormatter,
                       help="write a perturbed problem set (public tests perturbed, hidden kept)")
    tests.add_argument("--problems", type=cli.source, required=True, help="'demo', a file/folder, or a hub dataset id")
    tests.add_argument("--problem-split", default=None, help="split of the problem source")
    cli.renamed(tests, "--split", "is now --problem-split, as in evaluate.py and collect.py")
    tests.add_argument("--limit", type=cli.count, default=None, help="the first K problems only")
    tests.add_argument("--out", type=cli.output_file, required=True,
                       help="output JSONL (our format, with feedback_tests)")
    tests.add_argument("--perturb-seed", type=int, default=0,
                   help="which tests are swapped (per problem; the same as evaluate.py --perturbed --perturb-seed)")
    cli.renamed(tests, "--seed", "is now --perturb-seed, as in evaluate.py")
    augment = sub.add_parser("augment", formatter_class=cli.HelpFormatter,
                       help="perturbed training contexts from collected trajectories")
    augment.add_argument("--trajectories", type=cli.source, required=True, help="raw.jsonl from collect.py")
    augment.add_argument("--problems", type=cli.source, required=True,
                   help="the problem set the trajectories were collected on")
    augment.add_argument("--problem-split", default=None, help="split of the problem source")
    cli.renamed(augment, "--split", "is now --problem-split, as in evaluate.py and collect.py")
    augment.add_argument("--out", type=cli.output_file, required=True,
                   help="output contexts JSONL for train.py --perturbed-contexts")
    augment.add_argument("--fraction", type=cli.probability, default=1.0, help="share of problems perturbed, in (0, 1]")
    augment.add_argument("--m", type=cli.count, default=4, help="trajectories kept per problem")
    augment.add_argument("--tokenizer", type=cli.source, default=None,
                   help="policy tokenizer for the 10,000-token prompt budget")
    augment.add_argument("--thinking", action="store_true",
                         help="a thinking model's trajectories (history after </think>)")
    grader_flags(augment)
    augment.add_argument("--workers", type=cli.count, default=None, help="sandbox workers (default: one per CPU)")
    augment.add_argument("--perturb-seed", type=int, default=0,
                   help="which tests are swapped, and which problems with --fraction below 1")
    cli.renamed(augment, "--seed", "is now --perturb-seed, as in evaluate.py")
    analyze = sub.add_parser("analyze", formatter_class=cli.HelpFormatter,
                       help="hacking candidates of an evaluate.py --perturbed run")
    analyze.add_argument("--run", required=True, help="the evaluate.py --out folder")
    judge = sub.add_parser("judge", formatter_class=cli.HelpFormatter,
                       help="classify hacking candidates with an LLM judge")
    judge.add_argument("--cases", type=cli.source, required=True, help="hacking_candidates.jsonl from `analyze`")
    judge.add_argument("--out", type=cli.output_file, default=None,
                   help="judgements JSONL (default: judgements.jsonl beside --cases)")
    judge.add_argument("--model", required=True,
                       help="the judge: hub id, folder, .gguf; with --engine api its name on the --api-base server")
    judge.add_argument("--engine", default="auto", choices=["auto", "vllm", "hf", "api"],
                       help="auto: vLLM when installed and a GPU is present, else transformers; api: a model behind an "
                            "OpenAI-compatible server (--api-base; --model: its name there)")
    judge.add_argument("--thinking", action="store_true", help="the judge is a thinking model")
    cli.renamed(judge, "--api-model", "is now --model, with --engine api --api-base URL (as in collect.py and "
                                      "evaluate.py)")
    cli.api_flags(judge)
    judge.add_argument("--max-new-tokens", type=cli.count, default=2048, help="per judgement")
    judge.add_argument("--cases-at-once", type=cli.count, default=16, help="cases sent to the judge together")
    cli.renamed(judge, "--batch-size", "is now --cases-at-once (--batch-size counts contexts per step in train.py)")
    return ap


def main(argv=None):
    """perturb.py's command line: parse the subcommand and its flags, then run it."""
    ap = parser()
    args = ap.parse_args(argv)
    if args.cmd in ("tests", "augment"):
        cli.distinct(ap, **{"--problems": args.problems, "--out": args.out,
                            "--trajectories": getattr(args, "trajectories", None)})
    if args.cmd == "judge":
        cli.distinct(ap, **{"--cases": args.cases, "--out": args.out})
        cli.check_model_flags(ap, args)
    print(cli.settings_line("perturb.py", args), file=sys.stderr)
    {"tests": cmd_tests, "augment": cmd_augment, "analyze": cmd_analyze, "judge": cmd_judge}[args.cmd](args)


if __name__ == "__main__":
    main()
