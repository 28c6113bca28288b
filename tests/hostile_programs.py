"""Hostile programs for the sandbox, run by tests/test_sandbox_hostile.py INSIDE a throw-away pid
namespace (`unshare --pid --fork --mount-proc`), so that a sandbox failure cannot harm the machine.

    unshare --pid --fork --mount-proc python tests/hostile_programs.py --isolation bwrap CANARY_DIR
    unshare --pid --fork --mount-proc python tests/hostile_programs.py --isolation bwrap --as-user 1000 CANARY_DIR

--as-user: the grader runs as that (non-root) uid, as a user without root would run it. The harness
starts as root to make the Python install and this checkout reachable for it (in the namespace's own
mount table only), then drops to the uid before it imports the sandbox.

Prints one JSON object: {name: {"results": [...], "elapsed_s": float, ...}, "_leftover": [...]}.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sandbox = None  # cobalt_min.sandbox, imported once the harness has its final identity (main)
ISOLATION = [None]  # the mode under test (main)

TIMEOUT = 1.0  # per test, short so the whole suite stays quick
MEMORY_MB = 256  # per process (sandbox memory_mb)
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
        # "fill": fill the process limit with children, then answer at once. "count": print how many
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
        # A job forged into every descriptor the program can open of another process (bubblewrap's pid 1
        # holds descriptors 0-2 and runs as the grader's user when it is not root), then a flood.
        "forge_grader_job": (FORGE, two),
        # Leave System V shared memory, queues, semaphores and /dev/shm files behind; write into /dev.
        # The next test counts what is left (all must be gone) and looks for the file in /dev.
        "leave_ipc_and_shm": (LEAVE_IPC, {"inputs": ["leave", "count"], "outputs": ["left\n", "0 0 False\n"]}),
        # Make the scratch folder unusable (modes, removal, nesting past PATH_MAX and the recursion limit);
        # each next test must find it empty and writable.
        "poison_scratch": (POISON, {"inputs": [x for cmd in ("chmod000", "chmod300", "chmod500", "rmdir", "deep")
                                               for x in (cmd, "check")],
                                    "outputs": ["done\n", "ok 0\n"] * 5}),
        # Leave a file anywhere outside the scratch folder (the root folder, the folders above the Python
        # install, ...) for the next test to find: everything but the scratch folder is read-only.
        "plant_outside": (PLANT, {"inputs": ["plant", "find"], "outputs": ["done\n", "0\n"]}),
        # Keep a key in the user keyring (it outlives processes) for a later program to find.
        "keyring_cache": (KEYRING, {"inputs": ["store", "find"], "outputs": ["stored\n", "found\n"]}),
        # Stop the process that keeps the test's clock (its parent), work past the limit, print the right
        # answer, and have a helper let the parent go on: as the module `random` is not preloaded, also
        # through the runner's copy that imports it. Must be a timeout.
        "stop_the_clock": (STOP_THE_CLOCK, two),
        # Many processes, each under the per-process limit (MEMORY_MB), together far over it.
        "memory_together": (MEMORY_TOGETHER, {"inputs": [f"{TOGETHER_PROCS}\n"], "outputs": ["ok\n"]}),
        # Reach the process that runs the tests (pid 1 of the test's namespace): its descriptors (the
        # runner's error log, once), ptrace, other processes; and interrupt it (SIGINT).
        "reach_pid_1": (REACH_PID_1, {"inputs": ["\n"], "outputs": ["fd-denied ptrace-denied 0\n"]}),
        "interrupt_pid_1": ("import os, signal\nos.kill(1, signal.SIGINT)\nos.kill(os.getppid(), signal.SIGINT)\n"
                            + SUM, two),
        # Third red team. Evict single pages of a shared read-only file from the machine's page cache, or
        # probe them without blocking: a channel to programs in other sandboxes. Every way must be refused.
        "page_cache_channel": (PAGE_CACHE, {"inputs": ["\n"], "outputs": ["fadvise-blocked nowait-blocked "
                                                                          "cachestat-blocked io_uring-blocked\n"]}),
        # Memory outside a process's address space: a tmpfs mounted in a user namespace of its own.
        "nested_namespaces": (NESTED_NAMESPACES, {"inputs": ["\n"], "outputs": ["userns-blocked\n"]}),
        # Kernel memory in socket buffers (unix socket pairs, filled and never read), in many processes.
        "socket_buffers": (SOCKET_BUFFERS, {"inputs": ["\n"], "outputs": ["blocked\n"]}),
        # Memory files (memfd_create; each under the file-size limit) in 20 processes: about 1 GiB that is in
        # no process's address space. With a cgroup it counts against the sandbox's memory.
        "memfd_hoard": (MEMFD_HOARD, {"inputs": ["\n"], "outputs": ["ok\n"]}),
    }


# Programs judged one after another in ONE sandbox: what the earlier ones do must not change what the later
# ones see. Each name -> list of (program, tests).
def sequences() -> dict:
    answer = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
    return {
        # A daemon of program A rewrites an answers file after A's clean-up; B solves nothing and prints it.
        "leftover_writer": [(LEFTOVER_WRITER, answer), (PRINT_ANSWERS, answer), (PRINT_ANSWERS, answer)],
        # A spoils every counter a later program could read (inode numbers of new files in the scratch
        # folder and /dev/shm, pid numbers) and sets extended attributes on the folders it can; the probe
        # must print the same before and after.
        "side_channels": [(PROBE, answer), (SPOIL, answer), (PROBE, answer)],
        # Third red team. Each program A carries a random marker in its source (several lengths: where freed
        # memory is reused depends on sizes); the next program scans every readable page of its own memory
        # (a test is a fork of the process that received the job) for any such marker.
        "previous_source": [job for length in SOURCE_LENGTHS for job in ((marked_source(length), answer),
                                                                          (FIND_SOURCE, answer))],
        # A leaves connections in TIME_WAIT on ports that spell its answer, and moves the network namespace's
        # counters (datagrams sent, packets without a route); the probe must print the same before and after.
        "network_state": [(PROBE_NET, answer), (SPOIL_NET, answer), (PROBE_NET, answer)],
    }


SOURCE_LENGTHS = (200, 700, 1500, 3000, 6000, 12000, 30000)


def marked_source(length: int) -> str:
    """A correct program of about `length` characters holding one random marker (the regex of FIND_SOURCE)."""
    head = f"# SRC-{uuid.uuid4().hex}\n"
    pad = "".join(f"# {k:06d} {'x' * 60}\n" for k in range(max(0, length - len(head) - len(SUM)) // 70))
    return head + pad + SUM


STOP_THE_CLOCK = r"""
import os, random, signal, time
a, b = map(int, input().split())
parent = os.getppid()
if os.fork() == 0:
    time.sleep(1.6)
    try:
        os.kill(parent, signal.SIGCONT)
    except OSError:
        pass
    os._exit(0)
