"""The process that lives INSIDE the sandbox and runs untrusted programs (standard library only).

sandbox.py starts this file as `python -I -c <this source> <settings json>`, inside bubblewrap or as a
plain subprocess, and talks to it in frames (FRAME: length, kind; then the body):

    grader -> runner (stdin)     J {"op": "run", "program": str, "inputs": [...], "start": k, "limits": {...}}
    runner -> report file        one R frame per test (REPORT header, then the stdout, stderr and
                                 result bytes), appended from offset 0 for each job
    runner -> grader (stdout)    R frames of reports over PIPE_REPORT_BYTES instead of the file;
                                 J {"done": true} once the job's tests are all reported

J bodies are JSON. The report file is a memfd the grader made and passed in (settings["report_fd"]):
writing to it wakes nobody, so the grader wakes once per job instead of once per test, and if the
runner dies mid-job, every test it finished is still there to read. Big reports (a program printing
megabytes) go through the pipe, which the grader drains as they come: the file stays small. Reports
are binary because they are the runner's hot path: every page the runner writes between two forks
is copied (copy-on-write), and json.dumps writes many.

Why one long-lived process instead of `python3 program.py` per test: starting an interpreter costs
~10-20 ms, far more than a typical test. The runner starts Python once and forks a fresh copy of
itself per test, so every test still begins from untouched interpreter state (the fork is a copy),
with its own rlimits, its own wall clock and its own stdin/stdout/stderr files (memfds).

Speed (see bench/RESULTS.md): a fork costs little, but every memory page that the child or the runner
writes afterwards is copied, ~1-2 us each on a small VM. So everything a test child needs that does
not depend on the test is built once per job (child_plan), the child does as little as it can
before running the program, and the runner writes little between two forks.

What this process never holds: the expected outputs. They stay in the grader, which compares.
A program can kill this runner (it shares its uid), and the grader then restarts it; it cannot
read it (the runner makes itself non-dumpable, so /proc/<runner>/{mem,fd,environ} are closed to it).
"""

import builtins
import ctypes
import errno
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
# in each test because the fork copies them untouched). typing alone would cost a program that
# imports it (`from typing import List`) ~2 ms per test; held here it costs every test ~1%.
# Deliberately NOT threading or random (nor statistics, which imports random): both register
# Python-level fork hooks that cost ~0.1-0.25 ms per test; a program imports them itself.
import atexit, bisect, collections, functools, gc, heapq, itertools, linecache  # noqa: E401,F401
import math, operator, re, string, traceback, typing  # noqa: E401,F401

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
CLONE_NEWNET = 0x40000000
PROGRAM_NAME = "solution.py"
_libc = ctypes.CDLL(None, use_errno=True)
KEEP_FDS = []  # descriptors a test child keeps (import folders in process mode)


FRAME = struct.Struct("!Qc")  # body length, kind: b"J" (JSON) or b"R" (test report)
# A test report: test index, exit code (negative: killed by that signal), flags, wall seconds, and the
# sizes of the stdout, stderr and result bytes that follow (each cut at the output cap).
REPORT = struct.Struct("!IiBd3I")
TIMED_OUT, OUTPUT_LIMITED, HAS_RESULT = 1, 2, 4
PIPE_REPORT_BYTES = 1 << 16  # a report bigger than this goes through the pipe, not the report file


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_frame(fd, kind, body):
    write_all(fd, FRAME.pack(len(body), kind) + body)


def send(msg):
    write_frame(1, b"J", json.dumps(msg).encode())


def recv():
    header = read_exact(FRAME.size)
    if header is None:
        return None
    size, kind = FRAME.unpack(header)
    return json.loads(read_exact(size))


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


def has_children():
    """Whether any process is left under us (reaping the ones that already exited)."""
    while True:
        pid = _libc.waitpid(-1, None, os.WNOHANG)
        if pid <= 0:
            return pid == 0  # 0: some still run; -1: none (ECHILD)


