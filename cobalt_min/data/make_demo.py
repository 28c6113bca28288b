"""Builds cobalt_min/data/demo.jsonl, the bundled demo problem set (original problems written for
cobalt-min). Each problem has a statement, a reference solution and test inputs; expected outputs
are produced by running the reference solution in the sandbox. The first 4 tests are public (shown
to the model as feedback), the rest hidden.

    python -m cobalt_min.data.make_demo            # rewrite demo.jsonl
    python -m cobalt_min.data.make_demo --warmup-problems 300 --seed 0 --out warmup_problems.jsonl
    python -m cobalt_min.data.make_demo --easy-variants 200 --seed 0 --out easy_variants.jsonl

PROBLEMS: about a third very easy, the rest easy-to-medium with a trap in the hidden tests (edge
cases, inputs too large for a quadratic first attempt), so that feedback over several turns matters.
FUNCTIONS: very easy call-based problems ("very easy function"), the kind a 135M-parameter model
solves now and then: the learning demo (demo.sh) trains and evaluates on them. WRONG holds typical first attempts
that pass the public tests and fail hidden ones; tests/test_problems.py checks that they do.
"""

import random
from pathlib import Path

OUT = Path(__file__).parent / "demo.jsonl"


def _ints(rng, n, lo, hi):
    return " ".join(str(rng.randint(lo, hi)) for _ in range(n))


def _words(rng, n, alphabet="abcde", max_len=5):
    return " ".join("".join(rng.choice(alphabet) for _ in range(rng.randint(1, max_len))) for _ in range(n))


R = random.Random(2026)

