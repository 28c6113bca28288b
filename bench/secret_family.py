"""The "secret value" probe of the self-repair issue (bench/RESULTS.md, "Self-repair at 135M"): 12 call-based
problems whose only fix is a literal that the first failing public test shows (`def fruit(): return "mango"`,
the statement saying only that the tests fix the value). A model that copies the expected output from the
feedback repairs its program at turn 1; one that does not, never.

    python bench/secret_family.py /tmp/secret.jsonl
    python evaluate.py --model demo_out/smollm2 --problems /tmp/secret.jsonl --turns 3 --samples 4 \
        --max-new-tokens 128 --stop-after-code --engine hf --batch-problems 12 --out /tmp/eval_secret
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from cobalt_min.problems import Problem, save_problems, split_tests  # noqa: E402

SECRETS = [("secret_word", "the secret word", "cobalt"), ("lucky_number", "the lucky number", 17),
           ("favorite_color", "the favourite colour", "teal"), ("magic_number", "the magic number", 73),
           ("password", "the password", "swordfish"), ("planet", "the chosen planet", "Neptune"),
           ("fruit", "the fruit of the day", "mango"), ("code_name", "the code name", "falcon"),
           ("answer_number", "the answer", 1234), ("greeting_word", "the greeting word", "ahoy"),
           ("animal", "the team's animal", "otter"), ("city", "the meeting city", "Oslo")]


def secret_problems() -> list:
    """One problem per secret: 8 identical calls without arguments (4 public, 4 hidden), all expecting it."""
    out = []
    for name, what, value in SECRETS:
        public, hidden = split_tests({"inputs": [[] for _ in range(8)], "outputs": [value] * 8, "fn_name": name}, 4)
        statement = (f"{name.replace('_', ' ').title()}\n\nWrite a function {name}() that returns {what}. "
                     "The tests fix the exact value.")
        out.append(Problem(id=f"secret/{name}", question=statement, starter_code=f"def {name}():\n", fn_name=name,
                           public_tests=public, hidden_tests=hidden, difficulty="secret value",
                           source="bench/secret_family.py", solutions=[f"def {name}():\n    return {value!r}\n"]))
    return out


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the problems file to write (our JSONL)")
    out = ap.parse_args().out
    save_problems(secret_problems(), out)
    print(f"wrote {len(SECRETS)} problems to {out}")
