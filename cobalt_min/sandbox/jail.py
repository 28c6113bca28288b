"""The sandbox's walls as its runner builds them from inside (standard library only): the runner's namespaces
and root file system, the seccomp filter, the identity each job drops to, the clean-up after each test
(leftover processes, files, System V objects) and the memory cgroup's kill count.

This file and runner.py are one program: process.py compiles both and runs this one's code first, in the
same globals, inside the sandbox (where cobalt_min cannot be imported); runner.py imports these names from
here only when the grader imports it as a module. Nothing here decides a verdict.
"""

import ctypes
import errno
import os
import resource
import signal
import struct
# The runner's own handles on the os functions that a reference grader's guard takes from programs
# (runner.grader_setup sets os.<name> to None; the clean-up goes on calling these).
from os import chdir, chmod, fork, rmdir, setuid, unlink

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 22, 36, 38
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x4000000, 0x8000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None):
    enc = lambda x: None if x is None else x.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
NAMESPACE_FILES = ((CLONE_NEWNS, "mnt"), (CLONE_NEWIPC, "ipc"), (CLONE_NEWPID, "pid"), (CLONE_NEWNET, "net"))


def enter_namespaces(settings):
    """Process mode as root: the isolation bubblewrap would give, made here with the kernel's own calls.

    New mount, pid, ipc, network and uts namespaces; this process forks once, and the child, pid 1
    of the new pid namespace, becomes the runner (a test cannot signal it, and when it exits every
    process of the namespace dies). Its root is a fresh tmpfs holding read-only binds of /usr, the
    system library folders and the Python install only, a size-capped /tmp and /dev/shm, a minimal
    /dev and its own /proc: no other file of the machine is visible. The parent stays outside,
    holding nothing, and exits when the runner does (the grader watches it)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != settings["parent"]:
        os._exit(0)  # the grader is already gone
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS), "unshare")
    pid = fork()
    if pid != 0:
        os.closerange(0, 1 << 16)
        os._exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) & 0xFF)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    make_root(settings)


def make_root(settings):
    """Build the sandbox's file system on a tmpfs at settings["root"] and pivot into it (see above)."""
    os.umask(0o022)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here propagates to the machine
    new = settings["root"]
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096")
    ro = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV

    def bind(path, writable=False):
        target = new + path
        if os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()
        _mount(path, target, None, MS_BIND | MS_REC)
        if not writable:
            _mount(None, target, None, ro)
    # The writable tmpfs folders: the scratch folder (never one that holds the Python install) and /dev/shm.
    small = f"size={settings['tmp_mb']}m,nr_inodes=65536,mode=1777"
    for path in (settings["tmp"], "/dev/shm"):
        os.makedirs(new + path)
        _mount("tmpfs", new + path, "tmpfs", MS_NOSUID | MS_NODEV, small)
    for name in ("bin", "lib", "lib32", "lib64", "sbin", "usr"):
        path = "/" + name
        if os.path.islink(path):
            os.symlink(os.readlink(path), new + path)
        elif os.path.isdir(path):
            bind(path)
    for path in ["/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"] + settings["python_paths"]:
        if os.path.exists(path) and not path.startswith("/usr/"):
            bind(path)
    for name in ("null", "zero", "full", "random", "urandom"):
        bind("/dev/" + name, writable=True)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{new}/dev/{name}")
    os.mkdir(new + "/proc")
    chdir(new)
    _check(_libc.syscall(SYS_PIVOT_ROOT[os.uname().machine], b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", 2), "umount the old root")  # MNT_DETACH
    chdir("/")
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount(None, "/", None, ro)


# seccomp (x86-64 and aarch64), installed in each job process before its first test and inherited by every
# test. What a program may not do:
# - make things that outlive it: kernel keyrings (a uid's keyring would carry answers from one program to
#   the next), System V shared memory, queues and semaphores (gigabytes of them);
# - make namespaces (unshare, clone with a CLONE_NEW* flag; clone3, whose flags a filter cannot read, is
#   answered ENOSYS and the C library falls back to clone): in a user namespace of its own a program could
#   mount a tmpfs, memory that no limit of the sandbox counts;
# - open sockets other than IPv4/IPv6 ones (which reach nothing: each job has a network namespace of its
#   own whose loopback is down): a unix socket pair holds ~0.25 MiB of kernel memory in its buffers, outside
#   any address-space limit;
# - evict pages of shared read-only files from the page cache or probe them without blocking
#   (posix_fadvise, preadv2/pwritev2 with their flags, cachestat, io_uring, which can do both): a channel to
#   programs in other sandboxes;
# - start a session of its own (setsid): the scheduler gives each session an equal share of the machine, so
#   62 busy processes in 62 sessions would starve the program judged next to them.
# Elsewhere the runner removes System V objects after each test instead (remove_ipc_objects) and the rest
# stays open.
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SYSCALLS = {  # name: (x86-64, aarch64)
    "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219), "shmget": (29, 194),
    "semget": (64, 190), "msgget": (68, 186), "unshare": (272, 97), "setns": (308, 268), "fadvise64": (221, 223),
    "preadv2": (327, 286), "pwritev2": (328, 287), "cachestat": (451, 451), "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426), "io_uring_register": (427, 427), "setsid": (112, 157), "socketpair": (53, 199),
    "socket": (41, 198), "clone": (56, 220), "clone3": (435, 435)}
BLOCKED_SYSCALLS = ("add_key", "request_key", "keyctl", "shmget", "semget", "msgget", "unshare", "setns", "fadvise64",
                    "preadv2", "pwritev2", "cachestat", "io_uring_setup", "io_uring_enter", "io_uring_register",
                    "setsid", "socketpair")
NEW_NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
SOCKET_FAMILIES = (2, 10)  # AF_INET, AF_INET6


def seccomp_filter():
    """The filter above as a BPF program (built once per runner), or None where it does not exist.

    Each instruction is (opcode, jump if true, jump if false, k); jumps are written as labels and
    resolved here. seccomp_data: nr at offset 0, arch at 4, the arguments from 16 (low half first)."""
    machine = os.uname().machine
    if machine not in AUDIT_ARCH:
        return None
    column = 0 if machine == "x86_64" else 1
    nr = {name: numbers[column] for name, numbers in SYSCALLS.items()}
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
    ALLOW, KILL = 0x7FFF0000, 0x80000000
    deny = lambda err: 0x00050000 | err  # noqa: E731 - SECCOMP_RET_ERRNO
    code = [(LD, None, None, 4), (JEQ, None, "kill", AUDIT_ARCH[machine]),
            (LD, None, None, 0), (JGE, "eperm", None, 0x40000000),  # x32 system call numbers
            (JEQ, "socket", None, nr["socket"]), (JEQ, "clone", None, nr["clone"]),
            (JEQ, "enosys", None, nr["clone3"])]
    code += [(JEQ, "eperm", None, nr[name]) for name in BLOCKED_SYSCALLS]
    code += [(RET, None, None, ALLOW),
             "socket", (LD, None, None, 16)] + [(JEQ, "allow", None, family) for family in SOCKET_FAMILIES] + [
             (RET, None, None, deny(errno.EPERM)),
             "clone", (LD, None, None, 16), (JSET, "eperm", "allow", NEW_NAMESPACE_FLAGS),
             "allow", (RET, None, None, ALLOW), "eperm", (RET, None, None, deny(errno.EPERM)),
             "enosys", (RET, None, None, deny(errno.ENOSYS)), "kill", (RET, None, None, KILL)]
    labels, program = {}, []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(program)
        else:
            program.append(item)
    jump = lambda label, at: 0 if label is None else labels[label] - at - 1  # noqa: E731

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]
    filters = (Filter * len(program))(*[Filter(op, jump(jt, i), jump(jf, i), k)
                                        for i, (op, jt, jf, k) in enumerate(program)])
    return Program(len(program), filters), filters  # (the array must outlive the program that points at it)


def install_seccomp(settings):
    """Install the filter (inherited by every test from here on); False where it does not exist."""
    if settings["seccomp"] is None:
        return False
    _check(_libc.prctl(PR_SET_SECCOMP, 2, ctypes.byref(settings["seccomp"][0]), 0, 0), "seccomp")
    return True


def setup(settings):
    """The runner's own set-up: no way to gain privileges, die with the grader, /proc/<runner> closed
    to programs. With job namespaces (settings["jobns"]) the runner keeps the privileges it was started
    with, to make each job's namespaces and mounts (job_process); each job drops them before its first
    test. Otherwise the runner becomes the sandbox identity itself."""
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    # Orphans of a test (daemons, a fork bomb's children) are re-parented to us, so we can reap them.
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    uid = settings.get("uid")
    if not settings["jobns"]:
        become_test_identity(settings)
    # After setuid (which clears both): die when the grader dies; keep /proc/<runner> closed to programs.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    # pid 1 (the runner here, each job process in its namespace) gets only the signals it handles. CPython
    # handles SIGINT: keep KeyboardInterrupt for the programs, but never let it reach a pid 1.
    signal.signal(signal.SIGINT, _interrupt_unless_init)
    if settings.get("parent") is not None and not settings.get("namespaces") and os.getppid() != settings["parent"]:
        os._exit(0)  # the grader is already gone
    settings["seccomp"] = seccomp_filter()
    if not settings["jobns"]:  # (with job namespaces each job process installs it: job_process)
        settings["ipc_blocked"] = install_seccomp(settings)
    if settings["kill_all"]:
        # kill(-1) must only ever reach the sandbox's own processes: refuse to run if it would not.
        own_uid = uid is not None and uid != 0 and os.getuid() == uid
        own_pidns = settings.get("pidns") and (os.getpid() == 1 or open("/proc/1/comm").read().strip() == "bwrap")
        if not (own_uid or own_pidns):
            raise RuntimeError("kill_all needs a reserved non-root uid or the sandbox's own pid namespace")
        kill_leftovers(settings, None)  # a previous user of this uid may have left processes behind


def _interrupt_unless_init(signum, frame):
    if os.getpid() != 1:
        raise KeyboardInterrupt


def become_test_identity(settings):
    """Drop every privilege for good: as root, the uid reserved for this sandbox (setuid clears all
    capabilities); in a user namespace (bubblewrap without root), the capabilities it was given."""
    uid = settings.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        setuid(uid)
    elif settings["jobns"]:
        drop_capabilities()
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # (setuid resets it)


def drop_capabilities():
    """Empty this process's capability sets (capset; with no_new_privs nothing can give them back)."""
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = ctypes.create_string_buffer(24)  # 2 x {effective, permitted, inheritable}, all zero
    _check(_libc.syscall(SYS_CAPSET[os.uname().machine], header, data), "capset")
    _libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL


def out_of_memory_kills(settings):
    """How many processes the kernel has killed in this sandbox's memory cgroup (its oom_kill counter,
    read through a descriptor the grader passed: memory.oom_control on cgroup v1, memory.events on v2),
    or 0 without a cgroup."""
    fd = settings.get("oom_fd")
    if fd is None:
        return 0
    text = os.pread(fd, 4096, 0)
    at = text.find(b"oom_kill ")
    return int(text[at + 9:text.index(b"\n", at)]) if at >= 0 else 0


def lost_a_process_to_oom(settings):
    """Whether the kernel killed a process of this sandbox for memory since the last call (the last test).
    settings["oom_kills"] keeps the count, which each report carries (process.py judges a runner lost
    with the count up as memory_limit)."""
    kills = out_of_memory_kills(settings)
    lost, settings["oom_kills"] = kills > settings.get("oom_kills", 0), kills
    return lost


JOB_NAMESPACES = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET


def make_job_namespaces(settings):
    """New mount, pid (for the children), ipc and network namespaces (a new one's loopback is down), and in
    them a fresh tmpfs on the scratch folder and /dev/shm."""
    _check(_libc.unshare(JOB_NAMESPACES), "unshare")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # mounts made here stay in the job's namespace
    fresh = f"size={settings['tmp_mb']}m,nr_inodes=65536,mode=1777"
    for path in settings["clean_folders"]:
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, fresh)


