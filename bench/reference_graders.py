"""The grader-agreement corpus, judged by the two reference graders themselves (graders.py's profiles are
tested against what this writes: tests/test_graders.py).

    python bench/reference_graders.py --livecodebench PATH/TO/LiveCodeBench --authors PATH/TO/cobalt \\
        [--out tests/data/grader_corpus.json]

(The programs' own stderr, which LiveCodeBench's in-process runs do not capture, goes to this script's
stderr: 2>/dev/null.) PATH/TO/LiveCodeBench: a checkout of github.com/LiveCodeBench/LiveCodeBench (its lcb_runner is run as it
is: compute_code_generation_metrics.check_correctness, timeout 6, the benchmark's default); PATH/TO/cobalt:
a checkout of github.com/OSU-NLP-Group/cobalt (verl/remote_reward_server.py's run_single_test and its
template, run as they are: bubblewrap, `python3 -S`, 4 s per test; Ray, which only serves them, is replaced
by a stand-in). Nothing of either is copied here: they are imported from the paths given.

The corpus (made here, in LiveCodeBench's record format: the format the authors' LiveCodeBench data comes
from too): a few problems, stdin and functional, and programs written to probe each rule a profile must
reproduce (comparison, exit status, exit()/quit(), the import prelude, recursion and digit limits, output
size, time) and each harness behaviour docs/departures.md lists as a departure. Each pair records the references'
verdict on every test (None: a test LiveCodeBench did not run, as it stops at the first failure) and, where
a profile departs from its reference on purpose, the departure's name as docs/departures.md's list gives it.
"""
import argparse
import base64
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import tempfile
import types
import zlib
from pathlib import Path

sys.set_int_max_str_digits(0)  # (the corpus holds a 4772-digit answer)
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "grader_corpus.json"


def lcb_record(qid: str, title: str, content: str, public: list, private: list, *, func_name: str | None = None,
               starter: str = "", encode_private: bool = True) -> dict:
    """A livecodebench/code_generation_lite row: tests as (input, output) text pairs; private tests as the
    real files hold them (base64 of zlib of a pickled JSON string) unless encode_private is False."""
    testtype = "functional" if func_name else "stdin"
    cases = lambda pairs: [{"input": i, "output": o, "testtype": testtype} for i, o in pairs]  # noqa: E731
    private_json = json.dumps(cases(private))
    return {"question_title": title, "question_content": content, "platform": "leetcode" if func_name else "atcoder",
            "question_id": qid, "contest_id": "corpus", "contest_date": "2025-01-01T00:00:00",
            "starter_code": starter, "difficulty": "easy", "public_test_cases": json.dumps(cases(public)),
            "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(private_json))).decode()
            if encode_private else private_json,
            "metadata": json.dumps({"func_name": func_name} if func_name else {})}


