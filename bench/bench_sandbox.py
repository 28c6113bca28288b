"""Sandbox throughput: run_batch vs a naive runner that starts a fresh `python3` per test.

    python bench/bench_sandbox.py                 # 120 programs x 20 tests, 2 workers
    python bench/bench_sandbox.py --programs 300 --workers 8 --isolation process
    python bench/bench_sandbox.py --against ../other-checkout --rounds 10   # this checkout's sandbox vs another's

Both runners judge the same programs (small competitive-programming solutions, a third of them wrong)
side by side in one run, with the same number of concurrent workers. Printed: tests/s of each, the
ratio, whether the verdicts agree, and the median per-test overhead of the sandbox above the
program's own run time (own time = the same program exec'd in this process, no sandbox; overhead =
sandbox wall time per test, one worker, minus that). Targets on a 2-core machine: ratio >= 10x,
identical verdicts, median overhead < 2 ms.

Also printed, for scale: two ceilings that no fork-per-test sandbox can pass on this machine, measured
in the same run with the same workers. Each is a bare loop in a fresh `python -I -S` that forks per
test, execs the program and keeps its stdout (no isolation, limits, timeout or reports): once with
nothing preloaded, once holding the modules the sandbox runner holds (json for call-based results,
traceback for error messages, ctypes, the common competitive-programming modules). And what a
forked child pays for each memory page it writes (copy-on-write), which bounds all of the above.

--against DIR compares two versions of the sandbox instead: run_batch of this checkout and of the
checkout in DIR on the same jobs, each in a fresh process, alternating over --rounds rounds; printed:
tests/s of each per round, the median ratio (this / other) with its range, and whether all verdicts
agree.
"""
import argparse
import concurrent.futures
import contextlib
import io
import json
import marshal
import mmap
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
from cobalt_min.graders import authors_stdout_matches as stdout_matches  # noqa: E402
from cobalt_min.sandbox import ISOLATIONS, Limits, Sandbox, default_workers, resolve_isolation, run_batch  # noqa

# (name, correct program, wrong program, input generator, reference answer)
TASKS = [
    ("sum", "a, b = map(int, input().split())\nprint(a + b)\n",
     "a, b = map(int, input().split())\nprint(a + b + (a > 900))\n",
     lambda r: f"{r.randint(0, 1000)} {r.randint(0, 1000)}\n", lambda s: f"{sum(map(int, s.split()))}\n"),
    ("sort", "import sys\nn, *xs = map(int, sys.stdin.read().split())\nprint(*sorted(xs))\n",
     "import sys\nn, *xs = map(int, sys.stdin.read().split())\nprint(*sorted(xs)[:-1] if n > 8 else sorted(xs))\n",
     lambda r: (lambda xs: f"{len(xs)}\n{' '.join(map(str, xs))}\n")([r.randint(-99, 99) for _ in range(r.randint(1, 12))]),
     lambda s: " ".join(map(str, sorted(map(int, s.split()[1:])))) + "\n"),
    ("words", "s = input()\nprint(len(s.split()))\n", "s = input()\nprint(s.count(' '))\n",
     lambda r: " ".join("ab"[:r.randint(1, 2)] for _ in range(r.randint(1, 9))) + ("  \n" if r.random() < .5 else "\n"),
     lambda s: f"{len(s.split())}\n"),
    ("fib", "n = int(input())\na, b = 0, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)\n",
     "n = int(input())\na, b = 0, 1\nfor _ in range(n - 1):\n    a, b = b, a + b\nprint(a)\n",
     lambda r: f"{r.randint(0, 300)}\n", lambda s: f"{_fib(int(s))}\n"),
    ("primes", "n = int(input())\ns = [1] * (n + 1)\ns[:2] = [0, 0][:n + 1]\nfor i in range(2, int(n ** .5) + 1):\n"
     "    if s[i]:\n        s[i * i::i] = [0] * len(s[i * i::i])\nprint(sum(s))\n",
     "n = int(input())\nprint(sum(all(k % d for d in range(2, k)) for k in range(2, n)))\n",
     lambda r: f"{r.randint(0, 2000)}\n", lambda s: f"{_pi(int(s))}\n"),
    ("reverse", "import sys\nfor line in sys.stdin:\n    print(line.rstrip('\\n')[::-1])\n",
     "print(input()[::-1])\n",
     lambda r: "".join("".join(r.choice("abc") for _ in range(r.randint(1, 6))) + "\n" for _ in range(r.randint(1, 3))),
     lambda s: "".join(line[::-1] + "\n" for line in s.splitlines())),
]