def can_return_to_own_namespaces():
    """Whether this process may setns back into its own namespaces after unsharing them (tried in a child,
    which exits 0 if so)."""
    pid = fork()
    if pid == 0:
        try:
            own = [(kind, os.open(f"/proc/self/ns/{name}", os.O_RDONLY)) for kind, name in NAMESPACE_FILES]
            _check(_libc.unshare(JOB_NAMESPACES), "unshare")
            os._exit(0 if all(_libc.setns(fd, kind) == 0 for kind, fd in own) else 1)
        finally:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


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


def empty_folder(path):
    """Delete everything inside `path`, whatever a program did to it: modes removed (chmod 000),
    folders nested past PATH_MAX or past Python's recursion limit. Walks with descriptors relative to
    the folder at hand (no long paths) and a loop (no recursion); the sandbox's processes are dead."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    depth, stuck = 0, set()  # stuck: folders that stay after emptying (nothing more to do there)
    try:
        while True:
            child = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        if not entry.is_dir(follow_symlinks=False):
                            unlink(entry.name, dir_fd=fd)
                            continue
                        if entry.inode() in stuck:
                            continue
                        try:
                            rmdir(entry.name, dir_fd=fd)
                            continue
                        except OSError:
                            pass
                        chmod(entry.name, 0o700, dir_fd=fd)
                        child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                        stuck.add(entry.inode())  # taken out again if it can be removed after emptying
                        break
                    except OSError:
                        continue
            if child is not None:
                os.close(fd)
                fd, depth = child, depth + 1
                continue
            if depth == 0:
                return
            inode = os.fstat(fd).st_ino
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd, depth = parent, depth - 1
            stuck.discard(inode)  # emptied: the parent's next pass removes it (or marks it stuck below)
            for entry in os.scandir(fd):
                if entry.inode() == inode:
                    try:
                        rmdir(entry.name, dir_fd=fd)
                    except OSError:
                        stuck.add(inode)
    finally:
        os.close(fd)


def ipc_objects_in_use():
    """How many System V shared memory segments, message queues and semaphore sets exist (in this
    ipc namespace): IPC_INFO-style calls, cheap enough for every test."""
    info = ctypes.create_string_buffer(128)
    _libc.shmctl(0, 14, info)  # SHM_INFO: struct shm_info, used_ids first
    n = struct.unpack_from("i", info)[0]
    _libc.msgctl(0, 12, info)  # MSG_INFO: struct msginfo, msgpool (queues in use) first
    n += struct.unpack_from("i", info)[0]
    _libc.semctl(0, 0, 19, info)  # SEM_INFO: struct seminfo, semusz (sets in use) 8th
    return n + struct.unpack_from("8i", info)[7]


def remove_ipc_objects():
    """Remove every System V shared memory segment, message queue and semaphore set. They outlive
    the process that made them (a test could leave gigabytes of shared memory on the machine). Only
    called where they are all the sandbox's own: its own ipc namespace, or its reserved uid."""
    if not ipc_objects_in_use():
        return
    for path, remove in (("/proc/sysvipc/shm", lambda i: _libc.shmctl(i, 0, None)),  # IPC_RMID = 0
                         ("/proc/sysvipc/msg", lambda i: _libc.msgctl(i, 0, None)),
                         ("/proc/sysvipc/sem", lambda i: _libc.semctl(i, 0, 0))):
        try:
            lines = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            remove(int(line.split()[1]))  # columns: key, id, ...


