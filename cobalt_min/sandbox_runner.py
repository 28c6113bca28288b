"""The process that lives INSIDE the sandbox and runs untrusted programs (standard library only).

sandbox.py starts this file as `python -I -c <this source> <settings json>`, inside bubblewrap or as a
plain subprocess, and talks to it over stdin/stdout with length-prefixed JSON messages:

    grader -> runner   {"op": "run", "program": str, "inputs": [...], "fn_name": str | None, "limits": {...}}
    runner -> grader   one {"i": k, "exit": int, "stdout": str, ...} per test, then {"done": true}

Why one long-lived process instead of `python3 program.py` per test: starting an interpreter costs
~10-20 ms, far more than a typical test. The runner starts Python once and forks a fresh copy of
itself per test, so every test still begins from untouched interpreter state (the fork is a copy),
with its own rlimits, its own wall clock and its own capture pipes.

What this process never holds: the expected outputs. They stay in the grader, which compares.
A program can kill this runner (it shares its uid), and the grader then restarts it; it cannot
read it (the runner makes itself non-dumpable, so /proc/<runner>/{mem,fd,environ} are closed to it).
"""

import builtins
import ctypes
import fcntl
import io
import json
import os
import resource
import select
import signal
import struct
import sys
import time
import types

# Pre-imported so that every forked test finds them already loaded (faster, and still fresh state
# in each test because the fork copies them untouched). Deliberately NOT threading or random: both
# register Python-level fork hooks that cost ~0.1-0.25 ms per test; a program imports them itself.
import atexit, bisect, collections, functools, gc, heapq, itertools, linecache  # noqa: E401,F401
import math, operator, re, string, traceback  # noqa: E401,F401

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
CLONE_NEWNET = 0x40000000
PROGRAM_NAME = "solution.py"
_libc = ctypes.CDLL(None, use_errno=True)
KEEP_FDS = []  # descriptors a test child keeps (import folders in process mode)


def send(msg):
    data = json.dumps(msg).encode()
    os.write(1, struct.pack("!Q", len(data)))
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]


def recv():
    header = read_exact(8)
    if header is None:
        return None
    body = read_exact(struct.unpack("!Q", header)[0])
    return json.loads(body)


