"""GRPO update cost, side by side in one run (CPU or GPU).

    python bench/bench_grpo.py                      # CPU: small Qwen3-like model with the real 151,936 vocabulary
    python bench/bench_grpo.py --device cuda --hidden 1024 --layers 28 --batch 8 --prompt 2048 --completion 1024

1. completion_logprobs, train.py's (chunked LM head, completion positions only) vs the naive full float32
   log-softmax:
   time and peak memory of forward + backward. Target: <= 1/3 of the naive peak memory.
2. One training update as train.py does it (policy log-probs with grad, reference log-probs,
   policy_loss, backward, AdamW step) vs a bare forward + backward of the same model on the same
   tokens (Hugging Face loss). Target: <= 1.5x the bare time.
3. With --vs-trl (only if the trl package is installed; never a requirement): train.py's GRPO step
   against TRL's GRPOTrainer at equal settings (SmolLM2-135M as a plain folder, 2 prompts x 4 samples
   x <= 128 new tokens, CPU, same clip / KL (k3, as TRL) / token-mean settings, the same execution-free
   reward, gradient checkpointing off on both sides, then on on both: --vs-trl-checkpointing). The sides sample different
   completions (different lengths), so time per completion token is compared; each side runs 3 steps
   in its own process (the first step is not counted), alternating over --vs-trl-rounds rounds;
   printed: the median ratio with its range and each side's peak RSS. Target: <= 0.5x TRL.
Each measurement runs in its own process, so peak memory is that measurement's alone (CPU: peak RSS
above the process's baseline; GPU: torch.cuda.max_memory_allocated).
"""

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def build(args):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                      num_hidden_layers=args.layers, num_attention_heads=max(1, args.hidden // 64),
                      num_key_value_heads=max(1, args.hidden // 128), head_dim=64, tie_word_embeddings=args.tie,
                      max_position_embeddings=args.prompt + args.completion + 8)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = Qwen3ForCausalLM(cfg).to(device=args.device, dtype=dtype)
    g = torch.Generator().manual_seed(1)
    T = args.prompt + args.completion
    ids = torch.randint(0, args.vocab, (args.batch, T), generator=g).to(args.device)
    att = torch.ones_like(ids)
    comp = torch.zeros_like(ids)
    comp[:, args.prompt:] = 1
    return model, ids, att, comp


def peak_bytes(args, baseline):
    import torch
    if args.device == "cuda":
        return torch.cuda.max_memory_allocated()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - baseline


def measure(kind, args, queue):
    import torch
    from cobalt_min.grpo import policy_loss
    from cobalt_min.logprobs import completion_logprobs, naive_token_logprobs, pack_groups
    torch.set_num_threads(args.threads)
    model, ids, att, comp = build(args)
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    weights = torch.randn(ids.shape, device=args.device)
    rows = pack_groups([r[:args.prompt] for r in ids.tolist()], [r[args.prompt:] for r in ids.tolist()],
                       list(range(ids.shape[0])), 0, device=args.device)  # prompt + completion, as train.py packs them

    def once():
        if kind == "chunked":
            (completion_logprobs(model, rows, chunk_tokens=args.chunk) * weights[:, args.prompt:]).sum().backward()
        elif kind == "naive":
            (naive_token_logprobs(model, ids, att, comp) * weights).sum().backward()
        elif kind == "bare":  # what any fine-tuning step costs: HF forward with labels, backward
            labels = ids.masked_fill(comp == 0, -100)
            model(input_ids=ids, attention_mask=att, labels=labels).loss.backward()
        elif kind == "update":  # train.py's update: policy + reference log-probs, loss, backward, AdamW step
            with torch.no_grad():
                ref_logp = completion_logprobs(ref, rows, chunk_tokens=args.chunk)
            logp = completion_logprobs(model, rows, chunk_tokens=args.chunk)
            adv = torch.linspace(-1, 1, ids.shape[0], device=args.device)
            loss, _ = policy_loss(logp, logp.detach(), ref_logp, adv, rows.completion_mask)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)

    if kind == "update":
        import copy
        ref = copy.deepcopy(model).eval().requires_grad_(False)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01)
    once()  # warm-up (and, for the update, AdamW's state)
    times = []
    for _ in range(args.repeats):
        if args.device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        once()
        if args.device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    queue.put({"kind": kind, "seconds": min(times), "peak_bytes": peak_bytes(args, baseline)})


