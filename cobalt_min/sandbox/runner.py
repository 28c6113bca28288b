"""The process that lives INSIDE the sandbox and runs untrusted programs (standard library only).

process.py starts this file's compiled code (`python -I -c <boot> <settings json> <code fd>`), inside
bubblewrap or as a subprocess that makes its own namespaces (enter_namespaces), and talks to it in
frames (FRAME: length, kind; then the body):

    grader -> job file           JSON {"program": str, "inputs": [...], "fn_name", "imports", "limits": {...}},
                                 written once per program (settings["job_fd"], a memfd)
    grader -> runner (in_fd)     J {"op": "run", "start": k, "budget_s": s}: run the job file's tests from k
    runner -> report file        one R frame per test (REPORT header, then the stdout, stderr and
                                 result bytes), appended from offset 0 for each job
    runner -> grader (out_fd)    R frames of reports over PIPE_REPORT_BYTES instead of the file;
                                 J {"done": true} once the job's tests are all reported

The two pipes are passed as extra descriptors (settings["in_fd"], ["out_fd"]), never as stdin/stdout:
bubblewrap's own pid 1 keeps descriptors 0-2 and runs as the grader's user when the grader is not
root, so a test could reach anything held there through /proc/1/fd. It closes every other one.

J bodies are JSON. The job file is read by the process that runs the job's tests, never by the runner
(but in the unsafe mode): every test is a fork of that process, and a program can read all of its own
memory, so the runner, from which every later job is forked, must never hold an earlier program or
its inputs, not even in memory it has freed. The report file is a memfd the grader made and passed in (settings["report_fd"]):
writing to it wakes nobody, so the grader wakes once per job instead of once per test, and if the
runner dies mid-job, every test it finished is still there to read. Big reports (a program printing
megabytes) go through the pipe, which the grader drains as they come: the file stays small. Reports
are binary because they are the runner's hot path: every page the runner writes between two forks
is copied (copy-on-write), and json.dumps writes many.

Why one long-lived process (docs/sandbox.md says more): an interpreter start costs ~10-20 ms, more
than a typical test. For each program the runner forks a job process in fresh namespaces (job_process), which
forks a fresh copy of itself per test; without namespaces (the unsafe mode) the runner forks the tests itself.
The walls (namespaces, root, seccomp, identities, clean-up) are jail.py's, run first in this program.

Speed (see bench/RESULTS.md): a fork costs little, but every memory page that the child or the runner
writes afterwards is copied, ~1-2 us each on a small VM. So everything a test child needs that does
not depend on the test is built once per job (child_plan), the child does as little as it can
before running the program, and the runner writes little between two forks.

What this process never holds: the expected outputs. They stay in the grader, which compares.
With job namespaces a program cannot even name this runner (it lives outside the program's pid
namespace) and cannot signal its job's pid 1; in the unsafe process mode it can kill the runner (the
grader then restarts it). It can read neither: both are non-dumpable, so /proc/<pid>/{mem,fd,environ}
are closed to it.
"""

import builtins
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
# The runner's own handles on the os functions that a reference grader's guard takes from programs
# (grader_setup sets os.<name> to None; the runner goes on calling these).
from os import chdir, fork, kill

PROGRAM_NAME = "solution.py"
# The sandbox's walls (jail.py): in the sandbox its code has run first in these globals; imported here
# when the grader imports this file as a module.
if __name__ != "__main__":
    from cobalt_min.sandbox.jail import (  # noqa: F401
        _check, _libc, _mount, become_test_identity, can_return_to_own_namespaces, clean_after_test,
        enter_namespaces, folder_state, has_children, install_seccomp, kill_leftovers,
        lost_a_process_to_oom, make_job_namespaces, MS_NODEV, MS_NOEXEC, MS_NOSUID, NAMESPACE_FILES,
        PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG, setup, apply_shared_limits
    )


