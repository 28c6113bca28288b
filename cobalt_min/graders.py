"""Grader profiles: the verdict rules of the two graders whose numbers cobalt-min reproduces.

    grader = graders.get("authors")                       # the reward the paper trains on (the default)
    grader = graders.get("livecodebench", timeout_s=6.0)  # LiveCodeBench's leaderboard
    results = sandbox.run_batch(jobs, grader=grader)

Every program runs in cobalt-min's sandbox whatever the profile; a profile says what the program finds
around it (names defined, functions taken away, limits), which endings count, and how its output is
compared. Both references were read in their sources and run on a corpus of edge cases
(tests/data/grader_corpus.json, tests/test_graders.py; bench/reference_graders.py runs the references).

authors: OSU-NLP-Group/cobalt, verl/remote_reward_server.py, the reward of the paper's training and the
grader of its evaluations. Every problem is stdin -> stdout there (their data turns call-based tests into
text). Per test: `python3 -S` (no site-packages: numpy is not importable) on a file that is their guard
followed by the program, so that `from __future__` in the program is a SyntaxError; the guard sets
`exit` and `quit` to None and takes functions of os away; 4 s per test, a program's tests together
within 27 s (4 at a time); passed = exit status 0 and stdout.strip() == expected.strip(), stdout read in
text mode (so "\r\n" and "\r" arrive as "\n"), nothing capped.

livecodebench: LiveCodeBench's lcb_runner (testing_util.run_test under
compute_code_generation_metrics.check_correctness), 6 s per test by default, a program's tests together
within (6 + 1) x tests + 5 s. The program runs in the grader's process after an import prelude (the
names of string, re, datetime, collections, heapq, bisect, copy, math, random, statistics, itertools,
functools, operator, io, sys, json, builtins and typing, then those modules themselves) with the
recursion limit at 50000 and integers up to 50000 digits; `quit` is None, `exit()` and any SystemExit
of a stdin program end it normally (its output counts). Stdout is compared line by line, each line and
the whole stripped, lines equal as text or as lists of Decimal numbers (3.0 = 3 = +3 = 003); a
function's return value with == (True == 1, 3.0 == 3), a returned tuple as a list.

Departures (docs/departures.md has the full list): where a reference's own harness fails programs
that are correct, the profile judges as a plain `python3` process would (LiveCodeBench: iterating over
sys.stdin, sys.stdout.buffer, os.write(1), open(0), `global` in a top-level function, a Solution()
reused across tests, nested tuples; the authors: none found); memory is 1 GiB per process in both
(LiveCodeBench sets none); output is capped at Limits.output_bytes (16 MiB; neither reference caps it);
shutil's and subprocess's functions stay usable (both references set a few to None); every test runs
(LiveCodeBench stops at the first failing one: Pass@1 is the same). Call-based tests, which the authors
never run, are judged under "authors" by cobalt-min's own rule: the returned value as JSON, equal in
type and value (an int is not a bool, 3.0 is not 3), a tuple as a list.
"""

import dataclasses
import decimal
import math
from typing import Callable

from cobalt_min.cli import positive


def authors_stdout_matches(got: str, expected: str) -> bool:
    """The authors' rule: stdout.strip() == expected.strip(), with stdout as a text-mode pipe delivers
    it ("\\r\\n" and "\\r" become "\\n"); the expected output as the data holds it."""
    return got.replace("\r\n", "\n").replace("\r", "\n").strip() == expected.strip()


def _decimals(line: str):
    try:
        return [decimal.Decimal(token) for token in line.split()]
    except (decimal.InvalidOperation, ValueError):
        return None


def livecodebench_stdout_matches(got: str, expected: str) -> bool:
    """LiveCodeBench's rule: both stripped and cut at "\\n", each line stripped; as many lines; each pair
    equal as text, or both lines lists of Decimal numbers that are equal (so 3.0, +3 and 003 are 3)."""
    got_lines = [line.strip() for line in got.strip().split("\n")]
    expected_lines = [line.strip() for line in expected.strip().split("\n")]
    if len(got_lines) != len(expected_lines):
        return False
    for a, b in zip(got_lines, expected_lines):
        if a != b:
            x, y = _decimals(a), _decimals(b)
            if x is None or y is None or x != y:
                return False
    return True