PROBLEMS = [
    lcb_record("sum", "Sum", "Print A+B.", [("1 2\n", "3\n"), ("10 20\n", "30\n")],
               [("-5 5\n", "0\n"), ("100 1\n", "101\n"), ("7 7\n", "14\n")]),
    lcb_record("stairs", "Staircase", "Print a right-aligned staircase of N steps.",
               [("2\n", " #\n##\n")], [("3\n", "  #\n ##\n###\n"), ("1\n", "#\n")], encode_private=False),
    lcb_record("double", "Double", "Print twice each of the N numbers, one per line.",
               [("2\n1 2\n", "2\n4\n")], [("3\n5 6 7\n", "10\n12\n14\n")]),
    lcb_record("half", "Half", "Print A/2 (an integer when it is one).", [("6\n", "3\n")], [("5\n", "2.5\n")]),
    lcb_record("bigpow", "Big power", "Print 3 to the power N.", [], [("10000\n", str(3 ** 10000) + "\n")]),
    lcb_record("depth", "Depth", "Print 1 + 2 + ... + N.", [("3000\n", "4501500\n")], [("10\n", "55\n")]),
    lcb_record("crlf", "Two lines", "Print 1 and 2 on two lines.", [], [("\n", "1\r\n2\r\n")]),
    lcb_record("slow", "Slow", "Print A+B (slowly).", [], [("1 2\n", "3\n")]),
    lcb_record("long", "Long line", "Print N letters a.", [], [("1200000\n", "a" * 1200000 + "\n")]),
    lcb_record("pal", "Palindrome", "Is s a palindrome?", [('"aba"', "true"), ('"ab"', "false")],
               [('"abba"', "true"), ('"abc"', "false")], func_name="isPalindrome",
               starter="class Solution:\n    def isPalindrome(self, s: str) -> bool:\n        "),
    lcb_record("twosum", "Two sum", "Indices of the two numbers that add up to target.",
               [("[2,7,11,15]\n9", "[0, 1]")], [("[3,2,4]\n6", "[1, 2]"), ("[3,3]\n6", "[0, 1]")],
               func_name="twoSum", starter="class Solution:\n    def twoSum(self, nums: List[int], target: int) -> "
                                           "List[int]:\n        "),
    lcb_record("halve", "Halve", "Return n / 2.", [("6", "3")], [("5", "2.5"), ("8", "4")], func_name="halve",
               starter="class Solution:\n    def halve(self, n: int) -> float:\n        "),
    lcb_record("pairs", "Pairs", "Return [[0, n]].", [("1", "[[0, 1]]")], [("2", "[[0, 2]]")], func_name="pairs",
               starter="class Solution:\n    def pairs(self, n: int) -> List[List[int]]:\n        "),
]

SUM = "a, b = map(int, input().split())\nprint(a + b)\n"
PAL = "class Solution:\n    def isPalindrome(self, s: str) -> bool:\n        return {}\n"
HALVE = "class Solution:\n    def halve(self, n: int) -> float:\n        return {}\n"