FRAME = struct.Struct("!Qc")  # body length, kind: b"J" (JSON) or b"R" (test report)
# A test report: test index, exit code (negative: killed by that signal), flags, wall seconds, CPU seconds
# of the test's processes together, the sandbox's out-of-memory kills so far (the cgroup's count), and the
# sizes of the stdout, stderr and result bytes that follow (each cut at the output cap).
REPORT = struct.Struct("!IiBddQ3I")
TIMED_OUT, OUTPUT_LIMITED, HAS_RESULT, OUT_OF_MEMORY = 1, 2, 4, 8
PIPE_REPORT_BYTES = 1 << 16  # a report bigger than this goes through the pipe, not the report file


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_frame(fd, kind, body):
    write_all(fd, FRAME.pack(len(body), kind) + body)


def send(settings, msg):
    write_frame(settings["out_fd"], b"J", json.dumps(msg).encode())


def recv(settings):
    header = read_exact(settings["in_fd"], FRAME.size)
    if header is None:
        return None
    size, kind = FRAME.unpack(header)
    body = read_exact(settings["in_fd"], size)
    return None if body is None else json.loads(body)


def read_exact(fd, n):
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_job(settings, msg):
    """The job: the program, its inputs, fn_name, the modules it imports and the limits, which the grader
    wrote to the job file (settings["job_fd"], a memfd), with `msg`'s start and time budget. Read only by
    the process that runs the job's tests: with job namespaces that is the job process, so the runner, the
    process every later job is forked from, never holds a program, not even in memory it has freed."""
    fd = settings["job_fd"]
    job = json.loads(os.pread(fd, os.lseek(fd, 0, os.SEEK_END), 0))
    job["start"], job["deadline"] = msg["start"], msg["deadline"]
    return job


def prepare_job(settings, job):
    """(code, compile_error, plan) for the job's tests, and the limits every test inherits, set here."""
    program = job["program"]
    try:
        # With its own flags only (never this file's), and, where the reference puts something before the
        # program, `from __future__` must fail as it does there (a line before it makes it fail the same way).
        if not settings["grader"].get("future_imports", True) and "__future__" in program:
            compile("pass\n" + program, PROGRAM_NAME, "exec", dont_inherit=True)
        code, compile_error = compile(program, PROGRAM_NAME, "exec", dont_inherit=True), None
    except BaseException as e:  # SyntaxError, ValueError (null bytes), RecursionError, MemoryError
        code, compile_error = None, e.with_traceback(None)  # printed as python prints it: no runner frame
    linecache.cache[PROGRAM_NAME] = (len(job["program"]), None, job["program"].splitlines(True), PROGRAM_NAME)
    apply_shared_limits(job["limits"])
    return code, compile_error, child_plan(settings, job)


def run_job(settings, msg):
    """Run a job's tests from msg["start"] in a job process of its own (job_process), pid 1 of fresh
    mount, pid, ipc and network namespaces with a fresh tmpfs for the scratch folder and /dev/shm: nothing
    a program leaves (files, extended attributes, inode and pid numbers, System V objects, processes,
    sockets and the network's counters) can reach a later program, as it all lives in namespaces that end
    with the job. Where the runner can return to its own namespaces (setns; as root), it makes the job's
    for itself, forks the job process into them and goes back: one fork per job. Otherwise (bubblewrap
    without root, whose user namespace owns the namespaces one level up) a child makes them and forks the
    job process. Returns the first test not run, or None if the job process was killed (the grader then
    charges the first test it has no report for)."""
    if settings.get("last_job"):
        os.waitpid(settings.pop("last_job"), 0)  # (by now its namespaces are long gone: see below)
    progress_r, progress_w = os.pipe()
    if settings["setns_back"]:
        make_job_namespaces(settings)
        try:
            pid = fork()
            if pid == 0:
                run_job_process(settings, msg, progress_r, progress_w)
        finally:
            for kind, fd in settings["own_namespaces"]:  # back to the runner's own namespaces
                _check(_libc.setns(fd, kind), "setns")
            chdir(settings["tmp"])
    else:
        pid = fork()
        if pid == 0:
            try:
                make_job_namespaces(settings)
                if fork() == 0:
                    run_job_process(settings, msg, progress_r, progress_w)
                os.close(progress_w)  # (only the job process reports progress)
                os.wait()
            finally:
                os._exit(0)
    os.close(progress_w)
    done = os.read(progress_r, 4)
    os.close(progress_r)
    # The job process exits right after reporting; tearing down its namespaces takes the kernel a few ms
    # (mostly waiting), which need not delay the grader: it is reaped before the next job.
    settings["last_job"] = pid
    return int.from_bytes(done, "big") if len(done) == 4 else None


