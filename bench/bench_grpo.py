"""GRPO update cost, side by side in one run (CPU or GPU).

    python bench/bench_grpo.py                      # CPU: small Qwen3-like model with the real 151,936 vocabulary
    python bench/bench_grpo.py --device cuda --hidden 1024 --layers 28 --batch 8 --prompt 2048 --completion 1024

1. token_logprobs (chunked LM head, completion positions only) vs the naive full float32 log-softmax:
   time and peak memory of forward + backward. Target: <= 1/3 of the naive peak memory.
2. One training update as train.py does it (policy log-probs with grad, reference log-probs,
   policy_loss, backward, AdamW step) vs a bare forward + backward of the same model on the same
   tokens (Hugging Face loss). Target: <= 1.5x the bare time.
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
    from cobalt_min.grpo import naive_token_logprobs, policy_loss, token_logprobs
    torch.set_num_threads(args.threads)
    model, ids, att, comp = build(args)
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    weights = torch.randn(ids.shape, device=args.device)

    def once():
        if kind == "chunked":
            (token_logprobs(model, ids, att, comp, chunk_tokens=args.chunk) * weights).sum().backward()
        elif kind == "naive":
            (naive_token_logprobs(model, ids, att, comp) * weights).sum().backward()
        elif kind == "bare":  # what any fine-tuning step costs: HF forward with labels, backward
            labels = ids.masked_fill(comp == 0, -100)
            model(input_ids=ids, attention_mask=att, labels=labels).loss.backward()
        elif kind == "update":  # train.py's update: policy + reference log-probs, loss, backward, AdamW step
            with torch.no_grad():
                ref_logp = token_logprobs(ref, ids, att, comp, chunk_tokens=args.chunk)
            logp = token_logprobs(model, ids, att, comp, chunk_tokens=args.chunk)
            adv = torch.linspace(-1, 1, ids.shape[0], device=args.device)
            loss, _ = policy_loss(logp, logp.detach(), ref_logp, adv, comp)
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


def run(kind, args):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=measure, args=(kind, args, q))
    p.start()
    p.join()
    if p.exitcode != 0:
        raise SystemExit(f"measurement {kind} failed (exit {p.exitcode})")
    return q.get()


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
    args = ap.parse_args()
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
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": res, "memory_ratio": mem_ratio, "update_ratio": time_ratio}, f,
                      indent=2)


if __name__ == "__main__":
    main()
