"""The sandbox's process machinery: the runner processes and the channel to them (their isolation:
isolation.py).

Verdicts are verdicts.py's (output comparison, grade_test, Sandbox.run), but for two kinds of test that
Runner.reports judges itself: one that cost the runner its life (a timeout, memory_limit or runtime_error
by what killed it) and one past the program's total time budget (OUT_OF_TIME). What it does: start one
long-lived runner process (runner.py, with jail.py: one program) inside bubblewrap or in namespaces the
runner makes itself, lease it a uid of its own, hand it one program and its tests' inputs at a time, read
back its binary per-test reports, and replace it when a program kills or freezes it. verdicts.py hands each
report to grade_test.
"""

from __future__ import annotations

import ast
import json
import marshal
import os
import select
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cobalt_min.sandbox import jail
from cobalt_min.sandbox import runner
from cobalt_min.sandbox.isolation import (Cgroup, UidLease, bwrap_prefix, cgroup_support, python_paths,
                                          resolve_isolation, runner_env, scratch_folder, warn_no_cgroup)
from cobalt_min.sandbox.types import OUT_OF_TIME, Limits, SandboxError, TestResult

# The runner starts from its compiled code (marshal), read from a memfd: compiling its source in each
# runner would leave ~2 MB more of the compiler's memory in the process that every test forks from
# (each page of it costs every fork).
# The runner is one program made of two files: jail.py's code runs first, then runner.py's, in the same
# globals (cobalt_min cannot be imported in the sandbox).
RUNNER_CODE = marshal.dumps(tuple(compile((Path(__file__).parent / name).read_text(), name, "exec", dont_inherit=True)
                                  for name in ("jail.py", "runner.py")))  # (not our __future__ flags)
RUNNER_BOOT = ("import marshal, os, sys\nfd = int(sys.argv[2])\ncodes = marshal.loads(os.pread(fd, 1 << 24, 0))\n"
               "os.close(fd)\nrunner = {'__name__': '__main__'}\nfor code in codes:\n    exec(code, runner)\n")
_RUNNER_CODE_FD: list = []


def _next_frame(data: bytes, pos: int):
    """(kind, body, position after it) of the runner's frame at `pos`, or None while incomplete."""
    if len(data) - pos < runner.FRAME.size:
        return None
    size, kind = runner.FRAME.unpack_from(data, pos)
    end = pos + runner.FRAME.size + size
    return (kind, data[pos + runner.FRAME.size:end], end) if end <= len(data) else None


def _decode_report(body: bytes) -> dict:
    """The runner's binary report on one test (runner.REPORT) as a dict for verdicts.grade_test()."""
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
        self._report_fd = self._job_fd = None  # memfds: test reports from the runner, the job to it (runner.py)
        self._tmp = None
        self.restarts = 0
        self._stopped = False  # interrupt(): no runner is started any more
        self._cgroup = self._counter_fd = None
        self._lease = UidLease() if os.geteuid() == 0 else None
        found = cgroup_support()
        if found[0] is not None:
            try:
                self._cgroup = Cgroup(found, self.limits)
                self._counter_fd = os.open(self._cgroup.counter, os.O_RDONLY)
            except OSError as e:
                self.close()
                raise SandboxError(f"the sandbox's cgroup could not be made: {e}") from None
        else:
            warn_no_cgroup(found[1])

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
            scratch = scratch_folder(python_paths())
            settings["tmp"], cmd, env = scratch, bwrap_prefix(self.limits, scratch), runner_env(scratch)
        elif self.namespaces:
            scratch = scratch_folder(python_paths())
            settings.update(tmp=scratch, root=self._tmp, python_paths=python_paths())
            cmd, env = [], runner_env(scratch)
        else:
            settings["tmp"], cmd, env = self._tmp, [], runner_env(self._tmp)
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
            jail.empty_folder(self._tmp)  # (no recursion: a program may have nested folders very deep)
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
        """The job file the runner's job process reads (runner.read_job); the runner is idle."""
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
        return jail.out_of_memory_kills({"oom_fd": self._counter_fd})

    def _max_frame(self):
        """The largest message the runner can honestly send: a report of three capped streams."""
        return 3 * self.limits.output_bytes + (1 << 16)

    def _job_limits(self) -> dict:
        """The limits the runner applies to each test of a job."""
        lim = self.limits
        # RLIMIT_NPROC counts per uid and user namespace: it binds the sandbox alone under a reserved uid or in
        # bwrap's own user namespace (non-root), else the user's processes.
        return {"timeout_s": lim.timeout_s, "memory_mb": lim.memory_mb, "output_bytes": lim.output_bytes,
                "max_files": lim.max_files, "max_procs": lim.max_procs if self._lease or self.isolation == "bwrap" else 0}

    def _lost_runner(self, job: dict, *, frozen: bool, oom_kills: int, out_of_time: bool) -> TestResult:
        """The verdict on a test that cost the runner its life (or froze it, or ran out of the program's time),
        once the runner is killed; the job is rewritten for the next runner, without importing ahead."""
        self._kill()
        # The kernel's OOM killer picks the largest process of the cgroup, which is the runner when the test's
        # memory is in no process (memory files, kernel buffers), and a cgroup short of memory can stall the
        # runner: either way the test's doing.
        status, detail = ("timeout", OUT_OF_TIME) if out_of_time else \
            ("memory_limit", "the test's processes together went over the memory limit (the sandbox was lost "
                             "with them)") if self._oom_kills() > oom_kills else \
            ("timeout", "the sandbox stopped answering") if frozen else \
            ("runtime_error", "the program killed its sandbox")
        self.restarts += 1
        job["imports"] = []  # the rest without importing ahead: that may be what failed
        self._write_job(job)
        return TestResult(False, status, detail=detail)

    def reports(self, program: str, inputs: list, fn_name: str | None = None, budget_s: float | None = None):
        """Run `program` on each input in order; yield (k, report) where report is the runner's raw
        dict (stdout, stderr, exit, result, ...) or, for a test that cost the runner its life or hit the
        program's total time limit (budget_s for all its tests; by default Limits' rule), a TestResult
        that already says so."""
        lim = self.limits
        job = {"program": program, "inputs": inputs, "fn_name": fn_name, "imports": imported_modules(program),
               "limits": self._job_limits()}
        self._write_job(job)
        k = 0
        if budget_s is None:
            budget_s = lim.total_timeout_s * min(lim.budget_tests, len(inputs))
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
                    yield k, self._lost_runner(job, frozen=msg is None and not self._eof, oom_kills=oom_kills,
                                               out_of_time=time.monotonic() >= program_deadline)
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
    runner imports once for all its tests when it has not loaded them (runner.run_in_template)."""
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