def run_job_process(settings, msg, progress_r, progress_w):
    """In the forked job process: job_process, and exit (an error is the sandbox's, printed for the grader)."""
    try:
        os.close(progress_r)
        job_process(settings, msg, progress_w)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(0)


def job_process(settings, msg, progress_w):
    """The job process: pid 1 of the job's pid namespace, without any privilege, it reads the job, imports
    what the program imports and runs the tests. As pid 1 it gets no signal it does not handle (SIGKILL and
    SIGSTOP from its tests are ignored by the kernel), so no test can stop the clock it keeps, and its
    kill(-1) reaches exactly the job's processes."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.close(settings["in_fd"])
    become_test_identity(settings)
    settings["ipc_blocked"] = install_seccomp(settings)
    chdir(settings["tmp"])
    settings["clean"] = [[path, folder_state(path)] for path in settings["clean_folders"]]
    lost_a_process_to_oom(settings)  # (counts from here)
    job = read_job(settings, msg)
    code, compile_error, plan = prepare_job(settings, job)
    missing = [name for name in job.get("imports") or () if name not in sys.modules]
    if missing and compile_error is None:
        saved = os.dup(2)
        os.dup2(os.open(os.devnull, os.O_RDWR), 2)  # what an import prints goes nowhere
        guard_os(settings, True)  # (as the reference's own process had its modules before its guard)
        for name in missing:
            try:
                __import__(name)
            except BaseException:  # the program meets the same error when it imports it
                pass
        guard_os(settings, False)
        os.dup2(saved, 2)
        os.close(saved)
    k = job["start"]
    while k < len(job["inputs"]) and time.monotonic() < job["deadline"]:
        run_one(settings, job, k, code, compile_error, plan)
        k += 1
    os.write(progress_w, k.to_bytes(4, "big"))



# ----------------------------------------------------------------------------- the grader's profile (graders.py)

# What both reference graders take from a program before it runs (their "reliability guard"): functions
# of os set to None, modules made unimportable. (Their shutil and subprocess removals are not reproduced.)
REFERENCE_GUARD_OS = ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
                      "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown",
                      "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir")
REFERENCE_GUARD_MODULES = ("ipdb", "joblib", "resource", "psutil", "tkinter")
# LiveCodeBench's import prelude: the public names of these modules, in this order, then the modules.
PRELUDE_STAR = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
                "statistics", "itertools", "functools", "operator", "io", "sys", "json", "builtins", "typing")
PRELUDE_MODULES = PRELUDE_STAR[:15] + ("json",)


def grader_setup(settings):
    """Once per runner, so that every test inherits it at no cost: what the reference grader's process did
    before running a program (settings["grader"], a graders.Grader's `run`). Without site-packages (the
    authors run `python3 -S`) installed packages are not importable; the prelude's modules are imported
    and its namespace built; builtins and functions of os set to None, modules made unimportable, the
    recursion and integer-digit limits raised. (The runner's own code calls its handles above.)"""
    run = settings["grader"]
    if not run.get("site_packages", True):
        sys.path[:] = [p for p in sys.path if "site-packages" not in p and "dist-packages" not in p]
    if run.get("prelude"):
        prelude = {}
        for name in PRELUDE_STAR:
            module = __import__(name)
            names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
            prelude.update((n, getattr(module, n)) for n in names if hasattr(module, n))
        prelude.update((name, sys.modules[name]) for name in PRELUDE_MODULES)
        # Builtins the reference had set to None before its prelude copied them.
        prelude.update((name, None) for name in run.get("none_builtins", ()) if name in prelude)
        settings["prelude"] = prelude
    for name in run.get("none_builtins", ()):
        setattr(builtins, name, None)
    if run.get("guard"):
        settings["unguarded"] = {name: getattr(os, name) for name in REFERENCE_GUARD_OS if hasattr(os, name)}
        guard_os(settings, None)
        for name in REFERENCE_GUARD_MODULES:
            sys.modules[name] = None
    if run.get("recursion_limit"):
        sys.setrecursionlimit(run["recursion_limit"])
    if run.get("int_max_str_digits"):
        sys.set_int_max_str_digits(run["int_max_str_digits"])


def guard_os(settings, restore):
    """Set the guarded functions of os to None, or (restore=True) back to themselves."""
    for name, function in settings.get("unguarded", {}).items():
        setattr(os, name, function if restore else None)


def program_globals(settings, streams, argv):
    """The namespace a program starts in: what `python` defines, and the prelude's names with the test's own
    streams and argv (as a program that imported them from sys at its start would have them)."""
    names = {}
    if settings.get("prelude"):
        names.update(settings["prelude"])
        names.update(stdin=streams[0], stdout=streams[1], stderr=streams[2], argv=argv)
    names.update(__name__="__main__", __builtins__=builtins, __file__=PROGRAM_NAME)
    return names


def exact_number(value):
    """json.dumps' fallback for exact_numbers: a numpy scalar, Decimal or Fraction as the equal int or
    float, where one is equal (else it stays unserializable, equal to no expected value)."""
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        return value.item()
    if type(value).__name__ in ("Decimal", "Fraction"):
        for kind in (int, float):
            try:
                if kind(value) == value:
                    return kind(value)
            except (ValueError, OverflowError):  # nan, infinity
                pass
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# ----------------------------------------------------------------------------- the test child


def fresh_streams():
    """New sys.stdin/stdout/stderr objects on fds 0/1/2, configured as CPython configures them for
    non-terminals. Made ONCE in the runner and never used there: each test child gets its own untouched
    copy through the fork (building them in the child would cost copy-on-write page faults)."""
    return (io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8"),
            io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8"),
            io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8",
                             errors="backslashreplace", line_buffering=True))


