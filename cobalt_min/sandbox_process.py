"""The sandbox's process machinery: the runner processes, their isolation, and the channel to them.

Verdicts are sandbox.py's (output comparison, grade_test, Sandbox.run), but for the tests that cost a
runner its life (Runner.reports says what happened to them); a reader of the paper can skip this file. Imports run one way: sandbox.py -> this file -> sandbox_runner.py,
all of them above sandbox_types.py. What it does: start one long-lived runner process
(sandbox_runner.py) inside bubblewrap or in namespaces the runner makes itself, lease it a uid of its
own, hand it one program and its tests' inputs at a time, read back its binary per-test reports, and
replace it when a program kills or freezes it. sandbox.py hands each report to grade_test.
"""

from __future__ import annotations

import ast
import fcntl
import json
import marshal
import os
import select
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from pathlib import Path

from cobalt_min import sandbox_runner as runner
from cobalt_min.sandbox_types import OUT_OF_TIME, Limits, SandboxError, TestResult

# The runner starts from its compiled code (marshal), read from a memfd: compiling its source in each
# runner would leave ~2 MB more of the compiler's memory in the process that every test forks from
# (each page of it costs every fork).
RUNNER_CODE = marshal.dumps(compile((Path(__file__).parent / "sandbox_runner.py").read_text(), "sandbox_runner.py",
                                    "exec", dont_inherit=True))  # (not this file's __future__ flags)
RUNNER_BOOT = ("import marshal, os, sys\nfd = int(sys.argv[2])\ncode = marshal.loads(os.pread(fd, 1 << 24, 0))\n"
               "os.close(fd)\nexec(code, {'__name__': '__main__'})\n")
_RUNNER_CODE_FD: list = []

SANDBOX_UID_BASE = int(os.environ.get("COBALT_SANDBOX_UID_BASE", "61000"))  # uids base .. base+255
# Uid leases are locked machine-wide (not under TMPDIR, which two graders may set differently).
LOCK_DIR = Path(next((d for d in ("/run/lock", "/var/lock") if os.path.isdir(d)), "/tmp")) / "cobalt_min-sandbox"

def _next_frame(data: bytes, pos: int):
    """(kind, body, position after it) of the runner's frame at `pos`, or None while incomplete."""
    if len(data) - pos < runner.FRAME.size:
        return None
    size, kind = runner.FRAME.unpack_from(data, pos)
    end = pos + runner.FRAME.size + size
    return (kind, data[pos + runner.FRAME.size:end], end) if end <= len(data) else None


def _decode_report(body: bytes) -> dict:
    """The runner's binary report on one test (sandbox_runner.REPORT) as a dict for sandbox.grade_test()."""
    k, code, flags, time_s, cpu_s, oom_kills, n_out, n_err, n_res = runner.REPORT.unpack_from(body)
    out = runner.REPORT.size
    if len(body) != out + n_out + n_err + n_res:
        raise ValueError("report sizes do not add up")
    text = [body[a:b].decode("utf-8", "replace") for a, b in
            ((out, out + n_out), (out + n_out, out + n_out + n_err), (out + n_out + n_err, len(body)))]
    return {"i": k, "exit": code, "timed_out": bool(flags & runner.TIMED_OUT),
            "output_limited": bool(flags & runner.OUTPUT_LIMITED), "out_of_memory": bool(flags & runner.OUT_OF_MEMORY),
            "stdout": text[0], "stderr": text[1],
            "result": text[2] if flags & runner.HAS_RESULT else None, "time_s": time_s, "cpu_s": cpu_s,
            "oom_kills": oom_kills}


# ----------------------------------------------------------------------------- isolation modes

UNSAFE_ENV = "COBALT_SANDBOX_ISOLATION"  # bwrap, process or unsafe: the mode 'auto' stands for
ISOLATIONS = ("auto", "bwrap", "process", "unsafe")
_WARNED: list = []  # the unsafe mode's warning is given once per process