for target in (parent, 1):
    try:
        os.kill(target, signal.SIGSTOP)
    except OSError:
        pass
end = time.time() + 1.5
while time.time() < end:
    pass
print(a + b)
"""

TOGETHER_PROCS, TOGETHER_MB = 12, 90  # 1080 MiB together, each process under MEMORY_MB
MEMORY_TOGETHER = r"""
import os, time
n = int(input())
r, w = os.pipe()
pids = []
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        block = b'\x01' * (%d << 20)  # written: really held
        os.close(w)
        os.read(r, 1)  # end of file once every process holds its block: all of them at once
        time.sleep(0.3)
        os._exit(0)
    pids.append(pid)
os.close(w)
ok = all(os.waitpid(p, 0)[1] == 0 for p in pids)
print('ok' if ok else 'a child died')
""" % TOGETHER_MB

REACH_PID_1 = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
out = []
try:
    os.listdir('/proc/1/fd')
    out.append('fd-open')
except OSError:
    out.append('fd-denied')
out.append('ptrace-ok' if libc.ptrace(16, 1, 0, 0) == 0 else 'ptrace-denied')  # PTRACE_ATTACH
others = [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, os.getpid())]
input()
print(*out, len(others))
"""

LEFTOVER_WRITER = r"""
import os, random, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        end = time.time() + 3
        while time.time() < end:
            for folder in ('.', '/tmp', '/dev/shm'):
                try:
                    with open(os.path.join(folder, 'answers.txt'), 'w') as f:
                        f.write('3\n')
                except OSError:
                    pass
            time.sleep(0.001)
    os._exit(0)
time.sleep(0.2)
a, b = map(int, input().split())
print(a + b)
"""