def child_plan(settings, job):
    """Everything a test child of this job needs that does not depend on the test, prepared ONCE per job
    (a child that builds objects or calls helpers pays for it in copy-on-write faults)."""
    limits = job["limits"]
    cpu, mem = int(limits["timeout_s"]) + 1, limits["memory_mb"] << 20
    # stdout and stderr are files: the kernel stops them (and any file the program writes) at the cap.
    rlimits = [(resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (mem, mem)),
               (resource.RLIMIT_STACK, (mem, mem)), (resource.RLIMIT_FSIZE, (limits["output_bytes"] + 1,) * 2)]
    first = 3 if job.get("fn_name") is None else 4  # fds 0-2 (and 3, the result, for call-based tests)
    main = types.ModuleType("__main__")
    argv = [PROGRAM_NAME]
    main.__dict__.update(program_globals(settings, settings["streams"], argv))
    return rlimits, first, main, settings["streams"], argv, not settings["kill_all"], settings["grader"]


def run_child(code, compile_error, fn_name, args, fds, plan):
    """In the forked child: wire fds, apply limits, run the program like `python solution.py`, exit.

    fds: stdin, stdout, stderr and (call-based tests) result memfds, which become fds 0, 1, 2, 3.
    Signal dispositions are the runner's: CPython's own (SIGPIPE ignored, SIGINT -> KeyboardInterrupt),
    as for `python solution.py`, except SIGXFSZ (see main): writing past the output limit kills."""
    rlimits, first_closed, main, streams, argv, die_with_runner, run = plan
    try:
        if die_with_runner:
            os.setpgid(0, 0)  # so that killpg reaches what it starts (no kill(-1) in this mode)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(first_closed, 1 << 16)  # the grader's pipes, the report file: the program gets none
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
                payload = json.dumps(value, default=exact_number if run.get("exact_numbers") else None).encode()
            except (TypeError, ValueError) as e:
                payload = json.dumps({"unserializable": f"{type(value).__name__}: {e}"}).encode()
            else:
                payload = json.dumps({"value": payload.decode()}).encode()
            write_all(3, payload)
        exit_code = finish_like_python(0)
    except SystemExit as e:  # (a stdin program's SystemExit ends it normally where the grader says so)
        exit_code = finish_like_python(0 if run.get("swallow_exit") and fn_name is None else exit_status(e.code))
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