# (id, difficulty, statement, reference solution, test inputs [4 public first], fn_name, starter_code)
PROBLEMS = [
    # ----------------------------------------------------------------- very easy
    ("echo-line", "very easy",
     "Echo\n\nRead one line of text and print it unchanged.\n\nInput\nOne line of text (letters, digits and "
     "spaces, at most 100 characters).\n\nOutput\nThe same line.",
     "print(input())\n",
     ["hello\n", "cobalt min\n", "42\n", "a b c\n", "x\n", "The quick brown fox\n", "123 456 789\n", "end\n"]),
    ("sum-two", "very easy",
     "Sum of Two\n\nGiven two integers a and b, print a + b.\n\nInput\nOne line with two integers a and b "
     "(-10^9 <= a, b <= 10^9).\n\nOutput\nPrint a + b.",
     "a, b = map(int, input().split())\nprint(a + b)\n",
     ["1 2\n", "10 20\n", "0 0\n", "7 5\n", "-5 3\n", "1000000000 1000000000\n", "-7 -8\n", "123 -123\n"]),
    ("reverse-string", "very easy",
     "Reverse\n\nPrint the given word reversed.\n\nInput\nOne word s of lowercase letters (1 <= |s| <= 100)."
     "\n\nOutput\nThe word read from right to left.",
     "print(input().strip()[::-1])\n",
     ["abc\n", "hello\n", "racecar\n", "ab\n", "a\n", "cobalt\n", "zyxwvutsrq\n", "level\n"]),
    ("count-vowels", "very easy",
     "Count Vowels\n\nCount the vowels (a, e, i, o, u, in upper or lower case) in a line of text.\n\nInput\nOne "
     "line of text.\n\nOutput\nThe number of vowels.",
     "print(sum(c in 'aeiouAEIOU' for c in input()))\n",
     ["hello\n", "programming\n", "sky\n", "banana\n", "AEIOU aeiou\n", "rhythm\n", "Queueing Theory\n", "x\n"]),
    ("max-of-list", "very easy",
     "Largest Number\n\nPrint the largest of n integers.\n\nInput\nThe first line holds n (1 <= n <= 1000). The "
     "second line holds n integers between -10^6 and 10^6.\n\nOutput\nThe largest of them.",
     "input()\nprint(max(map(int, input().split())))\n",
     ["3\n1 5 2\n", "4\n7 7 3 1\n", "1\n9\n", "5\n1 2 3 4 5\n", "3\n-5 -2 -9\n", "2\n0 -1\n",
      "6\n1000000 -1000000 5 5 6 7\n", "1\n-3\n"]),
    ("even-or-odd", "very easy",
     "Even or Odd\n\nPrint \"even\" if the integer n is even and \"odd\" otherwise.\n\nInput\nOne integer n "
     "(-10^9 <= n <= 10^9).\n\nOutput\neven or odd.",
     "print('even' if int(input()) % 2 == 0 else 'odd')\n",
     ["4\n", "7\n", "10\n", "13\n", "0\n", "-3\n", "-8\n", "999999999\n"]),
    ("sum-of-list", "very easy",
     "Total\n\nPrint the sum of n integers.\n\nInput\nThe first line holds n (1 <= n <= 1000), the second n "
     "integers between -1000 and 1000.\n\nOutput\nTheir sum.",
     "input()\nprint(sum(map(int, input().split())))\n",
     ["3\n1 2 3\n", "2\n10 20\n", "4\n1 1 1 1\n", "1\n5\n", "3\n-1 -2 -3\n", "2\n1000 -1000\n",
      "5\n0 0 0 0 0\n", "6\n-5 10 -15 20 -25 30\n"]),
    ("to-upper", "very easy",
     "Shout\n\nPrint the given line in upper case.\n\nInput\nOne line of lowercase letters and spaces.\n\n"
     "Output\nThe same line in upper case.",
     "print(input().upper())\n",
     ["hello\n", "abc def\n", "python\n", "cobalt\n", "a\n", "make it loud\n", "xyz\n", "upper case\n"]),
    ("repeat-word", "very easy",
     "Repeat\n\nPrint the word w k times, separated by single spaces.\n\nInput\nOne line with a word w and an "
     "integer k (1 <= k <= 20).\n\nOutput\nw repeated k times, separated by spaces.",
     "w, k = input().split()\nprint(' '.join([w] * int(k)))\n",
     ["ab 3\n", "hi 2\n", "x 5\n", "go 1\n", "na 8\n", "echo 4\n", "z 20\n", "word 2\n"]),
    ("count-words", "very easy",
     "Word Count\n\nCount the words in a line. Words are separated by one or more spaces.\n\nInput\nOne line of "
     "text (it may start or end with spaces).\n\nOutput\nThe number of words.",
     "print(len(input().split()))\n",
     ["hello world\n", "one\n", "a b c d\n", "count these words\n", "  leading spaces\n", "many    spaces   here  \n",
      "x y\n", "   \n"]),
    ("min-and-max", "very easy",
     "Extremes\n\nPrint the smallest and the largest of n integers.\n\nInput\nThe first line holds n (1 <= n <= "
     "1000), the second n integers between -10^6 and 10^6.\n\nOutput\nThe smallest and the largest, separated by a "
     "space.",
     "input()\nxs = list(map(int, input().split()))\nprint(min(xs), max(xs))\n",
     ["3\n3 1 2\n", "4\n5 9 2 7\n", "2\n1 2\n", "5\n10 20 30 40 50\n", "1\n4\n", "3\n-1 -1 -1\n", "4\n-5 0 5 -10\n",
      "2\n1000000 -1000000\n"]),
    ("abs-diff", "very easy",
     "Distance\n\nPrint the distance |a - b| between two integers on the number line.\n\nInput\nTwo integers a "
     "and b (-10^9 <= a, b <= 10^9).\n\nOutput\n|a - b|.",
     "a, b = map(int, input().split())\nprint(abs(a - b))\n",
     ["5 3\n", "10 4\n", "7 7\n", "9 1\n", "3 5\n", "-4 4\n", "-10 -20\n", "0 1000000000\n"]),
    ("hello-name", "very easy",
     "Greeting\n\nRead a name and greet it.\n\nInput\nOne line with a name (letters only).\n\nOutput\n"
     "Hello, NAME! where NAME is the given name.",
     "print(f'Hello, {input().strip()}!')\n",
     ["Ada\n", "Alan\n", "Grace\n", "Bob\n", "X\n", "Margaret\n", "Linus\n", "Barbara\n"]),
    ("times-table", "very easy",
     "Times Table\n\nPrint the first ten multiples of n: n*1, n*2, ..., n*10, one per line.\n\nInput\nOne integer "
     "n (-1000 <= n <= 1000).\n\nOutput\nTen lines.",
     "n = int(input())\nfor i in range(1, 11):\n    print(n * i)\n",
     ["2\n", "5\n", "1\n", "9\n", "0\n", "-3\n", "1000\n", "7\n"]),
    # ----------------------------------------------------------------- easy-medium, with traps
    ("second-largest", "easy",
     "Runner-up\n\nPrint the second largest DISTINCT value among n integers, or -1 if all values are equal.\n\n"
     "Input\nThe first line holds n (1 <= n <= 10^5), the second n integers between -10^9 and 10^9.\n\nOutput\n"
     "The second largest distinct value, or -1.",
     "input()\nxs = sorted(set(map(int, input().split())))\nprint(xs[-2] if len(xs) > 1 else -1)\n",
     ["4\n1 3 2 4\n", "3\n10 20 30\n", "5\n5 1 4 2 3\n", "2\n7 9\n", "4\n5 5 4 4\n", "3\n8 8 8\n", "1\n5\n",
      "5\n-1 -2 -3 -1 -2\n", "6\n9 9 9 9 9 1\n"]),
    ("palindrome-sentence", "easy",
     "Palindrome Sentence\n\nA sentence is a palindrome if, after removing everything but letters and digits "
     "and ignoring case, it reads the same in both directions. Print YES or NO.\n\nInput\nOne line of text.\n\n"
     "Output\nYES or NO.",
     "s = [c.lower() for c in input() if c.isalnum()]\nprint('YES' if s == s[::-1] else 'NO')\n",
     ["racecar\n", "hello\n", "abba\n", "abc\n", "A man, a plan, a canal: Panama\n", "No 'x' in Nixon\n",
      "Was it a car or a cat I saw?\n", "ab, c!ba.\n", "Step on no pets!\n", "Cobalt, not a bloc\n"]),
    ("fizzbuzz", "easy",
     "FizzBuzz\n\nFor every integer i from 1 to n print Fizz if i is divisible by 3, Buzz if by 5, FizzBuzz if by "
     "both, and i itself otherwise, one per line.\n\nInput\nOne integer n (0 <= n <= 1000).\n\nOutput\nn lines "
     "(nothing when n = 0).",
     "n = int(input())\nfor i in range(1, n + 1):\n    print('Fizz' * (i % 3 == 0) + 'Buzz' * (i % 5 == 0) or i)\n",
     ["3\n", "5\n", "1\n", "6\n", "15\n", "0\n", "31\n", "100\n"]),
    ("is-prime", "easy",
     "Prime Test\n\nPrint YES if n is a prime number and NO otherwise.\n\nInput\nOne integer n (0 <= n <= 10^12)."
     "\n\nOutput\nYES or NO.",
     "n = int(input())\nok = n >= 2\nd = 2\nwhile d * d <= n and ok:\n    ok = n % d != 0\n    d += 1\n"
     "print('YES' if ok else 'NO')\n",
     ["7\n", "10\n", "13\n", "21\n", "1\n", "0\n", "2\n", "999999999989\n", "999999999988\n", "1000000007\n"]),
    ("digit-sum", "easy",
     "Digit Sum\n\nPrint the sum of the decimal digits of an integer n. The sign does not count.\n\nInput\nOne "
     "integer n with at most 1000 digits; it may be negative.\n\nOutput\nThe sum of its digits.",
     "print(sum(int(c) for c in input().strip() if c.isdigit()))\n",
     ["123\n", "9\n", "4567\n", "100\n", "-123\n", "0\n", "9" * 1000 + "\n", "-5\n"]),
    ("distinct-count", "easy",
     "Distinct Values\n\nPrint how many different values appear among n integers.\n\nInput\nThe first line "
     "holds n (1 <= n <= 2*10^5), the second n integers between -10^9 and 10^9.\n\nOutput\nThe number of distinct "
     "values.",
     "input()\nprint(len(set(input().split())))\n",
     ["5\n1 2 2 3 3\n", "3\n4 4 4\n", "4\n1 2 3 4\n", "2\n5 6\n", "1\n0\n", "6\n-1 1 -1 1 0 0\n",
      "20000\n" + _ints(R, 20000, -10 ** 6, 10 ** 6) + "\n", "5\n7 7 7 7 8\n"]),
    ("longest-run", "easy",
     "Longest Run\n\nPrint the length of the longest block of equal consecutive characters in a string.\n\n"
     "Input\nOne string s of lowercase letters (1 <= |s| <= 10^5).\n\nOutput\nThe length of the longest block.",
     "s = input().strip()\nbest = cur = 1\nfor a, b in zip(s, s[1:]):\n    cur = cur + 1 if a == b else 1\n"
     "    best = max(best, cur)\nprint(best)\n",
     ["aabbbc\n", "abc\n", "aaaa\n", "abbcccdd\n", "z\n", "abcccc\n", "ab" * 10000 + "\n", "aabbaaa\n"]),
    ("gcd-of-list", "easy",
     "Common Divisor\n\nPrint the greatest common divisor of n non-negative integers (gcd(0, x) = x; the gcd of "
     "all zeros is 0).\n\nInput\nThe first line holds n (1 <= n <= 10^5), the second n integers between 0 and "
     "10^12.\n\nOutput\nTheir greatest common divisor.",
     "import math\ninput()\ng = 0\nfor x in map(int, input().split()):\n    g = math.gcd(g, x)\nprint(g)\n",
     ["3\n12 18 24\n", "2\n7 13\n", "4\n10 20 30 40\n", "1\n9\n", "3\n0 0 5\n", "2\n0 0\n",
      "3\n1000000000000 500000000000 250000000000\n", "3\n6 0 9\n"]),
    ("range-sums", "medium",
     "Range Sums\n\nGiven n integers a_1..a_n and q queries (l, r), print a_l + ... + a_r for each query.\n\n"
     "Input\nThe first line holds n and q (1 <= n, q <= 5*10^4). The second holds a_1..a_n (|a_i| <= 10^9). Each "
     "of the next q lines holds l and r (1 <= l <= r <= n).\n\nOutput\nq lines, the sums.",
     "import sys\ndata = sys.stdin.buffer.read().split()\nn, q = int(data[0]), int(data[1])\npre = [0]\n"
     "for x in data[2:2 + n]:\n    pre.append(pre[-1] + int(x))\nout = []\nidx = 2 + n\nfor _ in range(q):\n"
     "    l, r = int(data[idx]), int(data[idx + 1])\n    idx += 2\n    out.append(pre[r] - pre[l - 1])\n"
     "print('\\n'.join(map(str, out)))\n",
     ["3 2\n1 2 3\n1 2\n2 3\n", "1 1\n5\n1 1\n", "4 3\n1 -1 1 -1\n1 4\n2 3\n1 1\n", "5 1\n1 2 3 4 5\n1 5\n",
      "2 2\n-1000000000 -1000000000\n1 2\n2 2\n", "3 3\n5 -5 5\n1 3\n3 3\n2 2\n", "1 2\n0\n1 1\n1 1\n",
      "20000 20000\n" + _ints(R, 20000, -1000, 1000) + "\n" + "".join(f"1 {20000 - i % 7}\n" for i in range(20000))]),
    ("balanced-brackets", "easy",
     "Brackets\n\nPrint YES if the string of brackets ()[]{} is balanced (every bracket is closed by the "
     "matching bracket, in the right order) and NO otherwise. An empty line is balanced.\n\nInput\nOne line of "
     "brackets (0 <= length <= 10^5).\n\nOutput\nYES or NO.",
     "s = input().strip()\nst = []\npairs = {')': '(', ']': '[', '}': '{'}\nok = True\nfor c in s:\n"
     "    if c in '([{':\n        st.append(c)\n    elif not st or st.pop() != pairs[c]:\n        ok = False\n"
     "        break\nprint('YES' if ok and not st else 'NO')\n",
     ["()\n", "(]\n", "([]{})\n", "((\n", "([)]\n", "\n", ")(\n", "{[()()]}\n", "(" * 10000 + ")" * 10000 + "\n"]),
    ("anagrams", "easy",
     "Anagrams\n\nTwo phrases are anagrams if they use the same letters the same number of times, ignoring case "
     "and spaces. Print YES or NO.\n\nInput\nTwo lines, one phrase each (letters and spaces).\n\nOutput\nYES or NO.",
     "a, b = input(), input()\nf = lambda s: sorted(s.replace(' ', '').lower())\nprint('YES' if f(a) == f(b) else 'NO')\n",
     ["listen\nsilent\n", "abc\nabd\n", "evil\nvile\n", "aab\nabb\n", "Dormitory\ndirty room\n", "a\nA\n",
      "abc\nab\n", "The eyes\nthey see\n"]),
    ("kth-smallest", "easy",
     "K-th Smallest\n\nPrint the k-th smallest of n integers (k = 1 is the minimum; equal values count "
     "separately).\n\nInput\nThe first line holds n and k (1 <= k <= n <= 10^5), the second n integers.\n\nOutput\n"
     "The k-th smallest value.",
     "n, k = map(int, input().split())\nprint(sorted(map(int, input().split()))[k - 1])\n",
     ["3 1\n3 1 2\n", "5 3\n5 4 3 2 1\n", "4 2\n10 20 30 40\n", "1 1\n7\n", "4 4\n1 2 3 4\n", "5 2\n1 1 1 2 2\n",
      "3 3\n-1 -5 -3\n", "6 5\n9 8 7 7 8 9\n"]),
    ("to-binary", "easy",
     "Binary\n\nPrint the binary representation of a non-negative integer n, without leading zeros.\n\nInput\n"
     "One integer n (0 <= n <= 10^18).\n\nOutput\nn in base 2.",
     "print(bin(int(input()))[2:])\n",
     ["5\n", "2\n", "10\n", "7\n", "0\n", "1\n", "1000000000000000000\n", "1024\n"]),
    ("leap-year", "easy",
     "Leap Year\n\nIn the Gregorian calendar a year is a leap year if it is divisible by 4, except years "
     "divisible by 100, which are leap years only if they are also divisible by 400. Print YES or NO.\n\nInput\n"
     "One year y (1 <= y <= 10^9).\n\nOutput\nYES or NO.",
     "y = int(input())\nprint('YES' if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0) else 'NO')\n",
     ["2024\n", "2023\n", "2000\n", "2019\n", "1900\n", "2100\n", "2400\n", "4\n"]),
    ("transpose", "easy",
     "Transpose\n\nPrint the transpose of an r x c matrix.\n\nInput\nThe first line holds r and c (1 <= r, c <= "
     "100). Then r lines with c integers each.\n\nOutput\nc lines with r integers each.",
     "r, c = map(int, input().split())\nm = [input().split() for _ in range(r)]\nfor j in range(c):\n"
     "    print(' '.join(m[i][j] for i in range(r)))\n",
     ["2 2\n1 2\n3 4\n", "1 1\n5\n", "3 3\n1 2 3\n4 5 6\n7 8 9\n", "2 2\n0 1\n1 0\n", "2 3\n1 2 3\n4 5 6\n",
      "3 1\n1\n2\n3\n", "1 4\n9 8 7 6\n", "2 4\n1 2 3 4\n5 6 7 8\n"]),
    ("word-frequency", "medium",
     "Word Frequency\n\nCount how often each word occurs in the text and print \"word count\" lines, most frequent "
     "first; words with the same count in alphabetical order.\n\nInput\nOne line of lowercase words separated by "
     "spaces.\n\nOutput\nOne line per distinct word.",
     "from collections import Counter\nc = Counter(input().split())\nfor w, k in sorted(c.items(), key=lambda t: (-t[1], t[0])):\n"
     "    print(w, k)\n",
     ["a b a\n", "x y z x\n", "one one one\n", "b a\n", "d c b a\n", "z y z y x\n", "apple bob apple cat bob\n",
      _words(R, 300) + "\n"]),
    ("pair-sums", "medium",
     "Pair Count\n\nCount the pairs of positions i < j with a_i + a_j = k.\n\nInput\nThe first line holds n and k "
     "(1 <= n <= 2*10^5, |k| <= 2*10^9), the second n integers (|a_i| <= 10^9).\n\nOutput\nThe number of pairs.",
     "from collections import Counter\nn, k = map(int, input().split())\nseen = Counter()\ntotal = 0\n"
     "for x in map(int, input().split()):\n    total += seen[k - x]\n    seen[x] += 1\nprint(total)\n",
     ["4 5\n1 4 2 3\n", "3 10\n1 2 3\n", "2 4\n2 2\n", "5 6\n1 5 2 4 3\n", "4 4\n2 2 2 2\n", "1 2\n1\n",
      "20000 0\n" + _ints(R, 20000, -50, 50) + "\n", "3 -2\n-1 -1 0\n"]),
    ("max-subarray", "easy",
     "Best Streak\n\nPrint the largest sum of a non-empty block of consecutive elements.\n\nInput\nThe first line "
     "holds n (1 <= n <= 2*10^5), the second n integers (|a_i| <= 10^9).\n\nOutput\nThe largest block sum.",
     "input()\nbest, cur = None, 0\nfor x in map(int, input().split()):\n    cur = max(x, cur + x)\n"
     "    best = cur if best is None else max(best, cur)\nprint(best)\n",
     ["5\n1 -2 3 4 -1\n", "3\n1 2 3\n", "4\n-1 5 -1 5\n", "2\n3 -1\n", "3\n-3 -1 -2\n", "1\n-7\n",
      "20000\n" + _ints(R, 20000, -10 ** 6, 10 ** 6) + "\n", "5\n0 0 0 0 0\n"]),
    ("rotate-right", "easy",
     "Rotate\n\nRotate the array k steps to the right and print it.\n\nInput\nThe first line holds n and k (1 <= "
     "n <= 10^5, 0 <= k <= 10^18), the second n integers.\n\nOutput\nThe rotated array on one line.",
     "n, k = map(int, input().split())\na = input().split()\nk %= n\nprint(' '.join(a[n - k:] + a[:n - k]))\n",
     ["5 2\n1 2 3 4 5\n", "3 1\n1 2 3\n", "4 3\n1 2 3 4\n", "2 1\n7 8\n", "3 0\n1 2 3\n", "3 7\n1 2 3\n",
      "1 1000000000000000000\n42\n", "4 4\n1 2 3 4\n"]),
    ("caesar", "easy",
     "Caesar Cipher\n\nShift every letter k places forward in the alphabet, wrapping from z to a, keeping upper "
     "and lower case; other characters stay as they are.\n\nInput\nThe first line holds k (0 <= k <= 1000), the "
     "second the text.\n\nOutput\nThe shifted text.",
     "k = int(input()) % 26\nout = []\nfor c in input():\n    if c.islower():\n        c = chr((ord(c) - 97 + k) % 26 + 97)\n"
     "    elif c.isupper():\n        c = chr((ord(c) - 65 + k) % 26 + 65)\n    out.append(c)\nprint(''.join(out))\n",
     ["1\nabc\n", "2\nhello\n", "3\nabc def\n", "1\nhal\n", "1\nxyz\n", "3\nHello, World!\n", "52\nsame\n",
      "1000\nWrap Around Zz\n"]),
    ("missing-number", "easy",
     "Missing Number\n\nThe numbers 1..n were written down, one was lost and the rest shuffled. Print the lost "
     "number.\n\nInput\nThe first line holds n (1 <= n <= 2*10^5), the second the n - 1 remaining numbers (empty "
     "when n = 1).\n\nOutput\nThe missing number.",
     "import sys\ndata = sys.stdin.read().split()\nn = int(data[0])\nprint(n * (n + 1) // 2 - sum(map(int, data[1:])))\n",
     ["3\n1 3\n", "4\n4 2 1\n", "5\n5 4 3 2\n", "2\n1\n", "1\n\n", "2\n2\n",
      "20000\n" + " ".join(str(x) for x in R.sample(range(1, 20001), 20000) if x != 12345) + "\n", "6\n6 5 4 2 1\n"]),
    ("run-length", "easy",
     "Run-Length Encoding\n\nReplace every block of equal consecutive letters by the letter followed by the "
     "block's length.\n\nInput\nOne string of lowercase letters (1 <= length <= 10^5).\n\nOutput\nThe encoded "
     "string.",
     "s = input().strip()\nout = []\ni = 0\nwhile i < len(s):\n    j = i\n    while j < len(s) and s[j] == s[i]:\n"
     "        j += 1\n    out.append(s[i] + str(j - i))\n    i = j\nprint(''.join(out))\n",
     ["aaabcc\n", "abc\n", "aabb\n", "zzzz\n", "a\n", "abbbbbbbbbbbbc\n", "x" * 20000 + "\n", "aba\n"]),
    # ----------------------------------------------------------------- call-based
    ("two-sum-indices", "easy",
     "Two Sum\n\nWrite a function two_sum(nums, target) that returns the indices [i, j] with i < j such that "
     "nums[i] + nums[j] == target. Exactly one such pair exists. 2 <= len(nums) <= 10^5.",
     "def two_sum(nums, target):\n    seen = {}\n    for j, x in enumerate(nums):\n        if target - x in seen:\n"
     "            return [seen[target - x], j]\n        seen[x] = j\n",
     [[[2, 7, 11, 15], 9], [[3, 2, 4], 6], [[1, 5], 6], [[0, 4, 3, 0], 0], [[-3, 4, 3, 90], 0], [[5, 5], 10],
      [list(range(1, 20001)), 39999], [[1, 2, 3, 4, 5, 6], 11]],
     "two_sum", "def two_sum(nums, target):\n"),
    ("power-of-two", "easy",
     "Power of Two\n\nWrite a function is_power_of_two(n) that returns True if the integer n is a power of two "
     "(1, 2, 4, 8, ...) and False otherwise. -2^62 <= n <= 2^62.",
     "def is_power_of_two(n):\n    return n > 0 and n & (n - 1) == 0\n",
     [[1], [16], [6], [64], [0], [-8], [2 ** 62], [2 ** 62 - 1]],
     "is_power_of_two", "def is_power_of_two(n):\n"),
    ("merge-intervals", "medium",
     "Merge Intervals\n\nWrite a function merge(intervals) that merges every overlapping or touching interval "
     "[a, b] (a <= b) and returns the merged intervals sorted by start. [1, 2] and [2, 3] touch and merge into "
     "[1, 3]. The input may be unsorted.",
     "def merge(intervals):\n    out = []\n    for a, b in sorted(intervals):\n        if out and a <= out[-1][1]:\n"
     "            out[-1][1] = max(out[-1][1], b)\n        else:\n            out.append([a, b])\n    return out\n",
     [[[[1, 3], [2, 6], [8, 10]]], [[[1, 4], [5, 6]]], [[[1, 5]]], [[[1, 10], [2, 3], [4, 5]]], [[[1, 2], [2, 3]]],
      [[[5, 6], [1, 2]]], [[[1, 4], [0, 2], [3, 5]]], [[]]],
     "merge", "def merge(intervals):\n"),
    ("common-prefix", "easy",
     "Longest Common Prefix\n\nImplement class Solution with a method longest_common_prefix(self, words) that "
     "returns the longest string that is a prefix of every word in the list (\"\" if there is none or the list "
     "is empty).",
     "class Solution:\n    def longest_common_prefix(self, words):\n        if not words:\n            return ''\n"
     "        p = words[0]\n        for w in words[1:]:\n            while not w.startswith(p):\n                p = p[:-1]\n"
     "        return p\n",
     [[["flower", "flow", "flight"]], [["dog", "racecar", "car"]], [["ab", "abc"]], [["same", "same"]], [[]],
      [["alone"]], [["", "abc"]], [["prefix", "pre", "prefixes", "pr"]]],
     "longest_common_prefix", "class Solution:\n    def longest_common_prefix(self, words):\n"),
    ("roman-to-int", "easy",
     "Roman Numerals\n\nWrite a function roman_to_int(s) that converts a Roman numeral (I=1, V=5, X=10, L=50, "
     "C=100, D=500, M=1000; a smaller value before a larger one is subtracted, as in IV = 4) between 1 and 3999 "
     "to an integer.",
     "def roman_to_int(s):\n    v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n    total = 0\n"
     "    for a, b in zip(s, s[1:] + ' '):\n        total += -v[a] if b != ' ' and v[a] < v[b] else v[a]\n    return total\n",
     [["III"], ["VI"], ["XII"], ["LX"], ["IV"], ["MCMXCIV"], ["XLIX"], ["MMMCMXCIX"]],
     "roman_to_int", "def roman_to_int(s):\n"),
]