def _strict_equal(got, expected) -> bool:
    if isinstance(got, bool) or isinstance(expected, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(got, float) and not math.isfinite(got) or isinstance(expected, float) and not math.isfinite(expected):
        return False  # inf (a number too large for JSON's floats) or nan: never a match
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(_strict_equal(g, e) for g, e in zip(got, expected))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(_strict_equal(got[k], expected[k]) for k in got)
    return type(got) is type(expected) and got == expected


def strict_value_matches(got, expected, taco_wrapped: bool = False) -> bool:
    """cobalt-min's rule for call-based tests (no reference runs them for the authors): the returned
    value (a JSON value: a tuple arrives as a list) equal to the expected one in type and value (an int
    is not a bool, 3.0 is not 3, nan and inf never match). With taco_wrapped (TACO data only), an
    expected one-element list also accepts its element, as TACO's checker does."""
    try:
        if _strict_equal(got, expected):
            return True
        return taco_wrapped and isinstance(expected, list) and len(expected) == 1 and _strict_equal(got, expected[0])
    except RecursionError:  # nested deeper than the grader compares
        return False


def livecodebench_value_matches(got, expected, taco_wrapped: bool = False) -> bool:
    """LiveCodeBench's rule: prediction == expected in Python (True == 1, 3.0 == 3), a returned tuple
    compared as a list (the sandbox returns JSON values: nested tuples are lists too, a departure)."""
    try:
        return got == expected or (taco_wrapped and isinstance(expected, list) and len(expected) == 1
                                    and got == expected[0])
    except RecursionError:
        return False


def authors_budget_s(n_tests: int, limits) -> float:  # limits: sandbox.Limits
    """Their 27 s for a program's tests, 4 at a time; here one after another: 27 s x min(4, tests)."""
    return limits.total_timeout_s * min(limits.budget_tests, n_tests)


def livecodebench_budget_s(n_tests: int, limits) -> float:  # limits: sandbox.Limits
    """check_correctness's global timeout: (timeout + 1) x tests + 5 s."""
    return (limits.timeout_s + 1) * n_tests + 5


@dataclasses.dataclass(frozen=True)
class Grader:
    """One reference's rules. `run` is what the sandbox's runner does around every program of it
    (sandbox/runner.py's grader_setup reads it); the rest is decided in the grader's process.
    budget_s: the seconds a program's tests may take together (one that runs out fails every test)."""
    name: str
    timeout_s: float  # per test
    stdout_matches: Callable[[str, str], bool]
    value_matches: Callable  # (returned JSON value, expected, taco_wrapped) -> bool
    budget_s: Callable  # (tests, sandbox.Limits) -> seconds a program's tests may take together
    run: dict = dataclasses.field(default_factory=dict)


# What each reference's process does before the program (the runner applies it in each test child):
# none_builtins: builtins set to None; guard: functions of os set to None and modules made unimportable
# (sandbox/runner.py's REFERENCE_GUARD); site_packages: whether installed packages are importable; prelude: the
# import prelude's names defined; recursion_limit, int_max_str_digits; swallow_exit: a SystemExit ends a
# stdin program normally; future_imports: whether `from __future__` may start the program (in both
# references something is put before it); exact_numbers: returned numpy scalars, Decimal and Fraction
# values travel as the equal JSON number.
AUTHORS = Grader(
    name="authors", timeout_s=4.0, stdout_matches=authors_stdout_matches, value_matches=strict_value_matches,
    budget_s=authors_budget_s,
    run={"none_builtins": ["exit", "quit"], "guard": True, "site_packages": False, "prelude": False,
         "recursion_limit": None, "int_max_str_digits": None, "swallow_exit": False, "future_imports": False,
         "exact_numbers": False})
LIVECODEBENCH = Grader(
    name="livecodebench", timeout_s=6.0, stdout_matches=livecodebench_stdout_matches,
    value_matches=livecodebench_value_matches, budget_s=livecodebench_budget_s,
    run={"none_builtins": ["quit", "help"], "guard": True, "site_packages": True, "prelude": True,
         "recursion_limit": 50000, "int_max_str_digits": 50000, "swallow_exit": True, "future_imports": False,
         "exact_numbers": True})
GRADERS = {grader.name: grader for grader in (AUTHORS, LIVECODEBENCH)}  # the choices of the scripts' --grader
DEFAULT = "authors"
# A plain `python3` process (nothing a reference adds: no guard, prelude or limits of theirs), with the authors'
# comparison. For the sandbox's own tests: what they probe is the sandbox, and a reference's guard (functions
# of os set to None) is no defence anyway: a program reaches them through `posix` or ctypes.
PYTHON = dataclasses.replace(AUTHORS, name="python", run={})


def get(grader: "str | Grader | None" = None, timeout_s: float | None = None) -> Grader:
    """The profile called `grader` (a Grader is returned as it is; None: the default), with its own time
    limit per test unless timeout_s is given."""
    if not isinstance(grader, Grader):
        name = grader or DEFAULT
        if name not in GRADERS and name != PYTHON.name:
            raise ValueError(f"unknown grader {name!r}: one of {', '.join(GRADERS)}")
        grader = GRADERS.get(name, PYTHON)
    return grader if timeout_s is None else dataclasses.replace(grader, timeout_s=timeout_s)


def grader_flags(group) -> None:
    """--grader and --timeout, the same flags in every script that runs programs."""
    group.add_argument("--grader", choices=list(GRADERS), default=DEFAULT,
                       help="whose verdict rules judge programs: the authors' (the paper's reward and tables) or "
                            "LiveCodeBench's (its leaderboard); docs/departures.md lists where each differs")
    group.add_argument("--timeout", type=positive, default=None,
                       help="seconds per test (default: the grader's: 4 for the authors, 6 for LiveCodeBench)")


def grader_of(args) -> Grader:
    """The Grader the flags of grader_flags ask for."""
    return get(args.grader, args.timeout)
