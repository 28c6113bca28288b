"""The paper's TACO cleaning (§8).

    cleaned, dropped = clean_taco(load_problems("BAAI/TACO", split="train"))   # dropped: Counter of reasons
    python -m cobalt_min.taco_cleaning --input BAAI/TACO --problem-split train --out data/taco_train.jsonl \
        --dev-out data/taco_dev.jsonl
"""

import argparse
import collections
import dataclasses
import json
import random
import sys

from cobalt_min.cli import count, distinct, output_file, renamed
from cobalt_min.problems import PUBLIC_TESTS, Problem, load_problems, save_problems, split_tests
from cobalt_min.sandbox import run_batch


def _alnum_count(text: str) -> int:
    return sum(c.isalnum() for c in text)


def _input_size(x) -> int:
    return len(x) if isinstance(x, str) else len(json.dumps(x))


def clean_taco(problems: list[Problem], *, min_tests: int = 8, max_tests: int = 20, n_short: int = 5,
               public_count: int = PUBLIC_TESTS, max_solutions: int = 16, seed: int = 0, workers=None,
               progress: bool = True) -> tuple[list[Problem], collections.Counter]:
    """The authors' TACO cleaning (paper §8), each rule counted in the returned Counter:
    drop questions with < 100 alphanumeric characters or with images; keep >= min_tests tests; above
    max_tests keep the n_short shortest and (max_tests - n_short) longest inputs, in the authors' order
    (sorted by input length, longest first: the n_short shortest, then the longest); otherwise the
    source order; the first public_count tests are public, the rest hidden; keep a problem only if one
    of up to max_solutions reference solutions (shuffled, seeded) passes all of its tests in the sandbox.
    (The authors' script also checks up to 16 solutions but keeps a problem whichever way that goes;
    they started from likaixin/TACO-verified, whose problems are already checked. We start from
    BAAI/TACO, so the check decides.)"""
    dropped: collections.Counter = collections.Counter()
    rng = random.Random(seed)
    kept: list[Problem] = []
    for p in problems:
        if _alnum_count(p.question) < 100:
            dropped["question under 100 alphanumeric characters"] += 1
            continue
        if "image" in p.question.lower() or "\n![" in p.question:
            dropped["question with an image"] += 1
            continue
        tests = p.all_tests()
        n = len(tests["inputs"])
        if n < min_tests:
            dropped[f"fewer than {min_tests} tests"] += 1
            continue
        order = list(range(n))
        if n > max_tests:
            longest_first = sorted(order, key=lambda i: _input_size(tests["inputs"][i]), reverse=True)
            order = longest_first[-n_short:] + longest_first[:max_tests - n_short]
        chosen = dict(tests, inputs=[tests["inputs"][i] for i in order], outputs=[tests["outputs"][i] for i in order])
        public, hidden = split_tests(chosen, public_count)
        solutions = list(p.solutions)
        rng.shuffle(solutions)
        if not solutions:
            dropped["no reference solution"] += 1
            continue
        kept.append(dataclasses.replace(p, public_tests=public, hidden_tests=hidden, solutions=solutions[:max_solutions]))
    # Verify by execution: round r tries the r-th solution of every problem not verified yet.
    verified: dict[int, str] = {}
    for r in range(max_solutions):
        todo = [i for i, p in enumerate(kept) if i not in verified and r < len(p.solutions)]
        if not todo:
            break
        results = run_batch([(kept[i].solutions[r], kept[i].all_tests()) for i in todo], workers=workers,
                            progress=f"checking solutions (round {r + 1})" if progress else False)
        for i, res in zip(todo, results):
            if all(t.passed for t in res):
                verified[i] = kept[i].solutions[r]
    out = []
    for i, p in enumerate(kept):
        if i in verified:
            out.append(dataclasses.replace(p, solutions=[verified[i]] + [s for s in p.solutions if s != verified[i]]))
        else:
            dropped["no reference solution passes all tests"] += 1
    return out, dropped


def cmd_clean(args):
    """The paper's TACO cleaning (taco_cleaning.clean_taco), then an optional dev split, written as our JSONL."""
    problems = load_problems(args.input, split=args.problem_split, limit=args.limit, format="taco"
                             if args.input == "BAAI/TACO" else None)
    cleaned, dropped = clean_taco(problems, min_tests=args.min_tests, max_tests=args.max_tests,
                                  public_count=args.public, max_solutions=args.max_solutions, seed=args.seed,
                                  workers=args.workers)
    print(f"{len(problems)} problems in, {len(cleaned)} kept", file=sys.stderr)
    for reason, n in dropped.most_common():
        print(f"  dropped {n}: {reason}", file=sys.stderr)
    if args.dev_out:
        rng = random.Random(args.seed)
        idx = set(rng.sample(range(len(cleaned)), min(args.dev_size, len(cleaned))))
        save_problems([p for i, p in enumerate(cleaned) if i in idx], args.dev_out)
        cleaned = [p for i, p in enumerate(cleaned) if i not in idx]
        print(f"wrote {len(idx)} dev problems to {args.dev_out}", file=sys.stderr)
    save_problems(cleaned, args.out)
    print(f"wrote {len(cleaned)} problems to {args.out}", file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cobalt_min.taco_cleaning",
                                 description="Clean TACO as the paper does (§8) and write our JSONL.")
    ap.add_argument("--input", required=True, help="TACO source: BAAI/TACO, a folder of .arrow shards, or rows")
    ap.add_argument("--problem-split", default=None, help="split of the source to read (train or test)")
    renamed(ap, "--split", "is now --problem-split, as in every script")
    ap.add_argument("--out", type=output_file, required=True, help="output JSONL (the training set)")
    ap.add_argument("--dev-out", type=output_file, default=None, help="also write a dev split here (as TACO-Dev)")
    ap.add_argument("--dev-size", type=count, default=250, help="problems in the dev split (default 250)")
    ap.add_argument("--min-tests", type=count, default=8, help="drop problems with fewer tests (default 8)")
    ap.add_argument("--max-tests", type=count, default=20, help="keep at most this many tests (default 20)")
    ap.add_argument("--public", type=count, default=PUBLIC_TESTS, help="public tests per problem (default 4)")
    ap.add_argument("--max-solutions", type=count, default=16, help="reference solutions tried (default 16)")
    ap.add_argument("--limit", type=count, default=None, help="read at most this many problems")
    ap.add_argument("--workers", type=count, default=None, help="sandbox workers (default: one per CPU)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    distinct(ap, **{"--input": args.input, "--out": args.out, "--dev-out": args.dev_out})
    cmd_clean(args)


if __name__ == "__main__":
    main()