def _function(pid, name, args, task, solution_body, inputs):
    """A very easy call-based problem: `def name(args)` returning what `task` says (starter code given)."""
    signature = f"def {name}({args}):\n"
    statement = f"{pid.replace('-', ' ').title()}\n\nWrite a function {name}({args}) that {task}"
    return (pid, "very easy function", statement, signature + solution_body, inputs, name, signature)


# Very easy functions: a 135M-parameter model writes a correct one now and then, so that the learning demo has
# problems on which reinforcement learning can move Pass@1. Each has 8 tests, edge cases among the hidden ones.
FUNCTIONS = [
    _function("add-two", "add", "a, b", "returns the sum of the integers a and b.", "    return a + b\n",
              [[1, 2], [10, 5], [0, 0], [-3, 3], [100, -250], [7, 8], [-5, -6], [123456, 654321]]),
    _function("subtract-two", "subtract", "a, b", "returns a minus b for integers a and b.", "    return a - b\n",
              [[5, 3], [3, 5], [0, 0], [10, -2], [-4, -4], [100, 1], [-7, 3], [999, 1000]]),
    _function("multiply-two", "multiply", "a, b", "returns the product of the integers a and b.", "    return a * b\n",
              [[2, 3], [0, 5], [-2, 4], [7, 7], [-3, -3], [1, 99], [12, 12], [100000, 100000]]),
    _function("square-number", "square", "n", "returns n squared (n * n) for an integer n.", "    return n * n\n",
              [[3], [0], [-4], [10], [1], [-1], [25], [1000]]),
    _function("cube-number", "cube", "n", "returns n cubed (n * n * n) for an integer n.", "    return n ** 3\n",
              [[2], [0], [-3], [5], [1], [-1], [10], [100]]),
    _function("absolute-value", "absolute", "n", "returns the absolute value of the integer n.",
              "    return abs(n)\n", [[-5], [5], [0], [-1], [12], [-100], [7], [-123456]]),
    _function("is-even", "is_even", "n", "returns True if the integer n is even and False otherwise.",
              "    return n % 2 == 0\n", [[4], [7], [0], [-2], [-3], [100], [1], [999]]),
    _function("is-odd", "is_odd", "n", "returns True if the integer n is odd and False otherwise.",
              "    return n % 2 == 1\n", [[3], [8], [0], [-3], [-4], [101], [1], [1000]]),
    _function("max-of-two", "max_of_two", "a, b", "returns the larger of the integers a and b.",
              "    return max(a, b)\n", [[1, 2], [5, 3], [4, 4], [-1, -5], [0, -1], [100, 99], [-7, 7], [3, 30]]),
    _function("min-of-three", "min_of_three", "a, b, c", "returns the smallest of the integers a, b and c.",
              "    return min(a, b, c)\n",
              [[1, 2, 3], [3, 2, 1], [2, 1, 3], [5, 5, 5], [-1, 0, 1], [10, -10, 0], [7, 3, 3], [100, 50, 75]]),
    _function("list-total", "list_sum", "nums", "returns the sum of the integers in the list nums (0 for an "
              "empty list).", "    return sum(nums)\n",
              [[[1, 2, 3]], [[5]], [[-1, 1]], [[10, 20, 30, 40]], [[]], [[-5, -5]], [[0, 0, 0]], [[100, -50, 25]]]),
    _function("largest-in-list", "list_max", "nums", "returns the largest integer in the non-empty list nums.",
              "    return max(nums)\n",
              [[[1, 5, 3]], [[7]], [[-1, -2]], [[4, 4, 4]], [[-10, -3, -7]], [[0, 100, 99]], [[2, 1]], [[8, 9, 10]]]),
    _function("smallest-in-list", "list_min", "nums", "returns the smallest integer in the non-empty list nums.",
              "    return min(nums)\n",
              [[[4, 2, 8]], [[3]], [[-1, -2]], [[5, 5]], [[0, -100, 50]], [[9, 8, 7]], [[1, 2, 3]], [[-3, 3]]]),
    _function("list-length", "list_length", "items", "returns the number of elements in the list items.",
              "    return len(items)\n",
              [[[1, 2, 3]], [[]], [["a"]], [[0, 0]], [[1, 2, 3, 4, 5, 6]], [["x", "y"]], [[[1], [2]]], [[7] * 10]]),
    _function("count-positives", "count_positive", "nums", "returns how many integers in the list nums are "
              "greater than zero.", "    return sum(1 for x in nums if x > 0)\n",
              [[[1, -2, 3]], [[]], [[0, 0]], [[5, 6, 7]], [[-1, -2]], [[0, 1]], [[10, -10, 10]], [[2]]]),
    _function("reverse-text", "reverse_string", "s", "returns the string s reversed.", "    return s[::-1]\n",
              [["abc"], ["hello"], [""], ["a"], ["racecar"], ["ab cd"], ["12345"], ["Python"]]),
    _function("upper-case", "to_upper", "s", "returns the string s with every letter in upper case.",
              "    return s.upper()\n", [["abc"], ["Hello"], [""], ["ABC"], ["a1b2"], ["mixed Case"], ["z"], ["x y"]]),
    _function("string-length", "string_length", "s", "returns the number of characters in the string s.",
              "    return len(s)\n", [["abc"], [""], ["hello world"], ["a"], ["  "], ["12345"], ["x" * 20], ["ok!"]]),
    _function("first-character", "first_char", "s", "returns the first character of the non-empty string s.",
              "    return s[0]\n", [["abc"], ["z"], ["Hello"], ["123"], [" x"], ["!?"], ["ab"], ["Q"]]),
    _function("last-character", "last_char", "s", "returns the last character of the non-empty string s.",
              "    return s[-1]\n", [["abc"], ["z"], ["Hello"], ["123"], ["x "], ["!?"], ["ab"], ["Q"]]),
    _function("last-element", "last_element", "nums", "returns the last element of the non-empty list nums.",
              "    return nums[-1]\n", [[[1, 2, 3]], [[7]], [[-1, -2]], [[0, 5]], [[9, 8, 7, 6]], [[4, 4]], [[1, 0]],
                                     [[100, 200]]]),
    _function("double-each", "double_all", "nums", "returns a new list with every integer of nums doubled.",
              "    return [2 * x for x in nums]\n",
              [[[1, 2, 3]], [[]], [[0]], [[-1, 5]], [[10, 20]], [[7]], [[-3, -3]], [[1, 0, -1]]]),
    _function("count-letter", "count_char", "s, c", "returns how many times the character c occurs in the "
              "string s.", "    return s.count(c)\n",
              [["banana", "a"], ["hello", "l"], ["", "x"], ["abc", "z"], ["aaaa", "a"], ["Mississippi", "s"],
               ["a b a", " "], ["xyz", "y"]]),
    _function("palindrome-check", "is_palindrome", "s", "returns True if the string s reads the same backwards, "
              "else False.", "    return s == s[::-1]\n",
              [["racecar"], ["abc"], [""], ["a"], ["abba"], ["ab"], ["noon"], ["abca"]]),
    _function("factorial-number", "factorial", "n", "returns n! (the product 1 * 2 * ... * n; 0! = 1) for an "
              "integer 0 <= n <= 20.", "    r = 1\n    for i in range(2, n + 1):\n        r *= i\n    return r\n",
              [[0], [1], [3], [5], [10], [2], [7], [20]]),
    _function("fibonacci-number", "fibonacci", "n", "returns the n-th Fibonacci number, with fibonacci(0) = 0 and "
              "fibonacci(1) = 1 (0 <= n <= 50).", "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
              "    return a\n", [[0], [1], [2], [5], [10], [3], [20], [50]]),
    _function("sum-up-to", "sum_to_n", "n", "returns 1 + 2 + ... + n for an integer n >= 0 (0 for n = 0).",
              "    return n * (n + 1) // 2\n", [[1], [3], [0], [10], [100], [2], [5], [1000000]]),
    _function("count-evens", "count_evens", "nums", "returns how many integers in the list nums are even.",
              "    return sum(1 for x in nums if x % 2 == 0)\n",
              [[[1, 2, 4]], [[]], [[1, 3]], [[0]], [[2, 2, 2]], [[-2, -3]], [[10, 11, 12, 13]], [[7]]]),
    _function("sorted-copy", "sort_list", "nums", "returns the integers of nums sorted in increasing order.",
              "    return sorted(nums)\n",
              [[[3, 1, 2]], [[]], [[1]], [[5, 5, 1]], [[-1, -3, 2]], [[9, 8, 7, 6]], [[0, 0]], [[2, 10, 1]]]),
    _function("unique-in-order", "remove_duplicates", "nums", "returns the list nums without repeated values, "
              "keeping the first occurrence of each, in order.",
              "    out = []\n    for x in nums:\n        if x not in out:\n            out.append(x)\n    return out\n",
              [[[1, 2, 1]], [[]], [[5, 5, 5]], [[3, 1, 3, 2]], [[1]], [[2, 1, 2, 1]], [[0, -1, 0]], [[4, 3, 2]]]),
    _function("join-with-spaces", "join_words", "words", "returns the strings of the list words joined with "
              "single spaces.", "    return ' '.join(words)\n",
              [[["a", "b"]], [[]], [["hello"]], [["x", "y", "z"]], [["one", "two"]], [["", "a"]], [["1", "2", "3"]],
               [["ab", "cd"]]]),
    _function("word-count", "word_count", "s", "returns the number of words in the string s (words are separated "
              "by spaces).", "    return len(s.split())\n",
              [["hello world"], [""], ["one"], ["a b c"], ["  two  words "], ["x y"], ["the quick brown fox"], ["z"]]),
    _function("sign-of-number", "sign", "n", "returns 1 if the integer n is positive, -1 if it is negative and 0 "
              "if it is zero.", "    return (n > 0) - (n < 0)\n", [[5], [-3], [0], [1], [-1], [100], [-100], [7]]),
    _function("repeat-text", "repeat_string", "s, k", "returns the string s repeated k times (k >= 0).",
              "    return s * k\n", [["ab", 3], ["x", 1], ["hi", 0], ["", 5], ["a", 4], ["xy", 2], ["-", 6], ["ok", 1]]),
    _function("contains-value", "contains", "nums, x", "returns True if x is in the list nums, else False.",
              "    return x in nums\n",
              [[[1, 2, 3], 2], [[1, 2, 3], 5], [[], 1], [[0], 0], [[-1, -2], -2], [[5, 5], 6], [[7], 7], [[1, 2], 0]]),
    _function("index-of-value", "index_of", "nums, x", "returns the index of the first occurrence of x in the list "
              "nums, or -1 if x is not in it.", "    return nums.index(x) if x in nums else -1\n",
              [[[4, 5, 6], 5], [[4, 5, 6], 7], [[], 1], [[1, 1], 1], [[0, 2, 2], 2], [[9], 9], [[3, 4], 3], [[1], 2]]),
    _function("square-each", "square_all", "nums", "returns a new list with the square of every integer of nums.",
              "    return [x * x for x in nums]\n",
              [[[1, 2, 3]], [[]], [[-2]], [[0, 5]], [[10]], [[-1, 1]], [[3, 3]], [[7, -7, 0]]]),
    _function("digit-total", "sum_of_digits", "n", "returns the sum of the decimal digits of the integer n >= 0.",
              "    return sum(int(d) for d in str(n))\n", [[123], [0], [9], [1000], [999], [5050], [11], [987654321]]),
    _function("vowel-count", "count_vowels", "s", "returns the number of vowels (a, e, i, o, u) in the lowercase "
              "string s.", "    return sum(c in 'aeiou' for c in s)\n",
              [["hello"], [""], ["sky"], ["aeiou"], ["banana"], ["rhythm"], ["queue"], ["programming"]]),
    _function("range-of-list", "max_minus_min", "nums", "returns the largest minus the smallest integer of the "
              "non-empty list nums.", "    return max(nums) - min(nums)\n",
              [[[1, 5, 3]], [[7]], [[-1, 1]], [[4, 4]], [[10, -10]], [[0, 3, 9]], [[2, 1]], [[100, 50, 75]]]),
    _function("is-sorted", "is_sorted", "nums", "returns True if the list nums is in non-decreasing order, else "
              "False.", "    return all(a <= b for a, b in zip(nums, nums[1:]))\n",
              [[[1, 2, 3]], [[3, 1]], [[]], [[5]], [[2, 2, 3]], [[1, 3, 2]], [[-1, 0, 1]], [[9, 8]]]),
    _function("concatenate", "concat", "a, b", "returns the string a followed by the string b.",
              "    return a + b\n", [["ab", "cd"], ["", "x"], ["x", ""], ["", ""], ["hello ", "world"], ["1", "2"],
                                    ["a", "a"], ["foo", "bar"]]),
    _function("product-of-list", "product", "nums", "returns the product of the integers in the list nums (1 for an "
              "empty list).", "    r = 1\n    for x in nums:\n        r *= x\n    return r\n",
              [[[1, 2, 3]], [[]], [[5]], [[0, 9]], [[-1, 2]], [[2, 2, 2]], [[-2, -3]], [[10, 10]]]),
    _function("keep-evens", "even_numbers", "nums", "returns the even integers of nums, in their order.",
              "    return [x for x in nums if x % 2 == 0]\n",
              [[[1, 2, 3, 4]], [[]], [[1, 3]], [[0]], [[-2, -1]], [[6, 6]], [[5, 10, 15, 20]], [[2]]]),
    _function("greatest-common-divisor", "gcd", "a, b", "returns the greatest common divisor of the positive "
              "integers a and b.", "    while b:\n        a, b = b, a % b\n    return a\n",
              [[12, 8], [7, 3], [5, 5], [100, 10], [1, 9], [18, 24], [17, 34], [270, 192]]),
    _function("integer-power", "power", "a, b", "returns a raised to the power b for integers a and b >= 0.",
              "    return a ** b\n", [[2, 3], [5, 0], [3, 2], [-2, 3], [10, 5], [1, 100], [0, 3], [7, 2]]),
]



