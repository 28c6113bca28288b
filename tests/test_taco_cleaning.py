"""The paper's TACO cleaning (taco_cleaning.py): each rule on problems built for it, executed in the sandbox, and
its command (python -m cobalt_min.taco_cleaning; the old `problems clean` names it)."""
import json
import subprocess
import sys
from pathlib import Path

from cobalt_min import problems as P
from cobalt_min.taco_cleaning import clean_taco
from test_problems import taco_row

ROOT = str(Path(__file__).resolve().parent.parent)


def test_taco_cleaning_rules():
    good = "a, b = map(int, input().split())\nprint(a + b)\n"
    wrong = "print(0)\n"
    long_q = "Read two integers a and b and print their sum a + b. " * 5

    def prob(pid, n_tests=10, question=long_q, solutions=(good,)):
        tests = {"inputs": [f"{k} {k}\n" + " " * (k % 7) for k in range(n_tests)],
                 "outputs": [f"{2 * k}\n" for k in range(n_tests)]}
        pub, hid = P.split_tests(tests, 4)
        return P.Problem(pid, question, pub, hid, solutions=list(solutions))

    many = prob("many", n_tests=30)
    inputs = many.all_tests()["inputs"]
    longest_first = sorted(range(len(inputs)), key=lambda i: len(inputs[i]), reverse=True)  # (stable, as theirs)
    probs = [prob("ok"), prob("short", question="Sum them."), prob("img", question=long_q + " see image below"),
             prob("few", n_tests=7), many, prob("late-right", solutions=(wrong, wrong, good)),
             prob("none-right", solutions=(wrong,)), prob("no-solution", solutions=())]
    kept, dropped = clean_taco(probs, seed=1, progress=False)
    assert sorted(p.id for p in kept) == ["late-right", "many", "ok"]
    assert dropped == {"question under 100 alphanumeric characters": 1, "question with an image": 1,
                       "fewer than 8 tests": 1, "no reference solution passes all tests": 1,
                       "no reference solution": 1}
    m = next(p for p in kept if p.id == "many")
    kept_inputs = m.all_tests()["inputs"]
    assert len(m.public_tests["inputs"]) == 4 and len(kept_inputs) == 20
    # the authors' selection and order: the 5 shortest, then the 15 longest, longest first; first 4 public
    assert kept_inputs == [inputs[i] for i in longest_first[-5:] + longest_first[:15]]
    ok = next(p for p in kept if p.id == "ok")
    assert ok.all_tests() == next(p for p in probs if p.id == "ok").all_tests()  # source order, no shuffle
    assert next(p for p in kept if p.id == "late-right").solutions[0] == good  # the verified one first
    again, _ = clean_taco(probs, seed=1, progress=False)
    assert [p.to_dict() for p in again] == [p.to_dict() for p in kept]  # seeded: deterministic


def test_the_cleaning_command_writes_the_kept_problems_and_a_dev_split(tmp_path):
    rows = [taco_row(i) for i in range(4)] + [taco_row(4, question="Too short.")]
    source = tmp_path / "taco.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    proc = subprocess.run([sys.executable, "-m", "cobalt_min.taco_cleaning", "--input", str(source), "--out", str(out),
                           "--dev-out", str(dev), "--dev-size", "1", "--workers", "1"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "5 problems in, 4 kept" in proc.stderr and "dropped 1: question under 100 alphanumeric" in proc.stderr
    train, held = P.load_problems(out, verbose=False), P.load_problems(dev, verbose=False)
    assert len(train) == 3 and len(held) == 1 and not {p.id for p in train} & {p.id for p in held}
    # the command's old place refuses, naming the new one with the same flags
    proc = subprocess.run([sys.executable, "-m", "cobalt_min.problems", "clean", "--input", str(source), "--out", "x"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and "python -m cobalt_min.taco_cleaning --input" in proc.stderr
