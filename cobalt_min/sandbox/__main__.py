"""python -m cobalt_min.sandbox PROGRAM.py TESTS.json: judge one program in the sandbox, print JSON."""

import argparse
import json
from pathlib import Path

from cobalt_min import cli, graders
from cobalt_min.sandbox.isolation import ISOLATIONS
from cobalt_min.sandbox.types import SandboxError
from cobalt_min.sandbox.verdicts import check_tests, pass_rate, run_tests


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m cobalt_min.sandbox",
        description="Run PROGRAM.py on the tests in TESTS.json (TACO input_output format) inside the sandbox "
                    "and print one JSON object: passed, pass_rate, results. Exits 0 whatever the verdicts.")
    parser.add_argument("program", help="the Python program to judge")
    parser.add_argument("tests", help='JSON file: {"inputs": [...], "outputs": [...], "fn_name"?: str}')
    parser.add_argument("--grader", choices=list(graders.GRADERS), default=graders.DEFAULT,
                        help="whose verdict rules: the authors' (the paper's reward) or LiveCodeBench's (its "
                             "leaderboard); see cobalt_min/graders.py (default authors)")
    parser.add_argument("--timeout", type=cli.positive, default=None,
                        help="seconds per test (default: the grader's, 4 for the authors, 6 for LiveCodeBench)")
    parser.add_argument("--memory-mb", type=cli.count, default=1024,
                        help="memory per test: per process, and for all of a test's processes where cgroups are "
                             "usable (default 1024)")
    parser.add_argument("--total-timeout", type=cli.positive, default=27.0,
                        help="the authors' grader: a program's budget for all its tests is this many seconds times "
                             "min(4, tests); one that runs out fails every test (default 27: the authors' 27 s with 4 "
                             "tests at a time)")
    parser.add_argument("--isolation", choices=ISOLATIONS, default="auto",
                        help="auto: bwrap when it works here, else process as root (namespaces the sandbox makes "
                             "itself); unsafe runs programs without isolation, for trusted programs only "
                             "(default auto)")
    args = parser.parse_args(argv)
    try:
        program = Path(args.program).read_text()
    except (OSError, UnicodeDecodeError) as e:
        parser.exit(2, f"error: cannot read program {args.program}: {e}\n")
    try:
        tests = json.loads(Path(args.tests).read_text())
        check_tests(tests)
        if not tests["inputs"]:
            raise ValueError("it holds no tests")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        parser.exit(2, f"error: {args.tests} is not a usable tests file: {e}\n")
    try:
        results = run_tests(program, tests, grader=args.grader, timeout_s=args.timeout, memory_mb=args.memory_mb,
                            total_timeout_s=args.total_timeout, isolation=args.isolation)
    except SandboxError as e:
        parser.exit(3, f"error: {e}\n")
    print(json.dumps({
        "passed": [r.passed for r in results],
        "pass_rate": pass_rate(results),
        "results": [{"status": r.status, "time_s": round(r.time_s, 4), "stdout": r.stdout, "stderr": r.stderr}
                    for r in results],
    }))


if __name__ == "__main__":
    main()
