"""The paper's TACO cleaning (§8): `python -m cobalt_min.problems clean --input BAAI/TACO ...` runs it.

    cleaned, dropped = clean_taco(load_problems("BAAI/TACO", split="train"))   # dropped: Counter of reasons
"""

import collections
import dataclasses
import json
import random

from cobalt_min.problems import PUBLIC_TESTS, Problem, split_tests


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
    from cobalt_min.sandbox import run_batch
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