PRINT_ANSWERS = r"""
import os
for folder in ('.', '/tmp', '/dev/shm'):
    path = os.path.join(folder, 'answers.txt')
    if os.path.exists(path):
        print(open(path).read().strip())
        break
else:
    print('none')
"""

PROBE = r"""
import os
out = []
for folder in ('.', '/dev/shm'):
    path = os.path.join(folder, 'probe')
    open(path, 'w').close()
    out.append(os.stat(path).st_ino)
    os.remove(path)
    try:
        out.append(os.getxattr(folder, 'user.answer'))
    except OSError:
        out.append('no-xattr')
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
out += [os.getpid(), pid]
print(*out)
"""

SPOIL = r"""
import os
for folder in ('.', '/dev/shm'):
    for k in range(50):
        path = os.path.join(folder, f'spoil{k}')
        open(path, 'w').close()
        os.remove(path)
    try:
        os.setxattr(folder, 'user.answer', b'3')
    except OSError:
        pass
for _ in range(50):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
print(3)
"""


FIND_SOURCE = r"""
import ctypes, re
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/self/mem readable
pat = re.compile(rb'SRC-[0-9a-f]{32}')
found = set()
mem = open('/proc/self/mem', 'rb', 0)
for line in open('/proc/self/maps'):
    fields = line.split()
    lo, hi = (int(x, 16) for x in fields[0].split('-'))
    if 'r' not in fields[1] or hi - lo > 1 << 30 or (len(fields) > 5 and fields[5].startswith('[v')):
        continue
    try:
        mem.seek(lo)
        found.update(pat.findall(mem.read(hi - lo)))
    except (OSError, ValueError, OverflowError):
        pass
print('found' if found else 'none')
"""

PROBE_NET = r"""
out = []
for name in ('tcp', 'tcp6', 'udp', 'udp6', 'unix'):
    try:
        out.append(len(open('/proc/net/' + name).read().splitlines()) - 1)
    except OSError:
        out.append('-')
try:
    rows = [line.split() for line in open('/proc/net/snmp')]
    for a, b in zip(rows[::2], rows[1::2]):
        out += [f'{a[0]}{k}={v}' for k, v in zip(a[1:], b[1:]) if k in ('OutRequests', 'OutNoRoutes', 'OutDatagrams')]
except OSError:
    out.append('no-snmp')
print(*out)
"""

SPOIL_NET = r"""
import socket
for port in (40003, 40007, 40011):
    try:
        server = socket.socket()
        server.bind(('127.0.0.1', 0))
        server.listen()
        client = socket.socket()
        client.bind(('127.0.0.1', port))
        client.connect(server.getsockname())
        peer, _ = server.accept()
        client.close()  # the side that closes first waits in TIME_WAIT
        peer.close()
        server.close()
    except OSError:
        pass
for target in [('127.0.0.1', 9)] * 37 + [('10.1.2.3', 9)] * 11:
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', target)
    except OSError:
        pass
print(3)
"""

PAGE_CACHE = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(os.__file__, os.O_RDONLY)
out = []
try:
    os.posix_fadvise(fd, 0, 4096, os.POSIX_FADV_DONTNEED)
    out.append('fadvise-open')
except OSError:
    out.append('fadvise-blocked')
try:
    os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT)
    out.append('nowait-open')
except OSError:
    out.append('nowait-blocked')
