"""The multi-turn loop (rollout.rollout, the MDP of paper §1) with scripted responses: exact turn logic,
feedback order and the metrics of its records; real generation with a tiny model; thinking models scored
on the answer kept in the conversation. (Prompts: test_prompts.py; evaluate.py: test_evaluate.py.)"""
import pytest

from cobalt_min import graders
from cobalt_min import prompts as PR
from cobalt_min.generation import Completion
from cobalt_min.metrics import format_table, summarize
from cobalt_min.problems import load_problems
from cobalt_min.rollout import rollout


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
    # reverse-string: s0 always right, s1 never (it passes the palindromes only): the records test_metrics.py's
    # hand-computed summary starts from
    r0, r1 = by_id["demo/reverse-string"]
    assert [t["hidden_pass_rate"] for t in r0["turns"]] == [1.0] * 3
    assert [t["hidden_pass_rate"] for t in r1["turns"]] == [0.5] * 3
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


# ----------------------------------------------------------------------------- real generation


def test_rollout_with_a_tiny_transformers_model(tiny_model_dir):
    # ... and the time of each turn: sampling (the engine's prompt tokens run and reused: turn 1 reuses turn 0's
    # conversation), the sandbox, in all and per turn (what evaluate.py prints at its end)
    from cobalt_min.generation import HFEngine
    from cobalt_min.rollout import time_lines
    probs = load_problems("demo", limit=2, verbose=False)
    engine = HFEngine(tiny_model_dir)
    trajs, timings = rollout(probs, engine, samples=2, feedback_turns=1, max_new_tokens=16, temperature=1.0,
                             progress=False, keep_tokens=True)
    for per_problem in trajs:
        for t in per_problem:
            assert len(t["turns"]) == 2
            assert all(isinstance(x["response"], str) for x in t["turns"])
            assert t["messages"][-1]["role"] == "user"  # feedback after the last program too
    assert timings["generate_s"] == timings["turn0.generate_s"] + timings["turn1.generate_s"]
    assert timings["turn1.reused_tokens"] > timings["turn1.prefill_tokens"] > 0
    for turn in (0, 1):  # a decode step runs each live row's last token: all its tokens but the last
        sampled = [len(t["turns"][turn]["token_ids"]) for per_problem in trajs for t in per_problem]
        assert timings[f"turn{turn}.decode_tokens"] == sum(sampled) - len(sampled)
    lines = time_lines(timings)
    assert len(lines) == 2 and lines[1].startswith("  turn 1: sampling") and "reused" in lines[1]


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


def test_reuse_verdicts_runs_each_program_once_and_changes_no_record(monkeypatch):
    """reuse_verdicts: a resubmitted program (and another sample's identical one) is not run again; for
    deterministic programs every record is the one running them again gives."""
    import cobalt_min.rollout as RO
    probs = [p for p in load_problems("demo", verbose=False) if p.id in ("demo/sum-two", "demo/reverse-string")]
    add_ok, add_bad = "a, b = map(int, input().split())\nprint(a + b)", "a, b = map(int, input().split())\nprint(a - b)"
    same = "Here (#sample={}):\n```python\nprint(input().strip()[::-1])\n```"  # the same program in both samples
    script = {probs[0].id: {"question": probs[0].question, "samples": [[code(add_bad, 0), code(add_ok, 0), code(add_ok, 0)],
                                                                        [code(add_ok, 1)] * 3]},
              probs[1].id: {"question": probs[1].question, "samples": [[same.format(0)] * 3, [same.format(1)] * 3]}}
    run = RO.run_programs
    ran = []
    monkeypatch.setattr(RO, "run_programs", lambda programs, tests, **kw: ran.append(len(programs)) or run(programs, tests, **kw))
    plain, _ = rollout(probs, ReplayEngine(script), samples=2, feedback_turns=2, progress=False)
    assert ran == [4, 4, 4]
    ran.clear()
    reused, _ = rollout(probs, ReplayEngine(script), samples=2, feedback_turns=2, progress=False, reuse_verdicts=True)
    # turn 0: add_bad, add_ok #1, `same` once; turn 1: add_ok #0 (new); turn 2: nothing new
    assert ran == [3, 1, 0]
    assert reused == plain
    # a verdict is kept for the rollout that met it, not carried to the next one
    ran.clear()
    rollout(probs, ReplayEngine(script), samples=2, feedback_turns=0, progress=False, reuse_verdicts=True)
    assert ran == [3]
