"""Infrastructure failures are not wrong answers: a program the sandbox fails on (twice) gets no verdict
(sandbox.InfraFailure), is counted apart (`infra_errors`) and left out of rewards and Pass@1, in evaluation,
collection and training; a sandbox that fails on many programs is broken and stops the run. The faults are
injected at the sandbox's boundary (a Sandbox.run that raises SandboxError, as a runner that dies does);
everything else runs for real."""
import json
import math
import os
import subprocess
import sys

import pytest

from cobalt_min import sandbox
from cobalt_min.grpo import group_advantages
from cobalt_min.problems import load_problems
from cobalt_min.rewards import training_reward
from cobalt_min.sandbox import InfraFailure, SandboxError, pass_rate, run_batch
from test_rollout import ReplayEngine, code
from test_train import ROOT, metrics, write_contexts

ADD = "a, b = map(int, input().split())\nprint(a + b)"
TESTS = {"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]}


@pytest.fixture
def flaky_sandbox(monkeypatch):
    """Sandbox.run fails on every program holding the marker `#infra` (on both tries)."""
    real = sandbox.Sandbox.run

    def run(self, program, tests):
        if "#infra" in program:
            raise SandboxError("the sandbox runner died (injected)")
        return real(self, program, tests)
    monkeypatch.setattr(sandbox.Sandbox, "run", run)


def test_run_batch_keeps_an_infra_failure_apart_and_stops_when_the_sandbox_is_broken(flaky_sandbox):
    jobs = [(ADD, TESTS), (ADD + "\n#infra", TESTS), ("print(0)", TESTS), (ADD, TESTS)]
    with pytest.raises(SandboxError, match="injected"):  # the default: a failure raises
        run_batch(jobs, workers=2)
    results = run_batch(jobs, workers=2, keep_infra_failures=True)
    assert isinstance(results[1], InfraFailure) and "injected" in results[1].error
    assert [pass_rate(results[i]) for i in (0, 2, 3)] == [1.0, 0.0, 1.0]  # the others judged as usual
    assert math.isnan(pass_rate(results[1]))  # no verdict: never a 0
    broken = [(ADD + "\n#infra", TESTS)] * 3 + [(ADD, TESTS)]
    with pytest.raises(SandboxError, match="failed on 3 of 4 programs, each twice: it is broken"):
        run_batch(broken, workers=2, keep_infra_failures=True)


def test_no_verdict_means_no_reward_and_no_advantage():
    import torch
    assert math.isnan(training_reward("```python\nx\n```", math.nan, 0.0, count_tokens=len, thinking=False))
    rewards = torch.tensor([[1.0, 0.0, math.nan, 1.0], [0.5, 0.5, 0.5, 0.5]])
    adv = group_advantages(rewards, valid=rewards.isfinite())
    assert adv[0, 2] == 0 and torch.allclose(adv[0, [0, 1, 3]], group_advantages(rewards[:1, [0, 1, 3]])[0])
    assert torch.equal(adv[1], torch.zeros(4))


def test_evaluate_leaves_a_conversation_the_sandbox_failed_on_out_of_pass_at_1(flaky_sandbox, monkeypatch, tmp_path):
    sys.path.insert(0, ROOT)
    import evaluate
    probs = [p for p in load_problems("demo", verbose=False) if p.id in ("demo/sum-two", "demo/reverse-string")]
    rev = "print(input().strip()[::-1])"
    script = {"demo/sum-two": {"samples": [[code(ADD, 0)] * 2, [code(ADD + "\n#infra", 1), code(ADD, 1)]]},
              "demo/reverse-string": {"samples": [[code(rev, 0)] * 2, [code("print(input())", 1)] * 2]}}
    for p in probs:
        script[p.id]["question"] = p.question
    from cobalt_min import problem_shards
    monkeypatch.setattr(problem_shards, "make_script_engine", lambda args, ranks: ReplayEngine(script))
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"id": p.id, "question": p.question, "public_tests": p.public_tests,
                                            "hidden_tests": p.hidden_tests}) + "\n" for p in probs))
    evaluate.main(["--model", str(tmp_path), "--problems", str(problems), "--turns", "2", "--samples", "2",
                   "--out", str(tmp_path / "eval")])
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["infra_errors"] == 1 and summary["problems_without_verdict"] == 0
    # sum-two: its one scored conversation passes; reverse-string: 1 of 2. Not (0 + 1) / 2 for sum-two.
    assert summary["pass@1"] == pytest.approx([75.0, 75.0])
    [record] = [json.loads(x) for x in (tmp_path / "eval" / "trajectories.jsonl").read_text().splitlines()
                if "sum-two" in x]
    assert len(record["samples"]) == 1 and len(record["infra_failed"]) == 1
    lost = record["infra_failed"][0]
    assert "injected" in lost["infra_error"] and lost["turns"][0]["pass_rate"] is None


@pytest.mark.parametrize("method", ["cobalt", "grpo-mt"])
def test_training_counts_infra_errors_per_step_and_leaves_them_out(tiny_model_dir, tmp_path, method):
    data = ["--contexts", str(write_contexts(tmp_path / "ctx.jsonl", short=True))] if method == "cobalt" else \
        ["--problems", "demo", "--limit", "2", "--turns", "2"]
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "inject_fault.py"), os.path.join(ROOT, "train.py"),
                           "--model", tiny_model_dir, "--method", method, *data, "--out", str(tmp_path / "run"),
                           "--batch-size", "2", "--group-size", "4", "--max-new-tokens", "8", "--max-steps", "2",
                           "--mini-batches", "1", "--lr", "1e-3", "--engine", "hf", "--workers", "2"],
                          cwd=ROOT, env=dict(os.environ, FAULT="sandbox"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = metrics(tmp_path / "run")
    # one program without a verdict per sandbox batch: per step, one (COBALT) or one per turn (GRPO-MT; the
    # conversation it is in is lost, and with it its problem's group: the other problem's is trained on)
    assert [m["infra_errors"] for m in rows] == ([1, 1] if method == "cobalt" else [2, 2])
    assert all(math.isfinite(m["reward_mean"]) and math.isfinite(m["pass_rate"]) for m in rows)  # nan left out
    assert all(math.isfinite(m["loss"]) and m["skipped_nonfinite_steps"] == 0 for m in rows)  # advantage 0, not nan


def test_collect_leaves_trajectories_the_sandbox_failed_on_out_of_the_contexts(tiny_model_dir, tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "inject_fault.py"), os.path.join(ROOT, "collect.py"),
                           "--model", tiny_model_dir, "--problems", "demo", "--limit", "2", "--trajectories", "2",
                           "--turns", "2", "--max-new-tokens", "8", "--engine", "hf", "--batch-problems", "1",
                           "--workers", "2", "--out", str(tmp_path)],
                          cwd=ROOT, env=dict(os.environ, FAULT="sandbox"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # each block's first trajectory loses its program at both turns: one trajectory per problem left out
    assert "trajectories left out (the sandbox failed on them): 2" in proc.stdout
    assert json.loads((tmp_path / "stats.json").read_text())["infra_errors"] == 2
    raw = [json.loads(x) for x in (tmp_path / "raw.jsonl").read_text().splitlines()]
    assert [(len(r["samples"]), len(r["infra_failed"])) for r in raw] == [(1, 1), (1, 1)]
    contexts = [json.loads(x) for x in (tmp_path / "contexts.jsonl").read_text().splitlines()]
    assert all(c["prev_best"] is not None for c in contexts)
