"""Bad input, script by script: each row is a mistake a new user makes and what the script must answer (a
non-zero exit and one line naming the flag or file and what is wrong), before any model loads. Scripts
are called in this process (their main), so the whole table takes seconds."""
import importlib
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TRAIN = ["--model", "m", "--contexts", "c.jsonl", "--out", "o"]
EVAL = ["--model", "m", "--problems", "demo", "--out", "o"]
COLLECT = ["--model", "m", "--problems", "demo", "--out", "o"]

# (script, arguments, message fragment). The argument under test comes last, so it overrides the defaults.
BAD = [
    ("train", TRAIN + ["--temperature", "0"], "--temperature: 0 is not in (0, infinity)"),
    ("train", TRAIN + ["--temperature", "-1"], "--temperature"),
    ("train", TRAIN + ["--top-p", "1.5"], "--top-p: 1.5 is not in (0, 1]"),
    ("train", TRAIN + ["--max-steps", "0"], "--max-steps: 0 is not in [1, infinity)"),
    ("train", TRAIN + ["--group-size", "1"], "--group-size: 1 is not in [2, infinity)"),
    ("train", TRAIN + ["--mini-batches", "0"], "--mini-batches"),
    ("train", TRAIN + ["--batch-size", "0"], "--batch-size"),
    ("train", TRAIN + ["--micro-batch-size", "0"], "--micro-batch-size"),
    ("train", TRAIN + ["--save-every", "0"], "--save-every"),
    ("train", TRAIN + ["--lr", "-1"], "--lr: -1 is not in (0, infinity)"),
    ("train", TRAIN + ["--lr", "abc"], "--lr: 'abc' is not a number"),
    ("train", TRAIN + ["--kl-coef", "nan"], "--kl-coef"),
    ("train", TRAIN + ["--perturbed-fraction", "1"], "--perturbed-fraction"),
    ("evaluate", EVAL + ["--turns", "0"], "--turns: 0 is not in [1, infinity)"),
    ("evaluate", EVAL + ["--top-p", "1.5"], "--top-p"),
    ("evaluate", EVAL + ["--temperature", "-1"], "--temperature"),
    ("evaluate", EVAL + ["--samples", "0"], "--samples"),
    ("evaluate", EVAL + ["--batch-problems", "0"], "--batch-problems"),
    ("collect", COLLECT + ["--turns", "0"], "--turns"),
    # One name per idea: a flag that meant something else in this script stops with its new name.
    ("evaluate", EVAL + ["--batch-size", "8"], "--batch-size is now --gen-batch-size"),
    ("evaluate", EVAL + ["--split", "test"], "--split is now --problem-split"),
    ("collect", COLLECT + ["--batch-size", "8"], "--batch-size is now --gen-batch-size"),
    ("perturb", ["tests", "--problems", "demo", "--out", "y.jsonl", "--split", "test"], "--split is now --problem-split"),
    ("cobalt_min.problems", ["show", "demo", "--split", "test"], "--split is now --problem-split"),
    ("collect", COLLECT + ["--trajectories", "0"], "--trajectories"),
    ("perturb", ["augment", "--trajectories", "MISSING.jsonl", "--problems", "demo", "--out", "x.jsonl"],
     "--trajectories: MISSING.jsonl does not exist"),
    ("cobalt_min.sandbox.__main__", ["p.py", "t.json", "--timeout", "0"], "--timeout"),
    ("cobalt_min.sandbox.__main__", ["p.py", "t.json", "--memory-mb", "0"], "--memory-mb"),
    ("cobalt_min.taco_cleaning", ["--input", "x.jsonl", "--out", "y.jsonl", "--dev-size", "0"], "--dev-size"),
    # A mistyped local path is not tried as a hub id (a minute of retries, then an unrelated error).
    ("evaluate", ["--model", "runs/final", "--problems", "demo", "--out", "o"], "--model: runs/final does not exist"),
    ("train", ["--model", "./smol", "--contexts", "c.jsonl", "--out", "o"], "--model: ./smol does not exist"),
    ("evaluate", ["--model", "m", "--problems", "data/x.jsonl", "--out", "o"], "--problems: data/x.jsonl does not exist"),
    # Each method's data, named when it is missing.
    ("train", ["--model", "m", "--method", "single-turn", "--out", "o"], "--method single-turn needs --problems"),
    ("train", ["--model", "m", "--method", "verpo-mt", "--out", "o"], "--method verpo-mt needs --problems"),
    ("train", ["--model", "m", "--method", "grpo-mt", "--problems", "demo", "--out", "o", "--adv-scale", "none"],
     "--adv-std-floor and --adv-scale shape the group advantages of --method cobalt and single-turn"),
]


def run_main(module: str, argv: list, capsys) -> tuple[int, str]:
    mod = importlib.import_module(module)
    with pytest.raises(SystemExit) as e:
        mod.main(argv)
    return e.value.code, capsys.readouterr().err + (e.value.code if isinstance(e.value.code, str) else "")


