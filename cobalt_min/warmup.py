"""The repair warm-up of the self-repair demo, make demo-repair (not in the paper, see docs/departures.md).
Demonstrations of a failing program repaired after its feedback, for supervised fine-tuning before COBALT
(train.py --method sft --demonstrations FILE).

Why: GRPO reinforces what the policy already does now and then; it cannot create a behaviour whose
probability is zero. The paper's starting models repair somewhat from the start (their Pass@1 rises over
the first feedback turns); SmolLM2-135M-Instruct never does (bench/RESULTS.md, "Self-repair at 135M"). A
short supervised warm-up on repairs gives the demo the paper's starting point: a model that repairs
sometimes. What COBALT then adds is measured against this warm-up model, not against the base model.

A demonstration, from a warm-up problem (never a problem COBALT trains on or is evaluated on):

    [system, user: the problem, assistant: a failing first attempt, user: its real feedback, assistant: TARGET]

Warm-up problems: random variants of the repair family's templates (make_demo.warmup_problems: the same
statements, the open detail drawn at random, none equal to a problem of the family), so that the model learns
to take the detail from the feedback, not to remember answers. Failing attempts: a wrong first guess
(make_demo.guess_of), and optionally the model's own first attempts (turn 0 of the conversations of an
evaluate.py or collect.py run on these problems: the model's distribution, not ours) that fail a public test.
The feedback is the project's own message from the sandbox's verdict (prompts.feedback_message), as in every
conversation. The target is the problem's reference solution in one code block (--target code), or after one
sentence that quotes the output the failing test expected (--target quote). The loss is on the target only.

    python -m cobalt_min.data.make_demo --warmup-problems 300 --out runs/warmup_problems.jsonl
    python -m cobalt_min.warmup --problems runs/warmup_problems.jsonl --target quote --out runs/demonstrations.jsonl
    python train.py --method sft --model smollm2 --demonstrations runs/demonstrations.jsonl --out runs/warmup
"""

import argparse
import collections
import json
import random
from pathlib import Path

from cobalt_min import cli
from cobalt_min.jsonl import read_jsonl, write_jsonl
from cobalt_min.problems import problem_flags, problems_of
from cobalt_min.prompts import ALL_PUBLIC_PASSED, NO_CODE, feedback_message, first_turn_messages, history_text
from cobalt_min.sandbox import run_batch

TARGETS = ("code", "quote")


def shows_a_failing_test(feedback: str) -> bool:
    """Whether a feedback message shows a failing public test (not: all passed, or no code block)."""
    return ALL_PUBLIC_PASSED not in feedback and NO_CODE not in feedback


def expected_output(feedback: str) -> str | None:
    """The expected output the feedback shows (the first failing public test's), or None."""
    marker = "Expected output:\n"
    if marker not in feedback:
        return None
    return feedback.split(marker, 1)[1].split("\n", 1)[0]


def target_text(problem, feedback: str, style: str) -> str:
    """The demonstration's answer: the reference solution in one code block, after one sentence (quote)
    that names the output the failing test expected, when the feedback shows one."""
    code = f"```python\n{problem.solutions[0].rstrip()}\n```"
    expected = expected_output(feedback)
    if style == "quote" and expected is not None:
        return f"The test expected {expected}, so the program must return exactly that.\n{code}"
    return code


def own_attempts(records: list, problem_id: str) -> list[tuple[str, str]]:
    """(response, feedback) of each distinct failing first attempt of `problem_id` in evaluate.py / collect.py
    records whose feedback shows a failing public test."""
    out, seen = [], set()
    for rec in records:
        if rec["problem_id"] != problem_id:
            continue
        for sample in rec["samples"]:
            first = sample["turns"][0] if sample["turns"] else None
            if first is None or first.get("infra_error") or first["program"] is None or first["pass_rate"] >= 1.0:
                continue
            if shows_a_failing_test(first["feedback"]) and first["program"] not in seen:
                seen.add(first["program"])
                out.append((first["response"], first["feedback"]))
    return out


