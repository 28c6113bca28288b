"""train.py's multi-rank paths, run for real: two CPU processes over gloo, launched as a GPU node launches
its ranks (torchrun), DDP through Accelerate and FSDP2 (--fsdp), each checked against one process.

How the runs are made equal: the reward is the sanity reward (a share of given tokens: no execution, no
timing), and a run's samples do not depend on the number of ranks (each context's seed comes from its
position in the global batch; learner.seeds_of_share); the weights then differ between the runs by float
rounding only, which moves no sample of a tiny model. So the rewards must be identical, and the losses,
gradient norms, KL and final weights equal to float tolerance: the gradient of a batch split over ranks
is the gradient of the whole batch. Each test asserts the world size it ran with (a launcher that
starts one process fails it) and has a timeout (a hang fails it)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from test_train import ROOT, metrics, target_tokens, write_contexts

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port"]

# 9 contexts at batch 4: 2 full steps per epoch, the ninth left out (the last partial batch); 3 validation
# contexts: shares of 2 and 1 on two ranks. KL on (the reference in use), 2 mini-batches, micro-batches
# of 3 rows (not a multiple of a context's 4), a checkpoint every 2 steps.
SETTINGS = ["--batch-size", "4", "--group-size", "4", "--max-new-tokens", "8", "--mini-batches", "2",
            "--micro-batch-size", "3", "--kl-coef", "0.01", "--lr", "1e-3", "--epochs", "3", "--val-every", "2",
            "--save-every", "2", "--keep-checkpoints", "10", "--engine", "hf"]
STEPS = 6


def run_args(tiny_model_dir, tmp_path, out, *extra):
    contexts = write_contexts(tmp_path / "ctx.jsonl", short=True, count=9)
    val = write_contexts(tmp_path / "val.jsonl", short=True, count=3)
    return [os.path.join(ROOT, "train.py"), "--model", tiny_model_dir, "--contexts", str(contexts), "--val-contexts",
            str(val), "--out", str(out), "--sanity-reward-tokens", target_tokens(tiny_model_dir), *SETTINGS, *extra]


def cpu_env():
    return dict(os.environ, ACCELERATE_USE_CPU="true", OMP_NUM_THREADS="1")


def kill_run(out):
    """SIGKILL every process whose command line names this run's output folder."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if str(out).encode() in f.read():
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


