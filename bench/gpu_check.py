"""One GPU, a few minutes: does the GPU path of cobalt-min work here? Prints one JSON object.

    python bench/gpu_check.py                   # one NVIDIA GPU, under 8 minutes; writes gpu_check.json too
    python bench/gpu_check.py --dry-run         # CPU, tiny sizes: every step that does not need CUDA (tests)

Nothing is downloaded: the model is a small random-weight Qwen3-like model saved to a local folder
(bench/random_model.py), its LM head scaled so that greedy tokens do not hinge on rounding noise.
Steps, each reported as {"ok": bool, ...} or {"skipped": why}:
1. hf_greedy: the transformers engine's greedy tokens (temperature 0) for a few prompts.
2. vllm_matches_hf: vLLM's greedy tokens on the same model and prompts equal the transformers ones.
3. vllm_follows_weights: after a policy update (the LM head nudged), `VLLMEngine.load_weights` makes
   vLLM's greedy tokens equal the updated model's again, and they differ from before.
4. train_steps: 2 steps of train.py (--engine vllm where vLLM is installed, else --engine hf) on the
   demo problems, to the final checkpoint.
5. two_ranks_fsdp: 2 steps of train.py on 2 GPUs, `torchrun --nproc_per_node 2 train.py --fsdp` (bf16
   compute, KL on, a checkpoint, the final save), with a vLLM engine per rank where vLLM is installed:
   the steps complete, step 1's KL is exactly 0 (rank 1's shards of the reference came from rank 0, which
   alone read the weights), the peak memory of each rank, each rank's peak host RSS at the end of the
   set-up (rank 1 read no weights), the ranks' time spread per step (rank_spread_s), and the memory each
   GPU held during the run (nvidia-smi, every 0.5 s: each rank's engine must sit on its own GPU, so both
   GPUs hold about as much).
6. bench: bench/bench_gpu.py --quick (0.6B update MFU and memory; engine vs plain generate).
7. kl_zero_bf16: one train.py step in bf16 with a KL term and one mini-batch: the policy has not moved, so its
   KL to the frozen reference must be exactly 0 (the reference computes the policy's function).
8. logprobs_left_padding: bf16 log-probs of rows whose prompts are left-padded to different lengths are finite
   and equal (to bf16 tolerance) to each row's own unpadded log-probs (an attention kernel that mishandles a
   fully padded row gives NaN here).
9. update_memory_vs_plan: one train.py --fsdp step (one rank) of a model sized for it, its peak memory at the
   update against bench/memory_plan.py's prediction for the same config and lengths.
10. vllm_sleep_mode: a vLLM engine with sleep mode (train.py --vllm-sleep-mode) gives back most of its share
   when it sleeps, and after wake_up with step 3's weights its greedy tokens are the updated model's.
Steps 2, 3 and 10 need vLLM (`pip install vllm`, see README); without it they are skipped, saying so. Step 5
needs 2 GPUs; the dry run runs it on 2 CPU processes (gloo) with the transformers engine.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from random_model import make_random_chat_model  # noqa: E402

from cobalt_min.generation import HFEngine, load_model  # noqa: E402
from cobalt_min.prompts import first_turn_messages  # noqa: E402
from cobalt_min.training.sharding import full_weights  # noqa: E402

QUESTIONS = ["Read two integers and print their sum.", "Print the reverse of the input line.",
             "Read n, then n numbers; print the largest.", "Print Hello, World!"]


ONLY: list = []  # --only: the steps to run (empty: all)


def step(results, name, fn):
    """Run one check, record its outcome (an exception is a failed check, not a crash)."""
    if ONLY and name not in ONLY[0]:
        return
    start = time.perf_counter()
    try:
        results[name] = fn()
    except Exception as e:  # noqa: BLE001 - reported in the JSON
        results[name] = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    results[name]["seconds"] = round(time.perf_counter() - start, 1)
    print(f"{name}: {json.dumps({k: v for k, v in results[name].items() if k != 'traceback'})[:300]}", file=sys.stderr)


def greedy(engine, prompts, new_tokens):
    return [c[0].token_ids for c in engine.sample(prompts, n=1, temperature=0.0, max_new_tokens=new_tokens, seed=0)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="CPU and tiny sizes; the CUDA-only steps are skipped")
    ap.add_argument("--json", default="gpu_check.json", help="also write the result here (default gpu_check.json)")
    ap.add_argument("--work", default=None, help="folder for the model and runs (default: a temporary one)")
    ap.add_argument("--only", default=None, help="comma-separated step names: run just these")
    args = ap.parse_args()
    if args.only:
        ONLY.append(set(args.only.split(",")))
    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        raise SystemExit("error: no CUDA GPU here; run with --dry-run to check everything else on the CPU")
    device = "cuda" if cuda else "cpu"
    have_vllm = cuda and __import__("importlib").util.find_spec("vllm") is not None
    work = args.work or tempfile.mkdtemp(prefix="cobalt-gpu-check-")
    size = dict(layers=2, hidden=64, heads=4, kv_heads=2) if args.dry_run else dict(layers=4, hidden=512, heads=8,
                                                                                        kv_heads=4, head_dim=64)
    new_tokens = 8 if args.dry_run else 48
    model_dir = make_random_chat_model(os.path.join(work, "model"), family="qwen3", logit_scale=40.0,
                                       dtype=torch.float32, **size)
    results = {"device": torch.cuda.get_device_name() if cuda else "cpu (dry run)", "torch": torch.__version__,
               "vllm_installed": have_vllm, "model": model_dir}
    import transformers
    results["transformers"] = transformers.__version__
    tokenizer, model = load_model(model_dir, dtype=torch.float32, device=device)
    hf = HFEngine(model_dir, model=model, tokenizer=tokenizer, device=device)
    prompts = [hf.prompt_ids(first_turn_messages(q)) for q in QUESTIONS]
    state = {}

    def hf_greedy():
        state["before"] = greedy(hf, prompts, new_tokens)
        # greedy through the engine == greedy through plain `generate` (both argmax of the same logits)
        ids = torch.tensor([prompts[0]], device=device)
        plain = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                               max_new_tokens=new_tokens, pad_token_id=tokenizer.pad_token_id)[0, len(prompts[0]):]
        same = plain.tolist()[:len(state["before"][0])] == state["before"][0]
        return {"ok": same and all(len(t) > 0 for t in state["before"]), "tokens": [len(t) for t in state["before"]],
                "equals_plain_generate": same}
    step(results, "hf_greedy", hf_greedy)

    vllm_engine = {}

    def vllm_matches_hf():
        if not have_vllm:
            return {"skipped": "vLLM is not installed" if cuda else "dry run (no CUDA)"}
        from cobalt_min.engines.vllm import VLLMEngine
        vllm_engine["e"] = VLLMEngine(model_dir, gpu_memory_utilization=0.3, dtype="float32", seed=0)
        got = greedy(vllm_engine["e"], prompts, new_tokens)
        equal = sum(a == b for a, b in zip(got, state["before"]))
        return {"ok": equal == len(prompts), "prompts_equal": f"{equal}/{len(prompts)}"}
    step(results, "vllm_matches_hf", vllm_matches_hf)

    def vllm_follows_weights():
        with torch.no_grad():  # a policy update: nudge the LM head until greedy tokens change
            g = torch.Generator(device="cpu").manual_seed(1)
            head = model.get_output_embeddings().weight
            head.add_(torch.randn(head.shape, generator=g).to(head) * head.std() * 0.5)
        after = greedy(hf, prompts, new_tokens)
        changed = sum(a != b for a, b in zip(after, state["before"]))
        if "e" not in vllm_engine:
            return {"skipped": "needs vLLM (step 2)", "hf_tokens_changed": f"{changed}/{len(prompts)}"}
        vllm_engine["e"].load_weights(full_weights(model))
        got = greedy(vllm_engine["e"], prompts, new_tokens)
        equal = sum(a == b for a, b in zip(got, after))
        return {"ok": equal == len(prompts) and changed > 0, "prompts_equal_after_update": f"{equal}/{len(prompts)}",
                "hf_tokens_changed": f"{changed}/{len(prompts)}"}
    step(results, "vllm_follows_weights", vllm_follows_weights)
    if "e" in vllm_engine:
        del vllm_engine["e"]

    def vllm_sleep_mode():  # train.py --vllm-sleep-mode: memory given back while asleep, the pushed weights after
        if not have_vllm:
            return {"skipped": "vLLM is not installed" if cuda else "dry run (no CUDA)"}
        from cobalt_min.engines.vllm import VLLMEngine
        engine = VLLMEngine(model_dir, gpu_memory_utilization=0.3, dtype="float32", seed=0, sleep_mode=True)
        free_awake = torch.cuda.mem_get_info()[0]
        engine.sleep()
        freed = torch.cuda.mem_get_info()[0] - free_awake
        engine.wake_up(full_weights(model))  # (step 3's nudged weights, when it ran)
        got, want = greedy(engine, prompts, new_tokens), greedy(hf, prompts, new_tokens)
        equal = sum(a == b for a, b in zip(got, want))
        del engine
        share = 0.3 * torch.cuda.mem_get_info()[1]
        return {"ok": equal == len(prompts) and freed > 0.5 * share, "freed_gb": round(freed / 1e9, 2),
                "share_gb": round(share / 1e9, 2), "prompts_equal_after_wake_up": f"{equal}/{len(prompts)}"}
    step(results, "vllm_sleep_mode", vllm_sleep_mode)
    del model, hf
    if cuda:
        torch.cuda.empty_cache()

    from cobalt_min.jsonl import write_jsonl
    from cobalt_min.problems import load_problems
    contexts = os.path.join(work, "contexts.jsonl")
    write_jsonl(contexts, [{"problem_id": p.id, "messages": first_turn_messages(p.question), "prev_best": 0.0,
                            "turn": 0, "tests": p.all_tests()} for p in load_problems("demo", limit=4, verbose=False)])

    def train_steps():
        out = os.path.join(work, "train")
        engine = "vllm" if have_vllm else "hf"
        cmd = [sys.executable, os.path.join(ROOT, "train.py"), "--model", model_dir, "--contexts", contexts, "--out", out,
               "--engine", engine, "--batch-size", "2", "--group-size", "4", "--max-new-tokens", str(2 * new_tokens),
               "--max-steps", "2", "--micro-batch-size", "4", "--save-every", "2", "--lr", "1e-5"]
        if args.dry_run:
            cmd += ["--mixed-precision", "no"]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
        metrics = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))] if proc.returncode == 0 else []
        return {"ok": proc.returncode == 0 and len(metrics) == 2 and os.path.exists(os.path.join(out, "final", "config.json")),
                "engine": engine, "step_s": [m["step_s"] for m in metrics],
                "stderr_tail": proc.stderr[-1500:] if proc.returncode else ""}
    step(results, "train_steps", train_steps)

    def two_ranks_fsdp():
        if cuda and torch.cuda.device_count() < 2:
            return {"skipped": f"{torch.cuda.device_count()} GPU(s): needs 2"}
        out, rss = os.path.join(work, "train_fsdp"), os.path.join(work, "train_fsdp_rss.jsonl")
        engine = "vllm" if have_vllm else "hf"
        # (each rank through bench/host_memory.py's wrapper: its peak host RSS at the end of the set-up)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", os.path.join(HERE, "host_memory.py"),
               "--as-rank", rss, os.path.join(ROOT, "train.py"),
               "--model", model_dir, "--contexts", contexts, "--out", out, "--fsdp", "--engine", engine,
               "--batch-size", "2", "--group-size", "4", "--mini-batches", "1", "--max-new-tokens", str(2 * new_tokens),
               "--max-steps", "2", "--micro-batch-size", "4", "--save-every", "1", "--kl-coef", "1e-4", "--lr", "1e-5",
               "--max-prompt-tokens", "2048"]
        env = dict(os.environ, **({} if cuda else {"ACCELERATE_USE_CPU": "true"}))
        used, stop = {}, []
        poller = None
        if cuda:
            import threading

            def poll():  # MiB held on each GPU, by any process (vLLM's engines and the trainers)
                while not stop:
                    q = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                                       capture_output=True, text=True)
                    for line in q.stdout.splitlines():
                        i, mib = (int(x) for x in line.split(","))
                        used[i] = max(used.get(i, 0), mib)
                    time.sleep(0.5)
            poller = threading.Thread(target=poll, daemon=True)
            poller.start()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900, env=env)
        stop.append(True)
        if poller:
            poller.join()
        metrics = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))] if proc.returncode == 0 else []
        both_gpus = not cuda or (len(used) >= 2 and min(used[0], used[1]) > 0.5 * max(used[0], used[1]))
        setup_mb = {r["rank"]: r["setup_mb"] for r in map(json.loads, open(rss))} if os.path.exists(rss) else {}
        return {"ok": proc.returncode == 0 and len(metrics) == 2 and "on 2 process(es) (FSDP)" in proc.stderr
                and os.path.exists(os.path.join(out, "final", "config.json")) and both_gpus
                and metrics[0]["kl"] == 0.0,  # step 1: the policy has not moved; rank 1's reference came from rank 0
                "engine": engine, "step_s": [m["step_s"] for m in metrics], "kl_step1": metrics[0]["kl"] if metrics else None,
                # only rank 0 reads the weights (learner.load_policy): rank 1's set-up peak should be lower by about
                # twice the float32 model (here a small one: the interpreter and CUDA's own memory weigh more)
                "setup_peak_host_mb_per_rank": setup_mb,
                "rank_spread_s": [m.get("rank_spread_s") for m in metrics],
                "peak_memory_gb_per_rank": metrics[-1]["peak_memory_gb_per_rank"] if metrics else None,
                "gpu_memory_used_mib": used, "stderr_tail": proc.stderr[-1500:] if proc.returncode else ""}
    step(results, "two_ranks_fsdp", two_ranks_fsdp)

    def bench():
        path = os.path.join(work, "bench_gpu.json")
        cmd = [sys.executable, os.path.join(HERE, "bench_gpu.py"), "--json", path]
        cmd += ["--tiny", "--device", "cpu"] if args.dry_run else ["--quick"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            return {"ok": False, "stderr_tail": proc.stderr[-1500:]}
        return {"ok": True, **json.load(open(path))}
    step(results, "bench", bench)

    # (no programs run in these: the reward is the share of lowercase letters, so no sandbox is needed)
    letters = ",".join(str(tokenizer.convert_tokens_to_ids(c)) for c in "abcdefghijklmnopqrstuvwxyz")

    def kl_zero_bf16():
        out = os.path.join(work, "train_kl")
        cmd = [sys.executable, os.path.join(ROOT, "train.py"), "--model", model_dir, "--contexts", contexts, "--out", out,
               "--engine", "hf", "--batch-size", "2", "--group-size", "4", "--max-new-tokens", str(new_tokens),
               "--max-steps", "1", "--mini-batches", "1", "--kl-coef", "0.01", "--save-every", "100",
               "--mixed-precision", "bf16" if cuda else "no", "--sanity-reward-tokens", letters]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
        metrics = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))] if proc.returncode == 0 else []
        return {"ok": len(metrics) == 1 and metrics[0]["kl"] == 0.0, "kl": metrics[0]["kl"] if metrics else None,
                "stderr_tail": proc.stderr[-1500:] if proc.returncode else ""}
    step(results, "kl_zero_bf16", kl_zero_bf16)

    def logprobs_left_padding():
        from cobalt_min.logprobs import completion_logprobs, pack_groups
        _, lm = load_model(model_dir, dtype=torch.bfloat16 if cuda else torch.float32, device=device)
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(0, 250, (n,), generator=g).tolist() for n in (3, 40, 200)]
        completions = [torch.randint(0, 250, (n,), generator=g).tolist() for n in (30, 5, 17)]
        with torch.no_grad():
            together = completion_logprobs(lm, pack_groups(prompts, completions, [0, 1, 2], 0, device=device))
            alone = [completion_logprobs(lm, pack_groups([p], [c], [0], 0, device=device))[0]
                     for p, c in zip(prompts, completions)]
        finite = bool(torch.isfinite(together).all())
        diff = max(float((together[r, :len(c)] - alone[r][:len(c)]).abs().max()) for r, c in enumerate(completions))
        return {"ok": finite and diff < (0.1 if cuda else 1e-4), "finite": finite, "max_abs_diff": diff}
    step(results, "logprobs_left_padding", logprobs_left_padding)

    def update_memory_vs_plan():
        from memory_plan import plan
        size36 = dict(layers=2, hidden=64, heads=4, kv_heads=2) if args.dry_run else \
            dict(layers=8, hidden=2048, heads=16, kv_heads=8, head_dim=128)
        big = make_random_chat_model(os.path.join(work, "model36"), family="qwen3", dtype=torch.float32, **size36)
        out = os.path.join(work, "train_memory")
        response = 2 * new_tokens
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", os.path.join(ROOT, "train.py"),
               "--model", big, "--contexts", contexts, "--out", out, "--fsdp", "--engine", "hf", "--batch-size", "2",
               "--group-size", "4", "--mini-batches", "1", "--max-new-tokens", str(response), "--max-steps", "1",
               "--gradient-checkpointing", "--micro-batch-tokens", "4096", "--kl-coef", "1e-4", "--save-every", "100",
               "--max-prompt-tokens", "2048", "--sanity-reward-tokens", letters]
        env = dict(os.environ, **({} if cuda else {"ACCELERATE_USE_CPU": "true"}))
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
        metrics = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))] if proc.returncode == 0 else []
        cfg = json.load(open(os.path.join(big, "config.json")))
        predicted = plan(cfg, ranks=1, device_gb=0.0, vllm_share=0.0, prompt=2048, response=response, micro_batch=1,
                         checkpointing=True, logprob_chunk=256, micro_batch_tokens=4096)
        measured = metrics[0]["peak_memory_gb"] if metrics else None
        # (the transformers engine's sampler copy under --fsdp, bf16, stands where vLLM's share would)
        planned = predicted["update_gb"] + 2 * predicted["parameters_billion"]
        return {"ok": bool(metrics) and (not cuda or measured <= planned * 1.2),
                "measured_peak_gb": measured, "planned_update_gb": round(planned, 3),
                "planned_parts": {k: round(v, 3) for k, v in predicted["update_parts"].items()},
                "stderr_tail": proc.stderr[-1500:] if proc.returncode else ""}
    step(results, "update_memory_vs_plan", update_memory_vs_plan)

    checks = [v for k, v in results.items() if isinstance(v, dict) and "ok" in v]
    results["all_ok"] = all(v["ok"] for v in checks)
    text = json.dumps(results, indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