CACHESTAT, IO_URING_SETUP = 451, 425  # the same numbers on x86-64 and aarch64
rng, stat = (ctypes.c_uint64 * 2)(0, 4096), (ctypes.c_uint64 * 6)()
r = libc.syscall(CACHESTAT, fd, ctypes.byref(rng), ctypes.byref(stat), 0)
out.append('cachestat-open' if r == 0 else 'cachestat-blocked')
params = (ctypes.c_uint8 * 120)()
r = libc.syscall(IO_URING_SETUP, 4, ctypes.byref(params))
out.append('io_uring-open' if r >= 0 else 'io_uring-blocked')
input()
print(*out)
"""

NESTED_NAMESPACES = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x20000
held = 0
if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0:
    os.makedirs('m', exist_ok=True)
    if libc.mount(b'tmpfs', b'm', b'tmpfs', 0, b'size=600m') == 0:
        try:
            with open('m/fill', 'wb') as f:
                for _ in range(48):
                    f.write(b'\x01' * (10 << 20))
                    held += 10
        except OSError:
            pass
    print('userns-open', held)
else:
    input()
    print('userns-blocked')
"""

SOCKET_BUFFERS = r"""
import os, socket
try:
    socket.socketpair()
except OSError:
    print('blocked')
    raise SystemExit
r, w = os.pipe()
pids = []
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        os.close(w)
        keep = []
        try:
            for _ in range(24):
                a, b = socket.socketpair()
                a.setblocking(False)
                try:
                    while True:
                        a.send(b'\x01' * 65536)
                except OSError:
                    pass
                keep.append((a, b))
        except OSError:
            pass
        os.read(r, 1)  # hold the buffers until every process has filled its own
        os._exit(0)
    pids.append(pid)
os.close(w)
ok = all(os.waitpid(p, 0)[1] == 0 for p in pids)
print('ok' if ok else 'a child died')
"""


MEMFD_HOARD = r"""
import os
input()
r, w = os.pipe()
pids = []
for _ in range(20):
    pid = os.fork()
    if pid == 0:
        os.close(w)
        held = []
        for k in range(50):
            fd = os.memfd_create(f'm{k}')
            os.write(fd, b'\x01' * (1 << 20))
            held.append(fd)
        os.read(r, 1)  # hold them until every process has its own
        os._exit(0)
    pids.append(pid)
os.close(w)
ok = all(os.waitpid(p, 0)[1] == 0 for p in pids)
print('ok' if ok else 'a child died')
"""


FORGE = r"""
import json, os, struct
limits = {"timeout_s": 1, "memory_mb": 256, "output_bytes": 1000, "max_files": 64, "max_procs": 0}
body = json.dumps({"op": "run", "program": "print(0)", "inputs": ["x"], "start": 0, "fn_name": None,
                   "imports": [], "limits": limits}).encode()
frame = struct.pack("!Qc", len(body), b"J") + body
for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:
    try:
        names = os.listdir(f'/proc/{pid}/fd')
    except OSError:
        continue
    for name in names:
        try:
            fd = os.open(f'/proc/{pid}/fd/{name}', os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            os.write(fd, frame * 4)
            os.write(fd, b'x' * 300000)
        except OSError:
            pass
        os.close(fd)
a, b = map(int, input().split())
print(a + b)
"""

LEAVE_IPC = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
if input() == 'leave':
    for _ in range(3):
        i = libc.shmget(0, 64 << 20, 0o1600)
        if i >= 0:
            p = libc.shmat(i, None, 0)
            if p is not None and p != ctypes.c_void_p(-1).value:
                ctypes.memset(p, 1, 64 << 20)
                libc.shmdt(ctypes.c_void_p(p))
    libc.msgget(0, 0o1600)
    libc.semget(0, 1, 0o1600)
    for k in range(4):
        try:
            open(f'/dev/shm/x{k}', 'wb').write(b'x' * 500000)
        except OSError:
            pass
    try:
        open('/dev/planted', 'w').write('x')
    except OSError:
        pass
    print('left')
else:
    n = 0
    for kind in ('shm', 'msg', 'sem'):
        n += len(open(f'/proc/sysvipc/{kind}').read().splitlines()) - 1
    print(n, len(os.listdir('/dev/shm')), os.path.exists('/dev/planted'))