def read_exact(n):
    chunks, got = [], 0
    while got < n:
        chunk = os.read(0, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def setup(settings):
    """Become the sandbox identity: no network (process mode), no root, no way back, die with the grader."""
    if settings.get("unshare_net"):
        if _libc.unshare(CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    # Orphans of a test (daemons, a fork bomb's children) are re-parented to us, so we can reap them.
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    uid = settings.get("uid")
    if uid is not None and settings.get("reopen_paths"):
        # Process mode as root: the Python install may sit where the sandbox uid cannot walk (pyenv
        # under /root, mode 700). Open each import folder now, as root, and import through
        # /proc/self/fd/N, which reaches the folder without walking its parents.
        moved = {}
        for i, path in enumerate(sys.path):
            if os.path.isdir(path):
                first = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
                fd = fcntl.fcntl(first, fcntl.F_DUPFD, 10)  # clear of fds 0-3, which each test rewires
                os.close(first)
                KEEP_FDS.append(fd)
                moved[path.rstrip("/") + "/"] = sys.path[i] = f"/proc/self/fd/{fd}/"
        for module in list(sys.modules.values()):  # packages already imported (e.g. encodings)
            paths = getattr(module, "__path__", None)
            if isinstance(paths, list):
                for j, p in enumerate(paths):
                    for old, new in moved.items():
                        if p.startswith(old):
                            paths[j] = new + p[len(old):]
        sys.path_importer_cache.clear()
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    # After setuid (which clears both): die when the grader dies; keep /proc/<runner> closed to programs.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    if settings.get("parent") is not None and os.getppid() != settings["parent"]:
        os._exit(0)  # the grader is already gone
    if settings["kill_all"]:
        # kill(-1) must only ever reach the sandbox's own processes: refuse to run if it would not.
        own_uid = uid is not None and uid != 0 and os.getuid() == uid
        own_pidns = settings.get("pidns") and open("/proc/1/comm").read().strip() == "bwrap"
        if not (own_uid or own_pidns):
            raise RuntimeError("kill_all needs a reserved non-root uid or the bwrap pid namespace")
        kill_leftovers(settings, None)  # a previous user of this uid may have left processes behind


def kill_leftovers(settings, child_pid):
    """Kill every process the last test left behind (daemons, grandchildren, detached sessions).

    kill(-1) reaches every process we may signal except ourselves: safe only when that set is ours
    alone, i.e. inside our own pid namespace (bwrap) or under a uid reserved for this sandbox.
    Otherwise (process mode as a normal user) only the test's process group can be killed.
    """
    if settings["kill_all"]:
        try:
            os.kill(-1, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    elif child_pid is not None:
        try:
            os.killpg(child_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    while True:  # reap what was killed (we are their subreaper), so no zombie outlives the test
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break


def clean_dir(path):
    """Empty the writable scratch folder between tests (a program may chmod things to resist)."""
    for name in os.listdir(path):
        full = os.path.join(path, name)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                os.chmod(full, 0o700)
                clean_dir(full)
                os.rmdir(full)
            else:
                os.unlink(full)
        except OSError:
            pass


# ----------------------------------------------------------------------------- the test child


def fresh_streams():
    """New sys.stdin/stdout/stderr objects on fds 0/1/2, configured as CPython configures them for
    pipes. Made in the runner BEFORE fork (cheap there; building them in the child costs copy-on-write
    page faults), used only by the child, which first points fds 0/1/2 at its own stdin and pipes."""
    return (io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8"),
            io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8"),
            io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8",
                             errors="backslashreplace", line_buffering=True))


def run_child(code, compile_error, fn_name, args, stdin_fd, out_w, err_w, res_w, limits, workdir, streams,
              die_with_runner):
    """In the forked child: wire fds, apply limits, run the program like `python solution.py`, exit.

    Signal dispositions need no change: the runner keeps CPython's own (SIGPIPE ignored, SIGINT ->
    KeyboardInterrupt), which is what `python solution.py` starts with."""
    try:
        if die_with_runner:
            os.setpgid(0, 0)  # so that killpg reaches what it starts (no kill(-1) in this mode)
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(res_w, 3)
        keep = sorted(fd for fd in KEEP_FDS if fd > 3)
        for lo, hi in zip([4] + [fd + 1 for fd in keep], keep + [1 << 16]):
            os.closerange(lo, hi)
        if die_with_runner:  # not needed where the runner's pid namespace or uid clean-up covers it
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.chdir(workdir)
        cpu = int(limits["timeout_s"]) + 1
        mem = limits["memory_mb"] << 20
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_STACK, (mem, mem))
        sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams
        sys.argv = [PROGRAM_NAME]
        main = types.ModuleType("__main__")
        main.__dict__.update({"__builtins__": builtins, "__file__": PROGRAM_NAME})
        sys.modules["__main__"] = main
    except BaseException:  # the harness itself failed: report it as such, distinctly
        os._exit(121)
    exit_code = 0
    try:
        if compile_error is not None:
            raise compile_error
        exec(code, main.__dict__)
        if fn_name is not None:
            obj = main.__dict__.get("Solution")
            target = getattr(obj(), fn_name) if isinstance(obj, type) and hasattr(obj, fn_name) \
                else main.__dict__.get(fn_name)
            if target is None:
                raise NameError(f"the program defines no function {fn_name!r} (nor Solution.{fn_name})")
            value = target(*args)
            try:
                payload = json.dumps(value).encode()
            except (TypeError, ValueError) as e:
                payload = json.dumps({"unserializable": f"{type(value).__name__}: {e}"}).encode()
            else:
                payload = json.dumps({"value": payload.decode()}).encode()
            view = memoryview(payload)
            while view:
                view = view[os.write(3, view):]
        exit_code = finish_like_python(0)
    except SystemExit as e:
        exit_code = finish_like_python(exit_status(e.code))
    except BaseException as e:
        print_program_error(e)
        exit_code = finish_like_python(1)
    os._exit(exit_code)


def exit_status(code):
    """sys.exit(code) semantics: None -> 0, int -> itself, anything else is printed and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def print_program_error(e):
    """The traceback a user would see, without the runner's own frame."""
    try:
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        traceback.print_exception(type(e), e, tb, file=sys.stderr)
    except BaseException:
        pass


def finish_like_python(code):
    """What the interpreter does at exit: join non-daemon threads, run atexit, flush stdout."""
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        atexit._run_exitfuncs()
    except SystemExit as e:
        code = exit_status(e.code)
    except BaseException as e:
        print_program_error(e)
    try:
        sys.stdout.flush()
    except BaseException:
        code = 120  # CPython's status when flushing stdout fails at exit
    try:
        sys.stderr.flush()
    except BaseException:
        pass
    return code


# ----------------------------------------------------------------------------- the runner loop


def read_available(fd, chunks, sizes, key, cap):
    """Read what a pipe has; return False on EOF. Stops storing past `cap` bytes."""
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return True
    if not data:
        return False
    sizes[key] += len(data)
    if sizes[key] <= cap:
        chunks[key].append(data)
    else:
        room = cap - (sizes[key] - len(data))
        if room > 0:
            chunks[key].append(data[:room])
    return True


def apply_shared_limits(limits):
    """Limits that bind the runner as harmlessly as its tests: set once per job, inherited by each fork.
    (Address space, stack and CPU time are set in each test child: the runner must not be bound.)"""
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_mb"] << 20,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["max_files"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits["max_procs"]:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_procs"],) * 2)