def in_own_process(target, *args, what="measurement"):
    """Run target(*args, queue) in a fresh (spawned) process and return what it put on the queue."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, q))
    p.start()
    p.join()
    if p.exitcode != 0:
        raise SystemExit(f"{what} failed (exit {p.exitcode})")
    return q.get()


def run(kind, args):
    return in_own_process(measure, kind, args, what=f"measurement {kind}")


# ----------------------------------------------------------------------------- --vs-trl

VS_TRL = dict(prompts=2, group=4, new_tokens=128, steps=3)  # 2 prompts x 4 samples x 128 tokens


def vs_trl_contexts(path):
    """Two demo-problem opening contexts, in train.py's contexts format."""
    from cobalt_min.jsonl import write_jsonl
    from cobalt_min.problems import load_problems
    from cobalt_min.prompts import first_turn_messages
    rows = [{"problem_id": p.id, "messages": first_turn_messages(p.question), "prev_best": 0.0, "turn": 0,
             "tests": p.all_tests()} for p in load_problems("demo", limit=VS_TRL["prompts"], verbose=False)]
    write_jsonl(path, rows)
    return rows


def digit_ids(tokenizer):
    """The shared, execution-free reward of this comparison: share of completion tokens that are digits."""
    return sorted({tokenizer.convert_tokens_to_ids(d) for d in "0123456789"})


