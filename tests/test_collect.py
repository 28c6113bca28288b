"""collect.py end to end (paper §4): trajectories and contexts written, a killed run resumed, --process-only,
and its errors."""
import json
import os
import signal
import subprocess
import sys
import time

from conftest import start_script, tensorboard_scalars

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def collect(out, model, *extra):
    return start_script("collect.py", "--model", model, "--problems", "demo", "--trajectories", 2, "--turns", 2,
                        "--max-new-tokens", 16, "--engine", "hf", "--batch-problems", 1, "--out", out, *extra)


def test_collect_end_to_end_resume_and_process_only(tiny_model_dir, tmp_path):
    killed = collect(tmp_path, tiny_model_dir, "--limit", "3")
    raw = tmp_path / "raw.jsonl"
    deadline = time.time() + 200
    while time.time() < deadline and not (raw.exists() and raw.read_text().count("\n") >= 1):
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    with open(raw, "a") as f:
        f.write('{"problem_id": "demo/half-writ')  # what a kill in the middle of a write leaves
    proc = collect(tmp_path, tiny_model_dir, "--limit", "3", "--resume")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    records = [json.loads(x) for x in raw.read_text().splitlines()]
    assert sorted(r["problem_id"] for r in records) == sorted({r["problem_id"] for r in records})  # no duplicates
    assert len(records) == 3 and all(len(r["samples"]) == 2 for r in records)
    assert all(len(s["turns"]) == 2 for r in records for s in r["samples"])
    assert "problems seen: 3" in out and (tmp_path / "contexts.jsonl").exists()
    contexts = [json.loads(x) for x in (tmp_path / "contexts.jsonl").read_text().splitlines()]
    assert all({"problem_id", "messages", "prev_best", "turn", "tests"} <= c.keys() for c in contexts)
    # --process-only, with a budget so small that only first-turn contexts fit.
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "collect.py"), "--process-only", "--out", str(tmp_path),
                           "--tokenizer", tiny_model_dir, "--prompt-budget", "10", "--log-with", "tensorboard"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert set(stats["contexts_per_turn"]) <= {"0"}
    logged = tensorboard_scalars(tmp_path)
    assert logged["collect/contexts"] == {0: stats["contexts"], 1: 0}
    assert set(logged["collect/reference_pass@1"]) == {0, 1}


def test_collect_errors(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "collect.py"), "--process-only", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode != 0 and "no raw trajectories" in proc.stderr
    (tmp_path / "raw.jsonl").write_text('{"problem_id": "a"}\nnot json\n{"problem_id": "b"}\n')
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "collect.py"), "--process-only", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode != 0 and "raw.jsonl line 2 is not valid JSON" in proc.stderr
    (tmp_path / "empty-model").mkdir()  # a folder with no model in it (a missing one is refused at parse time)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "collect.py"), "--model", str(tmp_path / "empty-model"),
                           "--problems", "demo", "--out", str(tmp_path / "o"), "--engine", "hf"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode != 0 and "could not load model" in proc.stderr and "is a folder with no model in it" in proc.stderr
