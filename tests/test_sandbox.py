"""The sandbox on well-behaved programs: every way of reading and writing, exits, call-based tests,
the comparison rules, the batch API and the CLI. Hostile programs: test_sandbox_hostile.py."""
import concurrent.futures
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cobalt_min.sandbox import Limits, Sandbox, SandboxError, imported_modules, pass_rate, run_batch, run_tests

ROOT = str(Path(__file__).resolve().parent.parent)


@pytest.fixture(autouse=True)
def plain_python(monkeypatch):
    """These tests probe the sandbox: programs run as a plain python3 runs them (graders.PYTHON), not under
    a reference grader's additions (tests/test_graders.py tests those)."""
    from cobalt_min import graders
    monkeypatch.setattr(graders, "DEFAULT", graders.PYTHON.name)
SUM_TESTS = {"inputs": ["1 2\n", "10 20\n", "-5 5\n"], "outputs": ["3\n", "30\n", "0\n"]}

READERS = {
    "input": "a, b = map(int, input().split())\nprint(a + b)\n",
    "stdin_read": "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n",
    "stdin_readline": "import sys\na, b = map(int, sys.stdin.readline().split())\nprint(a + b)\n",
    "stdin_readlines": "import sys\na, b = map(int, sys.stdin.readlines()[0].split())\nprint(a + b)\n",
    "stdin_buffer": "import sys\na, b = map(int, sys.stdin.buffer.read().split())\nprint(a + b)\n",
    "for_line": "import sys\nfor line in sys.stdin:\n    a, b = map(int, line.split())\n    print(a + b)\n",
    "open0": "a, b = map(int, open(0).read().split())\nprint(a + b)\n",
    "os_read": "import os\na, b = map(int, os.read(0, 100).split())\nprint(a + b)\n",
}
WRITERS = {
    "stdout_write": "import sys\na, b = map(int, input().split())\nsys.stdout.write(str(a + b) + '\\n')\n",
    "os_write": "import os\na, b = map(int, input().split())\nos.write(1, f'{a + b}\\n'.encode())\n",
    "buffer_write": "import sys\na, b = map(int, input().split())\nsys.stdout.buffer.write(b'%d\\n' % (a + b))\n",
    "print_no_newline": "a, b = map(int, input().split())\nprint(a + b, end='')\n",
    "print_flush_then_exit0": "import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(0)\n",
    "exit_builtin": "a, b = map(int, input().split())\nprint(a + b)\nexit()\n",
    "quit_builtin": "a, b = map(int, input().split())\nprint(a + b)\nquit()\n",
    "raise_systemexit": "a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit\n",
    "main_guard": "def main():\n    a, b = map(int, input().split())\n    print(a + b)\n\nif __name__ == '__main__':\n    main()\n",
    "threaded_main": ("import sys, threading\nsys.setrecursionlimit(10 ** 6)\nthreading.stack_size(1 << 26)\n"
                     "def main():\n    a, b = map(int, input().split())\n    print(a + b)\n"
                     "t = threading.Thread(target=main)\nt.start()\nt.join()\n"),
    "atexit_print": "import atexit\na, b = map(int, input().split())\natexit.register(print, a + b)\n",
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_every_way_of_reading_stdin(isolation, name):
    results = run_tests(READERS[name], SUM_TESTS, isolation=isolation)
    assert [r.status for r in results] == ["passed"] * 3, results


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_every_way_of_writing_stdout_and_exiting(isolation, name):
    results = run_tests(WRITERS[name], SUM_TESTS, isolation=isolation)
    assert [r.status for r in results] == ["passed"] * 3, results


def test_nonzero_exits_are_runtime_errors(isolation):
    for program in ["print(3)\nimport sys\nsys.exit(1)\n", "print(3)\nimport sys\nsys.exit('bad')\n",
                    "print(3)\nraise ValueError('boom')\n", "print(3\n"]:
        [r] = run_tests(program, {"inputs": ["\n"], "outputs": ["3\n"]}, isolation=isolation)
        assert r.status == "runtime_error" and not r.passed, (program, r)
    [r] = run_tests("print(3\n", {"inputs": ["\n"], "outputs": ["3\n"]}, isolation=isolation)
    assert "SyntaxError" in r.stderr and "solution.py" in r.stderr
    assert r.stderr.startswith('  File "solution.py", line 1\n') and "<string>" not in r.stderr  # as python prints it
    [r] = run_tests("x = 1\nraise ValueError('boom')\n", {"inputs": ["\n"], "outputs": ["\n"]}, isolation=isolation)
    assert "ValueError: boom" in r.stderr and 'File "solution.py", line 2' in r.stderr
    assert "runner.py" not in r.stderr and "jail.py" not in r.stderr  # only the program's frames
    assert "<string>" not in r.stderr


def test_every_test_starts_from_fresh_state(isolation):
    program = ("import os, math\n"
               "seen = [os.path.exists('state.txt'), getattr(math, 'touched', False)]\n"
               "open('state.txt', 'w').write('x')\nmath.touched = True\nprint(seen)\n")
    results = run_tests(program, {"inputs": ["", "", ""], "outputs": ["[False, False]\n"] * 3}, isolation=isolation)
    assert [r.status for r in results] == ["passed"] * 3, results
    # Common modules are already imported (free per test); none that slows every fork with a hook.
    program = ("import sys\nprint(all(m in sys.modules for m in ('collections', 'heapq', 'math', 're', 'typing')),\n"
               "      any(m in sys.modules for m in ('threading', 'random')))\n")
    [r] = run_tests(program, {"inputs": [""], "outputs": ["True False\n"]}, isolation=isolation)
    assert r.passed, r


def test_modules_a_program_imports_are_imported_once_per_program(isolation):
    # fractions is not preloaded: the runner imports it once, in a copy of itself made for this
    # program, and every test starts from that copy, with the module loaded and untouched.
    program = ("import sys\nloaded = 'fractions' in sys.modules\nimport fractions\n"
               "seen = getattr(fractions, 'touched', False)\nfractions.touched = True\nprint(loaded, seen)\n")
    results = run_tests(program, {"inputs": [""] * 3, "outputs": ["True False\n"] * 3}, isolation=isolation)
    assert [r.status for r in results] == ["passed"] * 3, results
    assert imported_modules("import a.b, c\nfrom d.e import f\nfrom d.e import *\nfrom . import g\n"
                            "def h():\n    import this\n") == ["a.b", "c", "d.e"]
    # (relative imports are skipped; `this` only prints, so it is left to the program)
    [r] = run_tests("import this\n", {"inputs": [""], "outputs": [""]}, isolation=isolation)
    assert r.stdout.startswith("The Zen of Python")
    # With job namespaces (bubblewrap; process mode as root) the job's tests run under a process that is
    # pid 1 of their namespace: no test can kill it, and what a test leaves behind is killed before the
    # next one. Otherwise (the unsafe process mode) a test that leaves a process behind stops the copy
    # the tests fork from, the runner kills it and runs the rest itself, and a program that kills the copy
    # costs that one test.
    program = ("import fractions, os, signal, time\nline = input()\nif line == 'daemon' and os.fork() == 0:\n"
               "    os.setsid()\n    time.sleep(100)\nif line == 'kill':\n    os.kill(os.getppid(), signal.SIGKILL)\n"
               "print(line)\n")
    inputs = ["a\n", "daemon\n", "b\n", "kill\n", "c\n", "daemon\n", "d\n"]
    with Sandbox(Limits(timeout_s=2), isolation) as sb:
        results = sb.run(program, {"inputs": inputs, "outputs": inputs})
        if sb.isolation == "bwrap" or sb.namespaces:
            assert [r.status for r in results] == ["passed"] * 7 and sb.restarts == 0, results
        else:
            assert [r.status for r in results] == ["passed"] * 3 + ["runtime_error"] + ["passed"] * 3, results
            assert sb.restarts == 1


def test_unicode_and_large_outputs(isolation):
    [r] = run_tests("print('héllo ✓')\n", {"inputs": [""], "outputs": ["héllo ✓\n"]}, isolation=isolation)
    assert r.passed
    big = "\n".join(str(i) for i in range(100_000)) + "\n"  # ~590 KB: compared in full, kept head + tail
    [r] = run_tests("for i in range(100000):\n    print(i)\n", {"inputs": [""], "outputs": [big]}, isolation=isolation)
    assert r.passed and len(r.stdout) < 10_000 and "characters cut" in r.stdout and r.stdout.endswith("99999\n")
    [r] = run_tests("for i in range(100000):\n    print(i)\nprint(1)\n", {"inputs": [""], "outputs": [big]},
                    isolation=isolation)
    assert r.status == "wrong_answer"


def test_big_and_small_reports_keep_their_order(isolation):
    # Reports over 64 KiB travel by the pipe, the others by the report file: the grader merges them.
    sizes = [10, 100_000, 20, 30, 200_000, 70_000, 5]
    program = "n = int(input())\nprint('x' * n)\n"
    results = run_tests(program, {"inputs": [f"{n}\n" for n in sizes], "outputs": ["x" * n + "\n" for n in sizes]},
                        isolation=isolation)
    assert [r.status for r in results] == ["passed"] * len(sizes)
    wrong = run_tests(program, {"inputs": [f"{n}\n" for n in sizes], "outputs": ["x" * (n + 1) + "\n" for n in sizes]},
                      isolation=isolation)
    assert [r.status for r in wrong] == ["wrong_answer"] * len(sizes)


def test_output_cap_kills_the_program(isolation):
    [r] = run_tests("print('x' * 5000)\n", {"inputs": [""], "outputs": [""]}, isolation=isolation,
                    output_bytes=1000)
    assert r.status == "output_limit"
    assert r.stdout == "x" * 1000 and r.exit_code != 0  # what fits under the cap is kept; the program died
    # Printing forever, on stdout or stderr, stops at the cap at once, not at the time limit.
    # So does a scratch file, and ignoring SIGXFSZ only turns the kill into an error.
    for program in ["while True:\n    print('x' * 1000)\n",
                    "import sys\nwhile True:\n    sys.stderr.write('x' * 1000)\n",
                    "import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
                    "while True:\n    print('x' * 1000, flush=True)\n"]:
        [r] = run_tests(program, {"inputs": [""], "outputs": [""]}, isolation=isolation, timeout_s=4.0,
                        output_bytes=100_000)
        assert r.status == "output_limit" and r.time_s < 2.0, (program, r)
        assert 90_000 < len(r.stdout) + len(r.stderr) or "characters cut" in r.stdout + r.stderr
    [r] = run_tests("open('big.bin', 'wb').write(b'x' * 200_000)\nprint('done')\n",
                    {"inputs": [""], "outputs": ["done\n"]},
                    isolation=isolation, output_bytes=100_000)
    assert r.status == "runtime_error" and r.exit_code == -25  # SIGXFSZ
    [r] = run_tests("open('ok.bin', 'wb').write(b'x' * 50_000)\nprint('done')\n",
                    {"inputs": [""], "outputs": ["done\n"]},
                    isolation=isolation, output_bytes=100_000)
    assert r.passed


def test_timeouts_are_per_test_and_total_is_capped(isolation):
    program = "import time\nif input() == 'slow':\n    time.sleep(30)\nprint('ok')\n"
    tests = {"inputs": ["fast\n", "slow\n", "fast\n"], "outputs": ["ok\n"] * 3}
    start = time.monotonic()
    results = run_tests(program, tests, timeout_s=0.5, isolation=isolation)
    assert [r.status for r in results] == ["passed", "timeout", "passed"]
    assert 0.5 <= results[1].time_s < 1.0 and time.monotonic() - start < 3.0
    start = time.monotonic()
    results = run_tests(program, {"inputs": ["slow\n"] * 5, "outputs": ["ok\n"] * 5}, timeout_s=0.5,
                        total_timeout_s=1.2, budget_tests=1, isolation=isolation)
    assert [r.status for r in results] == ["timeout"] * 5
    assert time.monotonic() - start < 3.0


def test_the_suite_budget_scales_with_the_tests_and_is_all_or_nothing(isolation):
    # The authors: 4 tests at a time within 27 s, a program that runs out scores 0. Here: one at a time
    # within total_timeout_s * min(4, tests), and a program that runs out fails every test.
    program = "import time\ntime.sleep(float(input()))\nprint('ok')\n"
    slow_but_fine = {"inputs": ["0.25\n"] * 12, "outputs": ["ok\n"] * 12}  # 3 s of tests, budget 4 x 1 s
    results = run_tests(program, slow_but_fine, timeout_s=1.0, total_timeout_s=1.0, isolation=isolation)
    assert [r.status for r in results] == ["passed"] * 12
    too_slow = {"inputs": ["0.5\n"] * 12, "outputs": ["ok\n"] * 12}  # 6 s of tests
    start = time.monotonic()
    results = run_tests(program, too_slow, timeout_s=1.0, total_timeout_s=1.0, isolation=isolation)
    assert [r.status for r in results] == ["timeout"] * 12 and pass_rate(results) == 0.0
    assert "total time limit" in results[0].detail and time.monotonic() - start < 6.0


CALL = {"inputs": [[1, 2], [3, 4]], "outputs": [3, 7], "fn_name": "add"}


@pytest.mark.parametrize("program,statuses", [
    ("def add(a, b):\n    return a + b\n", ["passed", "passed"]),
    ("class Solution:\n    def add(self, a, b):\n        return a + b\n", ["passed", "passed"]),
    ("def add(a, b):\n    print('debug')\n    return a + b\n", ["passed", "passed"]),
    ("def add(a, b):\n    return a - b\n", ["wrong_answer", "wrong_answer"]),
    ("def add(a, b):\n    return str(a + b)\n", ["wrong_answer", "wrong_answer"]),
    ("def add(a, b):\n    return {a + b}\n", ["wrong_answer", "wrong_answer"]),
    ("def plus(a, b):\n    return a + b\n", ["runtime_error", "runtime_error"]),
    ("def add(a, b):\n    return a / 0\n", ["runtime_error", "runtime_error"]),
    ("def add(a, b):\n    import sys\n    sys.exit(0)\n", ["runtime_error", "runtime_error"]),
])
def test_call_based(isolation, program, statuses):
    assert [r.status for r in run_tests(program, CALL, isolation=isolation)] == statuses


def test_call_based_values(isolation):
    tests = {"inputs": [[[3, 1, 2]], [[]]], "outputs": [[[1, 2, 3], 3], [[], 0]], "fn_name": "f"}
    program = "def f(xs):\n    return tuple(sorted(xs)), len(xs)\n"  # a tuple arrives as a list
    assert all(r.passed for r in run_tests(program, tests, isolation=isolation))
    wrapped = {"inputs": [[2]], "outputs": [[4]], "fn_name": "sq"}
    program = "def sq(x):\n    return x * x\n"
    assert not run_tests(program, wrapped, isolation=isolation)[0].passed  # not TACO data: no unwrapping
    assert run_tests(program, dict(wrapped, taco_wrapped_outputs=True), isolation=isolation)[0].passed


def test_bad_tests_are_rejected_with_a_clear_message():
    with pytest.raises(ValueError, match="2 inputs but 1 outputs"):
        run_tests("print(1)", {"inputs": ["1", "2"], "outputs": ["1"]})
    with pytest.raises(ValueError, match="list of arguments"):
        run_tests("print(1)", {"inputs": ["1"], "outputs": [1], "fn_name": "f"})
    with pytest.raises(ValueError, match="job 1"):
        run_batch([("print(1)", SUM_TESTS), ("print(1)", {"inputs": "x"})])


def test_run_batch_keeps_order_and_reuses_sandboxes(isolation):
    jobs = [(f"a, b = map(int, input().split())\nprint(a + b + {i % 3 == 0})\n", SUM_TESTS) for i in range(12)]
    results = run_batch(jobs, workers=2, isolation=isolation, progress="judging")
    assert len(results) == 12
    for i, res in enumerate(results):
        assert [r.passed for r in res] == [i % 3 != 0] * 3
        assert pass_rate(res) == (0.0 if i % 3 == 0 else 1.0)


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_run_batch_with_an_executor(kind):
    two = {"inputs": ["1 2\n", "2 2\n"], "outputs": ["3\n", "4\n"]}
    jobs = [("a, b = map(int, input().split())\nprint(a * b)\n", two), (READERS["input"], SUM_TESTS)] * 3
    pool = concurrent.futures.ThreadPoolExecutor(2) if kind == "thread" else concurrent.futures.ProcessPoolExecutor(2)
    with pool:
        results = run_batch(jobs, executor=pool, workers=2)
    assert [[r.passed for r in res] for res in results] == [[False, True], [True] * 3] * 3


def test_sandbox_object_survives_many_programs(isolation):
    with Sandbox(Limits(timeout_s=2), isolation) as sb:
        for i in range(5):
            assert all(r.passed for r in sb.run(READERS["input"], SUM_TESTS))
            assert not sb.run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", SUM_TESTS)[0].passed
        # (job namespaces: a test's parent is pid 1 of its namespace, which ignores its SIGKILL)
        assert sb.restarts == 0 if sb.isolation == "bwrap" or sb.namespaces else sb.restarts >= 5


def test_a_runner_killed_mid_program_costs_exactly_that_test(isolation):
    # Reports are appended to a file the grader reads once per job: those written before the runner
    # died must still count, and the death must be charged to the test it died in. (No test can kill the
    # runner in these modes; the kernel's OOM killer can. Here it is killed from outside during test 2.)
    import threading
    program = "import time\nline = input()\nif line == 'slow':\n    time.sleep(3)\nprint(line)\n"
    inputs = ["a\n", "b\n", "slow\n", "c\n", "d\n"]
    with Sandbox(Limits(timeout_s=5), isolation) as sb:
        sb.run("print(1)\n", {"inputs": [""], "outputs": ["1\n"]})  # the runner is up
        killer = threading.Timer(1.5, lambda: sb._proc.kill())
        killer.start()
        results = sb.run(program, {"inputs": inputs, "outputs": inputs})
        killer.join()
        assert [r.status for r in results] == ["passed", "passed", "runtime_error", "passed", "passed"], results
        assert "killed its sandbox" in results[2].detail and sb.restarts == 1


def test_slow_programs_are_not_mistaken_for_a_frozen_sandbox(isolation):
    # The grader sleeps until the job is done, waking every timeout + 2 s to check progress: a job
    # whose tests all fit their own timeout but take longer than that in total must run to the end.
    program = "import time\ntime.sleep(0.6)\nprint(input())\n"
    inputs = [f"{i}\n" for i in range(6)]  # ~3.6 s in all, timeout 1 s: the grader checks after 3 s
    with Sandbox(Limits(timeout_s=1.0), isolation) as sb:
        results = sb.run(program, {"inputs": inputs, "outputs": inputs})
        assert [r.status for r in results] == ["passed"] * 6 and sb.restarts == 0


def test_a_late_done_message_is_not_left_for_the_next_program(isolation, monkeypatch):
    # The grader's progress check can fire after the last report was written but before the runner's
    # "done": that "done" must be consumed then, not taken as the answer to the next program.
    real_recv = Sandbox._recv
    fired = []

    def progress_check_first(self, deadline):
        if not fired:
            fired.append(True)
            time.sleep(1.0)  # the job's tests are all reported by now, and its "done" waits in the pipe
            return None
        return real_recv(self, deadline)

    with Sandbox(Limits(timeout_s=2), isolation) as sb:
        assert all(r.passed for r in sb.run(READERS["input"], SUM_TESTS))  # runner started
        monkeypatch.setattr(Sandbox, "_recv", progress_check_first)
        assert all(r.passed for r in sb.run(READERS["input"], SUM_TESTS))
        monkeypatch.setattr(Sandbox, "_recv", real_recv)
        assert all(r.passed for r in sb.run(READERS["input"], SUM_TESTS)) and sb.restarts == 0


def _cli(tmp_path, program, tests_text, *extra):
    (tmp_path / "p.py").write_text(program)
    (tmp_path / "t.json").write_text(tests_text)
    return subprocess.run([sys.executable, "-m", "cobalt_min.sandbox", str(tmp_path / "p.py"),
                           str(tmp_path / "t.json"), *extra], capture_output=True, text=True, timeout=60)


def test_cli_prints_one_json_object_and_exits_zero(tmp_path):
    proc = _cli(tmp_path, "a, b = map(int, input().split())\nprint(a - b if a < 0 else a + b)\n",
                json.dumps(SUM_TESTS), "--timeout", "2")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["passed"] == [True, True, False] and out["pass_rate"] == pytest.approx(2 / 3)
    assert [r["status"] for r in out["results"]] == ["passed", "passed", "wrong_answer"]
    assert set(out["results"][0]) == {"status", "time_s", "stdout", "stderr"}


@pytest.mark.parametrize("text,needle", [("{not json", "not a usable tests file"),
                                         ('{"inputs": ["1"], "outputs": []}', "1 inputs but 0 outputs"),
                                         ('[1, 2]', "must be a dict")])
def test_cli_rejects_bad_tests_file(tmp_path, text, needle):
    proc = _cli(tmp_path, "print(1)\n", text)
    assert proc.returncode != 0 and needle in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- what a policy could exploit

MALFORMED_RESULTS = {
    # The result channel (fd 3) holds anything but the runner's one JSON record: a runtime error of
    # that test, never an exception in the grader.
    "not_json": "import os\nos.write(3, b'garbage')\ndef add(a, b):\n    return a + b\n",
    "a_list": "import os\nos.write(3, b'[1, 2]')\nos._exit(0)\n",
    "no_value": "import os\nos.write(3, b'{\"x\": 1}')\nos._exit(0)\n",
    "value_not_text": "import os\nos.write(3, b'{\"value\": 3}')\nos._exit(0)\n",
    "deep_nesting": "import os\nos.write(3, b'{\"value\": \"' + b'[' * 100000 + b'\"}')\nos._exit(0)\n",
    "forked_twice": ("import os\nchild = os.fork()\ndef add(a, b):\n    if child:\n        os.waitpid(child, 0)\n"
                     "    return a + b\n"),  # both processes return a result, the child first
    "huge_int": "import sys\nsys.set_int_max_str_digits(0)\ndef add(a, b):\n    return 10 ** 5000\n",
}


@pytest.mark.parametrize("name", sorted(MALFORMED_RESULTS))
def test_a_malformed_call_result_costs_that_test_only(isolation, name):
    jobs = [(CALL_OK, CALL), (MALFORMED_RESULTS[name], CALL), (CALL_OK, CALL)]
    results = run_batch(jobs, workers=1, isolation=isolation)
    assert [[r.status for r in res] for res in results] == [["passed"] * 2, ["runtime_error"] * 2, ["passed"] * 2], \
        results[1]


CALL_OK = "def add(a, b):\n    return a + b\n"


@pytest.mark.parametrize("failures", [1, 2])
def test_a_grader_failure_is_an_error_never_a_verdict(monkeypatch, failures):
    # A failure of the sandbox itself while judging a program (here a bug in the grader) is never scored: the
    # program is judged again in a fresh sandbox, and a second failure stops the batch with a SandboxError.
    import cobalt_min.sandbox.verdicts as sandbox_module  # where run_batch calls grade_test
    real_grade = sandbox_module.grade_test
    failed = []

    def grade_that_fails_on_seven(report, expected, *args, **kwargs):
        if report["stdout"] == "7\n" and len(failed) < failures:
            failed.append(True)
            raise RuntimeError("a bug in the grader")
        return real_grade(report, expected, *args, **kwargs)

    monkeypatch.setattr(sandbox_module, "grade_test", grade_that_fails_on_seven)
    jobs = [(READERS["input"], SUM_TESTS), ("print(7)\n", SUM_TESTS), (READERS["input"], SUM_TESTS)]
    if failures == 2:
        with pytest.raises(SandboxError, match="a bug in the grader"):
            run_batch(jobs, workers=1)
        return
    results = run_batch(jobs, workers=1)
    assert [r.status for r in results[0]] == [r.status for r in results[2]] == ["passed"] * 3
    assert [r.status for r in results[1]] == ["wrong_answer"] * 3


def test_honest_programs_with_many_threads_fit_the_memory_limit(isolation):
    program = ("from concurrent.futures import ThreadPoolExecutor\nimport threading, time\n"
               "def work(x):\n    time.sleep(0.05)\n    return x * x\n"
               "with ThreadPoolExecutor(40) as ex:\n    print(sum(ex.map(work, range(200))), threading.active_count())\n")
    [r] = run_tests(program, {"inputs": [""], "outputs": [f"{sum(x * x for x in range(200))} 41\n"]},
                    isolation=isolation)
    assert r.passed, r


def test_auto_refuses_an_unsafe_mode_and_says_how_to_opt_in(monkeypatch):
    import cobalt_min.sandbox.isolation as sandbox_module  # where the isolation policy lives
    monkeypatch.setattr(sandbox_module, "bwrap_available", lambda: False)
    monkeypatch.setattr(sandbox_module.os, "geteuid", lambda: 1000)  # a user without root
    monkeypatch.delenv(sandbox_module.UNSAFE_ENV, raising=False)
    with pytest.raises(sandbox_module.SandboxError) as err:
        sandbox_module.resolve_isolation("auto")
    assert "apt-get install bubblewrap" in str(err.value) and "--isolation unsafe" in str(err.value)
    assert sandbox_module.UNSAFE_ENV + "=unsafe" in str(err.value)
    # The process mode is the namespaced one or nothing: without root it refuses, never runs unisolated.
    with pytest.raises(sandbox_module.SandboxError, match="needs root"):
        sandbox_module.resolve_isolation("process")
    with pytest.warns(UserWarning, match="trusted programs only"):
        assert sandbox_module.resolve_isolation("unsafe") == "unsafe"  # the explicit opt-in
    monkeypatch.setenv(sandbox_module.UNSAFE_ENV, "unsafe")
    assert sandbox_module.resolve_isolation("auto") == "unsafe"


def test_a_mode_that_fails_to_start_is_tried_again_never_downgraded(monkeypatch, tmp_path):
    # One failed start (here: no folder can be made for the sandbox) is an error for that sandbox only;
    # the next sandbox asked for the same mode gets it, namespaces and all.
    import os
    import tempfile
    if os.geteuid() != 0:
        pytest.skip("the namespaced process mode needs root")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with pytest.raises(SandboxError, match="could not start"):
        run_tests("print(3)\n", {"inputs": [""], "outputs": ["3\n"]}, isolation="process")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with Sandbox(isolation="process") as sb:
        results = sb.run("import os\nprint(os.path.exists(%r))\n" % os.path.join(ROOT, "README.md"),
                         {"inputs": [""], "outputs": ["False\n"]})
        assert sb.namespaces and [r.status for r in results] == ["passed"], results


def test_uid_leases_are_machine_wide_whatever_tmpdir(tmp_path):
    import os
    if os.geteuid() != 0:
        pytest.skip("uid leases are for a root grader")
    code = ("import sys, time\nfrom cobalt_min.sandbox.isolation import UidLease\nlease = UidLease()\n"
            "print(lease.uid, flush=True)\nsys.stdin.read()\n")
    procs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        env = dict(os.environ, TMPDIR=str(tmp_path / name))
        procs.append(subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, env=dict(env, PYTHONPATH=ROOT)))
    try:
        uids = [int(p.stdout.readline()) for p in procs]
    finally:
        for p in procs:
            p.communicate("")
    assert uids[0] != uids[1], uids