def run_ours(argv, queue):
    """train.py in this (spawned) process: per step, seconds and completion tokens; the process's peak RSS."""
    import torch
    sys.argv = ["train.py"] + argv
    import train
    torch.set_num_threads(os.cpu_count() or 1)
    train.main(argv)
    out = [argv[i + 1] for i, a in enumerate(argv) if a == "--out"][0]
    steps = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))]
    g = VS_TRL["group"] * VS_TRL["prompts"]
    queue.put({"step_s": [m["step_s"] for m in steps], "tokens": [m["response_len"] * g for m in steps],
               "generate_s": [m["generate_s"] for m in steps], "logprob_s": [m["logprob_s"] for m in steps],
               "update_s": [m["update_s"] for m in steps],
               "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20})


def run_trl(model_dir, contexts, checkpointing, queue):
    """TRL's GRPOTrainer with train.py's loss settings; per step, wall time (callback) and completion tokens."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    torch.set_num_threads(os.cpu_count() or 1)
    tok = AutoTokenizer.from_pretrained(model_dir)
    targets = set(digit_ids(tok))

    def reward(completions, completion_ids, **kw):
        return [sum(t in targets for t in ids) / max(1, len(ids)) for ids in completion_ids]

    times, tokens = [], []
    g = VS_TRL["group"]

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.start)

        def on_log(self, args, state, control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                tokens.append(float(logs["completions/mean_length"]) * VS_TRL["prompts"] * g)

    cfg = GRPOConfig(output_dir=os.path.join(os.path.dirname(contexts[0]["_path"]), "trl"), use_cpu=True, bf16=False,
                     gradient_checkpointing=checkpointing,
                     per_device_train_batch_size=VS_TRL["prompts"] * g, num_generations=g, steps_per_generation=1,
                     gradient_accumulation_steps=1, max_completion_length=VS_TRL["new_tokens"], temperature=1.0,
                     top_p=1.0, top_k=0, learning_rate=1e-6, lr_scheduler_type="constant", weight_decay=0.01,
                     max_grad_norm=1.0, beta=1e-4, epsilon=0.2,
                     epsilon_high=0.4, delta=3.0, loss_type="dapo", num_iterations=1, scale_rewards="group",
                     max_steps=VS_TRL["steps"], logging_steps=1, report_to="none", save_strategy="no", seed=0)
    data = Dataset.from_list([{"prompt": c["messages"]} for c in contexts] * VS_TRL["steps"])
    trainer = GRPOTrainer(model=model_dir, reward_funcs=reward, args=cfg, train_dataset=data, callbacks=[Timer()])
    trainer.train()
    queue.put({"step_s": times, "tokens": tokens, "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20})


def per_token_s(run):
    """Seconds per completion token of the steps after the first (the first pays one-off costs)."""
    return [s / t for s, t in zip(run["step_s"][1:], run["tokens"][1:])]


def vs_trl(args):
    import importlib.util
    import tempfile
    if importlib.util.find_spec("trl") is None:
        raise SystemExit("--vs-trl needs the trl package (pip install trl); it is never a requirement of cobalt-min")
    with tempfile.TemporaryDirectory(prefix="vs-trl-") as work:  # each run saves a model: gigabytes, removed at the end
        return vs_trl_in_folder(args, work)


def vs_trl_in_folder(args, work: str) -> dict:
    import statistics
    from transformers import AutoTokenizer
    from cobalt_min.generation import convert_gguf, find_smollm2_gguf
    model_dir = args.vs_trl_model or convert_gguf(find_smollm2_gguf(), os.path.join(work, "smollm2"))
    ctx_path = os.path.join(work, "contexts.jsonl")
    contexts = vs_trl_contexts(ctx_path)
    for c in contexts:
        c["_path"] = ctx_path
    targets = ",".join(map(str, digit_ids(AutoTokenizer.from_pretrained(model_dir))))
    g = VS_TRL["group"]
    report = {}
    for checkpointing in {"both": (False, True), "off": (False,), "on": (True,)}[args.vs_trl_checkpointing]:
        ours, theirs = [], []
        for r in range(args.vs_trl_rounds):  # alternate the two sides, so that the machine's drift hits both
            argv = ["--model", model_dir, "--contexts", ctx_path, "--out", os.path.join(work, f"ours-{checkpointing}-{r}"),
                    "--engine", "hf", "--batch-size", str(VS_TRL["prompts"]), "--group-size", str(g),
                    "--max-new-tokens", str(VS_TRL["new_tokens"]), "--temperature", "1.0", "--top-p", "1.0",
                    "--lr", "1e-6", "--kl-coef", "1e-4", "--kl-estimator", "k3", "--clip-low", "0.2",
                    "--clip-high", "0.4", "--dual-clip", "3.0", "--agg", "token-mean", "--mini-batches", "1",
                    "--micro-batch-size", str(VS_TRL["prompts"] * g), "--max-steps", str(VS_TRL["steps"]),
                    "--epochs", str(VS_TRL["steps"]), "--save-every", "1000", "--sanity-reward-tokens", targets,
                    "--seed", str(r)] + (["--gradient-checkpointing"] if checkpointing else [])
            sides = [("ours", lambda: in_own_process(run_ours, argv, what="train.py run")),
                     ("trl", lambda: in_own_process(run_trl, model_dir, contexts, checkpointing, what="TRL run"))]
            for name, go in (sides if r % 2 == 0 else sides[::-1]):
                (ours if name == "ours" else theirs).append(go())
        ratios = [statistics.median(per_token_s(a)) / statistics.median(per_token_s(b)) for a, b in zip(ours, theirs)]
        label = "on" if checkpointing else "off"
        print(f"gradient checkpointing {label} on both sides, SmolLM2-135M, {VS_TRL['prompts']} prompts x {g} samples x "
              f"<= {VS_TRL['new_tokens']} new tokens, CPU, {args.vs_trl_rounds} alternating rounds:")
        for name, runs in (("train.py", ours), ("TRL GRPOTrainer", theirs)):
            per_tok = [x for run in runs for x in per_token_s(run)]
            print(f"  {name:16s} {1e3 * statistics.median(per_tok):7.1f} ms per completion token "
                  f"(steps: {', '.join(f'{s:.1f} s / {t:.0f} tok' for run in runs for s, t in zip(run['step_s'], run['tokens']))}); "
                  f"peak RSS {max(run['peak_rss_gib'] for run in runs):.2f} GiB")
        for k in ("generate_s", "logprob_s", "update_s"):
            print(f"    train.py {k}: {', '.join(f'{x:.1f}' for run in ours for x in run[k][1:])}")
        print(f"  ratio train.py / TRL per completion token: median {statistics.median(ratios):.2f} "
              f"(range {min(ratios):.2f}-{max(ratios):.2f})  target <= 0.5  {'OK' if statistics.median(ratios) <= 0.5 else 'ABOVE'}")
        report[f"checkpointing_{label}"] = {"ours": ours, "trl": theirs, "ratios": ratios}
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--vocab", type=int, default=151936, help="vocabulary (Qwen3's: 151,936)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tie", action="store_true", help="tie input and output embeddings")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--completion", type=int, default=512)
    ap.add_argument("--chunk", type=int, default=256, help="tokens per LM-head chunk (train.py --logprob-chunk)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--vs-trl", action="store_true", help="also time one train.py step against TRL's GRPOTrainer "
                    "(SmolLM2-135M, 2 prompts x 4 samples x 128 new tokens, CPU; needs `pip install trl`)")
    ap.add_argument("--vs-trl-only", action="store_true", help="only the TRL comparison")
    ap.add_argument("--vs-trl-model", default=None, help="plain model folder for --vs-trl (default: convert SmolLM2)")
    ap.add_argument("--vs-trl-rounds", type=int, default=2, help="alternating rounds per setting (default 2)")
    ap.add_argument("--vs-trl-checkpointing", choices=["both", "off", "on"], default="both",
                    help="gradient checkpointing on both sides: off, on, or both settings one after the other (default)")
    args = ap.parse_args()
    if args.vs_trl_only:
        vs_trl(args)
        return
    print(f"model: hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}; batch {args.batch} x "
          f"({args.prompt} prompt + {args.completion} completion) tokens; device {args.device}")
    res = {k: run(k, args) for k in ("chunked", "naive", "update", "bare")}
    gb = lambda b: b / 2 ** 30  # noqa: E731
    c, n, u, b = res["chunked"], res["naive"], res["update"], res["bare"]
    mem_ratio = c["peak_bytes"] / max(1, n["peak_bytes"])
    time_ratio = u["seconds"] / b["seconds"]
    print(f"log-probs fwd+bwd  chunked: {c['seconds']:.3f} s, peak {gb(c['peak_bytes']):.2f} GiB | "
          f"naive: {n['seconds']:.3f} s, peak {gb(n['peak_bytes']):.2f} GiB")
    print(f"  memory ratio chunked/naive: {mem_ratio:.2f}  (target <= 0.33)  {'OK' if mem_ratio <= 1 / 3 else 'ABOVE'}")
    print(f"  time ratio chunked/naive:   {c['seconds'] / n['seconds']:.2f}")
    print(f"training update: {u['seconds']:.3f} s (peak {gb(u['peak_bytes']):.2f} GiB) | bare fwd+bwd: "
          f"{b['seconds']:.3f} s (peak {gb(b['peak_bytes']):.2f} GiB)")
    print(f"  update / bare: {time_ratio:.2f}x  (target <= 1.5x)  {'OK' if time_ratio <= 1.5 else 'ABOVE'}")
    trl = vs_trl(args) if args.vs_trl else None
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": res, "memory_ratio": mem_ratio, "update_ratio": time_ratio,
                       "vs_trl": trl}, f, indent=2)


if __name__ == "__main__":
    main()