def read_capped(fd, cap):
    """(the first `cap` bytes, total size) of a memfd the test child wrote."""
    size = os.lseek(fd, 0, os.SEEK_END)  # (cheaper than fstat: no stat object)
    return os.pread(fd, min(size, cap), 0), size


def run_one(settings, job, k, code, compile_error, plan, clean_up=True):
    """Fork one test child, wait for it (its wall clock), and append what it did to the report file.

    Its stdin, stdout and stderr are memfds (in-memory files): the runner does nothing while the test
    runs but wait for its exit (no pipes to drain), and reads what it wrote afterwards.
    clean_up=False: leave killing what the test left behind, and then cleaning up, to the caller (see
    run_in_template)."""
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
    used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the CPU time of every process reaped here so far
    start = time.monotonic()
    gc.freeze()  # objects made since the last test stay out of the child's collections (fewer page copies)
    pid = fork()
    if pid == 0:
        run_child(code, compile_error, fn_name, args, fds, plan)
    pidfd = os.pidfd_open(pid)
    exited = select.select([pidfd], [], [], limits["timeout_s"])[0]
    # The wall clock from before the fork to the moment its exit was seen. Nothing a test does makes it
    # shorter (a test that stops this process only lengthens it), and a test over its limit is a timeout
    # whatever the select above saw: the clock, not the wake-up, decides.
    elapsed = time.monotonic() - start
    if not exited:  # out of time: kill it (and, below, everything it started)
        kill(pid, signal.SIGKILL)
    exit_code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    os.close(pidfd)
    if clean_up:  # kill first, then clean: a leftover writer could refill the folder after a clean-up
        kill_leftovers(settings, pid)
    # The CPU time of the test's processes together (all reaped by now, to us as the subreaper: with
    # clean_up=False, those the caller kills later are not counted).
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
    cap = limits["output_bytes"]
    out, out_size = read_capped(fds[1], cap)
    err, err_size = read_capped(fds[2], cap)
    res, res_size = read_capped(fds[3], cap) if fn_name is not None else (b"", 0)
    for fd in fds:
        os.close(fd)
    if clean_up:
        clean_after_test(settings)
    flags = ((not exited or elapsed > limits["timeout_s"] or exit_code == -signal.SIGXCPU) * TIMED_OUT
             | (max(out_size, err_size, res_size) > cap) * OUTPUT_LIMITED | (fn_name is not None) * HAS_RESULT
             | lost_a_process_to_oom(settings) * OUT_OF_MEMORY)
    report = REPORT.pack(k, exit_code, flags, elapsed, cpu, settings["oom_kills"], len(out), len(err), len(res)) \
        + out + err + res
    write_frame(settings["out_fd"] if len(report) > PIPE_REPORT_BYTES else settings["report_fd"], b"R", report)


