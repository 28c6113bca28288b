"""train.py end to end on CPU with a tiny random model: it learns a synthetic reward, resumes exactly,
runs the real COBALT reward path, runs two-process data parallel, and refuses bad input clearly."""
import json
import os
import subprocess
import sys

import pytest
import torch

from cobalt_min.problems import load_problems
from conftest import tensorboard_scalars
from cobalt_min.prompts import first_turn_messages

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_contexts(path, problems=None, short=False, count=4):
    rows = []
    for i, p in enumerate(problems or load_problems("demo", limit=count, verbose=False)):
        msgs = [{"role": "user", "content": f"Say something #{i}."}] if short else first_turn_messages(p.question)
        rows.append({"problem_id": p.id, "messages": msgs, "prev_best": 0.0, "turn": 0, "tests": p.all_tests()})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def train(out, model, contexts, *extra, launcher=(sys.executable,), timeout=900, env=None):
    cmd = [*launcher, os.path.join(ROOT, "train.py"), "--model", model, "--contexts", str(contexts), "--out", str(out),
           "--engine", "hf", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env)


def metrics(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


SANITY = ["--batch-size", "4", "--group-size", "8", "--max-new-tokens", "8", "--temperature", "1.0",
          "--mini-batches", "2", "--micro-batch-size", "16", "--kl-coef", "0.001", "--save-every", "2"]


def target_tokens(model_dir):
    """The lowercase letters: about a tenth of a random byte-level model's samples at first."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    return ",".join(str(tok.convert_tokens_to_ids(c)) for c in "abcdefghijklmnopqrstuvwxyz")


@pytest.mark.parametrize("mixed", ["no", "bf16"])  # bf16: the update in bfloat16 autocast (float32 master weights)
def test_grpo_loop_learns_a_synthetic_reward(mixed, tiny_model_dir, tmp_path):
    ctx = write_contexts(tmp_path / "ctx.jsonl", short=True)
    proc = train(tmp_path / "run", tiny_model_dir, ctx, *SANITY, "--lr", "5e-3", "--max-steps", "30", "--epochs", "100",
                 "--sanity-reward-tokens", target_tokens(tiny_model_dir), "--save-every", "100", "--mixed-precision", mixed)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"mixed precision {mixed}" in proc.stderr or mixed == "no", proc.stderr[-2000:]
    rewards = [m["reward_mean"] for m in metrics(tmp_path / "run")]
    assert len(rewards) == 30
    start, end = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert end > start + 0.3, rewards


def test_resume_continues_exactly(tiny_model_dir, tmp_path):
    ctx = write_contexts(tmp_path / "ctx.jsonl", short=True)
    args = [*SANITY, "--lr", "1e-3", "--epochs", "10", "--sanity-reward-tokens", target_tokens(tiny_model_dir)]
    straight = train(tmp_path / "a", tiny_model_dir, ctx, *args, "--max-steps", "4")
    assert straight.returncode == 0, straight.stderr[-3000:]
    first = train(tmp_path / "b", tiny_model_dir, ctx, *args, "--max-steps", "2")
    assert first.returncode == 0, first.stderr[-3000:]
    again = train(tmp_path / "b", tiny_model_dir, ctx, *args, "--max-steps", "4")
    assert again.returncode != 0 and "--resume" in again.stderr
    resumed = train(tmp_path / "b", tiny_model_dir, ctx, *args, "--max-steps", "4", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr
    from safetensors.torch import load_file
    a = load_file(str(tmp_path / "a" / "final" / "model.safetensors"))
    b = load_file(str(tmp_path / "b" / "final" / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
    ma, mb = metrics(tmp_path / "a"), metrics(tmp_path / "b")
    assert [m["step"] for m in mb] == [1, 2, 3, 4]
    assert [m["reward_mean"] for m in ma] == [m["reward_mean"] for m in mb]
    initial = load_file(str(tmp_path / "a" / "final" / "model.safetensors"))  # and it did change the model
    from transformers import AutoModelForCausalLM
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    assert any(not torch.allclose(start[k], initial[k]) for k in initial if k in start)


def test_cobalt_reward_path_and_final_model(tiny_model_dir, tmp_path):
    ctx = write_contexts(tmp_path / "ctx.jsonl")
    val = write_contexts(tmp_path / "val.jsonl", load_problems("demo", limit=2, verbose=False))
    proc = train(tmp_path / "run", tiny_model_dir, ctx, "--batch-size", "2", "--group-size", "2",
                 "--max-new-tokens", "8", "--max-steps", "2", "--micro-batch-size", "2", "--val-contexts", str(val),
                 "--val-every", "1", "--log-with", "tensorboard")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ms = metrics(tmp_path / "run")
    logged = tensorboard_scalars(tmp_path / "run")  # the same numbers, grouped by kind
    assert logged["train/reward_mean"] == {1: ms[0]["reward_mean"], 2: ms[1]["reward_mean"]}
    assert "val/reward" in logged and "time/generate_s" in logged
    for key in ["reward_mean", "reward_std", "pass_rate", "zero_std_groups", "clip_frac_high", "clip_frac_low",
                "clip_frac_dual", "kl", "ratio", "grad_norm", "response_len", "truncated", "generate_s", "execute_s",
                "update_s", "gen_tokens_per_s", "train_tokens_per_s", "val_reward"]:
        assert key in ms[0], key
    assert ms[0]["reward_mean"] == -1.0  # a random tiny model writes no code block: r = -1
    assert (tmp_path / "run" / "checkpoints" / "step_2").is_dir()
    from cobalt_min.generation import HFEngine
    engine = HFEngine(str(tmp_path / "run" / "final"))
    assert len(engine.generate([[{"role": "user", "content": "hi"}]], n=1, max_new_tokens=4)[0]) == 1


def test_clear_errors(tiny_model_dir, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    proc = train(tmp_path / "o1", tiny_model_dir, empty)
    assert proc.returncode != 0 and "holds no contexts" in proc.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem_id": "x", "messages": [], "prev_best": 0, "tests": {"inputs": [], "outputs": []}}))
    proc = train(tmp_path / "o2", tiny_model_dir, bad)
    assert proc.returncode != 0 and "line 1 (problem x) has no usable tests" in proc.stderr
    proc = train(tmp_path / "o3", str(tmp_path / "no-model"), write_contexts(tmp_path / "c.jsonl", short=True))
    assert proc.returncode == 2 and "--model: " + str(tmp_path / "no-model") + " does not exist" in proc.stderr
    (tmp_path / "empty-model").mkdir()  # a folder with no model in it
    proc = train(tmp_path / "o3", str(tmp_path / "empty-model"), write_contexts(tmp_path / "c.jsonl", short=True))
    assert proc.returncode != 0 and "is a folder with no model in it (no config.json)" in proc.stderr, proc.stderr[-500:]
    proc = train(tmp_path / "o4", tiny_model_dir, tmp_path / "missing.jsonl")
    assert proc.returncode != 0 and "does not exist" in proc.stderr
    proc = train(tmp_path / "o6", tiny_model_dir, write_contexts(tmp_path / "c3.jsonl", short=True), "--batch-size", "8")
    assert proc.returncode != 0 and "4 training contexts are fewer than --batch-size 8" in proc.stderr
    from cobalt_min.engines.vllm import vllm_build
    if vllm_build() is None:  # refused at once, before the model loads
        proc = train(tmp_path / "o5", tiny_model_dir, write_contexts(tmp_path / "c2.jsonl", short=True),
                     "--engine", "vllm")
        assert proc.returncode != 0 and "--engine vllm needs vLLM" in proc.stderr and "Loading" not in proc.stderr


def test_two_processes_drop_the_same_long_contexts_at_load(tiny_model_dir, tmp_path):
    # Contexts too long for --max-prompt-tokens are dropped once at load, identically on every rank. (Were
    # they dropped per step, one rank could run fewer micro-batches than the other and the gradient
    # all-reduce would wait forever: this test would then time out.) Two real ranks (torchrun, gloo).
    ctx = write_contexts(tmp_path / "ctx.jsonl", short=True)
    long_rows = [{"problem_id": f"long{i}", "messages": [{"role": "user", "content": "word " * 400}], "prev_best": 0.0,
                  "turn": 0, "tests": {"inputs": ["1\n"], "outputs": ["1\n"]}} for i in range(3)]
    with open(ctx, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in long_rows))
    proc = train(tmp_path / "ddp", tiny_model_dir, ctx, *SANITY, "--max-steps", "2", "--micro-batch-size", "4",
                 "--max-prompt-tokens", "300", "--sanity-reward-tokens", target_tokens(tiny_model_dir),
                 launcher=(sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           "29624"), timeout=300, env=dict(os.environ, ACCELERATE_USE_CPU="true"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "on 2 process(es)" in proc.stderr
    assert "4 training contexts" in proc.stderr and "dropped as longer than 300 prompt tokens: 3 training" in proc.stderr
    assert [m["dropped_long_contexts"] for m in metrics(tmp_path / "ddp")] == [3, 3]


def test_kl_to_the_reference_is_exactly_zero_before_the_first_update(tiny_model_dir, tmp_path):
    # Step 1 with one mini-batch: the policy has not moved, so under bf16 compute its KL to the reference
    # (the same weights) must be exactly 0.
    ctx = write_contexts(tmp_path / "ctx.jsonl", short=True)
    proc = train(tmp_path / "run", tiny_model_dir, ctx, "--batch-size", "4", "--group-size", "4", "--max-new-tokens",
                 "8", "--mini-batches", "1", "--kl-coef", "0.01", "--max-steps", "1", "--mixed-precision", "bf16",
                 "--sanity-reward-tokens", target_tokens(tiny_model_dir), "--save-every", "100")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [m] = metrics(tmp_path / "run")
    assert m["kl"] == 0.0, m
    # The final policy is saved in the compute dtype (bf16 here), and loads.
    from safetensors.torch import load_file
    weights = load_file(str(tmp_path / "run" / "final" / "model.safetensors"))
    assert {w.dtype for w in weights.values()} == {torch.bfloat16}


def test_a_run_stops_after_too_many_non_finite_steps_in_a_row(tiny_model_dir, tmp_path):
    # A learning rate of 1e30 makes the first update's weights huge and the later gradients NaN.
    ctx = write_contexts(tmp_path / "ctx.jsonl", short=True)
    proc = train(tmp_path / "run", tiny_model_dir, ctx, *SANITY, "--sanity-reward-tokens", target_tokens(tiny_model_dir),
                 "--lr", "1e30", "--epochs", "10", "--max-steps", "8", "--max-nonfinite-steps", "2", "--save-every", "100")
    assert proc.returncode != 0 and "optimizer steps in a row had a non-finite gradient norm" in proc.stderr, \
        proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr[-3000:]
    rows = metrics(tmp_path / "run") if (tmp_path / "run" / "metrics.jsonl").exists() else []
    assert all(m["rank_spread_s"] == 0.0 for m in rows)  # (one rank: no spread)


def test_micro_batches_by_tokens_train_as_micro_batches_of_one_row(tiny_model_dir, tmp_path):
    # The accumulated gradient is the mini-batch's whatever the micro-batches: the same run with micro-batches
    # of one row and with whole contexts up to 40 tokens computes the same losses, KL and gradient norms.
    ctx = write_contexts(tmp_path / "ctx.jsonl", short=True)
    runs = {}
    for name, flags in (("rows", ["--micro-batch-size", "1"]), ("tokens", ["--micro-batch-tokens", "40"])):
        proc = train(tmp_path / name, tiny_model_dir, ctx, "--batch-size", "4", "--group-size", "4",
                     "--max-new-tokens", "8", "--mini-batches", "2", "--kl-coef", "0.01", "--lr", "1e-3",
                     "--max-steps", "3", "--epochs", "3", "--sanity-reward-tokens", target_tokens(tiny_model_dir),
                     "--save-every", "100", *flags)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = metrics(tmp_path / name)
    for a, b in zip(runs["rows"], runs["tokens"]):
        assert a["reward_mean"] == b["reward_mean"]
        for key in ("loss", "kl", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-7), (key, a[key], b[key])


def test_a_step_without_any_learning_signal_says_so(tiny_model_dir, tmp_path):
    # A reward no sample can earn (a token id past the vocabulary): every group's rewards are equal.
    ctx = write_contexts(tmp_path / "ctx.jsonl", short=True)
    proc = train(tmp_path / "run", tiny_model_dir, ctx, "--batch-size", "2", "--group-size", "2", "--max-new-tokens",
                 "4", "--max-steps", "1", "--sanity-reward-tokens", "999999", "--save-every", "100")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 1: every group's rewards are equal, so every advantage is 0" in proc.stderr


def test_a_checkpoint_exports_to_a_model_folder_evaluate_can_load(tiny_model_dir, tmp_path):
    # A checkpoint is each rank's shard: `python -m cobalt_min.training.checkpoint export` makes it a model folder (the
    # last checkpoint of a run equals its final/); given to a loader as it is, it is refused with the command.
    from safetensors.torch import load_file
    from cobalt_min.generation import load_model
    ctx = write_contexts(tmp_path / "ctx.jsonl", short=True)
    proc = train(tmp_path / "run", tiny_model_dir, ctx, "--batch-size", "2", "--group-size", "2", "--max-new-tokens", "4",
                 "--max-steps", "2", "--save-every", "2", "--lr", "1e-2", "--sanity-reward-tokens", target_tokens(tiny_model_dir))
    assert proc.returncode == 0, proc.stderr[-2000:]
    step = tmp_path / "run" / "checkpoints" / "step_2"
    with pytest.raises(SystemExit, match=r"is a training checkpoint .*`python -m cobalt_min.training.checkpoint export"):
        load_model(str(step))
    out = tmp_path / "exported"
    proc = subprocess.run([sys.executable, "-m", "cobalt_min.training.checkpoint", "export", str(step),
                           "--model", tiny_model_dir, "--out", str(out), "--dtype", "float32"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    final, exported = load_file(str(tmp_path / "run" / "final" / "model.safetensors")), load_file(str(out / "model.safetensors"))
    start = load_file(f"{tiny_model_dir}/model.safetensors")
    assert final.keys() == exported.keys() and all(torch.equal(final[k], exported[k]) for k in final)
    assert any(not torch.equal(start[k], exported[k]) for k in start)
    load_model(str(out))  # a model folder
