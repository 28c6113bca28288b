"""The sandbox's isolation: which mode a sandbox runs in (bwrap, process, unsafe) and what it is refused,
the bubblewrap command line, the runner's environment, the uid leases, and the cgroups that bound a
sandbox's memory, processes and CPU. process.Runner starts runners with them (docs/sandbox.md says what each mode
guarantees).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import warnings
from pathlib import Path

from cobalt_min.sandbox.types import Limits, SandboxError

SANDBOX_UID_BASE = int(os.environ.get("COBALT_SANDBOX_UID_BASE", "61000"))  # uids base .. base+255
# Uid leases are locked machine-wide (not under TMPDIR, which two graders may set differently).
LOCK_DIR = Path(next((d for d in ("/run/lock", "/var/lock") if os.path.isdir(d)), "/tmp")) / "cobalt_min-sandbox"


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
            probe = subprocess.run(bwrap_prefix(Limits(), scratch_folder(python_paths())) +
                                   [sys.executable, "-I", "-c", "pass"], capture_output=True, timeout=30)
            if probe.returncode == 0:
                _BWRAP_OK.append(True)
        except (OSError, subprocess.TimeoutExpired):
            pass
    return bool(_BWRAP_OK)


def python_paths() -> list[str]:
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


def bwrap_prefix(limits: Limits, scratch: str) -> list[str]:
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
    for p in python_paths():
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
    for name, value in runner_env(scratch).items():
        args += ["--setenv", name, value]
    # The runner is pid 1 itself (no bwrap process inside the sandbox: without root one would run as you,
    # dumpable, reachable by ptrace and /proc/1/fd). It keeps what it needs to give each job namespaces and
    # mounts of its own and to return to its own (CAP_SYS_ADMIN, CAP_SYS_CHROOT for setns) and, as root, to
    # drop to the sandbox uid; each job drops them all before its first test (runner.job_process).
    args += ["--as-pid-1"]
    caps = ["CAP_SYS_ADMIN", "CAP_SYS_CHROOT"] + (["CAP_SETUID", "CAP_SETGID", "CAP_KILL"] if os.geteuid() == 0 else [])
    args += (["--cap-drop", "ALL"] if os.geteuid() == 0 else []) + [x for cap in caps for x in ("--cap-add", cap)]
    return args


def runner_env(tmp: str) -> dict:
    """The whole environment of the runner and its programs. MALLOC_ARENA_MAX: glibc gives each thread
    its own 64 MiB malloc arena of address space, so an honest ThreadPoolExecutor(40) would hit the
    address-space limit without touching the memory."""
    return {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8", "MALLOC_ARENA_MAX": "2",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


class UidLease:
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


def warn_no_cgroup(why: str) -> None:
    """The warning a sandbox without a cgroup gives, once per process."""
    if not _WARNED_CGROUP:
        _WARNED_CGROUP.append(True)
        warnings.warn(f"sandbox without a cgroup: {why}. Memory is then bounded per process (address space), not "
                      "per test: a test's processes together can take up to max_procs x memory_mb; and CPU per "
                      "process, not per sandbox.", stacklevel=4)


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
        Cgroup(found, Limits()).remove()
        return found
    except OSError as e:
        return (None, f"cannot make cgroups here ({e})")


class Cgroup:
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