def resolve_isolation(isolation: str) -> str:
    """The mode a sandbox asked for `isolation` runs in. 'auto' -> 'bwrap' when bubblewrap works here,
    else 'process' as root (namespaces the runner makes itself), else an error saying how to get a safe
    mode, or how to opt in to the unsafe one for trusted code. Never a weaker mode than asked for: a mode
    that cannot start raises SandboxError each time it is tried (nothing is cached as unavailable)."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATIONS)}, not {isolation!r}")
    if isolation == "auto" and os.environ.get(UNSAFE_ENV):
        isolation = os.environ[UNSAFE_ENV]
        if isolation not in ISOLATIONS[1:]:
            raise SandboxError(f"{UNSAFE_ENV} must be bwrap, process or unsafe, not {isolation!r}")
    if isolation == "bwrap" or (isolation == "auto" and bwrap_available()):
        if not bwrap_available():
            raise SandboxError("isolation='bwrap' was asked for but bubblewrap is missing or cannot start here: "
                               "install it (apt-get install bubblewrap).")
        return "bwrap"
    if isolation in ("auto", "process") and os.geteuid() == 0:
        return "process"
    if isolation == "unsafe":
        if not _WARNED:
            _WARNED.append(True)
            warnings.warn("isolation='unsafe': programs see the machine's files"
                          + ("" if os.geteuid() == 0 else ", run as your own user and can reach your processes")
                          + ". Use it for trusted programs only.", stacklevel=3)
        return "unsafe"
    raise SandboxError(
        ("isolation='process' makes namespaces and mounts, which needs root. " if isolation == "process" else
         "no safe sandbox here: bubblewrap is missing or cannot start, and without root the process mode cannot "
         "hide the machine's files from the programs (a policy in training could learn to read its tests' "
         "answers). ")
        + "Install bubblewrap (apt-get install bubblewrap; in a container it needs unprivileged user namespaces or "
        f"root), or, for trusted programs only, opt in with {UNSAFE_ENV}=unsafe (the sandbox CLI: --isolation "
        "unsafe).")


def require_safe_sandbox() -> str:
    """For the scripts, before any long work: the isolation mode 'auto' resolves to here, or exit with
    one clear message (see resolve_isolation)."""
    try:
        return resolve_isolation("auto")
    except SandboxError as e:
        raise SystemExit(f"error: {e}") from None


_BWRAP_OK: list = []  # set once bubblewrap has started here; a failed probe is tried again next time


def bwrap_available() -> bool:
    """bubblewrap installed and able to start a sandbox here (a success is remembered, a failure is not)."""
    if not _BWRAP_OK and shutil.which("bwrap"):
        try:
            probe = subprocess.run(_bwrap_prefix(Limits(), scratch_folder(_python_paths())) +
                                   [sys.executable, "-I", "-c", "pass"], capture_output=True, timeout=30)
            if probe.returncode == 0:
                _BWRAP_OK.append(True)
        except (OSError, subprocess.TimeoutExpired):
            pass
    return bool(_BWRAP_OK)


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
    # The runner is pid 1 itself (no bwrap process inside the sandbox: without root one would run as you,
    # dumpable, reachable by ptrace and /proc/1/fd). It keeps what it needs to give each job namespaces and
    # mounts of its own and to return to its own (CAP_SYS_ADMIN, CAP_SYS_CHROOT for setns) and, as root, to
    # drop to the sandbox uid; each job drops them all before its first test (sandbox_runner.job_process).
    args += ["--as-pid-1"]
    caps = ["CAP_SYS_ADMIN", "CAP_SYS_CHROOT"] + (["CAP_SETUID", "CAP_SETGID", "CAP_KILL"] if os.geteuid() == 0 else [])
    args += (["--cap-drop", "ALL"] if os.geteuid() == 0 else []) + [x for cap in caps for x in ("--cap-add", cap)]
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


# ----------------------------------------------------------------------------- cgroups

CGROUP_SLACK_MB = 64  # the runner and its job process share the test's cgroup: their memory on top of memory_mb
CGROUP_SLACK_PROCS = 4  # likewise: the launcher (bwrap, or process mode's outer half), the runner, the job's two
CGROUP_PERIOD_US = 100_000  # the CPU bound: all of a sandbox's processes together get one CPU per period at most
_CGROUPS: dict = {}
_WARNED_CGROUP: list = []  # the no-cgroup warning is given once per process


def cgroup_support():
    """Where this process may make cgroups with a memory and a process limit: ("v1", {"memory": folder,
    "pids": folder, and "cpu": folder where the cpu controller is writable too}) or ("v2", folder), each the
    grader's own cgroup (new ones go under it, never elsewhere), or (None, why not). Checked once per process."""
    if "found" in _CGROUPS:
        return _CGROUPS["found"]
    own = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                own[c] = path
    except OSError:
        own = {}
    found = (None, "no cgroup file system with memory and pids controllers here")
    v1 = {c: Path("/sys/fs/cgroup") / c / own.get(c, "/").lstrip("/") for c in ("memory", "pids")}
    writable = lambda d: os.access(d, os.W_OK) and os.access(d / "cgroup.procs", os.W_OK)  # noqa: E731
    if all(c in own for c in v1):
        cpu = Path("/sys/fs/cgroup/cpu") / own.get("cpu", "/").lstrip("/")
        if "cpu" in own and writable(cpu) and (cpu / "cpu.cfs_quota_us").exists():
            v1["cpu"] = cpu
        found = _probe_cgroup(("v1", v1)) if writable(v1["memory"]) and writable(v1["pids"]) else \
            (None, f"the cgroup v1 folders {v1['memory']} and {v1['pids']} are not writable by this user (as root they are)")
    elif "" in own and Path("/sys/fs/cgroup/cgroup.controllers").exists():
        base = Path("/sys/fs/cgroup") / own[""].lstrip("/")
        try:
            enabled = (base / "cgroup.subtree_control").read_text().split()
            if not {"memory", "pids"} <= set(enabled):
                (base / "cgroup.subtree_control").write_text("+memory +pids")
            if "cpu" not in enabled:
                try:  # the CPU bound where the cpu controller may be had (else sandboxes go without it)
                    (base / "cgroup.subtree_control").write_text("+cpu")
                except OSError:
                    pass
            found = _probe_cgroup(("v2", base))
        except OSError as e:
            found = (None, f"cgroup v2 at {base} does not let this process make child cgroups with memory and "
                           f"pids controllers ({e.strerror}): run as root, or from a cgroup whose "
                           "cgroup.subtree_control enables them")
    _CGROUPS["found"] = found
    return found


