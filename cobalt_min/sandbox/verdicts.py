"""Verdicts on programs, and what callers use: run_tests, run_batch, run_programs, pass_rate.

Tests use TACO's `input_output` format: {"inputs": [...], "outputs": [...], "fn_name"?: str}.
Without fn_name a test is stdin -> stdout text; with fn_name each input is the list of positional
arguments of `fn_name` (a top-level function, or a method of `Solution()` when the program defines
`class Solution`) and each output is the expected return value.

This file decides verdicts (grade_test, Sandbox.run, by the rules of a grader profile: graders.py, the
authors' by default) from the runner's raw reports (process.py), and runs batches of programs on workers
of one sandbox each, judging again a program whose sandbox failed (run_batch). How a sandbox is built and
what it guarantees: the package's docstring and docs/sandbox.md.
"""

import concurrent.futures
import contextlib
import dataclasses
import json
import os
import queue
import signal
import threading

from cobalt_min import graders
from cobalt_min.graders import Grader
from cobalt_min.sandbox.isolation import resolve_isolation
from cobalt_min.sandbox.process import Runner
from cobalt_min.sandbox.types import OUT_OF_TIME, InfraFailure, Limits, SandboxError, TestResult


KEEP_CHARS = 4096  # each captured stream is kept as its first and last KEEP_CHARS characters


# ----------------------------------------------------------------------------- verdicts


def _keep_ends(text: str) -> str:
    if len(text) <= 2 * KEEP_CHARS:
        return text
    return f"{text[:KEEP_CHARS]}\n...({len(text) - 2 * KEEP_CHARS} characters cut)...\n{text[-KEEP_CHARS:]}"


def read_result(result: str):
    """(returned JSON text, value, problem) from a call-based test's result channel; problem is None when
    the result is the one JSON object {"value": json text} the runner writes, else says what is wrong
    (a program can write anything there: two results after a fork, garbage, nesting or an integer too
    big to parse). "unserializable" results keep their message as the problem."""
    try:
        payload = json.loads(result)
        if not isinstance(payload, dict):
            return None, None, "the program's result is not the sandbox's record"
        if "unserializable" in payload:
            return None, None, "return value is not JSON-like: " + str(payload["unserializable"])[:500]
        text = payload.get("value")
        if not isinstance(text, str):
            return None, None, "the program's result is not the sandbox's record"
        return text, json.loads(text), None
    except (ValueError, RecursionError, TypeError) as e:
        return None, None, f"the program's result could not be read ({type(e).__name__})"


def grade_test(report: dict, expected, fn_name: str | None, grader: Grader, taco_wrapped=False,
               timeout_s: float | None = None) -> TestResult:
    """Turn the runner's report on one test into a verdict, comparing with `expected` here by the grader's
    rules (graders.py). A test whose measured wall time exceeds timeout_s is a timeout, whatever else the
    report says."""
    out, err, code = report["stdout"], report["stderr"], report["exit"]
    returned = value = problem = None
    if fn_name is not None and report.get("result"):
        returned, value, problem = read_result(report["result"])
        if returned is not None and len(returned) > 2 * KEEP_CHARS:
            returned = _keep_ends(returned)

    def verdict(passed, status, detail=""):
        return TestResult(passed, status, _keep_ends(out), _keep_ends(err), report["time_s"], report["cpu_s"], code,
                          detail, returned)

    if report["output_limited"]:
        return verdict(False, "output_limit", "the program printed more than the output limit")
    if report["timed_out"] or (timeout_s is not None and report["time_s"] > timeout_s):
        return verdict(False, "timeout")
    if report.get("out_of_memory"):
        return verdict(False, "memory_limit", "the test's processes together went over the memory limit")
    if code != 0:
        if "MemoryError" in err[-2000:]:
            return verdict(False, "memory_limit")
        if code == 121:
            return verdict(False, "runtime_error", "the sandbox could not prepare the test")
        return verdict(False, "runtime_error")
    if fn_name is None:
        ok = grader.stdout_matches(out, expected)
        return verdict(ok, "passed" if ok else "wrong_answer")
    if not report.get("result"):
        return verdict(False, "runtime_error", "the function returned nothing the sandbox could read")
    if problem is not None:
        return verdict(False, "wrong_answer" if problem.startswith("return value") else "runtime_error", problem)
    ok = grader.value_matches(value, expected, taco_wrapped)
    return verdict(ok, "passed" if ok else "wrong_answer")