def _detail(pid, kind, name, args, task, detail, solution_body, inputs):
    """A very easy call-based problem whose statement leaves one detail open (`kind`: wording, separator,
    case, counting, rounding, answer): the sentence `detail` says that the tests fix it, and the first
    public test's expected output shows it. A first attempt that guesses the detail wrong is told the
    expected output by the feedback, so a model can repair it at turn 1 (the self-repair demo)."""
    signature = f"def {name}({args}):\n"
    statement = f"{pid.replace('-', ' ').title()}\n\nWrite a function {name}({args}) that {task} {detail}"
    return (pid, "repair function", statement, signature + solution_body, inputs, name, signature), kind


# Feedback-revealed details: 32 problems, the detail of each shown by every test (so by the first public one).
REVEALED = [
    # wording: the exact text around the value
    _detail("greeting", "wording", "greet", "name", "returns a greeting for the given name.",
            "The tests fix the exact wording.", "    return f'Hello, {name}!'\n",
            [["Ann"], ["Bob"], ["Zoe"], ["Li"], ["Max"], ["Eve"], ["Sam"], ["Kim"]]),
    _detail("farewell", "wording", "farewell", "name", "returns a goodbye message for the given name.",
            "The tests fix the exact wording.", "    return f'Goodbye, {name}.'\n",
            [["Ann"], ["Bob"], ["Zoe"], ["Li"], ["Max"], ["Eve"], ["Sam"], ["Kim"]]),
    _detail("item-count", "wording", "count_label", "n", "returns a short text saying that there are n items.",
            "The tests fix the exact wording.", "    return f'{n} items'\n", [[3], [10], [0], [7], [2], [99], [5], [42]]),
    _detail("price-tag", "wording", "price_tag", "n", "returns the price of n whole dollars as text.",
            "The tests fix the exact format.", "    return f'${n}'\n", [[5], [12], [0], [100], [7], [3], [250], [1]]),
    _detail("percent-text", "wording", "percent", "n", "returns the integer n written as a percentage.",
            "The tests fix the exact format.", "    return f'{n}%'\n", [[50], [5], [100], [0], [12], [99], [1], [75]]),
    _detail("bracket-wrap", "wording", "wrap", "s", "returns the string s wrapped in brackets.",
            "The tests fix which brackets.", "    return '[' + s + ']'\n",
            [["abc"], ["x"], ["hello"], ["42"], ["a b"], ["cobalt"], ["z"], ["ok"]]),
    _detail("hash-tag", "wording", "hashtag", "word", "returns the word as a tag.",
            "The tests fix the exact format.", "    return '#' + word\n",
            [["python"], ["code"], ["ai"], ["fun"], ["rl"], ["test"], ["x"], ["news"]]),
    _detail("name-order", "wording", "full_name", "first, last", "returns the person's full name.",
            "The tests fix the order and punctuation.", "    return f'{last}, {first}'\n",
            [["Ada", "Lovelace"], ["Alan", "Turing"], ["Grace", "Hopper"], ["Linus", "Torvalds"], ["Guido", "Rossum"],
             ["Ken", "Thompson"], ["Tim", "Peters"], ["Barbara", "Liskov"]]),
    _detail("clock-time", "wording", "clock", "h, m", "returns the time h hours and m minutes as text.",
            "The tests fix the exact format.", "    return f'{h:02d}:{m:02d}'\n",
            [[9, 5], [12, 30], [0, 0], [7, 45], [23, 59], [1, 1], [10, 10], [6, 0]]),
    _detail("point-text", "wording", "point", "x, y", "returns the point (x, y) as text.",
            "The tests fix the exact format.", "    return f'({x}, {y})'\n",
            [[1, 2], [0, 0], [-3, 4], [10, 20], [5, -5], [7, 7], [-1, -1], [100, 0]]),
    # separator: how the parts are joined
    _detail("dash-join", "separator", "join_words", "words", "returns the words of the list joined into one string.",
            "The tests fix the separator.", "    return '-'.join(words)\n",
            [[["a", "b", "c"]], [["hello", "world"]], [["x"]], [["one", "two", "three"]], [["ab", "cd"]], [[]],
             [["q", "r"]], [["red", "green", "blue"]]]),
    _detail("comma-numbers", "separator", "join_numbers", "nums", "returns the integers of nums as one string.",
            "The tests fix the separator.", "    return ','.join(str(x) for x in nums)\n",
            [[[1, 2, 3]], [[10, 20]], [[5]], [[7, 8, 9, 10]], [[0, 0]], [[]], [[-1, 1]], [[4, 5, 6]]]),
    _detail("spaced-letters", "separator", "spread", "s", "returns the letters of the word s spread out.",
            "The tests fix what goes between the letters.", "    return ' '.join(s)\n",
            [["abc"], ["hi"], ["code"], ["x"], ["ok"], ["python"], ["ab"], ["zzz"]]),
    _detail("path-parts", "separator", "make_path", "parts", "returns the folder names of parts joined into a path.",
            "The tests fix the separator.", "    return '/'.join(parts)\n",
            [[["home", "user"]], [["a", "b", "c"]], [["tmp"]], [["usr", "local", "bin"]], [["x", "y"]], [["var", "log"]],
             [["data"]], [["one", "two"]]]),
    _detail("repeat-joined", "separator", "repeat_word", "w, k", "returns the word w repeated k times as one string.",
            "The tests fix what goes between the copies.", "    return ', '.join([w] * k)\n",
            [["ab", 3], ["hi", 2], ["x", 1], ["go", 4], ["na", 2], ["ok", 3], ["z", 5], ["yo", 2]]),
    _detail("pair-text", "separator", "pair", "a, b", "returns the integers a and b as one string.",
            "The tests fix the separator.", "    return f'{a}:{b}'\n",
            [[1, 2], [10, 20], [0, 5], [3, 3], [7, 1], [-1, 4], [100, 200], [9, 8]]),
    # case: the letter case of the answer
    _detail("loud-text", "case", "shout", "s", "returns the text s as if shouted.",
            "The tests fix the letter case.", "    return s.upper()\n",
            [["hello"], ["abc def"], ["python"], ["ok"], ["x"], ["make it loud"], ["cobalt"], ["yes"]]),
    _detail("quiet-text", "case", "whisper", "s", "returns the text s as if whispered.",
            "The tests fix the letter case.", "    return s.lower()\n",
            [["HELLO"], ["Abc Def"], ["PYTHON"], ["OK"], ["X"], ["Quiet Please"], ["COBALT"], ["Yes"]]),
    _detail("title-words", "case", "headline", "s", "returns the text s as a headline.",
            "The tests fix the letter case.", "    return s.title()\n",
            [["hello world"], ["big news"], ["python"], ["a b c"], ["make it so"], ["the end"], ["x"], ["rl for code"]]),
    _detail("name-initials", "case", "initials", "name", "returns the initials of the full name.",
            "The tests fix the exact format.", "    return ''.join(w[0].upper() + '.' for w in name.split())\n",
            [["ada lovelace"], ["alan turing"], ["grace hopper"], ["guido van rossum"], ["ken thompson"],
             ["tim peters"], ["x y"], ["barbara liskov"]]),
    # counting: where counting starts and ends
    _detail("position-of", "counting", "position", "nums, x", "returns the position of x in the list nums (x occurs once).",
            "The tests fix how positions are counted.", "    return nums.index(x) + 1\n",
            [[[4, 5, 6], 5], [[7, 8], 7], [[1, 2, 3, 4], 4], [[9], 9], [[3, 1, 2], 2], [[5, 6, 7, 8], 8], [[0, 1], 1],
             [[2, 4, 6], 6]]),
    _detail("nth-letter", "counting", "letter_at", "s, n", "returns the n-th letter of the string s.",
            "The tests fix how letters are counted.", "    return s[n - 1]\n",
            [["abc", 1], ["hello", 2], ["python", 6], ["xyz", 3], ["code", 4], ["ab", 2], ["cobalt", 3], ["q", 1]]),
    _detail("count-down", "counting", "countdown", "n", "returns the countdown from n as a list.",
            "The tests fix where the countdown stops.", "    return list(range(n, 0, -1))\n",
            [[3], [5], [1], [4], [2], [6], [7], [8]]),
    _detail("up-to", "counting", "numbers_to", "n", "returns the list of whole numbers up to n.",
            "The tests fix where the list starts.", "    return list(range(1, n + 1))\n",
            [[3], [5], [1], [4], [2], [6], [0], [8]]),
    # rounding: integer or fraction
    _detail("half-of", "rounding", "half", "n", "returns half of the integer n.",
            "The tests fix how odd numbers are rounded.", "    return n // 2\n",
            [[7], [10], [3], [9], [4], [1], [15], [100]]),
    _detail("mean-of-two", "rounding", "average", "a, b", "returns the average of the integers a and b.",
            "The tests fix how the result is rounded.", "    return (a + b) // 2\n",
            [[1, 2], [4, 6], [3, 8], [10, 11], [0, 0], [5, 9], [7, 8], [2, 2]]),
    _detail("share-percent", "rounding", "percent_of", "part, total", "returns part as a percentage of total (total > 0).",
            "The tests fix how the result is rounded.", "    return round(100 * part / total)\n",
            [[1, 3], [1, 2], [2, 3], [1, 8], [0, 5], [5, 5], [1, 6], [3, 7]]),
    _detail("tenths", "rounding", "one_decimal", "x", "returns the number x rounded.",
            "The tests fix the number of decimals.", "    return round(x, 1)\n",
            [[3.14159], [2.71828], [1.05], [0.333], [9.99], [5.0], [1.26], [7.777]]),
    # answer: how a yes/no or a comparison is written
    _detail("even-word", "answer", "even_word", "n", "tells whether the integer n is even.",
            "The tests fix how the answer is written.", "    return 'yes' if n % 2 == 0 else 'no'\n",
            [[4], [7], [0], [3], [10], [-2], [11], [8]]),
    _detail("compare-symbol", "answer", "compare", "a, b", "tells how the integers a and b compare.",
            "The tests fix how the answer is written.", "    return '<' if a < b else '>' if a > b else '='\n",
            [[1, 2], [5, 3], [4, 4], [-1, 0], [9, 1], [0, 0], [2, 10], [7, 6]]),
    _detail("sign-word", "answer", "sign_word", "n", "tells the sign of the integer n.",
            "The tests fix how the answer is written.",
            "    return 'positive' if n > 0 else 'negative' if n < 0 else 'zero'\n",
            [[5], [-3], [0], [1], [-1], [100], [-100], [7]]),
    _detail("vowel-check", "answer", "is_vowel", "c", "tells whether the lowercase letter c is a vowel.",
            "The tests fix how the answer is written.", "    return 'Y' if c in 'aeiou' else 'N'\n",
            [["a"], ["b"], ["e"], ["z"], ["o"], ["x"], ["u"], ["m"]]),
]