@pytest.mark.parametrize("module, argv, message", BAD, ids=[f"{m} {' '.join(a[-2:])}" for m, a, _ in BAD])
def test_bad_values_are_refused_at_parse_time(module, argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.jsonl").write_text("")
    (tmp_path / "runs").mkdir()  # (a user's runs/ folder, without runs/final; data/ does not exist)
    (tmp_path / "x.jsonl").write_text("")
    code, err = run_main(module, argv, capsys)
    assert code not in (0, None) and message in err, err
    assert "Traceback" not in err


def test_outputs_that_would_overwrite_inputs_or_each_other(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.jsonl").write_text("")
    code, err = run_main("cobalt_min.problems", ["split", "demo", "--heldout", "2", "--train-out", "a.jsonl",
                                                 "--heldout-out", "a.jsonl"], capsys)
    assert code == 2 and "--train-out and --heldout-out are the same file" in err
    code, err = run_main("cobalt_min.problems", ["split", "p.jsonl", "--heldout", "2", "--train-out", "p.jsonl",
                                                 "--heldout-out", "b.jsonl"], capsys)
    assert code == 2 and "source and --train-out are the same file" in err
    code, err = run_main("perturb", ["tests", "--problems", "p.jsonl", "--out", "p.jsonl"], capsys)
    assert code == 2 and "--problems and --out are the same file" in err
    (tmp_path / "folder").mkdir()
    code, err = run_main("perturb", ["tests", "--problems", "demo", "--out", "folder"], capsys)
    assert code == 2 and "--out: folder is a folder" in err
    (tmp_path / "afile").write_text("x")
    code, err = run_main("evaluate", ["--model", "m", "--problems", "demo", "--out", "afile/run"], capsys)
    assert code == 2 and "afile is a file, not a folder" in err


def test_a_resume_with_other_settings_is_refused(capsys, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "trajectories.jsonl").write_text(json.dumps({"problem_id": "x", "samples": []}) + "\n")
    import evaluate
    args = evaluate.parse_args(["--model", "m", "--problems", "demo", "--out", str(out), "--samples", "4"])
    (out / "settings.json").write_text(json.dumps({k: getattr(args, k) for k in evaluate.SETTINGS}))
    code, err = run_main("evaluate", ["--model", "m", "--problems", "demo", "--out", str(out), "--samples", "2",
                                      "--turns", "3", "--batch-problems", "4", "--resume"], capsys)
    assert "--samples 4 there, 2 now" in str(code) and "--turns 9 there, 3 now" in str(code)
    assert "--batch-problems 8 there, 4 now" in str(code)  # (seeds follow the batches' positions)


def test_other_stages_files_and_non_demo_folders(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COBALT_SANDBOX_ISOLATION", "process")
    (tmp_path / "contexts.jsonl").write_text(json.dumps({"messages": [], "prev_best": 0}) + "\n")
    code, err = run_main("perturb", ["augment", "--trajectories", "contexts.jsonl", "--problems", "demo",
                                     "--out", "x.jsonl"], capsys)
    assert "contexts.jsonl line 1 lacks ['problem_id', 'samples']: is it collect.py's raw.jsonl?" in str(code)
    code, err = run_main("perturb", ["judge", "--cases", "contexts.jsonl", "--engine", "api", "--api-base", "x",
                                     "--model", "y"], capsys)
    assert "is it `perturb.py analyze`'s hacking_candidates.jsonl?" in str(code)
    import subprocess
    proc = subprocess.run([sys.executable, "-m", "cobalt_min.demos.demo_summary", str(tmp_path)], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode != 0 and "is not a demo's output folder" in proc.stderr


def test_renamed_flags_leave_no_trace_in_the_settings(capsys):
    """An old flag is only a message: it is not an option in --help nor a value in the run's arguments."""
    import collect
    import evaluate
    for mod, argv in ((evaluate, EVAL), (collect, COLLECT)):
        args = mod.parse_args(argv)
        assert not [k for k in vars(args) if "renamed" in k], vars(args)
        with pytest.raises(SystemExit):
            mod.parse_args(["--help"])
        shown = capsys.readouterr().out
        assert "--gen-batch-size" in shown and "--batch-size " not in shown and "renamed" not in shown


@pytest.mark.parametrize("module, function, argv, kept", [
    ("evaluate", "evaluate", EVAL + ["--problems", "demo"], "every finished block of --batch-problems problems"),
    ("train", "train", TRAIN, "no checkpoint was written yet (the first comes after --save-every steps)"),
    ("collect", "collect", COLLECT + ["--problems", "very easy.jsonl"], "every finished problem is in --out's raw.jsonl"),
])
def test_ctrl_c_says_what_was_kept_and_how_to_continue(module, function, argv, kept, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.jsonl").write_text("")
    (tmp_path / "very easy.jsonl").write_text("")
    mod = importlib.import_module(module)

    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(mod, function, interrupted)
    with pytest.raises(SystemExit) as e:
        mod.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 130 and err.count("\n") == 2 and "Traceback" not in err, err
    assert f"interrupted: {kept}" in err
    script = os.path.relpath(os.path.join(ROOT, module + ".py"))
    command = err.split("continue with: ")[1].strip()
    assert command.startswith(f"python {script} ") and command.endswith(" --resume")
    if module == "collect":
        assert "'very easy.jsonl'" in command  # quoted for a shell
    if module == "train":  # once a checkpoint exists, the message names its step
        out = tmp_path / TRAIN[TRAIN.index("--out") + 1] / "checkpoints" / "step_20"
        out.mkdir(parents=True)
        (out / "train_state.json").write_text("{}")
        with pytest.raises(SystemExit):
            mod.main(argv)
        assert "interrupted: the run keeps its checkpoint of step 20 in" in capsys.readouterr().err


def test_a_tracker_that_is_not_installed_is_refused_before_training(capsys, tmp_path, monkeypatch):
    # (was: the run trained to the end and logged nothing, one warning buried in its log)
    import importlib.util
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.jsonl").write_text("")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    code, err = run_main("train", TRAIN + ["--log-with", "tensorboard", "--sanity-reward-tokens", "1"], capsys)
    assert "--log-with tensorboard needs the tensorboard package: pip install tensorboard" in str(code)
    import train
    assert train.parse_args(TRAIN + ["--log-with", "none"]).log_with == "none"  # as --help shows it


def test_vllm_sleep_mode_without_vllm_is_refused_before_training(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.jsonl").write_text("")
    code, _ = run_main("train", TRAIN + ["--engine", "hf", "--vllm-sleep-mode", "--sanity-reward-tokens", "1"], capsys)
    assert "--vllm-sleep-mode is vLLM's: it needs --engine vllm" in str(code)


def test_augmenting_trajectories_of_other_problems_is_refused(capsys, tmp_path, monkeypatch):
    # Trajectories whose problems are not in --problems (another file, another spelling of an id) would perturb
    # nothing: an error naming the first id, not an empty output and exit 0.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "raw.jsonl").write_text(json.dumps({"problem_id": "taco-0000", "samples": []}) + "\n")
    code, err = run_main("perturb", ["augment", "--trajectories", "raw.jsonl", "--problems", "demo",
                                     "--out", "out.jsonl"], capsys)
    assert "no problem of raw.jsonl is in demo (first id: 'taco-0000')" in str(code), (code, err)
    assert not (tmp_path / "out.jsonl").exists()


def test_a_runs_settings_record_its_code_versions_and_inputs(tmp_path):
    # Beside the flags a --resume must match: the commit, the package versions and a hash of each input file.
    import hashlib
    import types
    from cobalt_min import cli
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"x": 1}\n')
    args = types.SimpleNamespace(problems=str(problems), samples=4)
    cli.record_settings(tmp_path, args, ("problems", "samples"), resume=False)
    saved = json.loads((tmp_path / "settings.json").read_text())
    assert saved["problems"] == str(problems) and saved["samples"] == 4
    run = saved["_provenance"]
    assert len(run["git_commit"] or "") == 40 and "torch" in run["versions"] and "transformers" in run["versions"]
    assert run["input_files"] == {str(problems): "sha256:" + hashlib.sha256(b'{"x": 1}\n').hexdigest()}
    cli.record_settings(tmp_path, args, ("problems", "samples"), resume=True)  # the record is not a setting


def test_the_command_that_continues_a_run_is_the_launch_it_ran_in(monkeypatch):
    from cobalt_min.cli import command_line
    monkeypatch.chdir(ROOT)  # (the script is named relative to the working folder)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert command_line(os.path.join(ROOT, "evaluate.py"), ["--out", "o"]) == "python evaluate.py --out o --resume"
    monkeypatch.setenv("WORLD_SIZE", "16")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert command_line(os.path.join(ROOT, "collect.py"), ["--out", "o x", "--resume"]) == \
        "torchrun --nproc_per_node=8 collect.py --out 'o x' --resume"


def test_training_data_is_checked_before_the_model_loads(tiny_model_dir, capsys, tmp_path, monkeypatch):
    # (was: a --contexts file that is not JSON failed after the policy loaded: minutes on 8B with FSDP)
    import train
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.jsonl").write_text('not json\n{"problem_id": "p0", "messages": []}\n')
    monkeypatch.setattr(train, "load_policy", lambda *a, **k: pytest.fail("the model loaded before the data was read"))
    code, err = run_main("train", ["--model", tiny_model_dir, "--contexts", "c.jsonl", "--out", "o", "--engine", "hf"],
                         capsys)
    assert "c.jsonl" in str(code) and "line 1" in str(code), code