def _probe_cgroup(found):
    """found, if a cgroup can be made there (checked by making one), else (None, why not). Also removes
    the empty cgroups of graders that died without removing theirs (older than a minute)."""
    kind, where = found
    for base in (where.values() if kind == "v1" else [where]):
        for stale in base.glob("cobalt_min-*"):
            try:
                if time.time() - stale.stat().st_mtime > 60 and not (stale / "cgroup.procs").read_text().strip():
                    stale.rmdir()
            except OSError:
                pass
    try:
        _Cgroup(found, Limits()).remove()
        return found
    except OSError as e:
        return (None, f"cannot make cgroups here ({e})")


class _Cgroup:
    """A cgroup of the sandbox's own, holding every process of it: the memory of all of them together
    (the test's processes, files in its tmpfs, the runner) is bounded by memory_mb + CGROUP_SLACK_MB,
    and their number by max_procs + CGROUP_SLACK_PROCS. Without it a test's 64 processes could each take
    memory_mb. When the test goes over, the kernel kills a process of this cgroup and counts it in the
    counter the runner reads (oom_fd), so the test's verdict is memory_limit. Where the cpu controller
    may be used (cpu_bounded), all its processes together get one CPU at most: a test that keeps 62
    processes busy cannot slow the program judged in the sandbox beside it."""

    def __init__(self, found, limits):
        kind, where = found
        self.kind, name = kind, f"cobalt_min-{os.getpid()}-{os.urandom(6).hex()}"  # (pids repeat across namespaces)
        memory = (limits.memory_mb + CGROUP_SLACK_MB) << 20
        procs = limits.max_procs + CGROUP_SLACK_PROCS
        if kind == "v1":
            self.folders = [where["memory"] / name, where["pids"] / name] + ([where["cpu"] / name] if "cpu" in where else [])
            settings = [(self.folders[0] / "memory.limit_in_bytes", memory),
                        (self.folders[0] / "memory.memsw.limit_in_bytes", memory),  # no swap (if accounted)
                        (self.folders[1] / "pids.max", procs)]
            if "cpu" in where:
                settings += [(self.folders[2] / "cpu.cfs_period_us", CGROUP_PERIOD_US),
                             (self.folders[2] / "cpu.cfs_quota_us", CGROUP_PERIOD_US)]
            self.counter = self.folders[0] / "memory.oom_control"
        else:
            self.folders = [where / name]
            settings = [(self.folders[0] / "memory.max", memory), (self.folders[0] / "memory.swap.max", 0),
                        (self.folders[0] / "pids.max", procs),
                        (self.folders[0] / "cpu.max", f"{CGROUP_PERIOD_US} {CGROUP_PERIOD_US}")]
            self.counter = self.folders[0] / "memory.events"
        self.cpu_bounded = False
        try:
            for folder in self.folders:
                folder.mkdir()
            for path, value in settings:
                if path.exists() or path.name not in ("memory.memsw.limit_in_bytes", "cpu.max"):
                    path.write_text(str(value))
                    self.cpu_bounded |= path.name in ("cpu.cfs_quota_us", "cpu.max")
        except OSError:
            self.remove()
            raise

    def join_command(self, cmd: list[str]) -> list[str]:
        """cmd, started inside this cgroup (a shell writes its own pid into cgroup.procs, then execs it):
        everything it starts is inside from its first instruction."""
        procs = [str(folder / "cgroup.procs") for folder in self.folders]
        script = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"'
        return ["/bin/sh", "-c", script, "sh", str(len(procs)), *procs, *cmd]

    def remove(self):
        """Delete the cgroup (its processes are gone or going: retried for a second)."""
        deadline = time.monotonic() + 1.0
        for folder in self.folders:
            while folder.exists():
                try:
                    folder.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)