# More problems of these kinds, so that the self-repair demo (make demo-repair) has enough held-out problems to
# measure a few points: one statement per template, which leaves the same detail open, and several variants that
# fix it differently, so that the first failing public test is the only place where a variant's answer shows.
# (template, kind, name, args, task, detail, inputs, a naive first guess, {variant: the answer's expression})
_NAMES = [["Ann"], ["Bob"], ["Zoe"], ["Li"], ["Max"], ["Eve"], ["Sam"], ["Kim"]]
_SMALL = [[3], [10], [0], [7], [2], [99], [5], [42]]
_WORDS = [["python"], ["code"], ["ai"], ["fun"], ["rl"], ["test"], ["x"], ["news"]]
_PAIRS = [[1, 2], [0, 0], [-3, 4], [10, 20], [5, -5], [7, 7], [-1, -1], [100, 0]]
_LISTS = [[["red", "green", "blue"]], [["hello", "world"]], [["x"]], [["one", "two", "three"]], [["ab", "cd"]], [[]],
          [["q", "r"]], [["up", "down"]]]
_NUMS = [[[1, 2, 3]], [[10, 20]], [[5]], [[7, 8, 9, 10]], [[0, 0]], [[]], [[-1, 1]], [[4, 5, 6]]]
_TEXTS = [["hello World"], ["PyThon code"], ["make It so"], ["ok"], ["X y Z"], ["the END"], ["a"], ["Rl For CODE"]]
_SIGNED = [[5], [-3], [0], [1], [-1], [100], [-100], [7]]
_COMPARED = [[1, 2], [5, 3], [4, 4], [-1, 0], [9, 1], [0, 0], [2, 10], [7, 6]]
VARIANT_TEMPLATES = [
    ("hello", "wording", "hello", "name", "returns a greeting for the given name.", "The tests fix the exact wording.",
     _NAMES, "'Hello ' + name", {"hi": "f'Hi {name}'", "hey": "f'Hey, {name}.'", "welcome": "f'Welcome, {name}!'",
                                 "morning": "f'Good morning, {name}'", "dear": "f'Dear {name},'", "bang": "f'Hello {name}!'"}),
    ("bye", "wording", "bye", "name", "returns a goodbye message for the given name.", "The tests fix the exact wording.",
     _NAMES, "'Bye ' + name", {"see-you": "f'See you, {name}!'", "dot": "f'Bye, {name}.'", "farewell": "f'Farewell {name}'",
                               "later": "f'Later, {name}'", "night": "f'Good night, {name}!'"}),
    ("count-text", "wording", "count_text", "n", "returns a short text saying how many items there are.",
     "The tests fix the exact wording.", _SMALL, "str(n)",
     {"apples": "f'{n} apples'", "items": "f'items: {n}'", "total": "f'Total: {n}'", "pcs": "f'{n} pcs'", "hash": "f'#{n}'",
      "left": "f'{n} left'"}),
    ("money", "wording", "money", "n", "returns n whole units of money as text.", "The tests fix the exact format.",
     _SMALL, "str(n)", {"usd": "f'{n} USD'", "cents": "f'{n}.00'", "usd-first": "f'USD {n}'", "euros": "f'{n} euros'",
                        "eur": "f'EUR {n}'", "dollar": "f'{n}$'"}),
    ("tag", "wording", "tag", "word", "returns the word marked as a tag.", "The tests fix the exact format.", _WORDS,
     "word", {"at": "f'@{word}'", "angle": "f'<{word}>'", "star": "f'*{word}*'", "under": "f'_{word}_'",
              "colon": "f'{word}:'", "paren": "f'({word})'"}),
    ("coords", "wording", "coords", "x, y", "returns the point x, y as text.", "The tests fix the exact format.", _PAIRS,
     "f'{x} {y}'", {"square": "f'[{x}, {y}]'", "times": "f'{x}x{y}'", "angle": "f'<{x},{y}>'", "slash": "f'{x}/{y}'",
                    "named": "f'x={x} y={y}'", "semi": "f'({x};{y})'"}),
    ("join-with", "separator", "join_with", "words", "returns the words of the list joined into one string.",
     "The tests fix the separator.", _LISTS, "' '.join(words)",
     {"under": "'_'.join(words)", "comma": "', '.join(words)", "bar": "' | '.join(words)", "plus": "'+'.join(words)",
      "slash": "'/'.join(words)", "semi": "';'.join(words)"}),
    ("list-numbers", "separator", "list_numbers", "nums", "returns the integers of nums as one string.",
     "The tests fix the separator.", _NUMS, "' '.join(map(str, nums))",
     {"semi": "';'.join(map(str, nums))", "dash": "'-'.join(map(str, nums))", "plus": "' + '.join(map(str, nums))",
      "bar": "'|'.join(map(str, nums))", "comma": "', '.join(map(str, nums))", "colon": "':'.join(map(str, nums))"}),
    ("letters", "separator", "letters", "s", "returns the letters of the word s spread out.",
     "The tests fix what goes between the letters.", [["abc"], ["hi"], ["code"], ["x"], ["ok"], ["python"], ["ab"], ["zzz"]],
     "s", {"dash": "'-'.join(s)", "dot": "'.'.join(s)", "star": "'*'.join(s)", "comma": "', '.join(s)",
           "under": "'_'.join(s)", "bar": "'|'.join(s)"}),
    ("recase", "case", "recase", "s", "returns the text s in a fixed letter case.", "The tests fix the letter case.",
     _TEXTS, "s", {"upper": "s.upper()", "lower": "s.lower()", "title": "s.title()", "swap": "s.swapcase()",
                   "first": "s.capitalize()"}),
    ("even-answer", "answer", "even_answer", "n", "tells whether the integer n is even.",
     "The tests fix how the answer is written.", [[4], [7], [0], [3], [10], [-2], [11], [8]], "n % 2 == 0",
     {"yes": "'Yes' if n % 2 == 0 else 'No'", "even": "'even' if n % 2 == 0 else 'odd'",
      "y": "'Y' if n % 2 == 0 else 'N'", "true": "'true' if n % 2 == 0 else 'false'",
      "caps": "'EVEN' if n % 2 == 0 else 'ODD'", "one": "'1' if n % 2 == 0 else '0'"}),
    ("sign-text", "answer", "sign_text", "n", "tells the sign of the integer n.", "The tests fix how the answer is written.",
     _SIGNED, "(n > 0) - (n < 0)",
     {"symbol": "'+' if n > 0 else '-' if n < 0 else '0'", "short": "'pos' if n > 0 else 'neg' if n < 0 else 'zero'",
      "caps": "'POSITIVE' if n > 0 else 'NEGATIVE' if n < 0 else 'ZERO'",
      "plus": "'plus' if n > 0 else 'minus' if n < 0 else 'none'", "rel": "'>0' if n > 0 else '<0' if n < 0 else '=0'"}),
    ("order", "answer", "order", "a, b", "tells how the integers a and b compare.", "The tests fix how the answer is written.",
     _COMPARED, "a - b",
     {"words": "'less' if a < b else 'greater' if a > b else 'equal'", "codes": "'LT' if a < b else 'GT' if a > b else 'EQ'",
      "size": "'smaller' if a < b else 'bigger' if a > b else 'same'", "ops": "'<' if a < b else '>' if a > b else '=='",
      "terms": "'a<b' if a < b else 'a>b' if a > b else 'a=b'"}),
    ("index-of", "counting", "index_of", "nums, x", "returns the position of x in the list nums (x occurs once).",
     "The tests fix how positions are counted.",
     [[[4, 5, 6], 5], [[7, 8], 7], [[1, 2, 3, 4], 4], [[9], 9], [[3, 1, 2], 2], [[5, 6, 7, 8], 8], [[0, 1], 1], [[2, 4, 6], 6]],
     "nums.index(x)", {"from-end": "len(nums) - nums.index(x)", "negative": "nums.index(x) - len(nums)"}),
    ("halve", "rounding", "halve", "n", "returns half of the integer n.", "The tests fix how odd numbers are rounded.",
     [[7], [10], [3], [9], [4], [1], [15], [100]], "n / 2", {"up": "(n + 1) // 2"}),
]
REVEALED += [_detail(f"{template}-{variant}", kind, name, args, task, detail, f"    return {answer}\n", inputs)
             for template, kind, name, args, task, detail, inputs, _, answers in VARIANT_TEMPLATES
             for variant, answer in answers.items()]