def run_one(settings, job, k, code, compile_error):
    limits = job["limits"]
    inputs = job["inputs"]
    fn_name = job.get("fn_name")
    stdin_fd = os.memfd_create("stdin")
    if fn_name is None:
        os.write(stdin_fd, inputs[k].encode("utf-8", "surrogateescape"))
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        args = None
    else:
        args = inputs[k]
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    res_r, res_w = os.pipe()
    workdir = settings["tmp"]
    start = time.monotonic()
    streams = fresh_streams()
    pid = os.fork()
    if pid == 0:
        run_child(code, compile_error, fn_name, args, stdin_fd, out_w, err_w, res_w, limits, workdir, streams,
                  not settings["kill_all"])
    for fd in (stdin_fd, out_w, err_w, res_w):
        os.close(fd)
    cap = limits["output_bytes"]
    deadline = start + limits["timeout_s"]
    chunks = {"out": [], "err": [], "res": []}
    sizes = {"out": 0, "err": 0, "res": 0}
    open_fds = {out_r: "out", err_r: "err", res_r: "res"}
    for fd in open_fds:
        os.set_blocking(fd, False)
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    for fd in (*open_fds, pidfd):
        poller.register(fd, select.POLLIN)
    status, timed_out, over_limit, exited_at = None, False, False, None
    while True:
        now = time.monotonic()
        if status is None and now >= deadline:
            timed_out = True
            break
        if status is not None and (not open_fds or now >= exited_at + 0.2):
            break  # exited; stop once its pipes are drained (or a stray writer keeps them open)
        limit_at = deadline if status is None else exited_at + 0.2
        for fd, _ in poller.poll(max(0.0, limit_at - now) * 1000 + 1):
            if fd == pidfd:
                poller.unregister(pidfd)
                status = os.waitpid(pid, 0)[1]
                exited_at = time.monotonic()
                kill_leftovers(settings, pid)  # descendants holding our pipes must not keep us here
                continue
            key = open_fds[fd]
            if not read_available(fd, chunks, sizes, key, cap):
                poller.unregister(fd)
                del open_fds[fd]
                os.close(fd)
            elif sizes[key] > cap:
                over_limit = True
        if over_limit:
            break
    elapsed = (exited_at or time.monotonic()) - start
    if status is None:  # timed out or over the output cap: kill it and everything it started
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        status = os.waitpid(pid, 0)[1]
        kill_leftovers(settings, pid)
    for fd in open_fds:
        os.close(fd)
    os.close(pidfd)
    clean_dir(workdir)
    exit_code = os.waitstatus_to_exitcode(status)
    return {
        "i": k,
        "exit": exit_code,
        "timed_out": timed_out or exit_code == -signal.SIGXCPU,
        "output_limited": over_limit,
        "stdout": b"".join(chunks["out"]).decode("utf-8", "replace"),
        "stderr": b"".join(chunks["err"]).decode("utf-8", "replace"),
        "stdout_bytes": sizes["out"],
        "result": b"".join(chunks["res"]).decode("utf-8", "replace") if sizes["res"] <= cap else None,
        "time_s": elapsed,
    }


def main():
    settings = json.loads(sys.argv[1])
    setup(settings)
    gc.freeze()  # objects that exist now are never scanned by a test's collector: fewer copied pages
    send({"ready": True, "pid": os.getpid(), "uid": os.getuid()})
    while True:
        job = recv()
        if job is None or job.get("op") == "exit":
            kill_leftovers(settings, None)
            return
        try:
            code, compile_error = compile(job["program"], PROGRAM_NAME, "exec"), None
        except BaseException as e:  # SyntaxError, ValueError (null bytes), RecursionError, MemoryError
            code, compile_error = None, e
        linecache.cache[PROGRAM_NAME] = (len(job["program"]), None,
                                         job["program"].splitlines(True), PROGRAM_NAME)
        apply_shared_limits(job["limits"])
        for k in range(job.get("start", 0), len(job["inputs"])):
            send(run_one(settings, job, k, code, compile_error))
        send({"done": True})


if __name__ == "__main__":
    main()