# (id, problem, program, {grader: departure} for what docs/departures.md lists as a departure from that reference)
PAIRS = [
    ("sum-input", "sum", SUM, {}),
    ("sum-read", "sum", "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n", {}),
    ("sum-iterate-stdin", "sum", "import sys\nfor line in sys.stdin:\n    a, b = map(int, line.split())\n    print(a + b)\n",
     {"livecodebench": "iterating over sys.stdin"}),
    ("sum-stdout-write", "sum", "import sys\na, b = map(int, input().split())\nsys.stdout.write(str(a + b) + '\\n')\n", {}),
    ("sum-stdout-buffer", "sum", "import sys\na, b = map(int, input().split())\nsys.stdout.buffer.write(b'%d\\n' % (a + b))\n",
     {"livecodebench": "sys.stdout.buffer"}),
    ("sum-os-write", "sum", "import os\na, b = map(int, input().split())\nos.write(1, b'%d\\n' % (a + b))\n",
     {"livecodebench": "os.write(1)"}),
    ("sum-open-0", "sum", "a, b = map(int, open(0).read().split())\nprint(a + b)\n", {"livecodebench": "open(0)"}),
    ("sum-from-sys-stdin", "sum", "from sys import stdin\na, b = map(int, stdin.readline().split())\nprint(a + b)\n", {}),
    ("sum-exit", "sum", SUM + "exit()\n", {}),
    ("sum-quit", "sum", SUM + "quit()\n", {}),
    ("sum-sys-exit-0", "sum", "import sys\n" + SUM + "sys.exit(0)\n", {}),
    ("sum-sys-exit-1", "sum", "import sys\n" + SUM + "sys.exit(1)\n", {}),
    ("sum-raise-systemexit", "sum", SUM + "raise SystemExit('done')\n", {}),
    ("sum-prelude-names", "sum", "a, b = map(int, input().split())\nprint(reduce(add, [a, b]))\n", {}),
    ("sum-typing-unimported", "sum", "def solve(xs: List[int]) -> int:\n    return sum(xs)\n"
                                     "print(solve(list(map(int, input().split()))))\n", {}),
    ("sum-annotation-at-run-time", "sum", "def read(text: int):\n    return text\n"
                                          "a, b = map(read.__annotations__['text'], input().split())\nprint(a + b)\n", {}),
    ("sum-future-import", "sum", "from __future__ import annotations\n" + SUM, {}),
    ("sum-zero-padded", "sum", "a, b = map(int, input().split())\nprint(f'{a + b:03d}')\n", {}),
    ("sum-plus-sign", "sum", "a, b = map(int, input().split())\nprint(f'{a + b:+d}')\n", {}),
    ("sum-leading-spaces", "sum", "a, b = map(int, input().split())\nprint('  ', a + b)\n", {}),
    ("sum-numpy", "sum", "import numpy as np\nprint(int(np.array(list(map(int, input().split()))).sum()))\n", {}),
    ("sum-global-in-function", "sum", "total = 0\ndef add(x):\n    global total\n    total += x\n"
                                      "for x in map(int, input().split()):\n    add(x)\nprint(total)\n",
     {"livecodebench": "global in a top-level function"}),
    ("sum-main-guard", "sum", "def main():\n    a, b = map(int, input().split())\n    print(a + b)\n\n"
                              "if __name__ == '__main__':\n    main()\n", {}),
    ("sum-wrong", "sum", "a, b = map(int, input().split())\nprint(a - b)\n", {}),
    ("sum-crash", "sum", "a, b = map(int, input().split())\nprint((a + b) // 0)\n", {}),
    ("sum-getcwd", "sum", "import os\nos.getcwd()\n" + SUM, {}),
    ("sum-import-resource", "sum", "import resource\n" + SUM, {}),
    ("sum-set-environ", "sum", "import os\nos.environ['X'] = '1'\n" + SUM, {}),
    ("sum-stderr-noise", "sum", "import sys\nsys.stderr.write('x' * 2000000)\n" + SUM, {}),
    ("sum-read-past-eof", "sum", SUM + "input()\n", {}),
    ("sum-readline-alias", "sum", "import sys\ninput = sys.stdin.readline\na, b = map(int, input().split())\nprint(a + b)\n",
     {}),
    ("stairs-right", "stairs", "n = int(input())\nfor k in range(1, n + 1):\n    print(' ' * (n - k) + '#' * k)\n", {}),
    ("stairs-left", "stairs", "n = int(input())\nfor k in range(1, n + 1):\n    print('#' * k)\n", {}),
    ("double-lines", "double", "input()\nfor x in input().split():\n    print(2 * int(x))\n", {}),
    ("double-trailing-spaces", "double", "input()\nfor x in input().split():\n    print(2 * int(x), end=' \\n')\n", {}),
    ("double-carriage-returns", "double", "input()\nprint('\\r'.join(str(2 * int(x)) for x in input().split()))\n", {}),
    ("double-crlf", "double", "input()\nprint(''.join(f'{2 * int(x)}\\r\\n' for x in input().split()), end='')\n", {}),
    ("double-readlines", "double", "import sys\nlines = sys.stdin.readlines()\n"
                                   "for line in lines[1:]:\n    print(*[2 * int(x) for x in line.split()], sep='\\n')\n",
     {}),
    ("half-float", "half", "print(int(input()) / 2)\n", {}),
    ("half-exact", "half", "n = int(input())\nprint(n // 2 if n % 2 == 0 else n / 2)\n", {}),
    ("bigpow-print", "bigpow", "print(3 ** int(input()))\n", {}),
    ("depth-recursive", "depth", "def s(n):\n    return 0 if n == 0 else n + s(n - 1)\nprint(s(int(input())))\n", {}),
    ("crlf-plain", "crlf", "print(1)\nprint(2)\n", {}),
    ("crlf-crlf", "crlf", "print('1\\r\\n2', end='\\r\\n')\n", {}),
    ("slow-5s", "slow", "import time\ntime.sleep(5)\n" + SUM, {}),
    ("slow-8s", "slow", "import time\ntime.sleep(8)\n" + SUM, {}),
    ("long-print", "long", "print('a' * int(input()))\n", {}),
    ("pal-bool", "pal", PAL.format("s == s[::-1]"), {}),
    ("pal-int", "pal", PAL.format("int(s == s[::-1])"), {}),
    ("pal-exit", "pal", PAL.format("exit()"), {}),
    ("pal-function", "pal", "def isPalindrome(s):\n    return s == s[::-1]\n", {}),
    ("pal-state-on-self", "pal", "class Solution:\n    def __init__(self):\n        self.calls = 0\n"
                                 "    def isPalindrome(self, s: str) -> bool:\n        self.calls += 1\n"
                                 "        return self.calls == 1 and s == s[::-1]\n",
     {"livecodebench": "a Solution() reused across tests"}),
    ("twosum-list", "twosum", "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
                              "        seen = {}\n        for i, x in enumerate(nums):\n"
                              "            if target - x in seen:\n                return [seen[target - x], i]\n"
                              "            seen[x] = i\n", {}),
    ("twosum-tuple", "twosum", "class Solution:\n    def twoSum(self, nums, target):\n"
                               "        for i in range(len(nums)):\n            for j in range(i + 1, len(nums)):\n"
                               "                if nums[i] + nums[j] == target:\n                    return (i, j)\n", {}),
    ("twosum-numpy", "twosum", "import numpy as np\nclass Solution:\n    def twoSum(self, nums, target):\n"
                               "        a = np.array(nums)\n        for i in range(len(a)):\n"
                               "            for j in range(i + 1, len(a)):\n"
                               "                if a[i] + a[j] == target:\n                    return [np.int64(i), np.int64(j)]\n",
     {}),
    ("twosum-heap-unimported", "twosum", "class Solution:\n    def twoSum(self, nums, target):\n"
                                         "        h = [(x, i) for i, x in enumerate(nums)]\n        heapify(h)\n"
                                         "        items = [heappop(h) for _ in range(len(h))]\n"
                                         "        lo, hi = 0, len(items) - 1\n        while True:\n"
                                         "            s = items[lo][0] + items[hi][0]\n"
                                         "            if s == target:\n"
                                         "                return sorted([items[lo][1], items[hi][1]])\n"
                                         "            lo, hi = (lo + 1, hi) if s < target else (lo, hi - 1)\n", {}),
    ("twosum-wrong", "twosum", "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n", {}),
    ("halve-float", "halve", HALVE.format("n / 2"), {}),
    ("halve-fraction", "halve", "from fractions import Fraction\n" + HALVE.format("Fraction(n, 2)"), {}),
    ("halve-decimal", "halve", "from decimal import Decimal\n" + HALVE.format("Decimal(n) / 2"), {}),
    ("halve-numpy", "halve", "import numpy as np\n" + HALVE.format("np.float64(n) / 2"), {}),
    ("halve-floor", "halve", HALVE.format("n // 2"), {}),
    ("pairs-list", "pairs", "class Solution:\n    def pairs(self, n):\n        return [[0, n]]\n", {}),
    ("pairs-nested-tuple", "pairs", "class Solution:\n    def pairs(self, n):\n        return [(0, n)]\n",
     {"livecodebench": "nested tuples"}),
]


