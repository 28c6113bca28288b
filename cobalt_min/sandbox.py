"""Run untrusted, model-written Python programs against test cases, safely and fast.

    results = run_tests(program, {"inputs": ["1 2\n"], "outputs": ["3\n"]})
    batch = run_batch([(program, tests), ...], workers=2, progress=True)
    python -m cobalt_min.sandbox solution.py tests.json [--timeout 4] [--memory-mb 1024]

Tests use TACO's `input_output` format: {"inputs": [...], "outputs": [...], "fn_name"?: str}.
Without fn_name a test is stdin -> stdout text; with fn_name each input is the list of positional
arguments of `fn_name` (a top-level function, or a method of `Solution()` when the program defines
`class Solution`) and each output is the expected return value.

How it is built (see README "Sandbox"):
- A sandbox is ONE long-lived runner process (sandbox_runner.py), started inside bubblewrap
  (isolation="bwrap") or, when the grader is root, in namespaces the runner makes itself
  (isolation="process"). Either way: no network, its own pid and ipc namespaces, a file system holding
  only the Python install and a size-capped private /tmp and /dev/shm, an empty environment, and
  (root) a uid reserved for this sandbox, so "kill every process of this sandbox" is a complete clean-up.
  Without root and without bubblewrap only an unsafe process mode is left: 'auto' refuses it.
- The runner forks a fresh copy of itself per test (fresh interpreter state, per-test rlimits and
  wall clock, capped output) and reports stdout/stderr/exit status. The grader, in this process,
  compares with the expected outputs, which never enter the sandbox.
- Whatever a program does costs its own tests only: a malformed result is a runtime error, a runner
  it killed or froze is replaced and the remaining tests go on, and nothing it made (files, shared
  memory, keys, processes) is left for the next test.
"""

import argparse
import ast
import concurrent.futures
import dataclasses
import fcntl
import json
import marshal
import math
import os
import queue
import re
import select
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
from pathlib import Path

from cobalt_min import sandbox_runner as runner

# The runner starts from its compiled code (marshal), read from a memfd: compiling its source in each
# runner would leave ~2 MB more of the compiler's memory in the process that every test forks from
# (each page of it costs every fork).
RUNNER_CODE = marshal.dumps(compile((Path(__file__).parent / "sandbox_runner.py").read_text(), "sandbox_runner.py",
                                    "exec"))
RUNNER_BOOT = ("import marshal, os, sys\nfd = int(sys.argv[2])\ncode = marshal.loads(os.pread(fd, 1 << 24, 0))\n"
               "os.close(fd)\nexec(code, {'__name__': '__main__'})\n")
