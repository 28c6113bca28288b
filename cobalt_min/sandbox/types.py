"""The sandbox's vocabulary, below both verdicts.py (verdicts, API) and process.py (the processes):
the limits a test runs under, the result of a test, and the error of a sandbox that cannot run at all."""

import dataclasses


STATUSES = ("passed", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit")
OUT_OF_TIME = "the program did not finish all its tests within its total time limit"


class SandboxError(RuntimeError):
    """The sandbox itself could not be started or used (not a verdict on a program)."""


@dataclasses.dataclass(frozen=True)
class InfraFailure:
    """What run_batch(keep_infra_failures=True) gives a job the sandbox failed on twice: no verdict. Callers
    count it apart and leave it out of rewards and Pass@1 (`infra_errors`), never score it."""
    error: str


@dataclasses.dataclass(frozen=True)
class Limits:
    timeout_s: float = 4.0  # wall clock per test (the paper: 4 s); CPU time is capped at ceil(t) + 1
    memory_mb: int = 1024  # address space per test (the authors: 1 GiB)
    # stdout, stderr and any file; a program writing more is killed (output_limit). Neither reference grader
    # caps output: this is a safety cap, far above what a competitive-programming answer prints.
    output_bytes: int = 16 << 20
    # A program's whole suite: the authors run 4 tests at a time within 27 s and score a program that runs
    # out 0. Here tests run one after another, so the budget is total_timeout_s * min(budget_tests, n)
    # seconds of tests, and a program that runs out fails every test (OUT_OF_TIME). (graders.py: each
    # profile's own rule.)
    total_timeout_s: float = 27.0
    budget_tests: int = 4  # the suite budget counts this many tests at most (the authors: 4 at a time)
    max_files: int = 64  # open file descriptors
    max_procs: int = 64  # processes + threads of the sandbox (reserved uid, or bwrap's own user namespace)
    tmp_mb: int = 64  # size of the private writable /tmp (bwrap)


@dataclasses.dataclass
class TestResult:
    """The verdict on one test. `stdout`/`stderr` keep the head and tail of long streams."""
    __test__ = False  # not a pytest test class
    passed: bool
    status: str  # one of STATUSES
    stdout: str = ""
    stderr: str = ""
    time_s: float = 0.0  # wall time
    cpu_s: float = 0.0  # CPU time of the test's processes together
    exit_code: int | None = None
    detail: str = ""  # why the grader decided as it did, when that is not obvious
    returned: str | None = None  # call-based tests: the returned value as JSON text (head kept)

    def to_dict(self):
        return dataclasses.asdict(self)
