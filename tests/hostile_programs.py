"""Hostile programs for the sandbox, run by tests/test_sandbox_hostile.py INSIDE a throw-away pid
namespace (`unshare --pid --fork --mount-proc`), so that a sandbox failure cannot harm the machine.

    unshare --pid --fork --mount-proc python tests/hostile_programs.py --isolation bwrap CANARY_DIR

Prints one JSON object: {name: {"results": [...], "elapsed_s": float, ...}, "_leftover": [...]}.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cobalt_min import sandbox  # noqa: E402

TIMEOUT = 1.0  # per test, short so the whole suite stays quick
SUM = "a, b = map(int, input().split())\nprint(a + b)\n"  # a well-behaved program, run after hostile ones


def programs(canary_dir: str, port: int, marker: str) -> dict:
    """name -> (program, tests). Expected outputs are the correct answers a hostile program tries to fake."""
    two = {"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]}
    host_file = os.path.join(canary_dir, "canary.txt")
    return {
        "infinite_loop": ("while True:\n    pass\n", two),
        "sleep": ("import time\ntime.sleep(100)\n", two),
        "ignore_sigalrm": ("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nsignal.alarm(0)\n"
                           "while True:\n    pass\n", two),
        "catch_base_exception": ("import time\nwhile True:\n    try:\n        while True:\n            time.sleep(0.01)\n"
                                 "    except BaseException:\n        pass\n", two),
        "memory_bomb": ("x = bytearray(50 * 1024 ** 3)\n", two),
        "memory_growth": ("a = []\nwhile True:\n    a.append(' ' * 10 ** 7)\n", two),
        "fork_bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", two),
        # "fill": fill the process limit with busy children, then answer at once. "count": print how many
        # other processes of the sandbox uid exist. A test must start with every process of the one
        # before it gone, killed AND reaped (one still dying counts against the process limit).
        "fill_process_limit": (FILL_THEN_COUNT, {"inputs": ["fill", "count", "fill", "count"],
                                                 "outputs": ["filled\n", "0\n", "filled\n", "0\n"]}),
        "daemon_child": ("import os, time, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                         "        time.sleep(100)\n    os._exit(0)\n" + SUM, two),
        "subprocess_holding_stdout": ("import subprocess\nsubprocess.Popen(['sleep', '100'])\n" + SUM, two),
        "daemon_thread": ("import threading, time\nthreading.Thread(target=time.sleep, args=(100,), daemon=True).start()\n"
                          + SUM, two),
        "lingering_thread": ("import threading, time\nthreading.Thread(target=time.sleep, args=(100,)).start()\n" + SUM, two),
        "huge_output": ("while True:\n    print('x' * 10000)\n", two),
        "closed_stdout": ("import os\nos.close(1)\n" + SUM, two),
        "write_outside": (f"import os\nfor p in [{host_file!r}, {os.path.join(canary_dir, 'new.txt')!r}, '/usr/pwned', "
                          "'/pwned']:\n    try:\n        open(p, 'w').write('pwned')\n    except OSError:\n        pass\n"
                          + SUM, two),
        "delete_outside": (f"import os, shutil\ntry:\n    os.remove({host_file!r})\nexcept OSError:\n    pass\n"
                           f"shutil.rmtree({canary_dir!r}, ignore_errors=True)\n" + SUM, two),
        "read_env_secrets": ("import os, glob\nout = [repr(dict(os.environ))]\nfor p in glob.glob('/proc/*/environ'):\n"
                             "    try:\n        out.append(open(p, 'rb').read().decode(errors='replace'))\n"
                             "    except OSError:\n        pass\nprint('\\n'.join(out))\n", two),
        "network": (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=0.5).sendall(b'hi')\n"
                    "    print('CONNECTED')\nexcept OSError as e:\n    print('blocked', e)\n", two),
        "kill_parent": ("import os, signal\nline = input()\nif line == 'kill':\n    os.kill(os.getppid(), signal.SIGKILL)\n"
                        "a, b = map(int, line.split())\nprint(a + b)\n",
                        {"inputs": ["kill", "3 4\n"], "outputs": ["?\n", "7\n"]}),
        "kill_everything": ("import os, signal\nline = input()\nif line == 'kill':\n    os.kill(-1, signal.SIGKILL)\n"
                            "a, b = map(int, line.split())\nprint(a + b)\n",
                            {"inputs": ["kill", "3 4\n"], "outputs": ["?\n", "7\n"]}),
        "stop_parent": ("import os, signal\nline = input()\nif line == 'stop':\n    os.kill(os.getppid(), signal.SIGSTOP)\n"
                        "    os.kill(-1, signal.SIGSTOP)\na, b = map(int, line.split())\nprint(a + b)\n",
                        {"inputs": ["stop", "3 4\n"], "outputs": ["?\n", "7\n"]}),
        "os_exit": ("import os, sys\na, b = map(int, input().split())\nprint(a + b)\nsys.stdout.flush()\n"
                    "os._exit(0 if a == 1 else 3)\n", two),
        "segfault": ("import ctypes\nctypes.string_at(0)\n", two),
        "deep_recursion": ("import sys\nsys.setrecursionlimit(10 ** 8)\ndef f(n):\n    return f(n + 1) + 1\nf(0)\n", two),
        "read_past_eof": ("input()\ninput()\n", two),
        "hunt_expected": (HUNT, {"inputs": ["\n"], "outputs": [marker + "\n"]}),
    }


FILL_THEN_COUNT = """
import os
if input() == 'fill':
    while True:
        try:
            if os.fork() == 0:
                while True:
                    pass
        except OSError:
            break
    print('filled')