def tests_of(record: dict) -> tuple[list, list, str | None]:
    """LiveCodeBench's evaluation sample of a record: public then private tests, as text, and func_name."""
    public = json.loads(record["public_test_cases"])
    private = record["private_test_cases"]
    try:
        private = json.loads(private)
    except ValueError:
        private = json.loads(pickle.loads(zlib.decompress(base64.b64decode(private))))
    cases = public + private
    return [c["input"] for c in cases], [c["output"] for c in cases], json.loads(record["metadata"]).get("func_name")


def run_livecodebench(checkout: str, pairs: list, problems: dict) -> dict:
    """Per pair, LiveCodeBench's verdict on each test (True/False; None: not run, after a failure)."""
    sys.path.insert(0, checkout)
    from lcb_runner.evaluation.compute_code_generation_metrics import check_correctness
    out = {}
    for pair_id, problem, program, _ in pairs:
        inputs, outputs, fn_name = tests_of(problems[problem])
        sample = {"input_output": json.dumps({"inputs": inputs, "outputs": outputs, "fn_name": fn_name})}
        try:
            results, _ = check_correctness(sample, program, timeout=6, debug=False)
        except Exception:  # (a SystemExit that ends their worker breaks check_correctness itself: as their
            results = [-5]  # evaluate_generations_by_problem, which catches it, a failure)
        verdicts = [bool(r is True or (not isinstance(r, int) and bool(r))) for r in results]
        out[pair_id] = verdicts + [None] * (len(inputs) - len(verdicts))
        print(f"livecodebench {pair_id:28s} {out[pair_id]}")
    return out