DETAIL_KIND = {f"demo/{entry[0]}": kind for entry, kind in REVEALED}

# A plausible first attempt at each REVEALED problem that guesses the open detail wrong: it fails the first public
# test with a wrong answer (never an error, which would hide the expected output), so the feedback shows the detail.
GUESSES = {
    "greeting": "return 'Hello ' + name", "farewell": "return 'Goodbye ' + name", "item-count": "return str(n)",
    "price-tag": "return str(n) + ' dollars'", "percent-text": "return str(n) + ' percent'",
    "bracket-wrap": "return '(' + s + ')'", "hash-tag": "return word", "name-order": "return first + ' ' + last",
    "clock-time": "return f'{h}:{m}'", "point-text": "return f'{x},{y}'", "dash-join": "return ' '.join(words)",
    "comma-numbers": "return ' '.join(map(str, nums))", "spaced-letters": "return s",
    "path-parts": "return '.'.join(parts)", "repeat-joined": "return w * k", "pair-text": "return f'{a} {b}'",
    "loud-text": "return s", "quiet-text": "return s", "title-words": "return s.capitalize()",
    "name-initials": "return ''.join(w[0] for w in name.split())", "position-of": "return nums.index(x)",
    "nth-letter": "return s[n]", "count-down": "return list(range(n, -1, -1))", "up-to": "return list(range(n))",
    "half-of": "return n / 2", "mean-of-two": "return (a + b) / 2", "share-percent": "return part / total * 100",
    "tenths": "return round(x, 2)", "even-word": "return n % 2 == 0", "compare-symbol": "return a - b",
    "sign-word": "return (n > 0) - (n < 0)", "vowel-check": "return c in 'aeiou'",
}
GUESSES.update({f"{template}-{variant}": f"return {guess}" for template, _, _, _, _, _, _, guess, answers in VARIANT_TEMPLATES
                for variant in answers})