def _fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _pi(n):
    return sum(1 for k in range(2, n + 1) if all(k % d for d in range(2, int(k ** .5) + 1)))


def make_jobs(n_programs, n_tests, seed=0):
    rng = random.Random(seed)
    jobs = []
    for i in range(n_programs):
        name, good, bad, gen, ref = TASKS[i % len(TASKS)]
        inputs = [gen(rng) for _ in range(n_tests)]
        program = bad if i % 3 == 2 else good
        jobs.append((program, {"inputs": inputs, "outputs": [ref(x) for x in inputs]}))
    return jobs


def naive_judge(program_path, tests, timeout_s):
    """The common harness: one fresh interpreter per test, subprocess.run with input and timeout."""
    verdicts = []
    for x, y in zip(tests["inputs"], tests["outputs"]):
        try:
            p = subprocess.run([sys.executable, program_path], input=x, capture_output=True, text=True,
                               timeout=timeout_s)
            verdicts.append(p.returncode == 0 and stdout_matches(p.stdout, y))
        except subprocess.TimeoutExpired:
            verdicts.append(False)
    return verdicts


# The ceiling of any fork-per-test design, run by `python -I -S -c PREAMBLE + BARE_FORK_LOOP`: fork
# per test, exec the program, keep its stdout. No isolation, no limits, no timeout, no reports. Reads
# marshal'd [(program, inputs), ...] on stdin, writes (exit status, stdout) per test.
BARE_FORK_LOOP = """
import io, marshal, os, sys
jobs = marshal.load(sys.stdin.buffer)
streams = (io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8"),
           io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8"))
results = []
for program, inputs in jobs:
    code = compile(program, "solution.py", "exec")
    for x in inputs:
        stdin, stdout = os.memfd_create("stdin"), os.memfd_create("stdout")
        os.write(stdin, x.encode())
        os.lseek(stdin, 0, os.SEEK_SET)
        pid = os.fork()
        if pid == 0:
            os.dup2(stdin, 0)
            os.dup2(stdout, 1)
            sys.stdin, sys.stdout = streams
            exec(code, {"__name__": "__main__"})
            sys.stdout.flush()
            os._exit(0)
        status = os.waitpid(pid, 0)[1]
        results.append((status, os.pread(stdout, os.fstat(stdout).st_size, 0).decode()))
        os.close(stdin)
        os.close(stdout)
marshal.dump(results, sys.stdout.buffer)
"""


# Makes the bare loop's process hold the same modules as the sandbox runner: it runs the runner's two files as
# the sandbox does (jail.py, then runner.py, in one namespace), all but the runner's main().
RUNNER_MODULES = (f"import pathlib\nfolder = pathlib.Path({ROOT!r}) / 'cobalt_min' / 'sandbox'\n"
                  "runner = {'__name__': '__main__'}\n"
                  "exec(compile((folder / 'jail.py').read_text(), 'jail.py', 'exec'), runner)\n"
                  "exec(compile((folder / 'runner.py').read_text()"
                  ".replace('\\nif __name__ == \"__main__\":\\n    main()', ''), 'runner.py', 'exec'), runner)\n")