def check_tests(tests) -> tuple[list, list]:
    """Validate a TACO input_output dict; return (inputs, outputs). Raises ValueError saying what is wrong."""
    if not isinstance(tests, dict):
        raise ValueError(f"tests must be a dict with 'inputs' and 'outputs', not {type(tests).__name__}")
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise ValueError("tests must have 'inputs' and 'outputs' lists")
    if len(inputs) != len(outputs):
        raise ValueError(f"tests have {len(inputs)} inputs but {len(outputs)} outputs")
    fn_name = tests.get("fn_name")
    if fn_name is not None and not isinstance(fn_name, str):
        raise ValueError("'fn_name' must be a string")
    for k, x in enumerate(inputs):
        if fn_name:
            if not isinstance(x, list):
                raise ValueError(f"test {k}: a call-based input must be the list of arguments, not {type(x).__name__}")
        elif not isinstance(x, str):
            raise ValueError(f"test {k}: a stdin input must be a string, not {type(x).__name__}")
    if not fn_name and not all(isinstance(y, str) for y in outputs):
        raise ValueError("stdin/stdout tests must have string outputs")
    return inputs, outputs


# ----------------------------------------------------------------------------- public API


class Sandbox(Runner):
    """A live sandbox: `run(program, tests)` judges every test of one program by the grader's rules
    (graders.py; the default: the authors'). The process machinery is process.Runner. Use as a
    context manager; one per thread. limits=None: Limits with the grader's time limit per test."""

    def __init__(self, limits: Limits | None = None, isolation: str = "auto", grader: "Grader | str | None" = None):
        self.grader = graders.get(grader)
        super().__init__(limits or Limits(timeout_s=self.grader.timeout_s), isolation, setup=self.grader.run)

    def run(self, program: str, tests: dict) -> list[TestResult]:
        """Judge `program` on every test of `tests` (TACO input_output dict), in order."""
        inputs, outputs = check_tests(tests)
        fn_name = tests.get("fn_name") or None
        taco_wrapped = bool(tests.get("taco_wrapped_outputs"))
        results = []
        try:
            for k, report in self.reports(program, inputs, fn_name, self.grader.budget_s(len(inputs), self.limits)):
                results.append(report if isinstance(report, TestResult)
                               else grade_test(report, outputs[k], fn_name, self.grader, taco_wrapped,
                                               timeout_s=self.limits.timeout_s))
        except SandboxError:
            raise  # the sandbox cannot run at all: not a verdict on this program
        except Exception as e:  # an infrastructure failure (what a program does costs its tests, in reports)
            self._kill()  # the next program starts with a fresh runner
            raise SandboxError(f"the sandbox failed while judging a program ({type(e).__name__}: "
                               f"{str(e)[:300]})") from e
        if any(r.detail == OUT_OF_TIME for r in results):  # all or nothing, as the authors score it
            results = [dataclasses.replace(r, passed=False, status="timeout", detail=OUT_OF_TIME) for r in results]
        return results


    def outputs(self, program: str, inputs: list, fn_name: str | None = None) -> list:
        """What `program` prints (stdin tests) or returns (call-based: the JSON value) on each input: the
        expected outputs of a reference solution. Raises RuntimeError if it fails on one."""
        outs = []
        for k, report in self.reports(program, inputs, fn_name):
            if isinstance(report, TestResult) or report["exit"] != 0 or report["timed_out"]:
                raise RuntimeError(f"the program failed on input {k}: {report}")
            if fn_name is None:
                outs.append(report["stdout"])
                continue
            _, value, problem = read_result(report["result"] or "")
            if problem is not None:
                raise RuntimeError(f"the program's result on input {k}: {problem}")
            outs.append(value)
        return outs


def _limits(grader: Grader, memory_mb, **kw) -> Limits:
    return Limits(timeout_s=grader.timeout_s, memory_mb=memory_mb, **{k: v for k, v in kw.items() if v is not None})