def run_authors(checkout: str, pairs: list, problems: dict) -> dict:
    """Per stdin pair, the authors' verdict on each test: their template and run_single_test, as their
    Evaluator calls them (one test at a time here; the corpus stays far from their 27 s per program)."""
    def deployment(**kwargs):  # a stand-in for Ray Serve, which only serves their evaluator
        def wrap(cls):
            cls.bind = staticmethod(lambda *a, **k: cls)
            return cls
        return wrap
    ray = types.ModuleType("ray")
    ray.serve = types.SimpleNamespace(deployment=deployment)
    sys.modules["ray"], sys.modules["ray.serve"] = ray, ray.serve
    spec = importlib.util.spec_from_file_location("remote_reward_server",
                                                  os.path.join(checkout, "verl", "remote_reward_server.py"))
    server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(server)
    out = {}
    for pair_id, problem, program, _ in pairs:
        inputs, outputs, fn_name = tests_of(problems[problem])
        if fn_name:
            continue  # the authors run stdin programs only
        with tempfile.NamedTemporaryFile("w", dir="/dev/shm", suffix=".py", delete=False) as f:
            f.write(server.PRE_TEMPLATE.format(memory_limit=1 << 30) + "\n" + program)
        try:
            verdicts = []
            for test_input, expected in zip(inputs, outputs):
                result = []
                server.run_single_test(test_input, expected, f.name, result, timeout=4)
                verdicts.append(bool(result and result[0]["passing"]))
        finally:
            os.remove(f.name)
        out[pair_id] = verdicts
        print(f"authors       {pair_id:28s} {verdicts}")
    return out


def commit_of(checkout: str) -> str:
    try:
        return subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--livecodebench", required=True, help="a checkout of LiveCodeBench/LiveCodeBench")
    ap.add_argument("--authors", required=True, help="a checkout of OSU-NLP-Group/cobalt")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    problems = {p["question_id"]: p for p in PROBLEMS}
    lcb = run_livecodebench(args.livecodebench, PAIRS, problems)
    authors = run_authors(args.authors, PAIRS, problems)
    corpus = {"references": {"livecodebench": commit_of(args.livecodebench), "authors": commit_of(args.authors)},
              "problems": PROBLEMS,
              "pairs": [{"id": pair_id, "problem": problem, "program": program, "departures": departures,
                         "livecodebench": lcb[pair_id], "authors": authors.get(pair_id)}
                        for pair_id, problem, program, departures in PAIRS]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(corpus, indent=1) + "\n")
    print(f"wrote {args.out}: {len(PAIRS)} pairs ({len(authors)} judged by the authors' grader too)")


if __name__ == "__main__":
    main()