_RUNNER_CODE_FD: list = []
STATUSES = ("passed", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit")
KEEP_CHARS = 4096  # each captured stream is kept as its first and last KEEP_CHARS characters
SANDBOX_UID_BASE = int(os.environ.get("COBALT_SANDBOX_UID_BASE", "61000"))  # uids base .. base+255
# Uid leases are locked machine-wide (not under TMPDIR, which two graders may set differently).
LOCK_DIR = Path(next((d for d in ("/run/lock", "/var/lock") if os.path.isdir(d)), "/tmp")) / "cobalt_min-sandbox"


OUT_OF_TIME = "the program did not finish all its tests within its total time limit"


class SandboxError(RuntimeError):
    """The sandbox itself could not be started or used (not a verdict on a program)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    timeout_s: float = 4.0  # wall clock per test (the paper: 4 s); CPU time is capped at ceil(t) + 1
    memory_mb: int = 1024  # address space per test (the authors: 1 GiB)
    output_bytes: int = 1 << 20  # stdout, stderr and any file; a program writing more is killed (output_limit)
    # A program's whole suite: the authors run 4 tests at a time within 27 s and score a program that runs
    # out 0. Here tests run one after another, so the budget is total_timeout_s * min(parallel_tests, n)
    # seconds of tests, and a program that runs out fails every test (OUT_OF_TIME).
    total_timeout_s: float = 27.0
    parallel_tests: int = 4
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
    time_s: float = 0.0
    exit_code: int | None = None
    detail: str = ""  # why the grader decided as it did, when that is not obvious
    returned: str | None = None  # call-based tests: the returned value as JSON text (head kept)

    def to_dict(self):
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------- comparison


def normalize_lines(text: str) -> list[str]:
    """Lines with trailing whitespace removed, without leading or trailing empty lines.

    Equivalent to the authors' `stdout.strip() == expected.strip()` except that leading spaces of the
    first line and trailing spaces inside lines are not significant either way; lines are compared
    in order, one to one (never as sets, never as prefixes). Lines end at "\n" only (as the authors'
    comparison sees them), never at the other characters str.splitlines() takes for line breaks."""
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    start = 0
    while start < len(lines) and not lines[start]:
        start += 1
    return lines[start:]


_INTEGER = re.compile(r"[+-]?[0-9]+")


def _tokens_close(a: str, b: str, tol: float) -> bool:
    """Two output tokens equal within `tol`. Integers compare exactly (a tolerance is for real numbers:
    1000000001 is not 1000000000); numbers too large for a float compare as text, never as inf."""
    if a == b:
        return True
    if _INTEGER.fullmatch(a) and _INTEGER.fullmatch(b):
        try:
            return int(a) == int(b)
        except ValueError:  # more digits than Python converts: the texts differ, so do the numbers
            return False
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isfinite(x) and math.isfinite(y) and math.isclose(x, y, rel_tol=tol, abs_tol=tol)


def stdout_matches(got: str, expected: str, float_tol: float | None = None) -> bool:
    """Line-by-line comparison of program output with the expected output (see normalize_lines).
    With float_tol, tokens (split at spaces and tabs) that both parse as real numbers may differ by that
    absolute or relative amount."""
    got_lines, exp_lines = normalize_lines(got), normalize_lines(expected)
    if len(got_lines) != len(exp_lines):
        return False
    if float_tol is None:
        return got_lines == exp_lines
    for g, e in zip(got_lines, exp_lines):
        g_tok, e_tok = g.replace("\t", " ").split(" "), e.replace("\t", " ").split(" ")
        g_tok, e_tok = [t for t in g_tok if t], [t for t in e_tok if t]
        if len(g_tok) != len(e_tok) or not all(_tokens_close(a, b, float_tol) for a, b in zip(g_tok, e_tok)):
            return False
    return True


def _values_equal(got, expected, float_tol):
    if isinstance(got, bool) or isinstance(expected, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
        if isinstance(got, float) and not math.isfinite(got) or isinstance(expected, float) and not math.isfinite(expected):
            return False  # inf (a number too large for JSON's floats) or nan: never a match
        if float_tol is not None and (isinstance(got, float) or isinstance(expected, float)):
            try:
                return math.isclose(got, expected, rel_tol=float_tol, abs_tol=float_tol)
            except OverflowError:  # an integer beyond float range against a float
                return False
        return got == expected
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(_values_equal(g, e, float_tol) for g, e in zip(got, expected))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(_values_equal(got[k], expected[k], float_tol) for k in got)
    return type(got) is type(expected) and got == expected


def value_matches(got, expected, float_tol: float | None = None, taco_wrapped: bool = False) -> bool:
    """Call-based comparison of JSON values (a returned tuple arrives as a list). With taco_wrapped
    (TACO data only), an expected one-element list also accepts its element, as TACO's checker does.
    Non-finite numbers never match; with float_tol only values involving a float are compared within it."""
    try:
        if _values_equal(got, expected, float_tol):
            return True
        return taco_wrapped and isinstance(expected, list) and len(expected) == 1 \
            and _values_equal(got, expected[0], float_tol)
    except RecursionError:  # nested deeper than the grader compares
        return False


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


def judge(report: dict, expected, fn_name: str | None, float_tol=None, taco_wrapped=False) -> TestResult:
    """Turn the runner's report on one test into a verdict, comparing with `expected` here."""
    out, err, code = report["stdout"], report["stderr"], report["exit"]
    returned = value = problem = None
    if fn_name is not None and report.get("result"):
        returned, value, problem = read_result(report["result"])
        if returned is not None and len(returned) > 2 * KEEP_CHARS:
            returned = _keep_ends(returned)

    def verdict(passed, status, detail=""):
        return TestResult(passed, status, _keep_ends(out), _keep_ends(err), report["time_s"], code, detail, returned)

    if report["output_limited"]:
        return verdict(False, "output_limit", "the program printed more than the output limit")
    if report["timed_out"]:
        return verdict(False, "timeout")
    if code != 0:
        if "MemoryError" in err[-2000:]:
            return verdict(False, "memory_limit")
        if code == 121:
            return verdict(False, "runtime_error", "the sandbox could not prepare the test")
        return verdict(False, "runtime_error")
    if fn_name is None:
        ok = stdout_matches(out, expected, float_tol)
        return verdict(ok, "passed" if ok else "wrong_answer")
    if not report.get("result"):
        return verdict(False, "runtime_error", "the function returned nothing the sandbox could read")
    if problem is not None:
        return verdict(False, "wrong_answer" if problem.startswith("return value") else "runtime_error", problem)
    ok = value_matches(value, expected, float_tol, taco_wrapped)
    return verdict(ok, "passed" if ok else "wrong_answer")


def _next_frame(data: bytes, pos: int):
    """(kind, body, position after it) of the runner's frame at `pos`, or None while incomplete."""
    if len(data) - pos < runner.FRAME.size:
        return None
    size, kind = runner.FRAME.unpack_from(data, pos)
    end = pos + runner.FRAME.size + size
    return (kind, data[pos + runner.FRAME.size:end], end) if end <= len(data) else None


def _decode_report(body: bytes) -> dict:
    """The runner's binary report on one test (sandbox_runner.REPORT) as a dict for judge()."""
    k, code, flags, time_s, n_out, n_err, n_res = runner.REPORT.unpack_from(body)
    out = runner.REPORT.size
    if len(body) != out + n_out + n_err + n_res:
        raise ValueError("report sizes do not add up")
    text = [body[a:b].decode("utf-8", "replace") for a, b in
            ((out, out + n_out), (out + n_out, out + n_out + n_err), (out + n_out + n_err, len(body)))]
    return {"i": k, "exit": code, "timed_out": bool(flags & runner.TIMED_OUT),
            "output_limited": bool(flags & runner.OUTPUT_LIMITED), "stdout": text[0], "stderr": text[1],
            "result": text[2] if flags & runner.HAS_RESULT else None, "time_s": time_s}


# ----------------------------------------------------------------------------- isolation modes


_BWRAP_OK: dict = {}
_NAMESPACES_OK: dict = {}


def bwrap_available() -> bool:
    """bubblewrap installed and able to start a sandbox here (checked once per process)."""
    if "ok" not in _BWRAP_OK:
        path = shutil.which("bwrap")
        ok = False
        if path:
            try:
                probe = subprocess.run(_bwrap_prefix(Limits(), scratch_folder(_python_paths())) + [sys.executable, "-I", "-c", "pass"],
                                       capture_output=True, timeout=30)
                ok = probe.returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
        _BWRAP_OK["ok"] = ok
    return _BWRAP_OK["ok"]


UNSAFE_ENV = "COBALT_SANDBOX_ISOLATION"  # set to "process" to allow the unsafe process mode everywhere


def resolve_isolation(isolation: str) -> str:
    """'auto' -> 'bwrap' when it works here, else 'process' when it is safe here (root: own namespaces),
    else an error saying how to get a safe mode, or how to opt in to the unsafe one for trusted code."""
    if isolation not in ("auto", "bwrap", "process"):
        raise ValueError(f"isolation must be auto, bwrap or process, not {isolation!r}")
    if isolation == "auto" and os.environ.get(UNSAFE_ENV):
        isolation = os.environ[UNSAFE_ENV]
        if isolation not in ("bwrap", "process"):
            raise SandboxError(f"{UNSAFE_ENV} must be bwrap or process, not {isolation!r}")
    if isolation == "bwrap" or (isolation == "auto" and bwrap_available()):
        if not bwrap_available():
            raise SandboxError("isolation='bwrap' was asked for but bubblewrap is missing or cannot start here: "
                               "install it (apt-get install bubblewrap).")
        return "bwrap"
    if namespaces_available():
        return "process"
    if isolation == "process":
        if not _BWRAP_OK.get("warned"):
            _BWRAP_OK["warned"] = True
            warnings.warn("isolation='process' without namespaces: programs see the machine's files"
                          + ("" if os.geteuid() == 0 else ", run as your own user and can reach your processes")
                          + ". Use it for trusted programs only.", stacklevel=3)
        return "process"
    raise SandboxError(
        "no safe sandbox here: bubblewrap is missing or cannot start, and without root the process mode cannot "
        "hide the machine's files from the programs (a policy in training could learn to read its tests' answers). "
        "Install bubblewrap (apt-get install bubblewrap; in a container it needs unprivileged user namespaces or "
        f"root), or, for trusted programs only, opt in with {UNSAFE_ENV}=process (the sandbox CLI: --isolation "
        "process).")


def namespaces_available() -> bool:
    """Process mode can isolate here: the grader is root and may make namespaces and mounts (checked once
    per process by starting a runner that does)."""
    if "ok" not in _NAMESPACES_OK:
        _NAMESPACES_OK["ok"] = False
        if os.geteuid() == 0:
            try:
                Sandbox(Limits(), "process", _probe=True).start_and_close()
                _NAMESPACES_OK["ok"] = True
            except (SandboxError, OSError):
                pass
    return _NAMESPACES_OK["ok"]


def require_safe_sandbox() -> str:
    """For the scripts, before any long work: the isolation mode 'auto' resolves to here, or exit with
    one clear message (see resolve_isolation)."""
    try:
        return resolve_isolation("auto")
    except SandboxError as e:
        raise SystemExit(f"error: {e}") from None


def _python_paths() -> list[str]:
    """Folders the interpreter needs, read-only: its install, the venv, and site-packages."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
    for p in sys.path:
        if p and os.path.isdir(p) and ("site-packages" in p or "dist-packages" in p):
            paths.add(p)
    keep = sorted(p for p in paths if p and os.path.exists(p))
    return [p for p in keep if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in keep)]


def scratch_folder(python_paths: list[str]) -> str:
    """Where programs run inside bwrap or the namespaced process mode (their cwd, HOME and TMPDIR): a
    private size-capped tmpfs that holds nothing else, emptied after every test. /tmp, unless the
    Python install lies under it (a checkout or venv in /tmp): its mount points would then sit in the
    programs' folder, where no clean-up can remove them, so another folder."""
    for folder in ("/tmp", "/scratch", "/cobalt-scratch"):
        if not any(p == folder or p.startswith(folder + "/") for p in python_paths):
            return folder
    raise SandboxError("the Python install lies under /tmp, /scratch and /cobalt-scratch: no scratch folder left")


def _bwrap_prefix(limits: Limits, scratch: str) -> list[str]:
    # /dev: bwrap's minimal one, read-only but for a size-capped /dev/shm (cleaned after each test).
    args = [shutil.which("bwrap") or "bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--clearenv",
            "--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev",
            "--size", str(limits.tmp_mb << 20), "--perms", "1777", "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    if os.geteuid() != 0:
        args[1:1] = ["--unshare-user"]  # unprivileged bwrap works through a user namespace
    for name in ("bin", "lib", "lib32", "lib64", "sbin"):
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    for f in ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"):
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    args += ["--size", str(limits.tmp_mb << 20), "--perms", "1777", "--tmpfs", scratch]
    made = {"/", "/usr", "/proc", "/dev", scratch}
    for p in _python_paths():
        parts = Path(p).parts
        for i in range(2, len(parts)):  # world-traversable parents, whatever the host's modes
            parent = str(Path(*parts[:i]))
            if parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", parent]
        if p not in made and not p.startswith("/usr/"):
            args += ["--ro-bind", p, p]
    # Everything else is read-only: without root, bwrap's root folder belongs to you inside its user
    # namespace, and a file a program left in it would be there for every later program.
    args += ["--remount-ro", "/", "--chdir", scratch]
    for name, value in _runner_env(scratch).items():
        args += ["--setenv", name, value]
    if os.geteuid() == 0:  # the runner needs these two to drop to the sandbox uid, then has none
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return args


def _runner_env(tmp: str) -> dict:
    """The whole environment of the runner and its programs. MALLOC_ARENA_MAX: glibc gives each thread
    its own 64 MiB malloc arena of address space, so an honest ThreadPoolExecutor(40) would hit the
    address-space limit without touching the memory."""
    return {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8", "MALLOC_ARENA_MAX": "2",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


class _UidLease:
    """A uid reserved for one live sandbox, across threads AND processes on this machine (flock)."""

    def __init__(self):
        LOCK_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        for uid in range(SANDBOX_UID_BASE, SANDBOX_UID_BASE + 256):
            f = open(LOCK_DIR / f"uid-{uid}.lock", "a")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            self.uid, self._file = uid, f
            return
        raise SandboxError(f"all 256 sandbox uids from {SANDBOX_UID_BASE} are in use; "
                           "set COBALT_SANDBOX_UID_BASE to another free range.")

    def release(self):
        self._file.close()


# ----------------------------------------------------------------------------- one sandbox


class Sandbox:
    """One live runner process; `run(program, tests)` judges all tests of one program.

    Use as a context manager. Not thread-safe: one Sandbox per thread (run_batch does that)."""

    def __init__(self, limits: Limits = Limits(), isolation: str = "auto", *, _probe: bool = False):
        self.limits = limits
        if _probe:  # namespaces_available(): try the namespaced process mode itself
            self.isolation, self.namespaces = "process", True
        else:
            self.isolation = resolve_isolation(isolation)
            self.namespaces = self.isolation == "process" and namespaces_available()
        self._proc = None
        self._report_fd = None  # the memfd the runner appends test reports to (see sandbox_runner)
        self._lease = _UidLease() if os.geteuid() == 0 else None
        self._tmp = None
        self.restarts = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def start_and_close(self):
        """Start the runner once and stop it (raises SandboxError if it cannot start)."""
        try:
            self._start()
        finally:
            self.close()

    def _start(self):
        uid = self._lease.uid if self._lease else None
        own_namespaces = self.isolation == "bwrap" or self.namespaces
        settings = {"uid": uid, "pidns": own_namespaces, "kill_all": own_namespaces or uid is not None,
                    "namespaces": self.namespaces, "private_ipc": own_namespaces or uid is not None,
                    "parent": os.getpid() if self.isolation == "process" else None}
        if self._tmp is None and self.isolation == "process":
            # namespaces: where the sandbox's root is mounted (in its own mount namespace: this folder stays
            # empty here); otherwise the programs' scratch folder.
            self._tmp = tempfile.mkdtemp(prefix="cobalt_min-sandbox-")
            if uid is not None and not self.namespaces:
                os.chown(self._tmp, uid, uid)
        if self.isolation == "bwrap":
            # bwrap itself gets the clean environment too: without root its pid 1 runs as you, and a
            # program can read /proc/1/environ.
            scratch = scratch_folder(_python_paths())
            settings["tmp"], cmd, env = scratch, _bwrap_prefix(self.limits, scratch), _runner_env(scratch)
        elif self.namespaces:
            scratch = scratch_folder(_python_paths())
            settings.update(tmp=scratch, root=self._tmp, tmp_mb=self.limits.tmp_mb, python_paths=_python_paths())
            cmd, env = [], _runner_env(scratch)
        else:
            settings["tmp"], cmd, env = self._tmp, [], _runner_env(self._tmp)
        if self._report_fd is None:
            self._report_fd = os.memfd_create("cobalt_min-reports")
        to_runner, self._to_runner = os.pipe()
        self._from_runner, from_runner = os.pipe()
        settings.update(in_fd=to_runner, out_fd=from_runner, report_fd=self._report_fd)
        if not _RUNNER_CODE_FD:
            _RUNNER_CODE_FD.append(os.memfd_create("cobalt_min-runner"))
            os.write(_RUNNER_CODE_FD[0], RUNNER_CODE)
        cmd += [sys.executable, "-I", "-c", RUNNER_BOOT, json.dumps(settings), str(_RUNNER_CODE_FD[0])]
        self._errlog = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._errlog,
                                          env=env, start_new_session=True, close_fds=True,
                                          pass_fds=(to_runner, from_runner, self._report_fd, _RUNNER_CODE_FD[0]))
        finally:
            os.close(to_runner)
            os.close(from_runner)
        self._buf, self._eof = b"", False
        hello = self._recv(time.monotonic() + 30)
        if not hello or not hello.get("ready"):
            self._errlog.seek(0)
            detail = self._errlog.read()[-2000:].decode(errors="replace").strip()
            self._kill()
            if uid is not None and self.isolation == "process" and not self.namespaces:
                detail += (f" (the runner runs as uid {uid}: it must be able to read the Python install "
                           f"{sys.base_prefix} and {sys.prefix})")
            raise SandboxError(f"the sandbox runner ({self.isolation}) did not start: {detail or 'no message'}")

    def _kill(self):
        if self._proc is not None:
            self._proc.kill()  # bwrap / namespaces: the whole pid namespace goes down with the runner
            self._proc.wait()
            for f in (self._to_runner, self._from_runner):
                try:
                    os.close(f)
                except OSError:
                    pass
            self._errlog.close()
            self._proc = None

    def close(self):
        """Stop the runner and every process of the sandbox; release the uid; delete the scratch folder."""
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._send({"op": "exit"})
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()
        if self._lease is not None and self.isolation == "process" and not self.namespaces:
            # The runner may have died before cleaning up: one more start kills whatever is left.
            try:
                self._start()
                self._send({"op": "exit"})
                self._proc.wait(timeout=5)
            except (OSError, SandboxError, subprocess.TimeoutExpired):
                pass
            self._kill()
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        if self._tmp is not None:
            runner.empty_folder(self._tmp)  # (no recursion: a program may have nested folders very deep)
            try:
                os.rmdir(self._tmp)
            except OSError:
                pass
            self._tmp = None
        if self._report_fd is not None:
            os.close(self._report_fd)
            self._report_fd = None

    def _send(self, msg):
        data = json.dumps(msg).encode()
        runner.write_all(self._to_runner, runner.FRAME.pack(len(data), b"J") + data)

    def _read_reports(self, offset):
        """The complete test reports the runner appended to the report file after `offset`, and the
        offset after them. Raises ValueError on a malformed report."""
        size = os.fstat(self._report_fd).st_size
        data = os.pread(self._report_fd, max(0, size - offset), offset)
        reports, pos = [], 0
        while (frame := _next_frame(data, pos)) is not None:  # an incomplete tail is still being written
            kind, body, pos = frame
            if kind != b"R":
                raise ValueError(f"unexpected frame kind {kind!r} in the report file")
            reports.append(_decode_report(body))
        return reports, offset + pos

    def _recv(self, deadline):
        """Next message from the runner (a dict: JSON, or a test report sent through the pipe), or None
        if it died or said nothing before `deadline`."""
        fd = self._from_runner
        while True:
            if len(self._buf) >= runner.FRAME.size and runner.FRAME.unpack_from(self._buf)[0] > self._max_frame():
                self._eof = True  # no honest message is that big: treat the runner as lost
                return None
            frame = _next_frame(self._buf, 0)
            if frame is not None:
                kind, body, end = frame
                self._buf = self._buf[end:]
                try:
                    return json.loads(body) if kind == b"J" else _decode_report(body)
                except (ValueError, struct.error):
                    self._eof = True  # garbled: treat the runner as lost
                    return None
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self._eof = True
                return None
            self._buf += chunk

    def _max_frame(self):
        """The largest message the runner can honestly send: a report of three capped streams."""
        return 3 * self.limits.output_bytes + (1 << 16)

    def reports(self, program: str, inputs: list, fn_name: str | None = None):
        """Run `program` on each input in order; yield (k, report) where report is the runner's raw
        dict (stdout, stderr, exit, result, ...) or, for a test that cost the runner its life or hit the
        program's total time limit, a TestResult that already says so."""
        lim = self.limits
        job = {"op": "run", "program": program, "inputs": inputs, "fn_name": fn_name,
               "imports": imported_modules(program),
               "limits": {"timeout_s": lim.timeout_s, "memory_mb": lim.memory_mb, "output_bytes": lim.output_bytes,
                          "max_files": lim.max_files,
                          # RLIMIT_NPROC counts per uid and user namespace: it binds the sandbox alone under a
                          # reserved uid or in bwrap's own user namespace (non-root), else the user's processes.
                          "max_procs": lim.max_procs if self._lease or self.isolation == "bwrap" else 0}}
        k = 0
        program_deadline = time.monotonic() + lim.total_timeout_s * min(lim.parallel_tests, len(inputs))
        while k < len(inputs):
            if time.monotonic() >= program_deadline:
                yield k, TestResult(False, "timeout", detail=OUT_OF_TIME)
                k += 1
                continue
            if self._proc is None or self._proc.poll() is not None:
                if self._proc is not None:
                    self._kill()
                    self.restarts += 1
                self._start()
            os.ftruncate(self._report_fd, 0)  # the runner is idle: drop the last job's reports
            try:
                self._send(dict(job, start=k, budget_s=max(0.0, program_deadline - time.monotonic())))
            except OSError:
                self._kill()
                continue
            offset, progress_at, done = 0, time.monotonic(), False
            pending = {}  # reports read but not yet yielded, by test index (big ones come by the pipe)
            while k < len(inputs):
                # Sleep until the runner says the job is done, waking to check progress: it enforces
                # timeout_s on each test itself, so no new report for timeout_s + 2 s means it froze.
                msg = self._recv(min(progress_at + lim.timeout_s + 2.0, program_deadline + 2.0))
                try:
                    reports, offset = self._read_reports(offset)  # (all written before msg was sent)
                except (ValueError, struct.error):
                    reports, msg, self._eof = [], None, True  # garbled: treat the runner as lost
                if msg is not None and "i" in msg:  # a big report, sent through the pipe
                    reports, msg = reports + [msg], None
                pending.update((report["i"], report) for report in reports)
                while k in pending:
                    yield k, pending.pop(k)
                    k += 1
                    progress_at = time.monotonic()
                done = msg == {"done": True}
                if done and k == len(inputs):
                    break
                if done and time.monotonic() >= program_deadline:
                    break  # the runner stopped at the program's total time: the outer loop fails the rest
                if msg is None and not self._eof and reports:
                    continue  # slow but alive
                if k < len(inputs):
                    # Killed, frozen (SIGSTOP) or garbled by the program, or out of total time: judge
                    # test k (the first one not reported), replace the runner, go on with k + 1.
                    frozen = msg is None and not self._eof
                    detail = (OUT_OF_TIME if time.monotonic() >= program_deadline
                              else "the sandbox stopped answering" if frozen else "the program killed its sandbox")
                    self._kill()
                    self.restarts += 1
                    job["imports"] = []  # the rest without importing ahead: that may be what failed
                    yield k, TestResult(False, "timeout" if frozen else "runtime_error", detail=detail)
                    k += 1
                    break
                self._kill()  # every test reported, but the runner said something unexpected
                break
            if k == len(inputs) and not done and self._proc is not None:
                # The last reports arrived while checking progress: the runner's "done" is still to come.
                if self._recv(time.monotonic() + 5) != {"done": True}:
                    self._kill()

    def run(self, program: str, tests: dict, float_tol: float | None = None) -> list[TestResult]:
        """Judge `program` on every test of `tests` (TACO input_output dict), in order."""
        inputs, outputs = check_tests(tests)
        fn_name = tests.get("fn_name") or None
        taco_wrapped = bool(tests.get("taco_wrapped_outputs"))
        results = []
        try:
            for k, report in self.reports(program, inputs, fn_name):
                results.append(report if isinstance(report, TestResult)
                               else judge(report, outputs[k], fn_name, float_tol, taco_wrapped))
        except SandboxError:
            raise  # the sandbox cannot run at all: not a verdict on this program
        except Exception as e:  # noqa: BLE001 - whatever went wrong costs this program only
            self._kill()  # the next program starts with a fresh runner
            detail = f"the sandbox failed on this program ({type(e).__name__}: {str(e)[:300]})"
            results += [TestResult(False, "runtime_error", detail=detail) for _ in range(len(inputs) - len(results))]
        if any(r.detail == OUT_OF_TIME for r in results):  # all or nothing, as the authors score it
            results = [dataclasses.replace(r, passed=False, status="timeout", detail=OUT_OF_TIME) for r in results]
        return results


# Imported ahead by the runner only as a program imports them: printing is all they do.
IMPORT_SIDE_EFFECTS = {"this", "antigravity", "__hello__", "__phello__"}


def imported_modules(program: str) -> list[str]:
    """The modules `program` imports anywhere (`import a.b`, `from a.b import c` -> a.b), which the
    runner imports once for all its tests when it has not loaded them (sandbox_runner.run_in_template)."""
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return [name for name in dict.fromkeys(names) if name.split(".")[0] not in IMPORT_SIDE_EFFECTS]


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


def _limits(timeout_s, memory_mb, **kw) -> Limits:
    return Limits(timeout_s=timeout_s, memory_mb=memory_mb, **{k: v for k, v in kw.items() if v is not None})


def run_tests(program: str, tests: dict, *, timeout_s: float = 4.0, memory_mb: int = 1024,
              isolation: str = "auto", float_tol: float | None = None, **limits) -> list[TestResult]:
    """Judge one program on all its tests in a fresh sandbox. Extra keywords: any field of Limits."""
    with Sandbox(_limits(timeout_s, memory_mb, **limits), isolation) as sandbox:
        return sandbox.run(program, tests, float_tol)


def _run_chunk(chunk, limits, isolation, float_tol):
    """Run a list of (program, tests) in ONE sandbox (module-level so executors can pickle it)."""
    with Sandbox(limits, isolation) as sandbox:
        return [sandbox.run(program, tests, float_tol) for program, tests in chunk]


def default_workers() -> int:
    """One worker per CPU this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def run_batch(jobs: list[tuple[str, dict]], *, timeout_s: float = 4.0, memory_mb: int = 1024,
              workers: int | None = None, isolation: str = "auto", float_tol: float | None = None,
              executor: concurrent.futures.Executor | None = None, progress: bool | str = False,
              **limits) -> list[list[TestResult]]:
    """Judge many (program, tests) jobs concurrently; results come back in job order.

    workers: concurrent sandboxes (default: one per CPU; each runs one test at a time, so the machine
    is never oversubscribed). executor: any concurrent.futures.Executor (a ProcessPoolExecutor, Ray's
    or Dask's executor, ...) to fan the work out beyond this machine; jobs are sent in chunks, each
    chunk judged by one sandbox where the executor runs it. progress: show a tqdm bar (a str is its label).
    """
    lim = _limits(timeout_s, memory_mb, **limits)
    for i, (_, tests) in enumerate(jobs):
        try:
            check_tests(tests)
        except ValueError as e:
            raise ValueError(f"job {i}: {e}") from None
    results: list = [None] * len(jobs)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(jobs), desc=progress if isinstance(progress, str) else "sandbox", unit="prog")
    try:
        if executor is not None:
            n_chunks = max(1, min(len(jobs), 4 * (workers or default_workers())))
            chunks = [list(range(len(jobs)))[c::n_chunks] for c in range(n_chunks)]
            futures = {executor.submit(_run_chunk, [jobs[i] for i in idx], lim, isolation, float_tol): idx
                       for idx in chunks if idx}
            for fut in concurrent.futures.as_completed(futures):
                for i, res in zip(futures[fut], fut.result()):
                    results[i] = res
                if bar:
                    bar.update(len(futures[fut]))
            return results
        todo: queue.Queue = queue.Queue()
        for i in range(len(jobs)):
            todo.put(i)
        errors: list = []
        isolation = resolve_isolation(isolation)  # resolve (and warn) once, not per thread

        def worker():
            try:
                with Sandbox(lim, isolation) as sandbox:
                    while not errors:
                        try:
                            i = todo.get_nowait()
                        except queue.Empty:
                            return
                        program, tests = jobs[i]
                        results[i] = sandbox.run(program, tests, float_tol)
                        if bar:
                            bar.update(1)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread below
                errors.append(e)

        n = max(1, min(workers or default_workers(), len(jobs)))
        threads = [threading.Thread(target=worker, daemon=True) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results
    finally:
        if bar:
            bar.close()


def pass_rate(results: list[TestResult]) -> float:
    """Fraction of tests passed (0.0 for an empty list)."""
    return sum(r.passed for r in results) / len(results) if results else 0.0


# ----------------------------------------------------------------------------- CLI


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m cobalt_min.sandbox",
        description="Run PROGRAM.py on the tests in TESTS.json (TACO input_output format) inside the sandbox "
                    "and print one JSON object: passed, pass_rate, results. Exits 0 whatever the verdicts.")
    parser.add_argument("program", help="the Python program to judge")
    parser.add_argument("tests", help='JSON file: {"inputs": [...], "outputs": [...], "fn_name"?: str}')
    parser.add_argument("--timeout", type=float, default=4.0, help="seconds per test (default 4, as the paper)")
    parser.add_argument("--memory-mb", type=int, default=1024, help="address space per test (default 1024)")
    parser.add_argument("--total-timeout", type=float, default=27.0,
                        help="a program's budget for all its tests is this many seconds times min(4, tests); one that "
                             "runs out fails every test (default 27: the authors' 27 s with 4 tests at a time)")
    parser.add_argument("--float-tol", type=float, default=None, help="accept numbers within this tolerance")
    parser.add_argument("--isolation", choices=["auto", "bwrap", "process"], default="auto",
                        help="auto: bwrap when it works here, else process as root (own namespaces); without "
                             "root and bubblewrap, process runs programs unisolated and must be asked for "
                             "(default auto)")
    args = parser.parse_args(argv)
    try:
        program = Path(args.program).read_text()
    except (OSError, UnicodeDecodeError) as e:
        parser.exit(2, f"error: cannot read program {args.program}: {e}\n")
    try:
        tests = json.loads(Path(args.tests).read_text())
        check_tests(tests)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        parser.exit(2, f"error: {args.tests} is not a usable tests file: {e}\n")
    try:
        results = run_tests(program, tests, timeout_s=args.timeout, memory_mb=args.memory_mb,
                            total_timeout_s=args.total_timeout, float_tol=args.float_tol, isolation=args.isolation)
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
