"""Two pieces of the demo's speed, each side by side in one run on this CPU (SmolLM2-135M-Instruct):

1. sampling one token per row (generation.sample_tokens, temperature 0.6, top-p 0.95, the demo's): the
   whole vocabulary sorted for every row (NUCLEUS_SCREEN = vocabulary) vs the nucleus looked for among
   the 64 most likely tokens first; on the model's own next-token logits for 64 rows of a demo prompt.
   The two must pick the same tokens (checked).
2. one micro-batch of train.py's update (completion_logprobs forward + backward: one demo-sized prompt
   shared by G = 8 completions) in float32 vs in bfloat16 autocast with float32 weights
   (train.py --mixed-precision bf16, what demo.sh uses where the CPU has native bf16).

    python bench/bench_demo_speed.py --rounds 5

Sides alternate within each round; printed: the median time ratio with its range over the rounds.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from cobalt_min import generation  # noqa: E402
from cobalt_min.generation import convert_gguf, find_smollm2_gguf, load_model  # noqa: E402
from cobalt_min.logprobs import completion_logprobs, pack_groups  # noqa: E402
from cobalt_min.problems import load_problems  # noqa: E402
from cobalt_min.prompts import first_turn_messages  # noqa: E402


def timed(fn, repeats):
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn()
    return (time.perf_counter() - start) / repeats, out


def report(name, a_name, b_name, pairs):
    ratios = [b / a for a, b in pairs]
    print(f"{name}: {a_name} {1e3 * statistics.median(a for a, _ in pairs):.1f} ms, {b_name} "
          f"{1e3 * statistics.median(b for _, b in pairs):.1f} ms; ratio {b_name} / {a_name}: median "
          f"{statistics.median(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f}, {len(pairs)} rounds)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="plain model folder (default: convert the bundled SmolLM2)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=500, help="the shared prompt of the update (default 500)")
    ap.add_argument("--completion-tokens", type=int, default=70, help="each of the 8 completions (default 70)")
    args = ap.parse_args()
    folder = args.model or convert_gguf(find_smollm2_gguf(), os.path.join(tempfile.mkdtemp(), "smollm2"))
    tokenizer, model = load_model(folder, dtype=torch.float32, trainable=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {folder}")

    # 1. sampling: the model's logits after a demo prompt, 64 rows
    problem = load_problems("demo", limit=1, verbose=False)[0]
    ids = generation.chat_prompt_ids(tokenizer, first_turn_messages(problem.question, problem.starter_code,
                                                                    problem.fn_name), False)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[:, -1].expand(64, -1).contiguous()
    uniforms = torch.rand(64, generator=torch.Generator().manual_seed(0))
    screen, pairs = generation.NUCLEUS_SCREEN, []
    for _ in range(args.rounds):
        generation.NUCLEUS_SCREEN = logits.shape[-1]
        full, picked_full = timed(lambda: generation.sample_tokens(logits, uniforms, 0.6, 0.95), 10)
        generation.NUCLEUS_SCREEN = screen
        screened, picked = timed(lambda: generation.sample_tokens(logits, uniforms, 0.6, 0.95), 10)
        assert torch.equal(picked, picked_full), "the screened nucleus picked other tokens"
        pairs.append((full, screened))
    report("sample_tokens, 64 rows", "whole vocabulary sorted", f"top-{screen} screen", pairs)

    # 2. one update micro-batch: a prompt shared by 8 completions, forward + backward
    model.train()
    g = torch.Generator().manual_seed(1)
    batch = pack_groups([torch.randint(0, len(tokenizer), (args.prompt_tokens,), generator=g).tolist()],
                        [torch.randint(0, len(tokenizer), (args.completion_tokens,), generator=g).tolist()
                         for _ in range(8)], [0] * 8, tokenizer.pad_token_id)

    def update(bf16):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logp = completion_logprobs(model, batch)
        logp.sum().backward()
        model.zero_grad(set_to_none=True)
    for bf16 in (False, True):  # warm-up
        update(bf16)
    pairs = []
    for r in range(args.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        times = {bf16: timed(lambda: update(bf16), 1)[0] for bf16 in order}
        pairs.append((times[False], times[True]))
    report(f"update micro-batch ({args.prompt_tokens} + 8 x {args.completion_tokens} tokens, forward + backward)",
           "float32", "bf16 autocast", pairs)


if __name__ == "__main__":
    main()
