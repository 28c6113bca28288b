"""collect.py and evaluate.py on several ranks (problem_shards.py), run for real: two or three CPU processes
launched by torchrun (gloo), each with its own transformers engine, against one process. A block of problems
is seeded by its position, so the merged outputs must equal one process's record for record; a rank that
fails must be named with its shard and leave no merged file; a run killed on one rank must resume on another
number of ranks without losing or duplicating a problem. Each run asserts the world size it ran with."""
import json
import os
import signal
import subprocess
import sys
import time

from test_distributed import cpu_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]


def command(script, model, out, ranks=1, *extra):
    flags = ["--model", model, "--problems", "demo", "--limit", "5", "--max-new-tokens", "24", "--engine", "hf",
             "--batch-problems", "1", "--out", str(out), *extra]
    flags += ["--trajectories", "2", "--turns", "2"] if script == "collect.py" else ["--samples", "2", "--turns", "2"]
    launcher = [sys.executable] if ranks == 1 else TORCHRUN + [str(ranks)]
    return launcher + [os.path.join(ROOT, script), *flags]


def run(cmd, ranks=1):
    proc = subprocess.run(cmd, cwd=ROOT, env=cpu_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if ranks > 1:
        assert f"(rank {ranks - 1})" in proc.stderr  # every rank rolled out its share
    return proc


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_collect_on_two_ranks_equals_one_process_and_a_failing_rank_is_named(tiny_model_dir, tmp_path):
    run(command("collect.py", tiny_model_dir, tmp_path / "one"))
    run(command("collect.py", tiny_model_dir, tmp_path / "two", 2), ranks=2)
    for name in ("raw.jsonl", "contexts.jsonl"):
        assert lines(tmp_path / "two" / name) == lines(tmp_path / "one" / name), name
    assert not (tmp_path / "two" / "shards").exists()  # merged and removed
    # Rank 1 fails on its second block: the launch ends naming it and its shard, nothing is merged.
    failing = [sys.executable, os.path.join(ROOT, "tests", "inject_fault.py")]
    cmd = command("collect.py", tiny_model_dir, tmp_path / "failed", 2)
    cmd = cmd[:cmd.index(os.path.join(ROOT, "collect.py"))] + failing[1:] + cmd[cmd.index(os.path.join(ROOT, "collect.py")):]
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(cpu_env(), FAULT="rank", FAIL_RANK="1"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0
    shard = tmp_path / "failed" / "shards" / "raw.rank-1.jsonl"
    assert f"error: rank 1 of 2 failed on its shard {shard} (1 of its 2 problems written" in proc.stderr, proc.stderr[-3000:]
    assert "CUDA out of memory (injected" in proc.stderr
    assert not (tmp_path / "failed" / "raw.jsonl").exists() and not (tmp_path / "failed" / "contexts.jsonl").exists()
    # Resumed on one process: the same records as the uninterrupted run, in problem order.
    run(command("collect.py", tiny_model_dir, tmp_path / "failed", 1, "--resume"))
    assert lines(tmp_path / "failed" / "raw.jsonl") == lines(tmp_path / "one" / "raw.jsonl")
    assert not (tmp_path / "failed" / "shards").exists()


def rank_pids(out, rank):
    """The pids of the processes of a run (by its output folder in their command line) that are rank `rank`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if str(out).encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"RANK={rank}".encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def test_evaluate_on_two_ranks_equals_one_process_and_resumes_on_three_after_a_kill(tiny_model_dir, tmp_path):
    run(command("evaluate.py", tiny_model_dir, tmp_path / "one"))
    run(command("evaluate.py", tiny_model_dir, tmp_path / "two", 2), ranks=2)
    one, two = lines(tmp_path / "one" / "trajectories.jsonl"), lines(tmp_path / "two" / "trajectories.jsonl")
    assert two == one and len(one) == 5
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["pass@1"] == json.loads((tmp_path / "one" / "summary.json").read_text())["pass@1"]
    # Kill rank 1 (SIGKILL, as a lost node) once it has written a problem; torchrun ends the others.
    out = tmp_path / "killed"
    proc = subprocess.Popen(command("evaluate.py", tiny_model_dir, out, 2), cwd=ROOT, env=cpu_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    shard = out / "shards" / "trajectories.rank-1.jsonl"
    deadline = time.monotonic() + 240
    while not (shard.exists() and shard.read_text().count("\n") >= 1) and time.monotonic() < deadline:
        time.sleep(0.005)
    for pid in rank_pids(out, 1):
        os.kill(pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, err[-3000:]
    assert not (out / "trajectories.jsonl").exists()  # nothing merged
    kept = [r["problem_id"] for f in (out / "shards").iterdir() for r in lines(f)]
    assert 1 <= len(kept) < 5 and len(set(kept)) == len(kept)
    # Resumed on three ranks: every problem once, the records of the uninterrupted run.
    resumed = run(command("evaluate.py", tiny_model_dir, out, 3, "--resume"), ranks=3)
    assert f"resuming: {len(kept)} problems already done" in resumed.stderr
    assert lines(out / "trajectories.jsonl") == one
    assert json.loads((out / "summary.json").read_text())["pass@1"] == summary["pass@1"]