# ----------------------------------------------------------------------------- one sandbox


class Runner:
    """One live runner process, replaced when a program kills or freezes it: reports(program, inputs)
    yields the runner's raw report on each test (sandbox.Sandbox adds the verdicts).

    Use as a context manager. Not thread-safe: one per thread (sandbox.run_batch does that). The runner
    dies with the thread that started it (the kernel's parent-death signal follows threads)."""

    def __init__(self, limits: Limits | None = None, isolation: str = "auto", setup: dict | None = None):
        self.limits = limits or Limits()
        self.setup = setup or {}  # what the runner does around every program (a grader profile's `run`)
        self.isolation = resolve_isolation(isolation)
        self.namespaces = self.isolation == "process"  # (the runner makes them; bwrap makes them for it)
        self._proc = None
        self._report_fd = self._job_fd = None  # memfds: test reports from the runner, the job to it (sandbox_runner)
        self._tmp = None
        self.restarts = 0
        self._stopped = False  # interrupt(): no runner is started any more
        self._cgroup = self._counter_fd = None
        self._lease = _UidLease() if os.geteuid() == 0 else None
        found = cgroup_support()
        if found[0] is not None:
            try:
                self._cgroup = _Cgroup(found, self.limits)
                self._counter_fd = os.open(self._cgroup.counter, os.O_RDONLY)
            except OSError as e:
                self.close()
                raise SandboxError(f"the sandbox's cgroup could not be made: {e}") from None
        elif not _WARNED_CGROUP:
            _WARNED_CGROUP.append(True)
            warnings.warn(f"sandbox without a cgroup: {found[1]}. Memory is then bounded per process "
                          "(address space), not per test: a test's processes together can take up to "
                          "max_procs x memory_mb; and CPU per process, not per sandbox.", stacklevel=3)

    @property
    def cpu_bounded(self) -> bool:
        """Whether all processes of this sandbox together get one CPU at most (a cgroup with the cpu
        controller): a neighbour's busy test cannot then make one of ours time out."""
        return self._cgroup is not None and self._cgroup.cpu_bounded

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def interrupt(self):
        """From another thread: kill the runner now and start no other, so that the thread using this
        sandbox gets a SandboxError soon and closes it (sandbox.run_batch, when the grader is stopped)."""
        self._stopped = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            try:
                proc.kill()
            except OSError:
                pass

    def _start(self):
        """Start a runner; SandboxError if it cannot start (an infrastructure failure, never a verdict)."""
        if self._stopped:
            raise SandboxError("the grader was interrupted: no sandbox is started any more")
        try:
            self._start_runner()
        except OSError as e:
            self._kill()
            raise SandboxError(f"the sandbox runner ({self.isolation}) could not start: {e}") from None

    def _start_runner(self):
        uid = self._lease.uid if self._lease else None
        own_namespaces = self.isolation == "bwrap" or self.namespaces
        settings = {"uid": uid, "pidns": own_namespaces, "kill_all": own_namespaces or uid is not None,
                    "namespaces": self.namespaces, "private_ipc": own_namespaces or uid is not None,
                    "parent": os.getpid() if self.isolation != "bwrap" else None,
                    "jobns": own_namespaces, "oom_fd": self._counter_fd, "tmp_mb": self.limits.tmp_mb,
                    "grader": self.setup}
        if self._tmp is None and self.isolation != "bwrap":
            # process: where the sandbox's root is mounted (in its own mount namespace: this folder stays
            # empty here); unsafe: the programs' scratch folder.
            self._tmp = tempfile.mkdtemp(prefix=f"cobalt_min-sandbox-{os.getpid()}-")
            if uid is not None and not self.namespaces:
                os.chown(self._tmp, uid, uid)
        if self.isolation == "bwrap":
            # bwrap itself gets the clean environment too: without root its pid 1 runs as you, and a
            # program can read /proc/1/environ.
            scratch = scratch_folder(_python_paths())
            settings["tmp"], cmd, env = scratch, _bwrap_prefix(self.limits, scratch), _runner_env(scratch)
        elif self.namespaces:
            scratch = scratch_folder(_python_paths())
            settings.update(tmp=scratch, root=self._tmp, python_paths=_python_paths())
            cmd, env = [], _runner_env(scratch)
        else:
            settings["tmp"], cmd, env = self._tmp, [], _runner_env(self._tmp)
        if self._report_fd is None:
            self._new_memfds()
        to_runner, self._to_runner = os.pipe()
        self._from_runner, from_runner = os.pipe()
        settings.update(in_fd=to_runner, out_fd=from_runner, report_fd=self._report_fd, job_fd=self._job_fd)
        if not _RUNNER_CODE_FD:
            _RUNNER_CODE_FD.append(os.memfd_create("cobalt_min-runner"))
            os.write(_RUNNER_CODE_FD[0], RUNNER_CODE)
        cmd += [sys.executable, "-I", "-c", RUNNER_BOOT, json.dumps(settings), str(_RUNNER_CODE_FD[0])]
        if self._cgroup is not None:
            cmd = self._cgroup.join_command(cmd)
        # The runner's stderr (only ever its own crash report: tests write theirs to files of their own) is
        # a pipe read here, never a file a program could reach through /proc.
        self._errlog, err_w = os.pipe()
        os.set_blocking(self._errlog, False)
        fds = (to_runner, from_runner, self._report_fd, self._job_fd, _RUNNER_CODE_FD[0]) + \
            ((self._counter_fd,) if self._counter_fd is not None else ())
        try:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_w,
                                          env=env, start_new_session=True, close_fds=True, pass_fds=fds)
        finally:
            os.close(to_runner)
            os.close(from_runner)
            os.close(err_w)
        os.set_blocking(self._to_runner, False)  # writes to the runner have a deadline (_send)
        self._buf, self._eof, self._err = b"", False, b""
        hello = self._recv(time.monotonic() + 30)
        if not hello or not hello.get("ready"):
            self._read_errors()
            detail = self._err[-2000:].decode(errors="replace").strip()
            self._kill()
            if uid is not None and self.isolation == "unsafe":
                detail += (f" (the runner runs as uid {uid}: it must be able to read the Python install "
                           f"{sys.base_prefix} and {sys.prefix})")
            raise SandboxError(f"the sandbox runner ({self.isolation}) did not start: {detail or 'no message'}")

    def _kill(self):
        if self._proc is not None:
            self._proc.kill()  # bwrap / namespaces: the whole pid namespace goes down with the runner
            self._proc.wait()
            for f in (self._to_runner, self._from_runner, self._errlog):
                try:
                    os.close(f)
                except OSError:
                    pass
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
        if self._lease is not None and self.isolation == "unsafe":
            # The runner may have died before cleaning up: one more start kills whatever is left.
            try:
                self._stopped = False
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
            os.close(self._job_fd)
            self._report_fd = self._job_fd = None
        if self._cgroup is not None:
            if self._counter_fd is not None:
                os.close(self._counter_fd)
            self._cgroup.remove()
            self._cgroup = self._counter_fd = None

    def _send(self, msg, seconds: float = 10.0):
        """Write a message to the runner within `seconds` (a runner stopped by a program never blocks the
        grader: OSError, and the caller replaces it)."""
        view = memoryview(runner.FRAME.pack(len(data := json.dumps(msg).encode()), b"J") + data)
        deadline = time.monotonic() + seconds
        while view:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([], [self._to_runner], [], wait)[1]:
                raise OSError("the sandbox runner does not read its messages")
            try:
                view = view[os.write(self._to_runner, view):]
            except BlockingIOError:
                pass

    def _read_errors(self):
        """What the runner wrote to its stderr so far (its last 4 KiB kept)."""
        try:
            while chunk := os.read(self._errlog, 1 << 16):
                self._err = (self._err + chunk)[-4096:]
        except (BlockingIOError, OSError):
            pass

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

    def _write_job(self, job: dict):
        """The job file the runner's job process reads (sandbox_runner.read_job); the runner is idle."""
        if self._job_fd is None:
            self._new_memfds()
        data = json.dumps(job).encode()
        os.ftruncate(self._job_fd, len(data))
        os.pwrite(self._job_fd, data, 0)

    def _new_memfds(self):
        self._report_fd = os.memfd_create("cobalt_min-reports")
        self._job_fd = os.memfd_create("cobalt_min-job")

    def _oom_kills(self) -> int:
        """How many processes the kernel has killed in this sandbox's cgroup for memory (0 without one)."""
        return runner.out_of_memory_kills({"oom_fd": self._counter_fd})

    def _max_frame(self):
        """The largest message the runner can honestly send: a report of three capped streams."""
        return 3 * self.limits.output_bytes + (1 << 16)

    def reports(self, program: str, inputs: list, fn_name: str | None = None, budget_s: float | None = None):
        """Run `program` on each input in order; yield (k, report) where report is the runner's raw
        dict (stdout, stderr, exit, result, ...) or, for a test that cost the runner its life or hit the
        program's total time limit (budget_s for all its tests; by default Limits' rule), a TestResult
        that already says so."""
        lim = self.limits
        job = {"program": program, "inputs": inputs, "fn_name": fn_name, "imports": imported_modules(program),
               "limits": {"timeout_s": lim.timeout_s, "memory_mb": lim.memory_mb, "output_bytes": lim.output_bytes,
                          "max_files": lim.max_files,
                          # RLIMIT_NPROC counts per uid and user namespace: it binds the sandbox alone under a
                          # reserved uid or in bwrap's own user namespace (non-root), else the user's processes.
                          "max_procs": lim.max_procs if self._lease or self.isolation == "bwrap" else 0}}
        self._write_job(job)
        k = 0
        if budget_s is None:
            budget_s = lim.total_timeout_s * min(lim.parallel_tests, len(inputs))
        program_deadline = time.monotonic() + budget_s
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
            oom_kills = self._oom_kills()  # (a runner lost with this count up was killed for the test's memory)
            try:
                self._send({"op": "run", "start": k, "budget_s": max(0.0, program_deadline - time.monotonic())},
                           seconds=lim.timeout_s + 2.0)
            except OSError:  # (a runner that does not read its job within that is frozen: replace it)
                self._kill()
                self.restarts += 1
                yield k, TestResult(False, "timeout", detail="the sandbox stopped answering")
                k += 1
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
                oom_kills = max([oom_kills] + [report["oom_kills"] for report in reports])
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
                    self._kill()
                    # The kernel's OOM killer picks the largest process of the cgroup, which is the runner when
                    # the test's memory is in no process (memory files, kernel buffers), and a cgroup short of
                    # memory can stall the runner: either way the test's doing.
                    status, detail = ("timeout", OUT_OF_TIME) if time.monotonic() >= program_deadline else \
                        ("memory_limit", "the test's processes together went over the memory limit (the sandbox "
                                         "was lost with them)") if self._oom_kills() > oom_kills else \
                        ("timeout", "the sandbox stopped answering") if frozen else \
                        ("runtime_error", "the program killed its sandbox")
                    self.restarts += 1
                    job["imports"] = []  # the rest without importing ahead: that may be what failed
                    self._write_job(job)
                    yield k, TestResult(False, status, detail=detail)
                    k += 1
                    break
                self._kill()  # every test reported, but the runner said something unexpected
                break
            if k == len(inputs) and not done and self._proc is not None:
                # The last reports arrived while checking progress: the runner's "done" is still to come.
                if self._recv(time.monotonic() + 5) != {"done": True}:
                    self._kill()


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