TMPFS_MAGIC = 0x01021994


def folder_state(path):
    """(inode, mode, size, on tmpfs) of a folder. A tmpfs folder's size counts its entries (20 bytes
    each), so an unchanged state means an unchanged, still empty folder: one stat per test, no listing."""
    st = os.stat(path)
    buf = ctypes.create_string_buffer(256)
    tmpfs = _libc.statfs(path.encode(), buf) == 0 and struct.unpack_from("l", buf)[0] == TMPFS_MAGIC
    return st.st_ino, st.st_mode, st.st_size, tmpfs


def clean_after_test(settings):
    """Leave nothing of a test for the next one: the scratch folder and /dev/shm emptied and restored
    (a program may chmod or remove its scratch folder), System V IPC objects removed (where seccomp does
    not block them). settings["clean"]: [path, its state when clean] for each such folder."""
    for entry in settings["clean"]:
        path, clean = entry
        try:
            st = os.stat(path)
        except OSError:  # removed by the program (a plain process-mode scratch folder)
            os.mkdir(path, 0o700)
            st = os.stat(path)
        if clean[3] and (st.st_ino, st.st_mode, st.st_size) == clean[:3]:
            continue  # unchanged since it was emptied
        if st.st_mode != clean[1]:
            chmod(path, clean[1] & 0o7777)
        empty_folder(path)
        if st.st_ino != clean[0] and path == settings["tmp"]:
            chdir(path)
        entry[1] = folder_state(path)
    if settings["private_ipc"] and not settings["ipc_blocked"]:
        remove_ipc_objects()


def apply_shared_limits(limits):
    """Limits that bind the runner as harmlessly as its tests: set once per job, inherited by each fork.
    (Address space, stack, CPU time and file size are set in each test child: the runner must not be
    bound by them; it writes each test's stdin, which may be larger than the output cap.)"""
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["max_files"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # no POSIX message queues (they outlive a test)
    if limits["max_procs"]:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_procs"],) * 2)