def run_tests(program: str, tests: dict, *, grader: "Grader | str | None" = None, timeout_s: float | None = None,
              memory_mb: int = 1024, isolation: str = "auto", **limits) -> list[TestResult]:
    """Judge one program on all its tests in a fresh sandbox, by the grader's rules (timeout_s: instead of
    the grader's per-test limit). Extra keywords: any field of Limits."""
    grader = graders.get(grader, timeout_s)
    with Sandbox(_limits(grader, memory_mb, **limits), isolation, grader) as sandbox:
        return sandbox.run(program, tests)


def _run_chunk(chunk, limits, isolation, grader):
    """Run a list of (program, tests) in ONE sandbox (module-level so executors can pickle it)."""
    with Sandbox(limits, isolation, grader) as sandbox:
        return [sandbox.run(program, tests) for program, tests in chunk]


def default_workers() -> int:
    """One worker per CPU this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


WAITED = 0.5  # a timeout whose processes used less CPU than this share of its wall time spent it waiting


def waited_out(results: list[TestResult]) -> bool:
    """Whether a program's timeouts may be a neighbour's doing: a test that timed out while its processes
    together used the CPU for less than WAITED of its wall time (starved, or sleeping)."""
    return any(r.status == "timeout" and r.cpu_s < WAITED * r.time_s for r in results)


def run_batch(jobs: list[tuple[str, dict]], *, grader: "Grader | str | None" = None, timeout_s: float | None = None,
              memory_mb: int = 1024, workers: int | None = None, isolation: str = "auto",
              executor: concurrent.futures.Executor | None = None, progress: bool | str = False,
              keep_infra_failures: bool = False, **limits) -> list[list[TestResult]]:
    """Judge many (program, tests) jobs concurrently, by the grader's rules (graders.py; timeout_s: instead
    of its per-test limit); results come back in job order.

    workers: concurrent sandboxes (default: one per CPU; each runs one test at a time). As root, each
    sandbox's processes together get one CPU at most (a cgroup), so a test that keeps many processes
    busy cannot make a program on another worker time out; where no cgroup bounds the CPU, a program
    with a timeout that spent its time waiting (waited_out) is judged again once the batch is done,
    alone, and that verdict counts. A sandbox that fails (an infrastructure failure: a runner that cannot
    start, a full TMPDIR) is replaced and the program judged again once; a second failure raises
    SandboxError: such a failure is never a verdict. With keep_infra_failures=True that job gets an
    InfraFailure instead and the batch goes on, unless more than a tenth of its jobs (and at least
    MAX_INFRA_FAILURES) fail so: then the sandbox itself is broken and SandboxError is raised. SIGINT or
    SIGTERM while judging (SIGTERM is turned into SystemExit while this runs, where it would kill the
    process outright) stops every sandbox and removes what they made (cgroups, folders) before the
    exception goes on.
    executor: any concurrent.futures.Executor (a ProcessPoolExecutor, Ray's or Dask's executor, ...) to
    fan the work out beyond this machine; jobs are sent in chunks, each chunk judged by one sandbox where
    the executor runs it. progress: show a tqdm bar (a str is its label).
    """
    grader = graders.get(grader, timeout_s)
    lim = _limits(grader, memory_mb, **limits)
    for i, (_, tests) in enumerate(jobs):
        try:
            check_tests(tests)
        except ValueError as e:
            raise ValueError(f"job {i}: {e}") from None
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(jobs), desc=progress if isinstance(progress, str) else "sandbox", unit="prog")
    try:
        if executor is not None:
            return _judge_with_executor(jobs, lim, isolation, grader, executor, workers, bar)
        return _judge_in_threads(jobs, lim, resolve_isolation(isolation), grader, workers, bar, keep_infra_failures)
    finally:
        if bar:
            bar.close()


def _judge_with_executor(jobs, lim, isolation, grader, executor, workers, bar) -> list:
    """run_batch through an executor: chunks of jobs, each judged in one sandbox where the executor runs it."""
    results: list = [None] * len(jobs)
    n_chunks = max(1, min(len(jobs), 4 * (workers or default_workers())))
    chunks = [list(range(len(jobs)))[c::n_chunks] for c in range(n_chunks)]
    futures = {executor.submit(_run_chunk, [jobs[i] for i in idx], lim, isolation, grader): idx
               for idx in chunks if idx}
    for fut in concurrent.futures.as_completed(futures):
        for i, res in zip(futures[fut], fut.result()):
            results[i] = res
        if bar:
            bar.update(len(futures[fut]))
    return results


def _judge_in_threads(jobs, lim, isolation, grader, workers, bar, keep_infra_failures) -> list:
    """run_batch's own way: `workers` threads, each judging jobs from a shared queue in a sandbox of its own
    (replaced when it fails), then the programs that may have timed out waiting judged again, alone."""
    results: list = [None] * len(jobs)
    todo: queue.Queue = queue.Queue()
    for i in range(len(jobs)):
        todo.put(i)
    live, errors, unbounded, lost = [], [], [], []
    stop = threading.Event()
    most_lost = max(MAX_INFRA_FAILURES, len(jobs) // 10)

    def judge(sandbox, i):
        """jobs[i] in `sandbox` (or a new one), replaced and tried again once if it fails; the sandbox."""
        for attempt in (1, 2):
            try:
                if sandbox is None:
                    sandbox = Sandbox(lim, isolation, grader)
                    live.append(sandbox)
                    if not sandbox.cpu_bounded:
                        unbounded.append(True)
                results[i] = sandbox.run(jobs[i][0], jobs[i][1])
                return sandbox
            except SandboxError as e:
                if sandbox is not None:
                    sandbox.close()
                    sandbox = None
                if attempt == 2 and keep_infra_failures and not stop.is_set():
                    lost.append(i)
                    if len(lost) > most_lost:
                        raise SandboxError(f"the sandbox failed on {len(lost)} of {len(jobs)} programs, each "
                                           f"twice: it is broken, not a program (last: {e})") from e
                    results[i] = InfraFailure(str(e))
                    return None
                if attempt == 2 or stop.is_set():
                    raise

    def worker(finished):
        sandbox = None
        try:
            while not stop.is_set():
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                sandbox = judge(sandbox, i)
                if bar:
                    bar.update(1)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread below
            errors.append(e)
            stop.set()
        finally:
            if sandbox is not None:
                sandbox.close()
            finished.set()

    n = max(1, min(workers or default_workers(), len(jobs)))
    # (Events, not Thread.join: a join that a signal interrupted may return early the next time.)
    finished = [threading.Event() for _ in range(n)]
    with _sigterm_as_exit():
        try:
            for event in finished:
                threading.Thread(target=worker, args=(event,), daemon=True).start()
            for event in finished:
                event.wait()
        except BaseException:  # Ctrl-C or SIGTERM: stop the workers, which close their sandboxes
            stop.set()
            for sandbox in list(live):
                sandbox.interrupt()
            for event in finished:
                event.wait(timeout=30)
            raise
    if errors:
        raise errors[0]
    again = [i for i, res in enumerate(results) if not isinstance(res, InfraFailure) and waited_out(res)]
    if unbounded and again:
        with Sandbox(lim, isolation, grader) as sandbox:
            for i in again:
                results[i] = sandbox.run(jobs[i][0], jobs[i][1])
    return results


@contextlib.contextmanager
def _sigterm_as_exit():
    """SIGTERM raises SystemExit(143) in the main thread while this runs, where it would otherwise end the
    process at once (leaving the sandboxes' cgroups behind); elsewhere, or with a handler of the
    program's own, nothing changes."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def terminate(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


MAX_INFRA_FAILURES = 2  # run_batch: infrastructure failures a batch may keep before the sandbox counts as broken


def pass_rate(results: "list[TestResult] | InfraFailure") -> float:
    """Fraction of tests passed (0.0 for an empty list; nan for an InfraFailure: there is no verdict)."""
    if isinstance(results, InfraFailure):
        return float("nan")
    return sum(r.passed for r in results) / len(results) if results else 0.0


def run_programs(programs: list, tests: list, *, grader: "Grader | str | None" = None, workers=None,
                 progress: bool | str = False) -> list:
    """Each program on its tests, in one run_batch by the grader's rules: results per program, in order. A
    program that is None (the response held no code block) is not run and gets None; one the sandbox
    failed on twice gets an InfraFailure (run_batch's keep_infra_failures), which callers count apart."""
    jobs = [(p, t) for p, t in zip(programs, tests) if p is not None]
    results = iter(run_batch(jobs, grader=grader, workers=workers, progress=progress, keep_infra_failures=True)
                   if jobs else [])
    return [None if p is None else next(results) for p in programs]