def kill_leftovers(settings, child_pid):
    """Kill every process the last test left behind (daemons, grandchildren, detached sessions).

    kill(-1) reaches every process we may signal except ourselves: safe only when that set is ours
    alone, i.e. inside our own pid namespace (bwrap) or under a uid reserved for this sandbox.
    Otherwise (process mode as a normal user) only the test's process group can be killed.
    """
    # libc's kill, not os.kill: "nobody left" is the usual answer, and an exception per test costs.
    target = -1 if settings["kill_all"] else -child_pid if child_pid is not None else None
    if target is None or _libc.kill(target, signal.SIGKILL) != 0:
        return  # nothing was left to kill (ESRCH), or nothing we may kill (EPERM)
    # Wait until all of it is gone, not just what has died so far: a killed process still counts
    # against RLIMIT_NPROC until it is reaped, and after a fork bomb the next test's fork would fail.
    # What was killed comes to us (we are the subreaper); the grader's progress check bounds the wait.
    while _libc.waitpid(target, None, 0) > 0 or ctypes.get_errno() == errno.EINTR:
        pass  # ends with ECHILD: nothing of that set is left under us


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
    non-terminals. Made ONCE in the runner and never used there: each test child gets its own untouched
    copy through the fork (building them in the child would cost copy-on-write page faults)."""
    return (io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8"),
            io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8"),
            io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8",
                             errors="backslashreplace", line_buffering=True))


def child_plan(settings, job, streams):
    """Everything a test child of this job needs that does not depend on the test, prepared ONCE in
    the runner (a child that builds objects or calls helpers pays for it in copy-on-write faults)."""
    limits = job["limits"]
    cpu, mem = int(limits["timeout_s"]) + 1, limits["memory_mb"] << 20
    # stdout and stderr are files: the kernel stops them (and any file the program writes) at the cap.
    rlimits = [(resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (mem, mem)),
               (resource.RLIMIT_STACK, (mem, mem)), (resource.RLIMIT_FSIZE, (limits["output_bytes"] + 1,) * 2)]
    first = 3 if job.get("fn_name") is None else 4  # fds 0-2 (and 3, the result, for call-based tests)
    keep = sorted(fd for fd in KEEP_FDS if fd >= first)
    close_ranges = list(zip([first] + [fd + 1 for fd in keep], keep + [1 << 16]))
    main = types.ModuleType("__main__")
    main.__dict__.update({"__builtins__": builtins, "__file__": PROGRAM_NAME})
    return rlimits, close_ranges, main, streams, [PROGRAM_NAME], not settings["kill_all"]


def run_child(code, compile_error, fn_name, args, fds, plan):
    """In the forked child: wire fds, apply limits, run the program like `python solution.py`, exit.

    fds: stdin, stdout, stderr and (call-based tests) result memfds, which become fds 0, 1, 2, 3.
    Signal dispositions are the runner's: CPython's own (SIGPIPE ignored, SIGINT -> KeyboardInterrupt),
    as for `python solution.py`, except SIGXFSZ (see main): writing past the output limit kills."""
    rlimits, close_ranges, main, streams, argv, die_with_runner = plan
    try:
        if die_with_runner:
            os.setpgid(0, 0)  # so that killpg reaches what it starts (no kill(-1) in this mode)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for lo, hi in close_ranges:
            os.closerange(lo, hi)
        if die_with_runner:  # not needed where the runner's pid namespace or uid clean-up covers it
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        for which, value in rlimits:
            resource.setrlimit(which, value)
        sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams
        sys.argv = argv
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
            write_all(3, payload)
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


def apply_shared_limits(limits):
    """Limits that bind the runner as harmlessly as its tests: set once per job, inherited by each fork.
    (Address space, stack, CPU time and file size are set in each test child: the runner must not be
    bound by them; it writes each test's stdin, which may be larger than the output cap.)"""
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["max_files"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits["max_procs"]:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_procs"],) * 2)


def read_capped(fd, cap):
    """(the first `cap` bytes, total size) of a memfd the test child wrote."""
    size = os.lseek(fd, 0, os.SEEK_END)  # (cheaper than fstat: no stat object)
    return os.pread(fd, min(size, cap), 0), size


def run_one(settings, job, k, code, compile_error, plan, clean_up=True):
    """Fork one test child, wait for it (its wall clock), and append what it did to the report file.

    Its stdin, stdout and stderr are memfds (in-memory files): the runner does nothing while the test
    runs but wait for its exit (no pipes to drain), and reads what it wrote afterwards.
    clean_up=False: leave killing what the test left behind to the caller (see run_in_template)."""
    limits = job["limits"]
    fn_name = job.get("fn_name")
    fds = [os.memfd_create("stdin"), os.memfd_create("stdout"), os.memfd_create("stderr")]
    if fn_name is None:
        os.write(fds[0], job["inputs"][k].encode("utf-8", "surrogateescape"))
        os.lseek(fds[0], 0, os.SEEK_SET)
        args = None
    else:
        fds.append(os.memfd_create("result"))
        args = job["inputs"][k]
    start = time.monotonic()
    gc.freeze()  # objects made since the last test stay out of the child's collections (fewer page copies)
    pid = os.fork()
    if pid == 0:
        run_child(code, compile_error, fn_name, args, fds, plan)
    pidfd = os.pidfd_open(pid)
    exited = select.select([pidfd], [], [], limits["timeout_s"])[0]
    elapsed = time.monotonic() - start
    if not exited:  # out of time: kill it (and, below, everything it started)
        os.kill(pid, signal.SIGKILL)
    exit_code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    os.close(pidfd)
    if clean_up:
        kill_leftovers(settings, pid)
    cap = limits["output_bytes"]
    out, out_size = read_capped(fds[1], cap)
    err, err_size = read_capped(fds[2], cap)
    res, res_size = read_capped(fds[3], cap) if fn_name is not None else (b"", 0)
    for fd in fds:
        os.close(fd)
    clean_dir(settings["tmp"])
    flags = ((not exited or exit_code == -signal.SIGXCPU) * TIMED_OUT
             | (max(out_size, err_size, res_size) > cap) * OUTPUT_LIMITED | (fn_name is not None) * HAS_RESULT)
    report = REPORT.pack(k, exit_code, flags, elapsed, len(out), len(err), len(res)) + out + err + res
    write_frame(1 if len(report) > PIPE_REPORT_BYTES else settings["report_fd"], b"R", report)


def run_in_template(settings, job, start, code, plan, modules):
    """Run the tests from `start` in a copy of this runner that first imports `modules`, the ones the
    program imports that are not loaded here (numpy: ~50 ms per test otherwise). Each test child
    then finds them loaded and untouched, as it finds the modules preloaded above. Returns the
    first test not run there: the copy stops after a test that leaves processes behind (the kill
    of every sandbox process, which would kill this runner too, is the runner's to do); then the
    runner goes on with the rest itself. If the copy dies (a program killed it), so does the runner,
    and the grader judges that test and starts a new one."""
    progress_r, progress_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(progress_r)
            _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # a test's orphans come to us
            memory = job["limits"]["memory_mb"] << 20
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            grader_out, null = os.dup(1), os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # an import must neither read nor write the grader's pipes
                os.dup2(null, fd)
            for name in modules:
                try:
                    __import__(name)
                except BaseException:  # the program meets the same error when it imports it
                    pass
            os.dup2(grader_out, 1)  # reports over PIPE_REPORT_BYTES go there
            k = start
            while k < len(job["inputs"]):
                # kill(-1) would kill the runner too; a process group kill (process mode) is safe here.
                run_one(settings, job, k, code, None, plan, clean_up=not settings["kill_all"])
                k += 1
                if settings["kill_all"] and has_children():
                    break
            os.write(progress_w, k.to_bytes(4, "big"))
        finally:
            os._exit(0)
    os.close(progress_w)
    os.waitpid(pid, 0)
    done = os.read(progress_r, 4)
    os.close(progress_r)
    kill_leftovers(settings, None)
    if len(done) != 4:
        sys.exit(1)  # killed by a program: the grader charges the first test without a report
    return int.from_bytes(done, "big")


def main():
    settings = json.loads(sys.argv[1])
    setup(settings)
    os.chdir(settings["tmp"])  # every test child starts here
    # CPython ignores SIGXFSZ; a test child must die when it writes past its file size limit. (The
    # runner itself has no such limit.) Set here once: signal.signal in each child costs ~20 page faults.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    streams = fresh_streams()
    # What a test child replaces stays referenced here, so that the child never frees (= writes) it.
    replaced = (sys.stdin, sys.stdout, sys.stderr, sys.argv, sys.modules["__main__"])  # noqa: F841
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
            code, compile_error = None, e.with_traceback(None)  # printed as python prints it: no runner frame
        linecache.cache[PROGRAM_NAME] = (len(job["program"]), None,
                                         job["program"].splitlines(True), PROGRAM_NAME)
        apply_shared_limits(job["limits"])
        plan = child_plan(settings, job, streams)
        os.lseek(settings["report_fd"], 0, os.SEEK_SET)  # the grader emptied the file before sending the job
        start = job.get("start", 0)
        missing = [name for name in job.get("imports") or () if name not in sys.modules]
        if missing and compile_error is None:
            start = run_in_template(settings, job, start, code, plan, missing)
        for k in range(start, len(job["inputs"])):
            run_one(settings, job, k, code, compile_error, plan)
        send({"done": True})


if __name__ == "__main__":
    main()