"""

POISON = r"""
import os
cmd = input().strip()
if cmd == 'check':
    open('probe.txt', 'w').write('x')
    print('ok', len([n for n in os.listdir('.') if n != 'probe.txt']))
else:
    def attempt(f, *a):
        try:
            f(*a)
        except OSError:
            pass
    if cmd.startswith('chmod'):
        os.makedirs('sub/inner', exist_ok=True)
        open('sub/inner/f', 'w').write('x')
        mode = int(cmd[5:], 8)
        attempt(os.chmod, 'sub/inner', 0)
        attempt(os.chmod, 'sub', mode)
        attempt(os.chmod, '.', mode)
    elif cmd == 'rmdir':
        here = os.getcwd()
        os.chdir('/')
        attempt(os.rmdir, here)
    elif cmd == 'deep':
        for _ in range(3000):
            os.mkdir('dddddddddd')
            os.chdir('dddddddddd')
        open('bottom', 'w').write('x')
    print('done')
"""

PLANT = r"""
import os
here = os.getcwd()
folders = ['/']
for top in sorted(os.listdir('/')):
    path = '/' + top
    if top in ('proc', 'sys', 'usr') or path == here or not os.path.isdir(path) or os.path.islink(path):
        continue
    folders.append(path)
    try:
        folders += [os.path.join(path, n) for n in os.listdir(path) if os.path.isdir(os.path.join(path, n))]
    except OSError:
        pass
folders = [f for f in folders if not (f + '/').startswith(here + '/')]
if input() == 'plant':
    for f in folders:
        try:
            open(os.path.join(f, 'planted-by-a-test'), 'w').write('x')
        except OSError:
            pass
    print('done')
else:
    print(sum(os.path.exists(os.path.join(f, 'planted-by-a-test')) for f in folders))
"""

KEYRING = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
add_key, keyctl = {'x86_64': (248, 250), 'aarch64': (217, 219)}[os.uname().machine]
USER_KEYRING, KEYCTL_SEARCH = -4, 10
if input() == 'store':
    r = libc.syscall(add_key, b'user', b'cobalt-cache', b'answer', 6, USER_KEYRING)
    print('stored' if r > 0 else 'blocked')
else:
    r = libc.syscall(keyctl, KEYCTL_SEARCH, USER_KEYRING, b'user', b'cobalt-cache', 0)
    print('found' if r > 0 else 'absent')
"""

# Reads the tests file of the command-line interface (its path is on the grader's command line) and the
# bundled demo problems (their path is known).
CLI_HUNT = r"""
import os
found = []
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    try:
        args = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\0')
    except OSError:
        continue
    for arg in args:
        if arg.endswith(b'.json'):
            try:
                found.append(open(arg.decode(), 'rb').read(100))
            except OSError:
                pass
if os.path.exists(DEMO):
    found.append(DEMO)
print('FOUND' if found else 'not found', found[:3])
"""


# A program that keeps a CPU busy in each of 57 processes, each in a session of its own (the kernel's
# scheduler then gives each session an equal share of the machine); and a correct program that needs about
# 0.3 s of CPU time, judged on the other worker meanwhile.
CPU_HOG = r"""
import os
input()
for _ in range(56):
    if os.fork() == 0:
        try:
            os.setsid()
        except OSError:
            pass
        while True:
            pass
while True:
    pass
"""
NEEDS_CPU = r"""
import time
a, b = map(int, input().split())
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
print(a + b)
"""


def run_noisy_neighbours():
    """The CPU hog's three tests on one worker while six correct programs are judged on the other."""
    hog = (CPU_HOG, {"inputs": ["\n"] * 3, "outputs": ["\n"] * 3})
    correct = [(NEEDS_CPU, {"inputs": ["1 2\n"], "outputs": ["3\n"]})] * 6
    start = time.monotonic()
    batch = sandbox.run_batch([hog] + correct, timeout_s=1.5, total_timeout_s=30, workers=2,
                              isolation=ISOLATION[0], memory_mb=MEMORY_MB)
    return {"hog": [r.to_dict() for r in batch[0]], "correct": [[r.to_dict() for r in rs] for rs in batch[1:]],
            "elapsed_s": time.monotonic() - start}


