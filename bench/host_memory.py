"""Host memory per rank of `train.py --fsdp` on two CPU ranks: only rank 0 reads the weights (learner.load_policy);
rank 1 builds the model on the meta device and receives its shards. Rank 0 is what every rank was before
(each read the whole model in float32, then made its reference and sampler copies), so the two ranks side by
side, in one launch, show the saving per rank. Peak RSS (VmHWM) of each rank, several launches, the median.

    python bench/host_memory.py [--hidden 1024 --layers 8 --runs 3]

A random Llama of about 85M parameters (340 MB in float32) by default: big enough that the weights dominate
the interpreter's own ~0.5 GB. One step, batch 2 x 2, 4 new tokens, a KL term (so a reference is made).
"""

import argparse
import atexit
import json
import os
import runpy
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def as_rank(out_file, script, argv):
    """Run `script` as this rank, then record this process's peak RSS (the wrapper of each rank)."""
    sys.argv = [script] + argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # (as `python script` would)
    import cobalt_min.training.learner
    make_learner, at_setup = cobalt_min.training.learner.make_learner, []

    def measured(*args, **kw):  # the peak up to the end of the set-up: loading and make_learner
        learner = make_learner(*args, **kw)
        at_setup.append(peak_rss_mb())
        return learner
    cobalt_min.training.learner.make_learner = measured  # (before train.py imports it)

    def record():  # an exit handler: a rank ends in os._exit (cli.end_rank), which runs these first
        with open(out_file, "a") as f:
            f.write(json.dumps({"rank": int(os.environ.get("RANK", 0)), "setup_mb": at_setup[0],
                                "peak_mb": peak_rss_mb()}) + "\n")
    atexit.register(record)
    runpy.run_path(script, run_name="__main__")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--as-rank":
        return as_rank(sys.argv[2], sys.argv[3], sys.argv[4:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    sys.path[:0] = [ROOT, os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests")]
    from random_model import make_random_chat_model
    from test_train import write_contexts
    with tempfile.TemporaryDirectory() as tmp:
        model = make_random_chat_model(os.path.join(tmp, "model"), hidden=a.hidden, layers=a.layers, heads=8, kv_heads=4)
        n = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model) if f.endswith(".safetensors"))
        ctx = write_contexts(__import__("pathlib").Path(tmp) / "ctx.jsonl", short=True)
        peaks = {(r, k): [] for r in (0, 1) for k in ("setup_mb", "peak_mb")}
        for run in range(a.runs):
            rss = os.path.join(tmp, f"rss{run}.jsonl")
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                   os.path.abspath(__file__), "--as-rank", rss, os.path.join(ROOT, "train.py"), "--model", model,
                   "--contexts", str(ctx), "--out", os.path.join(tmp, f"run{run}"), "--fsdp", "--engine", "hf",
                   "--batch-size", "2", "--group-size", "2", "--max-new-tokens", "4", "--max-steps", "1",
                   "--mini-batches", "1", "--kl-coef", "0.01", "--sanity-reward-tokens", "1", "--save-every", "100"]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                  env=dict(os.environ, ACCELERATE_USE_CPU="true", OMP_NUM_THREADS="1"))
            if proc.returncode != 0:
                raise SystemExit(proc.stderr[-3000:])
            for line in open(rss):
                r = json.loads(line)
                for k in ("setup_mb", "peak_mb"):
                    peaks[(r["rank"], k)].append(r[k])
        print(f"model: {n / 2**20:.0f} MB of float32 weights; {a.runs} launches of train.py --fsdp on 2 CPU ranks")
        for k, what in (("setup_mb", "through the set-up (load, reference, sampler copy, sharding)"),
                        ("peak_mb", "over the whole run (one step, a checkpoint, the final save)")):
            zero, one = statistics.median(peaks[(0, k)]), statistics.median(peaks[(1, k)])
            print(f"peak RSS {what}, median [all]: rank 0 (reads the weights, as every rank did before) {zero:.0f} MB "
                  f"{[round(x) for x in peaks[(0, k)]]}; rank 1 (meta device, shards from rank 0) {one:.0f} MB "
                  f"{[round(x) for x in peaks[(1, k)]]}; rank 1 / rank 0 {one / zero:.2f}, "
                  f"{(zero - one) / (n / 2**20):.1f}x the model's float32 size less")


if __name__ == "__main__":
    main()
