"""GPU performance of the training update and of the transformers generation engine, in one run.

    python bench/bench_gpu.py --json gpu.json            # on one GPU (H200: about 8 minutes)
    python bench/bench_gpu.py --quick --json gpu.json    # the 0.6B figures only (bench/gpu_check.py runs this)
    python bench/bench_gpu.py --tiny --device cpu        # the same code paths on tiny models (a smoke test)

Random-init models built from configs (no download): a Qwen3-0.6B-like and a Qwen3-8B-like model,
vocabulary 151,936, bf16 weights, sdpa attention. Measured:
- the bf16 matmul peak of this GPU (the MFU denominator);
- train.py's update path: completion_logprobs with grad (LogprobModel's forward: chunked LM head),
  reference log-probs,
  policy_loss, backward, AdamW step; gradient checkpointing for the 8B; prompt + completion lengths
  as in the paper (prompt 2-4k, completion 1-2k tokens). MFU counts 6 N T for the policy's forward
  and backward plus 2 N T for the reference forward (N = parameters without the input embedding,
  T = tokens), plus causal attention, against the measured peak;
- generation at batch 64: HFEngine.sample (our decode loop) vs plain `model.generate`, tokens/s.
Prints a table and writes JSON (--json).
"""

import argparse
import copy
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

CONFIGS = {  # Qwen3 shapes (random weights)
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, tie_word_embeddings=True),
}


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def matmul_peak(device, n=8192, iters=50) -> float:
    """Measured bf16 matmul TFLOP/s (the ceiling MFU is computed against)."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        a @ b
    sync(device)
    return 2 * n ** 3 * iters / (time.perf_counter() - start) / 1e12


def build(name, device, vocab):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=vocab, max_position_embeddings=8192, attn_implementation="sdpa", **CONFIGS[name])
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg).to(dtype)
    return model


def model_flops(model, batch, prompt, completion):
    """Training FLOPs of one update: (6 + 2) N T + causal attention for policy fwd/bwd and ref fwd."""
    cfg = model.config
    n = sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()
    T = batch * (prompt + completion)
    seq = prompt + completion
    attn = 2 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim * seq * T  # causal: half of 4 L H d s T
    return (6 + 2) * n * T + (3 + 1) * attn, n


def bench_update(name, device, vocab, batch, prompt, completion, checkpointing, repeats):
    from cobalt_min.grpo import policy_loss
    from cobalt_min.logprobs import completion_logprobs, enable_checkpointing, pack_groups
    model = build(name, device, vocab)
    if checkpointing:
        enable_checkpointing(model)
    model.config.use_cache = False
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01)
    ids = torch.randint(0, vocab, (batch, prompt + completion)).tolist()
    rows = pack_groups([r[:prompt] for r in ids], [r[prompt:] for r in ids], list(range(batch)), 0, device=device)
    adv = torch.linspace(-1, 1, batch, device=device)

    def step():
        with torch.no_grad():
            ref_logp = completion_logprobs(ref, rows)
        logp = completion_logprobs(model, rows)
        loss, _ = policy_loss(logp, logp.detach(), ref_logp, adv, rows.completion_mask)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up, optimizer state
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    sync(device)
    seconds = (time.perf_counter() - start) / repeats
    flops, n = model_flops(model, batch, prompt, completion)
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if device == "cuda" else float("nan")
    del model, ref, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"model": name, "params_non_embedding": n, "batch": batch, "prompt": prompt, "completion": completion,
            "checkpointing": checkpointing, "seconds": seconds, "tokens_per_s": batch * (prompt + completion) / seconds,
            "tflops": flops / seconds / 1e12, "peak_gib": peak}


def bench_generate(name, device, vocab, batch, prompt, new_tokens, kind):
    """kind "engine": HFEngine.sample; "generate": plain model.generate, same prompts and lengths."""
    from cobalt_min.generation import HFEngine

    class Tok:  # the engine only needs ids here: prompts are token ids already
        pad_token_id = 0
        eos_token_id = vocab + 1  # never sampled: every sequence runs to new_tokens

        def decode(self, ids, skip_special_tokens=True):
            return ""
    model = build(name, device, vocab).eval()
    model.generation_config.eos_token_id = Tok.eos_token_id
    engine = HFEngine("", model=model, tokenizer=Tok(), device=device, batch_size=batch)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, vocab, (prompt,), generator=g).tolist() for _ in range(batch)]

    def run(ps, n_new):
        if kind == "engine":
            return sum(len(c[0].token_ids) for c in engine.sample(ps, n=1, temperature=1.0, top_p=1.0,
                                                                   max_new_tokens=n_new, seed=0))
        ids = torch.tensor(ps, device=device)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                                 top_p=1.0, top_k=0, max_new_tokens=n_new, min_new_tokens=n_new, pad_token_id=0)
        return (out.shape[1] - ids.shape[1]) * ids.shape[0]
    run(prompts[:2], 8)  # warm-up
    sync(device)
    start = time.perf_counter()
    tokens = run(prompts, new_tokens)
    sync(device)
    seconds = time.perf_counter() - start
    del model, engine
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"model": name, "batch": batch, "prompt": prompt, "new_tokens": new_tokens, "kind": kind,
            "seconds": seconds, "tokens_per_s": tokens / seconds}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny models and lengths: check the code paths anywhere")
    ap.add_argument("--quick", action="store_true", help="the 0.6B update and generation only (about 2 minutes)")
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    dev = args.device
    if args.tiny:
        updates = [("tiny", 2, 64, 32, False), ("tiny", 2, 64, 32, True)]
        gen = [("tiny", 4, 16, 16)]
        vocab, peak_n = 1000, 512
    else:
        updates = [("qwen3-0.6b", 8, 1024, 1024, False)] + ([] if args.quick else [("qwen3-8b", 2, 2048, 2048, True)])
        gen = [("qwen3-0.6b", 64, 512, 256 if args.quick else 512)]
        vocab, peak_n = args.vocab, 8192
    results = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
               "peak_tflops": matmul_peak(dev, peak_n)}
    print(f"{results['device']}: measured matmul peak {results['peak_tflops']:.0f} TFLOP/s")
    results["updates"] = []
    for name, b, p, c, ckpt in updates:
        r = bench_update(name, dev, vocab, b, p, c, ckpt, args.repeats)
        r["mfu"] = r["tflops"] / results["peak_tflops"]
        results["updates"].append(r)
        print(f"update {name:11s} {b} x ({p}+{c}) ckpt={ckpt!s:5}: {r['tokens_per_s']:9.0f} tokens/s  "
              f"MFU {100 * r['mfu']:5.1f}%  peak {r['peak_gib']:.1f} GiB")
    results["generation"] = []
    for name, b, p, n in gen:
        for kind in ("generate", "engine"):
            r = bench_generate(name, dev, vocab, b, p, n, kind)
            results["generation"].append(r)
            print(f"{kind:8s} {name} batch {b}: {r['tokens_per_s']:8.0f} tokens/s")
    plain, ours = results["generation"][0], results["generation"][1]
    print(f"engine / plain generate: {ours['tokens_per_s'] / plain['tokens_per_s']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