# A grader that meets a transient fault at its first sandbox (its TMPDIR, found usable when the grader
# started, is out of inodes: no folder can be made there), then, the fault gone, judges a program that
# reads a file of the machine. Run in a fresh process, as a grader starts. Prints what the first batch did
# and what the program read.
GRADER_FAULT = r"""
import json, os, sys, tempfile
sys.path.insert(0, sys.argv[1])
from cobalt_min import sandbox
canary = sys.argv[2]
tempfile.gettempdir()  # the grader has started: TMPDIR was fine then
filler = os.path.join(tempfile.gettempdir(), "filler")
os.mkdir(filler)
for k in range(100):
    try:
        open(os.path.join(filler, f"f{k}"), "w").close()
    except OSError:
        break
tests = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
out = {}
try:
    out["first"] = [r.status for r in sandbox.run_batch([("print(3)\n", tests)], isolation="process")[0]]
except sandbox.SandboxError as e:
    out["first"] = "SandboxError: " + str(e)[:300]
for name in os.listdir(filler):
    os.remove(os.path.join(filler, name))
reader = ("try:\n    print(open(%r).read())\nexcept OSError:\n    print('blocked')\n" % canary)
try:
    out["second"] = [r.stdout for r in sandbox.run_batch([(reader, tests)], isolation="process")[0]]
except sandbox.SandboxError as e:
    out["second"] = "SandboxError: " + str(e)[:300]
print(json.dumps(out))
"""


def run_grader_fault(canary_dir):
    """GRADER_FAULT with TMPDIR on a tmpfs of 16 inodes (mounted in this namespace only)."""
    tmp = tempfile.mkdtemp(prefix="hostile-fulltmp-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=16,mode=1777", "tmpfs", tmp], check=True)
    try:
        proc = subprocess.run([sys.executable, "-c", GRADER_FAULT, os.path.abspath(ROOT),
                               os.path.join(canary_dir, "canary.txt")], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, TMPDIR=tmp))
        out = json.loads(proc.stdout) if proc.stdout.strip() else {}
        out["stderr"] = proc.stderr[-2000:]
        return out
    finally:
        subprocess.run(["umount", "-l", tmp])
        os.rmdir(tmp)  # (the folder under the tmpfs, empty)


# A grader judging two programs that never finish, stopped by a signal while they run.
GRADER_STOPPED = r"""
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # (started from a background job, SIGINT is ignored)
sys.path.insert(0, sys.argv[1])
from cobalt_min import sandbox
forever = ("while True:\n    pass\n", {"inputs": ["\n"] * 4, "outputs": ["\n"] * 4})
print("judging", flush=True)
sandbox.run_batch([forever, forever], timeout_s=20, total_timeout_s=100, workers=2, isolation=sys.argv[2])
"""