def run_killed_then_resumed(cmd, out, timeout=240):
    """Start a 2-rank run, SIGKILL every process of it once the step-2 checkpoint is complete (as a
    preempted node would), then run the same command with --resume to the end."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, text=True)
    marker = out / "checkpoints" / "step_2" / "train_state.json"
    deadline = time.monotonic() + timeout
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    kill_run(out)  # the launcher and its ranks (torchrun starts them in sessions of their own)
    _, err = proc.communicate()
    assert marker.exists(), err[-3000:]
    assert not (out / "final").exists(), "the run ended before it could be killed"
    resumed = subprocess.run(cmd + ["--resume"], cwd=ROOT, env=cpu_env(), capture_output=True, text=True,
                             timeout=timeout)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "on 2 process(es)" in resumed.stderr and "resumed from" in resumed.stderr
    return resumed


@pytest.fixture(scope="module")
def one_process(tiny_model_dir, tmp_path_factory):
    """The reference: the same run in one process, uninterrupted."""
    tmp = tmp_path_factory.mktemp("one")
    proc = subprocess.run([sys.executable, *run_args(tiny_model_dir, tmp, tmp / "run", "--max-steps", str(STEPS))],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "on 1 process(es)" in proc.stderr
    return tmp / "run"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ddp", "fsdp", "fsdp-checkpointing"])
def test_two_ranks_train_as_one_process(mode, one_process, tiny_model_dir, tmp_path):
    # fsdp-checkpointing: the 8B recipe's setting (FSDP2 shards, each decoder layer replayed in backward, the
    # prompts still shared by their completions, micro-batches by a token budget, so the ranks' counts must
    # be made equal): the same numbers as one process without checkpointing, micro-batches of 3 rows
    out = tmp_path / "run"
    port = {"ddp": "29621", "fsdp": "29622", "fsdp-checkpointing": "29623"}[mode]
    extra = {"ddp": [], "fsdp": ["--fsdp"],
             "fsdp-checkpointing": ["--fsdp", "--gradient-checkpointing", "--micro-batch-tokens", "30"]}[mode]
    cmd = [*TORCHRUN, port, *run_args(tiny_model_dir, tmp_path, out, "--max-steps", str(STEPS), *extra)]
    resumed = run_killed_then_resumed(cmd, out)
    assert ("(FSDP)" in resumed.stderr) == mode.startswith("fsdp")
    assert "runs each row's prompt again" not in resumed.stdout + resumed.stderr
    assert "each epoch leaves out 1 contexts" in resumed.stderr
    one, two = metrics(one_process), metrics(out)
    assert [m["step"] for m in two] == list(range(1, STEPS + 1))  # no row twice after the resume
    assert [m["reward_mean"] for m in two] == [m["reward_mean"] for m in one]  # the same samples
    for key in ("loss", "grad_norm", "kl", "ratio", "clip_frac_high"):
        assert [m[key] for m in two] == pytest.approx([m[key] for m in one], rel=1e-4, abs=1e-6), key
    assert [m.get("val_reward") for m in two] == [m.get("val_reward") for m in one]
    assert one[-1]["kl"] > 0  # the reference policy was used, and the policy moved away from it
    a, b = load_file(str(one_process / "final" / "model.safetensors")), load_file(str(out / "final" / "model.safetensors"))
    assert a.keys() == b.keys()
    start = load_file(os.path.join(tiny_model_dir, "model.safetensors"))
    assert any(not torch.allclose(a[k], start[k]) for k in a)  # training changed the weights
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), k
    # Checkpoints hold the policy and the optimizer, not the frozen reference: one copy of the weights.
    ckpt = out / "checkpoints" / f"step_{STEPS}"
    assert json.loads((ckpt / "train_state.json").read_text())["step"] == STEPS
    from torch.distributed.checkpoint import FileSystemReader
    saved = FileSystemReader(str(ckpt)).read_metadata().state_dict_metadata
    weights = {k.removeprefix("model.lm.") for k in saved if k.startswith("model.")}
    assert weights - {"lm_head.weight"} == set(b) - {"lm_head.weight"}  # the policy's weights (its tied head once)
    assert any(k.startswith("optimizer.state.") for k in saved)


def test_launches_that_cannot_form_one_run_are_refused(tiny_model_dir, tmp_path):
    # An accelerate FSDP config (on a machine without GPUs accelerate turns it into N unrelated processes),
    # and processes that were launched as a group Accelerate does not see.
    args = run_args(tiny_model_dir, tmp_path, tmp_path / "o", "--max-steps", "1")
    fsdp = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, ACCELERATE_USE_FSDP="true"))
    assert fsdp.returncode != 0 and "pass --fsdp" in fsdp.stderr and "Traceback" not in fsdp.stderr
    lone = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, WORLD_SIZE="2"))
    assert lone.returncode != 0 and "2 processes were launched" in lone.stderr
    uneven = subprocess.run([sys.executable, *args, "--batch-size", "3"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert uneven.returncode != 0 and "--batch-size 3 must be divisible by --mini-batches" in uneven.stderr


@pytest.mark.slow
def test_fsdp_pieces_on_two_ranks(tiny_model_dir):
    # What train.py --fsdp relies on, with the functions it calls (tests/fsdp_ranks.py): the reference
    # sharded and on the ranks' device, log-probs of the sharded model equal to the unsharded one (value and
    # gradient), the sampler's weight stream one full parameter at a time, the gathered final save.
    proc = subprocess.run([*TORCHRUN, "29623", os.path.join(ROOT, "tests", "fsdp_ranks.py"), tiny_model_dir],
                          cwd=ROOT, env=cpu_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("fsdp pieces ok") == 2, proc.stdout


RANK_THAT_ENDS = """
import atexit, sys
import torch, torch.distributed as dist
sys.path.insert(0, sys.argv[1])
from cobalt_min.cli import end_rank
dist.init_process_group("gloo")
rank = dist.get_rank()
atexit.register(lambda: print(f"exit handler of rank {rank}", flush=True))
total = torch.ones(1)
dist.all_reduce(total)
print(f"rank {rank} done, total {int(total)}")  # not flushed: stdout is a pipe
end_rank()
print("after end_rank", flush=True)
"""


def test_a_rank_ends_through_end_rank_after_leaving_the_process_group(tmp_path, monkeypatch):
    # What train.py, collect.py and evaluate.py call last: in a launch each rank leaves the process group,
    # runs its exit handlers, flushes its output and exits 0 there (cli.end_rank says why); in one
    # process it does nothing.
    script = tmp_path / "rank.py"
    script.write_text(RANK_THAT_ENDS)
    proc = subprocess.run([*TORCHRUN, "29628", str(script), ROOT], cwd=ROOT, env=cpu_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank} done, total 2" in proc.stdout and f"exit handler of rank {rank}" in proc.stdout
    assert "after end_rank" not in proc.stdout
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    from cobalt_min.cli import end_rank
    assert end_rank() is None  # one process: returns


def test_kl_to_the_reference_is_exactly_zero_before_the_first_update_on_two_fsdp_ranks(tiny_model_dir, tmp_path):
    # As tests/test_train.py's one-process check: FSDP2 runs the policy in bf16, the reference is stored in
    # bf16 with its buffers (the rotary inv_freq) left in float32, as the policy's are.
    out = tmp_path / "run"
    contexts = write_contexts(tmp_path / "ctx.jsonl", short=True, count=4)
    cmd = [*TORCHRUN, "29624", os.path.join(ROOT, "train.py"), "--model", tiny_model_dir, "--contexts", str(contexts),
           "--out", str(out), "--sanity-reward-tokens", target_tokens(tiny_model_dir), "--batch-size", "4",
           "--group-size", "4", "--max-new-tokens", "8", "--mini-batches", "1", "--kl-coef", "0.01", "--max-steps",
           "1", "--fsdp", "--mixed-precision", "bf16", "--engine", "hf", "--save-every", "100"]
    proc = subprocess.run(cmd, cwd=ROOT, env=cpu_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "on 2 process(es) (FSDP)" in proc.stderr
    [m] = metrics(out)
    assert m["kl"] == 0.0, m