def bare_fork_batch(jobs, workers, preamble=""):
    """Judge jobs with `workers` bare fork loops side by side; (verdicts per job, seconds)."""
    procs = [subprocess.Popen([sys.executable, "-I", "-S", "-c", preamble + BARE_FORK_LOOP], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE) for _ in range(workers)]
    time.sleep(0.5)  # interpreter start-up is not part of the per-test cost
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        outs = list(pool.map(lambda w: procs[w].communicate(marshal.dumps(
            [(p, t["inputs"]) for p, t in jobs[w::workers]]))[0], range(workers)))
    seconds = time.perf_counter() - start
    flat = {w: iter(marshal.loads(out)) for w, out in enumerate(outs)}
    verdicts = []
    for i, (_, tests) in enumerate(jobs):
        runs = [next(flat[i % workers]) for _ in tests["inputs"]]
        verdicts.append([status == 0 and stdout_matches(out, y) for (status, out), y in zip(runs, tests["outputs"])])
    return verdicts, seconds


def cow_page_cost_us(pages=400, rounds=200):
    """Microseconds a forked child pays for each page it writes (copy-on-write), measured here: fork
    and exit with and without writing one byte to each of `pages` pages the parent had written."""
    buf = mmap.mmap(-1, pages * 4096)
    buf.write(b"x" * len(buf))

    def per_fork(n):
        start = time.perf_counter()
        for _ in range(rounds):
            pid = os.fork()
            if pid == 0:
                for i in range(0, n * 4096, 4096):
                    buf[i] = 1
                os._exit(0)
            os.waitpid(pid, 0)
        return (time.perf_counter() - start) / rounds

    base = min(per_fork(0) for _ in range(3))
    return (min(per_fork(pages) for _ in range(3)) - base) / pages * 1e6


def own_time_per_test(program, tests, repeat=3):
    """The program's own run time per test: exec'd in this process with redirected stdin/stdout."""
    code = compile(program, "solution.py", "exec")
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for x in tests["inputs"]:
            old_stdin = sys.stdin
            sys.stdin = io.StringIO(x)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(code, {"__name__": "__main__"})
            finally:
                sys.stdin = old_stdin
        best = min(best, (time.perf_counter() - start) / len(tests["inputs"]))
    return best