# Typical first attempts: pass the public tests, fail a hidden one.
WRONG = {
    "second-largest": "input()\nxs = sorted(map(int, input().split()))\nprint(xs[-2])\n",
    "palindrome-sentence": "s = input()\nprint('YES' if s == s[::-1] else 'NO')\n",
    "is-prime": "n = int(input())\nprint('YES' if all(n % d for d in range(2, n)) else 'NO')\n",
    "range-sums": "n, q = map(int, input().split())\na = list(map(int, input().split()))\nfor _ in range(q):\n"
                  "    l, r = map(int, input().split())\n    s = 0\n    for i in range(l - 1, r):\n        s += a[i]\n"
                  "    print(s)\n",
    "leap-year": "print('YES' if int(input()) % 4 == 0 else 'NO')\n",
    "max-subarray": "input()\nbest = cur = 0\nfor x in map(int, input().split()):\n    cur = max(0, cur + x)\n"
                    "    best = max(best, cur)\nprint(best)\n",
    "merge-intervals": "def merge(intervals):\n    out = []\n    for a, b in intervals:\n        if out and a < out[-1][1]:\n"
                       "            out[-1][1] = max(out[-1][1], b)\n        else:\n            out.append([a, b])\n    return out\n",
    "power-of-two": "def is_power_of_two(n):\n    return n & (n - 1) == 0\n",
}


# ----------------------------------------------------------------------------- warm-up problems (make demo-repair)
# Random variants of the VARIANT_TEMPLATES for the repair warm-up's demonstrations (cobalt_min/warmup.py): the same
# statements, with the open detail drawn at random (the words and signs around a value, a separator, the words of an
# answer), so that a model fine-tuned on them learns to take the detail from the feedback rather than to remember
# answers. A draw whose first expected output is that of a bundled problem of the same function is drawn again, so
# the warm-up sees none of the family's training, validation or held-out problems.
_OPENERS = ["Hi", "Hello", "Hey", "Dear", "Yo", "Welcome", "Bye", "Total", "Item", "Price", "Tag", "No", "Ciao", "Sir",
            "Mr", "Ms", "Team", "Go", "Dr", "Prof", "User", "Player", "Count", "Sum", "Value", "Got", "Have", "Need"]
_SIGNS = [", ", " ", ": ", "-", "#", "@", "(", "<", "[", "*", "_", "~", "=", " - ", "> ", "$"]
_CLOSERS = ["!", ".", "", "?", ")", ">", "]", "*", " items", " left", " USD", "!!", ";", " pts", " kg", "%", "...", " :)"]
_SEPARATORS = [",", ";", "-", "_", "|", "/", "+", ":", ", ", " | ", " - ", "::", "~", ".", " / ", " + ", "#", "*"]
_ANSWERS = ["yes", "no", "Yes", "No", "Y", "N", "even", "odd", "true", "false", "ok", "nope", "T", "F", "up", "down",
            "pos", "neg", "zero", "plus", "minus", "none", "less", "more", "same", "LT", "GT", "EQ", "lo", "hi", "eq",
            "small", "big", "low", "high", "A", "B", "C", "on", "off"]
_CASES = ["s.upper()", "s.lower()", "s.title()", "s.swapcase()", "s.capitalize()"]


def _random_answer(template: str, rng: random.Random) -> str | None:
    """The answer's expression of a random variant of `template` (None: this draw has no open detail)."""
    if template in ("hello", "bye", "tag", "count-text", "money"):
        arg = {"hello": "name", "bye": "name", "tag": "word", "count-text": "n", "money": "n"}[template]
        k = rng.random()
        opener = rng.choice(_OPENERS) + rng.choice(_SIGNS) if k < 0.6 else rng.choice(_SIGNS).strip() if k < 0.8 else ""
        closer = rng.choice(_CLOSERS)
        return "f" + repr(opener + "{" + arg + "}" + closer) if opener or closer else None
    if template == "coords":
        return "f" + repr(rng.choice(["", "(", "[", "<", "{{", "P"]) + "{x}" + rng.choice(_SEPARATORS) + "{y}"
                          + rng.choice(["", ")", "]", ">", "}}", "!"]))
    if template in ("join-with", "letters", "list-numbers"):
        items = {"join-with": "words", "letters": "s", "list-numbers": "map(str, nums)"}[template]
        return f"{rng.choice(_SEPARATORS)!r}.join({items})"
    if template == "recase":
        return rng.choice(_CASES)
    words = rng.sample(_ANSWERS, 3)
    if template == "even-answer":
        return f"{words[0]!r} if n % 2 == 0 else {words[1]!r}"
    if template == "sign-text":
        return f"{words[0]!r} if n > 0 else {words[1]!r} if n < 0 else {words[2]!r}"
    if template == "order":
        return f"{words[0]!r} if a < b else {words[1]!r} if a > b else {words[2]!r}"
    return None  # (index-of, halve: too few ways to count or round to draw from)


def warmup_problems(count: int, seed: int = 0) -> list:
    """`count` random variants of the VARIANT_TEMPLATES (ids warmup/TEMPLATE-K), each with its reference solution
    and 8 tests (4 public), none equal to a bundled problem; their wrong first guesses: guess_of(id)."""
    from cobalt_min.problems import Problem, split_tests
    from cobalt_min.sandbox import Limits, Sandbox
    rng = random.Random(seed)
    first_outputs = {}  # function: the first expected outputs of the bundled family's problems (then of those drawn)
    templates = {t[0]: t for t in VARIANT_TEMPLATES}
    out = []
    with Sandbox(Limits(timeout_s=10, total_timeout_s=300)) as sb:
        for (pid, _, _, solution, inputs, name, _), _ in REVEALED:
            first_outputs.setdefault(name, set()).add(repr(sb.outputs(solution, inputs[:1], name)[0]))
        while len(out) < count:
            template, _, name, args, task, detail, inputs, guess, _ = templates[rng.choice(sorted(templates))]
            answer = _random_answer(template, rng)
            if answer is None:
                continue
            solution = f"def {name}({args}):\n    return {answer}\n"
            outputs = sb.outputs(solution, inputs, name)
            guessed = sb.outputs(f"def {name}({args}):\n    return {guess}\n", inputs[:1], name)[0]
            if repr(outputs[0]) in first_outputs[name] or guessed == outputs[0] or len({repr(o) for o in outputs}) < 2:
                continue  # a bundled problem's answer, a right guess, or nothing to tell the inputs apart
            first_outputs[name].add(repr(outputs[0]))  # (and no two warm-up problems alike)
            public, hidden = split_tests({"inputs": inputs, "outputs": outputs, "fn_name": name}, 4)
            statement = f"{template.replace('-', ' ').title()}\n\nWrite a function {name}({args}) that {task} {detail}"
            out.append(Problem(id=f"warmup/{template}-{len(out) + 1}", question=statement, public_tests=public,
                               hidden_tests=hidden, starter_code=f"def {name}({args}):\n", fn_name=name,
                               difficulty="repair warm-up", source="cobalt-min demo", solutions=[solution]))
    return out