def guess_attempts(problems: list, guess_of, grader=None) -> dict:
    """{problem id: [(response, feedback)]} for the hand-written wrong guesses (guess_of(problem id): the body
    of the starter's function, or None; make_demo.guess_of), each run on the public tests for its real feedback."""
    jobs = [(p, f"{p.starter_code}    {guess_of(p.id)}\n") for p in problems if guess_of(p.id)]
    results = run_batch([(program, p.public_tests) for p, program in jobs], grader=grader, progress=False)
    out = collections.defaultdict(list)
    for (p, program), verdicts in zip(jobs, results):
        message = feedback_message(verdicts, p.public_tests)["content"]
        if shows_a_failing_test(message):
            out[p.id].append((f"```python\n{program}```", message))
    return out


def repair_demonstrations(problems: list, records: list, guess_of, *, style: str = "code",
                          per_problem: int = 4, seed: int = 0) -> list[dict]:
    """The demonstrations of every problem with a reference solution: up to `per_problem` failing attempts
    (its hand-written guess first, then the model's own, at random), each followed by its feedback and the
    target (target_text)."""
    hand = guess_attempts(problems, guess_of)
    rng = random.Random(seed)
    demos = []
    for p in problems:
        if not p.solutions:
            continue
        own = own_attempts(records, p.id)
        rng.shuffle(own)
        attempts = [("guess", *a) for a in hand.get(p.id, [])] + [("own", *a) for a in own]
        for source, response, feedback in attempts[:per_problem]:
            messages = first_turn_messages(p.question, p.starter_code, p.fn_name) + [
                {"role": "assistant", "content": history_text(response, False)}, {"role": "user", "content": feedback},
                {"role": "assistant", "content": target_text(p, feedback, style)}]
            demos.append({"problem_id": p.id, "attempt": source, "messages": messages})
    rng.shuffle(demos)
    return demos


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=cli.HelpFormatter)
    problem_flags(ap, required=True, what="the warm-up problems (each with a reference solution)")
    ap.add_argument("--attempts", default=None,
                    help="an evaluate.py or collect.py run on these problems: its first attempts that fail")
    ap.add_argument("--no-guesses", action="store_true", help="leave out the hand-written wrong guesses")
    ap.add_argument("--target", default="code", choices=TARGETS,
                    help="code: the reference solution only; quote: one sentence naming the expected output first")
    ap.add_argument("--per-problem", type=cli.count, default=4, help="failing attempts per problem at most")
    ap.add_argument("--seed", type=int, default=0, help="which own attempts are kept, and the order")
    ap.add_argument("--out", type=cli.output_file, required=True, help="the demonstrations (JSONL)")
    args = ap.parse_args(argv)
    problems = problems_of(args)
    records = []
    if args.attempts:
        name = "trajectories.jsonl" if (Path(args.attempts) / "trajectories.jsonl").exists() else "raw.jsonl"
        path = Path(args.attempts) / name if Path(args.attempts).is_dir() else Path(args.attempts)
        if not path.exists():
            raise SystemExit(f"error: {args.attempts} holds no trajectories.jsonl or raw.jsonl")
        records = read_jsonl(path)
    from cobalt_min.data.make_demo import guess_of
    demos = repair_demonstrations(problems, records, (lambda pid: None) if args.no_guesses else guess_of,
                                  style=args.target, per_problem=args.per_problem, seed=args.seed)
    if not demos:
        raise SystemExit("error: no demonstration: no failing attempt with feedback (pass --attempts, or problems "
                         "with hand-written guesses) or no reference solution")
    write_jsonl(args.out, demos)
    kinds = collections.Counter(d["attempt"] for d in demos)
    print(f"wrote {len(demos)} demonstrations of {len({d['problem_id'] for d in demos})} problems to {args.out} "
          f"({json.dumps(dict(kinds))})")


if __name__ == "__main__":
    main()