# Judges the jobs in a JSON file with one checkout's run_batch; prints {"seconds", "passed"} as JSON.
RUN_BATCH = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
from cobalt_min.sandbox import run_batch
jobs = json.load(open(sys.argv[2]))
run_batch(jobs[:4], workers=int(sys.argv[3]), isolation=sys.argv[4])  # start-up, once
start = time.perf_counter()
results = run_batch(jobs, workers=int(sys.argv[3]), isolation=sys.argv[4])
print(json.dumps({"seconds": time.perf_counter() - start, "passed": [[r.passed for r in res] for res in results]}))
"""


def against(other: str, jobs, workers, isolation, rounds):
    """This checkout's run_batch against the one in `other`, alternating, each round in fresh processes."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(jobs, f)
        f.flush()
        n_tests = sum(len(t["inputs"]) for _, t in jobs)
        rates, verdicts = {ROOT: [], other: []}, {}
        for r in range(rounds):
            for side in (ROOT, other) if r % 2 == 0 else (other, ROOT):
                out = subprocess.run([sys.executable, "-c", RUN_BATCH, os.path.abspath(side), f.name, str(workers),
                                      isolation], capture_output=True, text=True, check=True).stdout
                result = json.loads(out)
                rates[side].append(n_tests / result["seconds"])
                verdicts.setdefault(side, result["passed"])
                agree = result["passed"] == verdicts[side]
                if not agree:
                    verdicts[side] = None
        ratios = [a / b for a, b in zip(rates[ROOT], rates[other])]
        print(f"{len(jobs)} programs, {n_tests} tests, {workers} workers, isolation={isolation}, {rounds} alternating rounds")
        for name, side in (("this", ROOT), ("other", other)):
            print(f"{name:5s} ({side}): tests/s " + ", ".join(f"{x:.0f}" for x in rates[side])
                  + f"; median {statistics.median(rates[side]):.0f}")
        print(f"ratio this/other: median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f})")
        same = verdicts[ROOT] is not None and verdicts[ROOT] == verdicts[other]
        print(f"verdicts  : {'identical' if same else 'DIFFERENT'}")
        return same


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", type=int, default=120, help="number of programs (default 120)")
    ap.add_argument("--tests", type=int, default=20, help="tests per program (default 20)")
    ap.add_argument("--workers", type=int, default=None, help="concurrent workers for both runners (default: CPUs)")
    ap.add_argument("--isolation", default="auto", choices=ISOLATIONS)
    ap.add_argument("--overhead-programs", type=int, default=30, help="programs used for the overhead figure")
    ap.add_argument("--against", default=None, help="another checkout of cobalt-min: compare its sandbox with this one")
    ap.add_argument("--rounds", type=int, default=10, help="with --against: alternating rounds (default 10)")
    args = ap.parse_args()
    workers = args.workers or default_workers()
    isolation = resolve_isolation(args.isolation)
    if args.against:
        sys.exit(0 if against(args.against, make_jobs(args.programs, args.tests), workers, isolation, args.rounds) else 1)
    page_us = cow_page_cost_us()  # first, while this process has no threads
    jobs = make_jobs(args.programs, args.tests)
    n_tests = sum(len(t["inputs"]) for _, t in jobs)
    print(f"{args.programs} programs x {args.tests} tests = {n_tests} tests, {workers} workers, isolation={isolation}")

    start = time.perf_counter()
    ours = run_batch(jobs, workers=workers, isolation=isolation, progress="run_batch")
    t_ours = time.perf_counter() - start

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, (program, _) in enumerate(jobs):
            paths.append(os.path.join(tmp, f"p{i}.py"))
            with open(paths[-1], "w") as f:
                f.write(program)
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            naive = list(pool.map(lambda i: naive_judge(paths[i], jobs[i][1], 4.0), range(len(jobs))))
        t_naive = time.perf_counter() - start

    bare, t_bare = bare_fork_batch(jobs, workers)
    bare_mods, t_bare_mods = bare_fork_batch(jobs, workers, RUNNER_MODULES)

    agree = all([r.passed for r in res] == v == b == c for res, v, b, c in zip(ours, naive, bare, bare_mods))
    n_pass = sum(r.passed for res in ours for r in res)

    # Per-test overhead, one worker: sandbox wall time per test minus the program's own time per test.
    overheads = []
    with Sandbox(Limits(), isolation) as sb:
        sb.run(*jobs[0])  # start-up excluded: it is paid once per worker, not per test
        for program, tests in jobs[:args.overhead_programs]:
            start = time.perf_counter()
            sb.run(program, tests)
            per_test = (time.perf_counter() - start) / len(tests["inputs"])
            overheads.append(per_test - own_time_per_test(program, tests))
    median_ms = 1000 * statistics.median(overheads)

    ratio = t_naive / t_ours
    print(f"tests passed: {n_pass}/{n_tests}")
    print(f"run_batch : {n_tests / t_ours:9.1f} tests/s  ({t_ours:.2f} s)")
    print(f"naive     : {n_tests / t_naive:9.1f} tests/s  ({t_naive:.2f} s)")
    print(f"speed-up  : {ratio:9.1f}x   (target >= 10x)   {'OK' if ratio >= 10 else 'BELOW TARGET'}")
    print("ceilings of fork-per-test (a loop that forks per test and execs the program; no sandbox at all):")
    print(f"  nothing preloaded            : {n_tests / t_bare:7.1f} tests/s = {t_naive / t_bare:4.1f}x naive")
    print(f"  holding the runner's modules : {n_tests / t_bare_mods:7.1f} tests/s = {t_naive / t_bare_mods:4.1f}x naive"
          f"   (run_batch reaches {t_bare_mods / t_ours:.0%} of it)")
    print(f"page copy : {page_us:.2f} us per page a forked child writes (a CPython test writes ~200)")
    print(f"verdicts  : {'identical' if agree else 'DIFFERENT'}")
    print(f"overhead  : median {median_ms:.2f} ms per test above the program's own time "
          f"(target < 2 ms)   {'OK' if median_ms < 2 else 'ABOVE TARGET'}")
    sys.exit(0 if agree else 1)


if __name__ == "__main__":
    main()