def run_stopped_grader(isolation, signum):
    """GRADER_STOPPED, sent `signum` once its sandboxes run; then what it left: its cgroups and the folders in
    its TMPDIR."""
    tmp = tempfile.mkdtemp(prefix="hostile-stopped-")
    os.chmod(tmp, 0o777)
    kind, where = sandbox.cgroup_support()
    bases = [] if kind is None else list(where.values()) if kind == "v1" else [where]
    earlier = {c for base in bases for c in base.glob("cobalt_min-*")}  # (pids repeat: namespaces, earlier runs)
    proc = subprocess.Popen([sys.executable, "-c", GRADER_STOPPED, os.path.abspath(ROOT), isolation],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, TMPDIR=tmp))
    proc.stdout.readline()
    time.sleep(2.0)  # both sandboxes started, their programs running
    made = [str(c) for base in bases for c in base.glob(f"cobalt_min-{proc.pid}-*") if c not in earlier]
    start = time.monotonic()
    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    left = [str(c) for base in bases for c in base.glob(f"cobalt_min-{proc.pid}-*") if c not in earlier]
    tmp_left = os.listdir(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    return {"cgroups_made": made, "cgroups_left": left, "tmp_left": tmp_left,
            "exit": proc.returncode, "stop_s": time.monotonic() - start, "stderr": err[-2000:]}


FILL_THEN_COUNT = """
import os, time
if input() == 'fill':
    while True:
        try:
            if os.fork() == 0:
                time.sleep(100)  # (sleeping, not spinning: 64 spinning children would starve the parent)
                os._exit(0)
        except OSError:
            break
    print('filled')
else:
    others = 0
    for p in os.listdir('/proc'):
        if p.isdigit() and int(p) not in (1, os.getpid(), os.getppid()):  # (1: bwrap's own init)
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
found = []
for fd in range(3, 1024):  # any descriptor the program did not open itself (a folder it could walk up from)
    try:
        os.fstat(fd)
        found.append(f'fd {fd}')
    except OSError:
        pass
deadline = time.time() + 4  # search for 4 seconds at most, then report
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


class MemoryWatch:
    """The largest drop of the machine's available memory (MemAvailable) below its level at the start,
    sampled every 5 ms until stop() (MiB)."""

    def __init__(self):
        self.start, self.lowest, self.done = self.available(), None, threading.Event()
        self.lowest = self.start
        self.thread = threading.Thread(target=self.poll, daemon=True)
        self.thread.start()

    @staticmethod
    def available():
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024

    def poll(self):
        while not self.done.is_set():
            self.lowest = min(self.lowest, self.available())
            time.sleep(0.005)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.start - self.lowest


def leftover_processes(as_user) -> list[str]:
    """Processes still running under a sandbox uid, or with --as-user under that uid but this harness
    (there must be none once the sandboxes are closed). Processes that are already dying (the last of a
    sandbox that just closed) get two seconds to go."""
    deadline = time.monotonic() + 2.0
    while True:
        left = running_processes(as_user)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def running_processes(as_user) -> list[str]:
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")[:80]
            if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # dead, waiting for this namespace's init (this harness) to reap it
        except OSError:
            continue
        if as_user is not None:
            if uid == as_user and int(pid) != os.getpid():
                left.append(f"{pid} uid={uid} {cmd!r}")
        elif sandbox.SANDBOX_UID_BASE <= uid < sandbox.SANDBOX_UID_BASE + 256:
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


def reachable_for_others(paths):
    """In this process's own mount namespace: make every folder on the way to `paths` traversable by
    any uid, by hiding a closed folder (e.g. /root, mode 700) behind an open tmpfs that holds only
    the needed entries, bound back in place. Nothing changes outside the namespace."""
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    for _ in range(32):
        closed = {}
        for path in paths:
            parts = Path(path).parts
            for i in range(1, len(parts)):
                folder = Path(*parts[:i])
                if not os.stat(folder).st_mode & 0o001:
                    closed.setdefault(str(folder), set()).add(parts[i])
                    break
        if not closed:
            return
        folder = min(closed, key=len)
        kept = {}
        for name in closed[folder]:
            kept[name] = tempfile.mkdtemp(prefix="hostile-keep-")
            subprocess.run(["mount", "--rbind", os.path.join(folder, name), kept[name]], check=True)
        mode = os.stat(folder).st_mode & 0o777 | 0o755
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"mode={mode:o}", "tmpfs", folder], check=True)
        for name, where in kept.items():
            os.mkdir(os.path.join(folder, name))
            subprocess.run(["mount", "--move", where, os.path.join(folder, name)], check=True)
            os.rmdir(where)  # (the empty folder the mount was kept on)
    raise RuntimeError("could not make the Python install reachable")


def run_cli_hunt(isolation, marker):
    """The command-line interface on a tests file holding the marker (world-readable, as files usually
    are), with a program that hunts it."""
    folder = tempfile.mkdtemp(prefix="hostile-cli-")
    os.chmod(folder, 0o755)
    tests_path = os.path.join(folder, "tests.json")
    Path(tests_path).write_text(json.dumps({"inputs": ["\n"], "outputs": [marker + "\n"]}))
    program_path = os.path.join(folder, "hunt.py")
    demo = os.path.join(os.path.abspath(ROOT), "cobalt_min", "data", "demo.jsonl")
    Path(program_path).write_text(f"DEMO = {demo!r}\n" + CLI_HUNT)
    try:
        proc = subprocess.run([sys.executable, "-m", "cobalt_min.sandbox", program_path, tests_path, "--timeout", "4",
                               "--isolation", isolation], capture_output=True, text=True, timeout=120, cwd=ROOT)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out = json.loads(proc.stdout)
    return {"results": out["results"], "stderr": proc.stderr[-2000:]}


def main():
    global sandbox
    if os.getpid() == 1:
        become_init_then_run()
    ap = argparse.ArgumentParser()
    ap.add_argument("--isolation", required=True)
    ap.add_argument("--as-user", type=int, default=None, help="run the grader as this non-root uid")
    ap.add_argument("canary_dir")
    args = ap.parse_args()
    if args.as_user is not None:
        reachable_for_others([sys.base_prefix, sys.prefix, os.path.realpath(sys.executable), os.path.abspath(ROOT),
                              args.canary_dir])
        os.setgroups([])
        os.setgid(args.as_user)
        os.setuid(args.as_user)
        os.environ["HOME"] = os.environ["TMPDIR"] = "/tmp"
    from cobalt_min import graders, sandbox as imported
    sandbox = imported
    # The programs run as a plain python3 runs them: a reference grader's guard (os.fork and the like set
    # to None) would stop some of them early, and is no defence (posix.fork, ctypes): the sandbox is.
    graders.DEFAULT = graders.PYTHON.name
    ISOLATION[0] = args.isolation
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
    sum_tests = {"inputs": ["2 2\n"], "outputs": ["4\n"]}
    for name, (program, tests) in progs.items():
        start = time.monotonic()
        watch = MemoryWatch() if name == "memory_together" else None
        # Each hostile job is followed by two well-behaved ones in the same batch (same sandbox worker),
        # one right and one wrong: the sandbox must still judge both correctly afterwards.
        batch = sandbox.run_batch([(program, tests), (SUM, sum_tests), ("print(0)\n", sum_tests)],
                                  timeout_s={"hunt_expected": 8.0, "memory_together": 4.0}.get(name, TIMEOUT),
                                  total_timeout_s=30,
                                  workers=1, isolation=args.isolation, memory_mb=MEMORY_MB)
        out[name] = {"results": [r.to_dict() for r in batch[0]], "after": [r.to_dict() for r in batch[1]],
                     "after_wrong": [r.to_dict() for r in batch[2]],
                     "elapsed_s": time.monotonic() - start, "leftover": leftover_processes(args.as_user)}
        if watch is not None:
            out[name]["memory_drop_mb"] = watch.stop()
    for name, jobs in sequences().items():
        start = time.monotonic()
        batch = sandbox.run_batch(jobs, timeout_s=TIMEOUT, total_timeout_s=30, workers=1, isolation=args.isolation,
                                  memory_mb=MEMORY_MB)
        out[name] = {"jobs": [[r.to_dict() for r in results] for results in batch],
                     "elapsed_s": time.monotonic() - start, "leftover": leftover_processes(args.as_user)}
    out["cli_hunt"] = run_cli_hunt(args.isolation, marker)
    out["noisy_neighbours"] = run_noisy_neighbours()
    if args.isolation == "process":  # (a full TMPDIR concerns the process mode only: bwrap makes no folder there)
        out["grader_fault"] = run_grader_fault(args.canary_dir)
    out["stopped"] = {name: run_stopped_grader(args.isolation, signum)
                      for name, signum in (("SIGTERM", signal.SIGTERM), ("SIGINT", signal.SIGINT))}
    out["_cgroup"] = sandbox.cgroup_support()[0]
    stop.set()
    out["_secret"] = secret
    out["_connections"] = len(connections)
    out["_leftover"] = leftover_processes(args.as_user)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