else:
    others = 0
    for p in os.listdir('/proc'):
        if p.isdigit() and int(p) not in (os.getpid(), os.getppid()):
            try:
                others += os.stat('/proc/' + p).st_uid == os.getuid()
            except OSError:
                pass
    print(others)
"""

# Looks for the expected output everywhere a program might: frames, objects, /proc of every process
# (cmdline, environ, memory), and files. The marker is random and lives only in the grader's memory.
HUNT = r"""
import gc, os, sys, re, time
deadline = time.time() + 4  # search for 4 seconds at most, then report
found = []
pat = re.compile(rb'HUNT-[0-9a-f]{32}')
f = sys._getframe()
while f is not None:
    if pat.search(repr(f.f_locals).encode(errors='replace')):
        found.append('frame')
    f = f.f_back
for o in gc.get_objects():
    try:
        if pat.search(repr(o).encode(errors='replace')):
            found.append('object')
            break
    except Exception:
        pass
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    for name in ('cmdline', 'environ'):
        try:
            if pat.search(open(f'/proc/{pid}/{name}', 'rb').read()):
                found.append(f'{pid}/{name}')
        except OSError:
            pass
    try:
        mem = open(f'/proc/{pid}/mem', 'rb')
        for line in open(f'/proc/{pid}/maps'):
            lo, hi = (int(x, 16) for x in line.split()[0].split('-'))
            if 'r' in line.split()[1] and hi - lo < 1 << 28:
                mem.seek(lo)
                if pat.search(mem.read(hi - lo)):
                    found.append(f'{pid}/mem')
                    break
    except (OSError, ValueError, OverflowError):
        pass
for root in (os.getcwd(), '/tmp', '/var/tmp', '/dev/shm', '/root', '/home', '/work'):
    for d, _, files in os.walk(root):
        if time.time() > deadline:
            break
        for name in files:
            try:
                if pat.search(open(os.path.join(d, name), 'rb').read(1 << 20)):
                    found.append(os.path.join(d, name))
            except OSError:
                pass
print('FOUND' if found else 'not found', found[:5])
"""


def leftover_processes() -> list[str]:
    """Processes still running under a sandbox uid (there must be none)."""
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")[:80]
        except OSError:
            continue
        if sandbox.SANDBOX_UID_BASE <= uid < sandbox.SANDBOX_UID_BASE + 256:
            left.append(f"{pid} uid={uid} {cmd!r}")
    return left


def become_init_then_run():
    """As pid 1 of the test namespace we must reap orphans (a real init would): fork, reap, relay."""
    child = os.fork()
    if child:
        while True:
            pid, status = os.wait()
            if pid == child:
                os._exit(os.waitstatus_to_exitcode(status))


def main():
    if os.getpid() == 1:
        become_init_then_run()
    ap = argparse.ArgumentParser()
    ap.add_argument("--isolation", required=True)
    ap.add_argument("canary_dir")
    args = ap.parse_args()
    secret = "SECRET-" + uuid.uuid4().hex
    os.environ["COBALT_TEST_SECRET"] = secret
    marker = "HUNT-" + uuid.uuid4().hex
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.1)
    connections = []

    def accept():
        while not stop.is_set():
            try:
                connections.append(server.accept())
            except OSError:
                pass
    stop = threading.Event()
    threading.Thread(target=accept, daemon=True).start()
    progs = programs(args.canary_dir, server.getsockname()[1], marker)
    out = {}
    for name, (program, tests) in progs.items():
        start = time.monotonic()
        # Each hostile job is followed by a well-behaved one in the same batch (same sandbox worker):
        # the sandbox must still judge it correctly afterwards.
        batch = sandbox.run_batch([(program, tests), (SUM, {"inputs": ["2 2\n"], "outputs": ["4\n"]})],
                                  timeout_s=8.0 if name == "hunt_expected" else TIMEOUT, total_timeout_s=30,
                                  workers=1, isolation=args.isolation, memory_mb=256)
        out[name] = {"results": [r.to_dict() for r in batch[0]], "after": [r.to_dict() for r in batch[1]],
                     "elapsed_s": time.monotonic() - start, "leftover": leftover_processes()}
    stop.set()
    out["_secret"] = secret
    out["_connections"] = len(connections)
    out["_leftover"] = leftover_processes()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