def run_in_template(settings, job, start, code, plan, modules):
    """Run the tests from `start` in a copy of this runner that first imports `modules`, the ones the
    program imports that are not loaded here (numpy: ~50 ms per test otherwise). Each test child
    then finds them loaded and untouched, as it finds the modules preloaded above. Returns the
    first test not run there: the copy stops after a test that leaves processes behind (the kill
    of every sandbox process, which would kill this runner too, is the runner's to do); then the
    runner goes on with the rest itself. If the copy dies (a program killed it), so does the runner,
    and the grader judges that test and starts a new one."""
    progress_r, progress_w = os.pipe()
    pid = fork()
    if pid == 0:
        try:
            os.close(progress_r)
            _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # a test's orphans come to us
            memory = job["limits"]["memory_mb"] << 20
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            os.dup2(os.open(os.devnull, os.O_RDWR), 2)  # what an import prints goes nowhere
            for name in modules:
                try:
                    __import__(name)
                except BaseException:  # the program meets the same error when it imports it
                    pass
            k = start
            while k < len(job["inputs"]) and time.monotonic() < job["deadline"]:
                # kill(-1) would kill the runner too; a process group kill (process mode) is safe here.
                run_one(settings, job, k, code, None, plan, clean_up=not settings["kill_all"])
                k += 1
                if settings["kill_all"]:
                    if has_children():
                        break  # the runner kills what is left, then cleans up (kill first, then clean)
                    clean_after_test(settings)
            os.write(progress_w, k.to_bytes(4, "big"))
        finally:
            os._exit(0)
    os.close(progress_w)
    os.waitpid(pid, 0)
    done = os.read(progress_r, 4)
    os.close(progress_r)
    kill_leftovers(settings, None)
    clean_after_test(settings)
    if len(done) != 4:
        sys.exit(1)  # killed by a program: the grader charges the first test without a report
    return int.from_bytes(done, "big")


def main():
    settings = json.loads(sys.argv[1])
    if settings.get("namespaces"):
        enter_namespaces(settings)  # from here on: pid 1 of the sandbox's own namespaces and file system
    setup(settings)
    grader_setup(settings)
    chdir(settings["tmp"])  # every test child starts here
    folders = [settings["tmp"]] + (["/dev/shm"] if settings["private_ipc"] and os.path.isdir("/dev/shm") else [])
    settings["clean_folders"] = folders
    settings["clean"] = [[path, folder_state(path)] for path in folders]  # see clean_after_test
    lost_a_process_to_oom(settings)  # (the cgroup's count may hold the kills of a runner before this one)
    if settings["jobns"]:  # what run_job returns to after making each job's namespaces, if it can
        settings["setns_back"] = can_return_to_own_namespaces()
        settings["own_namespaces"] = [(kind, os.open(f"/proc/self/ns/{name}", os.O_RDONLY))
                                      for kind, name in NAMESPACE_FILES]
    # CPython ignores SIGXFSZ; a test child must die when it writes past its file size limit. (The
    # runner itself has no such limit.) Set here once: signal.signal in each child costs ~20 page faults.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    settings["streams"] = fresh_streams()
    # What a test child replaces stays referenced here, so that the child never frees (= writes) it.
    replaced = (sys.stdin, sys.stdout, sys.stderr, sys.argv, sys.modules["__main__"])  # noqa: F841
    gc.freeze()  # objects that exist now are never scanned by a test's collector: fewer copied pages
    send(settings, {"ready": True, "pid": os.getpid(), "uid": os.getuid()})
    while True:
        msg = recv(settings)  # {"op": "run", "start": k, "budget_s": s}: the job itself is in the job file
        if msg is None or msg.get("op") == "exit":
            kill_leftovers(settings, None)
            return
        msg["deadline"] = time.monotonic() + msg["budget_s"]
        os.lseek(settings["report_fd"], 0, os.SEEK_SET)  # the grader emptied the file before sending the job
        if settings["jobns"]:
            if run_job(settings, msg) is None:
                sys.exit(1)  # killed (out of memory): the grader charges the first test without a report
            send(settings, {"done": True})
            continue
        # The unsafe process mode (no namespaces): the runner reads the job and runs the tests itself.
        job = read_job(settings, msg)
        code, compile_error, plan = prepare_job(settings, job)
        start = job["start"]
        missing = [name for name in job.get("imports") or () if name not in sys.modules]
        if missing and compile_error is None:
            start = run_in_template(settings, job, start, code, plan, missing)
        for k in range(start, len(job["inputs"])):
            if time.monotonic() >= job["deadline"]:
                break  # out of the program's total time: the grader fails the tests not run
            run_one(settings, job, k, code, compile_error, plan)
        send(settings, {"done": True})


if __name__ == "__main__":
    main()