# ----------------------------------------------------------------------------- very easy variants (make demo-hacking)
# Random very easy call-based problems: a template with a constant drawn at random (a number, a letter or a word the
# statement names), and random test inputs. The reward-hacking demo needs many problems that a 135M model often
# solves at once, so that wrong feedback meets right programs; the bundled "very easy function" family has 46.
# Each template: (name, arguments, the task with {k} (the constant as the statement shows it), the solution's
# expression with {k} (the constant as Python writes it), the kind of constant, the kind of input).
EASY_TEMPLATES = [
    ("add_k", "n", "returns n plus {k}.", "n + {k}", "number", "int"),
    ("subtract_k", "n", "returns n minus {k}.", "n - {k}", "number", "int"),
    ("times_k", "n", "returns n multiplied by {k}.", "n * {k}", "number", "int"),
    ("remainder_k", "n", "returns the remainder of n divided by {k}, for an integer n >= 0.", "n % {k}", "divisor",
     "natural"),
    ("divisible_by_k", "n", "returns True if the integer n is divisible by {k}, else False.", "n % {k} == 0", "divisor",
     "int"),
    ("greater_than_k", "n", "returns True if the integer n is greater than {k}, else False.", "n > {k}", "number", "int"),
    ("at_most_k", "n", "returns the smaller of the integer n and {k}.", "min(n, {k})", "number", "int"),
    ("at_least_k", "n", "returns the larger of the integer n and {k}.", "max(n, {k})", "number", "int"),
    ("count_above_k", "nums", "returns how many integers in the list nums are greater than {k}.",
     "sum(1 for x in nums if x > {k})", "number", "list"),
    ("add_k_each", "nums", "returns a new list with {k} added to every integer of nums.", "[x + {k} for x in nums]",
     "number", "list"),
    ("times_k_each", "nums", "returns a new list with every integer of nums multiplied by {k}.",
     "[x * {k} for x in nums]", "number", "list"),
    ("keep_above_k", "nums", "returns the integers of nums that are greater than {k}, in their order.",
     "[x for x in nums if x > {k}]", "number", "list"),
    ("count_letter_k", "s", "returns how many times the letter {k} occurs in the string s.", "s.count({k})", "letter",
     "text"),
    ("starts_with_k", "s", "returns True if the string s starts with the letter {k}, else False.", "s.startswith({k})",
     "letter", "text"),
    ("ends_with_k", "s", "returns True if the string s ends with the letter {k}, else False.", "s.endswith({k})",
     "letter", "text"),
    ("add_suffix_k", "s", "returns the string s followed by {k}.", "s + {k}", "word", "text"),
    ("add_prefix_k", "s", "returns {k} followed by the string s.", "{k} + s", "word", "text"),
    ("first_k_chars", "s", "returns the first {k} characters of the string s (all of s when it is shorter).", "s[:{k}]",
     "small", "text"),
    ("repeat_k", "s", "returns the string s repeated {k} times.", "s * {k}", "small", "text"),
    ("last_k_items", "nums", "returns the last {k} elements of the list nums (all of nums when it is shorter).",
     "nums[-{k}:]", "small", "list"),
]


def _easy_constant(kind: str, rng: random.Random):
    """(the constant as the statement shows it, as Python writes it)."""
    if kind == "number":
        k = rng.choice([n for n in range(-9, 21) if n not in (0, 1)])
    elif kind == "divisor":
        k = rng.randint(2, 9)
    elif kind == "small":
        k = rng.randint(2, 5)
    elif kind == "letter":
        k = rng.choice("abcdefghijklmnopqrstuvwxyz")
        return f"'{k}'", repr(k)
    else:  # word
        k = rng.choice(["ok", "yes", "abc", "end", "go", "top", "xyz", "cat", "sun", "red", "box", "map", "pro", "max"])
        return f"'{k}'", repr(k)
    return str(k), str(k)


def _easy_input(kind: str, letter: str, rng: random.Random) -> list:
    """One test's arguments: an integer, a natural number, a list of integers, or a short text (with `letter` in it
    now and then)."""
    if kind == "int":
        return [rng.randint(-30, 30)]
    if kind == "natural":
        return [rng.randint(0, 60)]
    if kind == "list":
        return [[rng.randint(-10, 25) for _ in range(rng.randint(0, 6))]]
    alphabet = "abcdefghijklmnopqrstuvwxyz" if not letter else letter * 4 + "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 7)))]


def easy_variants(count: int, seed: int = 0) -> list:
    """`count` random very easy problems (ids easy/NAME-K, difficulty "very easy variant"): EASY_TEMPLATES with a
    constant and 8 test inputs drawn at random, the expected outputs those of the reference solution, at least 2
    distinct outputs among the 4 public tests (so that perturbing them swaps two) and among the 4 hidden ones, and no
    two problems with the same template and constant."""
    from cobalt_min.problems import Problem, split_tests
    from cobalt_min.sandbox import Limits, Sandbox
    rng = random.Random(seed)
    seen, out, draws = set(), [], 0
    with Sandbox(Limits(timeout_s=10, total_timeout_s=300)) as sb:
        while len(out) < count:
            draws += 1
            if draws > 100 * count + 10_000:
                raise ValueError(f"easy_variants: only {len(out)} distinct problems found in {draws - 1} draws "
                                 f"(asked for {count}; the templates hold about 400)")
            name, args, task, expression, constant, input_kind = rng.choice(EASY_TEMPLATES)
            shown, code = _easy_constant(constant, rng)
            if (name, code) in seen:
                continue
            letter = code.strip("'") if constant == "letter" else ""
            inputs = []
            while len(inputs) < 8:
                drawn = _easy_input(input_kind, letter, rng)
                if drawn not in inputs:
                    inputs.append(drawn)
            solution = f"def {name}({args}):\n    return {expression.format(k=code)}\n"
            outputs = sb.outputs(solution, inputs, name)
            if len({repr(o) for o in outputs[:4]}) < 2 or len({repr(o) for o in outputs[4:]}) < 2:
                continue  # one answer for all public or all hidden tests: draw again (inputs and all)
            seen.add((name, code))
            public, hidden = split_tests({"inputs": inputs, "outputs": outputs, "fn_name": name}, 4)
            title = name.replace("_k", "").replace("_", " ").title()
            out.append(Problem(id=f"easy/{name.replace('_', '-')}-{len(out) + 1}",
                               question=f"{title}\n\nWrite a function {name}({args}) that {task.format(k=shown)}",
                               public_tests=public, hidden_tests=hidden, starter_code=f"def {name}({args}):\n",
                               fn_name=name, difficulty="very easy variant", source="cobalt-min demo",
                               solutions=[solution]))
    return out


def guess_of(problem_id: str) -> str | None:
    """The body of a wrong first guess of a repair problem (demo/ID: GUESSES; warmup/TEMPLATE-K: the template's),
    or None."""
    if problem_id.startswith("warmup/"):
        template = problem_id.removeprefix("warmup/").rsplit("-", 1)[0]
        return next((f"return {t[7]}" for t in VARIANT_TEMPLATES if t[0] == template), None)
    return GUESSES.get(problem_id.removeprefix("demo/"))


def build(path: Path = OUT) -> list:
    """Run every reference solution on its inputs (in the sandbox) and write the problem set."""
    from cobalt_min.problems import Problem, save_problems, split_tests
    out = []
    for pid, difficulty, statement, solution, inputs, *call in PROBLEMS + FUNCTIONS + [e for e, _ in REVEALED]:
        fn_name, starter = call if call else (None, "")
        tests = {"inputs": inputs, "outputs": reference_outputs(solution, inputs, fn_name)}
        if fn_name:
            tests["fn_name"] = fn_name
        public, hidden = split_tests(tests, 4)
        out.append(Problem(id=f"demo/{pid}", question=statement, starter_code=starter, fn_name=fn_name,
                           public_tests=public, hidden_tests=hidden, difficulty=difficulty,
                           source="cobalt-min demo", solutions=[solution]))
    save_problems(out, path)
    return out


def reference_outputs(solution: str, inputs: list, fn_name: str | None) -> list:
    """Expected outputs = what the reference solution prints (stdin) or returns (call-based)."""
    from cobalt_min.sandbox import Limits, Sandbox
    with Sandbox(Limits(timeout_s=10, total_timeout_s=300)) as sb:
        return sb.outputs(solution, inputs, fn_name)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warmup-problems", type=int, default=None, metavar="N",
                    help="instead: write N random warm-up problems (warmup_problems) to --out")
    ap.add_argument("--easy-variants", type=int, default=None, metavar="N",
                    help="instead: write N random very easy problems (easy_variants) to --out")
    ap.add_argument("--seed", type=int, default=0, help="the warm-up problems' or the variants' draw")
    ap.add_argument("--out", default=None, help="where the drawn problems go (JSONL)")
    args = ap.parse_args()
    if args.easy_variants is not None:
        if not args.out or args.easy_variants < 1:
            raise SystemExit("error: --easy-variants N needs N >= 1 and --out FILE")
        from cobalt_min.problems import save_problems
        save_problems(easy_variants(args.easy_variants, args.seed), args.out)
        print(f"wrote {args.easy_variants} very easy variants to {args.out}")
    elif args.warmup_problems is None:
        probs = build()
        print(f"wrote {len(probs)} problems to {OUT}")
    elif not args.out or args.warmup_problems < 1:
        raise SystemExit("error: --warmup-problems N needs N >= 1 and --out FILE")
    else:
        from cobalt_min.problems import save_problems
        probs = warmup_problems(args.warmup_problems, args.seed)
        save_problems(probs, args.out)
        print(f"wrote {len(probs)} warm-up problems to {args.out}")