def test_the_scratch_folder_is_emptied_whatever_its_depth_and_modes(tmp_path):
    from cobalt_min.sandbox.jail import empty_folder
    import os
    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        for _ in range(2500):  # past PATH_MAX and past Python's recursion limit
            os.mkdir("dddddddddd")
            os.chdir("dddddddddd")
        open("bottom", "w").write("x")
    finally:
        os.chdir(here)
    (tmp_path / "closed" / "inner").mkdir(parents=True)
    (tmp_path / "closed" / "inner" / "f").write_text("x")
    os.chmod(tmp_path / "closed" / "inner", 0)
    os.chmod(tmp_path / "closed", 0)
    empty_folder(str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_the_programs_folder_holds_nothing_but_their_files(isolation):
    # A checkout or venv under /tmp is bound into the sandbox: its mount point must never sit in the
    # programs' folder (it showed there, and no clean-up could remove it).
    from cobalt_min.sandbox.isolation import scratch_folder
    assert scratch_folder(["/usr/lib/python3.11", "/root/.venv"]) == "/tmp"
    assert scratch_folder(["/tmp/ci/.venv", "/usr/lib/python3.11"]) == "/scratch"
    assert scratch_folder(["/tmp/a", "/scratch/b"]) == "/cobalt-scratch"
    program = "import os\nprint(sorted(os.listdir('.')))\nopen('mine.txt', 'w').write('x')\n"
    results = run_tests(program, {"inputs": ["", ""], "outputs": ["[]\n", "[]\n"]}, isolation=isolation)
    assert [r.status for r in results] == ["passed", "passed"], results


def test_a_frozen_runner_never_blocks_the_grader(isolation):
    # A runner stopped (SIGSTOP) while the grader sends it a job bigger than a pipe holds: the send has a
    # deadline, the test is charged, the runner replaced, and the next program judged as usual.
    import signal
    import threading
    big = "x = 1\n" + "#" * 300_000 + "\nprint(input())\n"
    done = []

    def judge():  # (in a thread: a grader that blocks fails this test instead of hanging it)
        with Sandbox(Limits(timeout_s=1.0), isolation) as sb:
            assert sb.run("print(1)\n", {"inputs": [""], "outputs": ["1\n"]})[0].passed
            launcher = sb._proc.pid  # the runner is its only child (bubblewrap, or process mode's outer half)
            children = open(f"/proc/{launcher}/task/{launcher}/children").read().split()
            os.kill(int(children[0]), signal.SIGSTOP)
            results = sb.run(big, {"inputs": ["a\n", "b\n"], "outputs": ["a\n", "b\n"]})
            done.append((results, sb.restarts, sb.run("print(2)\n", {"inputs": [""], "outputs": ["2\n"]})))
    thread = threading.Thread(target=judge, daemon=True)
    thread.start()
    thread.join(30)
    assert done, "the grader blocked on a frozen runner"
    results, restarts, after = done[0]
    assert results[0].status == "timeout" and results[1].passed and restarts == 1, results
    assert after[0].passed, after


def test_programs_still_get_keyboard_interrupt(isolation):
    # The process that runs the tests ignores SIGINT (it is pid 1 of its namespace); the programs keep
    # Python's KeyboardInterrupt, as under `python solution.py`.
    program = ("import os, signal, time\ntry:\n    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(1)\n"
               "    print('none')\nexcept KeyboardInterrupt:\n    print('interrupted')\n")
    [r] = run_tests(program, {"inputs": [""], "outputs": ["interrupted\n"]}, isolation=isolation)
    assert r.passed, r


def test_the_measured_time_decides_a_timeout():
    # Whatever the runner's report says, a test that ran longer than its limit is a timeout (grader side).
    from cobalt_min.graders import AUTHORS
    from cobalt_min.sandbox import grade_test
    report = {"stdout": "3\n", "stderr": "", "exit": 0, "timed_out": False, "output_limited": False, "time_s": 2.5,
              "cpu_s": 2.4}
    assert grade_test(report, "3\n", None, AUTHORS).passed
    assert grade_test(report, "3\n", None, AUTHORS, timeout_s=2.0).status == "timeout"
    assert grade_test(dict(report, time_s=1.9), "3\n", None, AUTHORS, timeout_s=2.0).passed


def test_timeouts_spent_waiting_are_judged_again_alone_where_no_cgroup_bounds_the_cpu(monkeypatch):
    # Without a CPU bound per sandbox a busy neighbour can starve a program: a program with a timeout whose
    # processes used the CPU for less than half its wall time is judged once more after the batch, alone.
    from cobalt_min import sandbox as sandbox_module
    from cobalt_min.sandbox import TestResult
    assert sandbox_module.waited_out([TestResult(False, "timeout", time_s=1.2, cpu_s=0.3)])
    assert not sandbox_module.waited_out([TestResult(False, "timeout", time_s=1.2, cpu_s=1.1)])  # busy itself
    assert not sandbox_module.waited_out([TestResult(True, "passed", time_s=0.2, cpu_s=0.0)])
    runs = []
    real_run = sandbox_module.Sandbox.run
    monkeypatch.setattr(sandbox_module.Sandbox, "run", lambda self, *a: runs.append(a[0]) or real_run(self, *a))
    sleeper, spinner = "import time\ntime.sleep(3)\n", "while True:\n    pass\n"
    jobs = [(sleeper, SUM_TESTS), (spinner, SUM_TESTS), (READERS["input"], SUM_TESTS)]
    for bounded in (True, False):
        monkeypatch.setattr(sandbox_module.Sandbox, "cpu_bounded", property(lambda self: bounded))
        runs.clear()
        results = run_batch(jobs, timeout_s=0.5, workers=2)
        assert [r.status for r in results[0] + results[1]] == ["timeout"] * 6
        assert sorted(runs) == sorted([sleeper, spinner, READERS["input"]] + ([] if bounded else [sleeper])), runs
