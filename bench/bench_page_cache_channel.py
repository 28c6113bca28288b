"""The page-cache channel the sandbox leaves open, measured: bits a program can pass to a later program (or
one in another sandbox) through which pages of a shared read-only file are in the machine's page cache.

    python bench/bench_page_cache_channel.py                 # 512 bits, the largest file programs can read
    python bench/bench_page_cache_channel.py --bits 2048 --isolation process

The sandbox refuses the cheap ways to use this channel: evicting pages (posix_fadvise DONTNEED), probing
them without blocking (preadv2 RWF_NOWAIT), asking the kernel (cachestat, and mincore, which the kernel
answers only for files the caller could write), io_uring. What is left, and measured here: the sender
READS the pages that stand for 1-bits (a read caches a page), and the receiver times one read of each
page (a page read from the disk takes far longer than a cached one). It needs pages nobody has read
since the machine last evicted them, and reading a page spends it (it stays cached), so the sender can
only turn bits on: each page carries one bit, once, until memory pressure evicts it again.

Before each round this script (the grader, outside any sandbox) evicts the file's pages, which no
program can do. Printed: the bits sent, how many the receiver read right, and the bits per second of the
two programs' own time (their tests' wall time together).
"""
import argparse
import os
import random
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
from cobalt_min.sandbox import ISOLATIONS, run_batch  # noqa: E402
from cobalt_min.sandbox.isolation import python_paths  # noqa: E402

STRIDE = 1 << 20  # one bit per MiB of the file: the kernel's readahead (128 KiB here) never reaches a neighbour

SENDER = """
import os
path, bits = input().split()
fd = os.open(path, os.O_RDONLY)
for i, bit in enumerate(bits):
    if bit == '1':
        os.pread(fd, 1, i * %d)
print('sent')
""" % STRIDE

RECEIVER = """
import os, time
path, n = input().split()
fd = os.open(path, os.O_RDONLY)
times = []
for i in range(int(n)):
    start = time.perf_counter()
    os.pread(fd, 1, i * %d)
    times.append(time.perf_counter() - start)
cut = sorted(times)[len(times) // 2] ** 0.5 * min(times) ** 0.5  # between the fast and the slow reads
print(''.join('1' if t < cut else '0' for t in times))
""" % STRIDE


def largest_readable_file() -> str:
    """The largest file in the folders a sandbox binds read-only (the Python install, site-packages)."""
    best, size = None, 0
    for top in python_paths():
        for folder, _, names in os.walk(top):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    if os.path.isfile(path) and os.path.getsize(path) > size:
                        best, size = path, os.path.getsize(path)
                except OSError:
                    pass
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bits", type=int, default=512, help="bits per round (default 512)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--isolation", default="auto", choices=ISOLATIONS)
    args = ap.parse_args()
    path = largest_readable_file()
    bits = min(args.bits, os.path.getsize(path) // STRIDE)
    print(f"file: {path} ({os.path.getsize(path) >> 20} MiB), {bits} bits per round, isolation={args.isolation}")
    rng = random.Random(0)
    for r in range(args.rounds):
        message = "".join(rng.choice("01") for _ in range(bits))
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the grader's reset, out of any program's reach
        os.close(fd)
        time.sleep(0.2)
        start = time.perf_counter()
        [[sent]] = run_batch([(SENDER, {"inputs": [f"{path} {message}\n"], "outputs": ["sent\n"]})],
                             isolation=args.isolation, timeout_s=30)
        [[received]] = run_batch([(RECEIVER, {"inputs": [f"{path} {bits}\n"], "outputs": [message + "\n"]})],
                                 isolation=args.isolation, timeout_s=30)
        wall = time.perf_counter() - start
        got = received.stdout.strip()
        right = sum(a == b for a, b in zip(got, message))
        own = sent.time_s + received.time_s
        print(f"round {r}: sender {sent.status}, {right}/{bits} bits right ({right / bits:.1%}); programs' own time "
              f"{own:.2f} s -> {bits / own:.0f} bits/s ({wall:.1f} s with two sandboxes started)")


if __name__ == "__main__":
    main()
