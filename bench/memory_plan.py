"""Per-rank GPU memory of train.py --fsdp with colocated vLLM, from arithmetic the code follows. Prints a table.

    python bench/memory_plan.py                                   # Qwen3-8B on 4 x 80 GB, the paper's lengths
    python bench/memory_plan.py --ranks 8 --micro-batch-tokens 32768 --vllm-share 0.35
    python bench/memory_plan.py --config path/to/config.json      # another model (a Hugging Face config)

What each phase holds on one rank (GB = 1e9 bytes):
- always: the policy's float32 master weights and AdamW's two float32 moments, sharded over the ranks
  (sharding.shard_model); the frozen reference in the compute dtype (bf16), sharded (learner.batched_logprobs
  gives back its root unit's gathered embeddings and LM head after each pass); vLLM's share of the
  device's TOTAL memory (--vllm-gpu-memory-utilization x what the card reports: 85.2 GB for an "80 GB"
  H100): its bf16 weights, then KV cache in what is left.
- generation: nothing more (vLLM samples in its own share; the trainer's weights are not gathered).
- update: + the float32 gradient shards (freed after each optimizer step: zero_grad(set_to_none=True)),
  + two decoder layers gathered in bf16 (the one running and the one prefetched), + the root unit gathered
  in bf16 for the whole update (the LM head and final norm, and the embedding when tied to the head: FSDP2
  does not reshard a root it expects back in backward; an untied embedding is a unit of its own, gathered
  only at the start of a forward and the end of backward, not at the peak), + the LM head's gradient in
  bf16 (logprobs: built in the weight's dtype), + activations of one micro-batch (--micro-batch-size rows,
  or at most --micro-batch-tokens tokens): with --gradient-checkpointing each layer keeps its bf16 input
  (hidden size per token) and one layer's internals are alive at a time; without it every layer's internals are kept (about 34 x hidden
  bytes per token and layer for a Llama/Qwen layer in bf16, a standard estimate). Either way a prompt runs
  once for the rows that continue it (logprobs.completion_logprobs): a micro-batch of at most G rows holds
  one prompt + micro-batch x response tokens, and under checkpointing each layer also keeps the prompt's
  bf16 keys and values (the completions attend to them; the replay in backward reads them again), while
  the replayed layer repeats them for its rows. The LM head adds one chunk of float32 logits
  (--logprob-chunk x vocabulary).
- weight sync: + one full float32 parameter at a time (sharding.full_weights); the largest is the embedding.
- with --vllm-sleep-mode (train.py's): vLLM's share is held during generation only; the update has it free,
  and the push happens into vLLM's woken weights (its KV cache wakes after it).
What this leaves out: CUDA/NCCL workspace and the allocator's fragmentation (budget a few GB), the
reference log-prob pass (no gradient: smaller than the update's).
"""

import argparse
import json

QWEN3_8B = {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": False}
GB = 1e9


def parameter_counts(cfg: dict) -> dict:
    """Parameters of a Llama/Qwen3-style decoder: {'layer': one decoder layer, 'embedding': vocab x hidden,
    'total': all, counting an untied LM head}."""
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    d = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    attention = h * q + 2 * h * kv + q * h
    norms = 2 * h + (2 * d if cfg.get("model_type", "qwen3") == "qwen3" else 0)  # Qwen3 adds q/k norms
    layer = attention + 3 * h * i + norms
    embedding = v * h
    total = cfg["num_hidden_layers"] * layer + embedding + h + (0 if cfg.get("tie_word_embeddings") else embedding)
    return {"layer": layer, "embedding": embedding, "total": total}


def plan(cfg: dict, *, ranks: int, device_gb: float, vllm_share: float, prompt: int, response: int,
         micro_batch: int, checkpointing: bool, logprob_chunk: int, micro_batch_tokens: int | None = None,
         sequences: int = 512, vllm_sleep: bool = False) -> dict:
    """GB per rank in each phase (see the module docstring). micro_batch_tokens: the token budget instead of
    micro_batch rows (its worst case: all of it prompt, whose keys and values each layer keeps);
    sequences: how many a rank samples per step (vLLM's KV cache is shared by them); vllm_sleep: train.py
    --vllm-sleep-mode (vLLM holds nothing outside sampling; its weights wake for the push, then its KV cache)."""
    n = parameter_counts(cfg)
    h, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    master = 4 * n["total"] / ranks
    adam = 8 * n["total"] / ranks
    reference = 2 * n["total"] / ranks
    vllm = vllm_share * device_gb * GB
    resident = master + adam + reference + vllm
    grads = 4 * n["total"] / ranks
    gathered_layers = 2 * 2 * n["layer"]
    tokens = prompt + micro_batch * response  # one prompt, shared by the micro-batch's rows
    if micro_batch_tokens is not None:
        tokens, prompt, micro_batch = micro_batch_tokens, micro_batch_tokens, 1
    if checkpointing:
        d = cfg.get("head_dim") or h // cfg["num_attention_heads"]
        prompt_kv = prompt * 2 * cfg["num_key_value_heads"] * d * 2  # keys + values of one layer, bf16
        activations = (tokens * h * 2 * layers + prompt_kv * layers  # each layer's input, the prompt's K/V
                       + tokens * 34 * h + micro_batch * prompt_kv)  # one replayed layer, K/V repeated per row
    else:
        activations = tokens * 34 * h * layers
    head = logprob_chunk * cfg["vocab_size"] * 4 * 3  # logits, their softmax, its gradient
    untied = not cfg.get("tie_word_embeddings")  # (then the embedding is a unit of its own: sharding.shard_model)
    root = 2 * (n["total"] - layers * n["layer"] - (n["embedding"] if untied else 0))  # LM head, norm: bf16
    head_grad = 2 * n["embedding"]  # the LM head's gradient, bf16
    vllm_weights = 2 * n["total"]
    outside_sampling = resident - vllm if vllm_sleep else resident  # (asleep, vLLM gives its whole share back)
    update = outside_sampling + grads + gathered_layers + root + head_grad + activations + head
    sync = (outside_sampling + vllm_weights if vllm_sleep else resident) + 4 * n["embedding"]
    kv_per_token = 2 * layers * cfg["num_key_value_heads"] * (cfg.get("head_dim") or h // cfg["num_attention_heads"]) * 2
    return {"parameters_billion": n["total"] / 1e9,
            "resident": {"master_weights": master / GB, "adam_moments": adam / GB, "reference": reference / GB,
                         "vllm_share": vllm / GB},
            "generation_gb": resident / GB, "update_gb": update / GB, "sync_gb": sync / GB,
            "update_parts": {"gradients": grads / GB, "gathered_layers": gathered_layers / GB,
                             "gathered_root": root / GB, "lm_head_gradient": head_grad / GB,
                             "activations": activations / GB, "lm_head_chunk": head / GB},
            "vllm_kv_cache_gb": (vllm - vllm_weights) / GB,
            "vllm_kv_cache_tokens": int(max(0.0, vllm - vllm_weights) / kv_per_token),
            "vllm_kv_tokens_per_sequence": int(max(0.0, vllm - vllm_weights) / kv_per_token / sequences),
            "device_gb": device_gb}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=None, help="a model's config.json (default: Qwen3-8B's numbers)")
    ap.add_argument("--ranks", type=int, default=4, help="GPUs (default 4)")
    ap.add_argument("--device-gb", type=float, default=85.2,
                    help="memory per GPU as the card reports it, GB (default 85.2: an \"80 GB\" H100)")
    ap.add_argument("--vllm-share", type=float, default=0.3, help="--vllm-gpu-memory-utilization (default 0.3)")
    ap.add_argument("--prompt", type=int, default=10240, help="--max-prompt-tokens (default 10240)")
    ap.add_argument("--response", type=int, default=6144, help="--max-new-tokens (default 6144)")
    ap.add_argument("--micro-batch-size", type=int, default=1, help="--micro-batch-size (default 1)")
    ap.add_argument("--micro-batch-tokens", type=int, default=None, help="--micro-batch-tokens (instead of rows)")
    ap.add_argument("--sequences", type=int, default=512,
                    help="sequences a rank samples per step (default 512: 128 contexts x 16 / 4 ranks)")
    ap.add_argument("--no-checkpointing", action="store_true", help="without --gradient-checkpointing")
    ap.add_argument("--logprob-chunk", type=int, default=256, help="--logprob-chunk (default 256)")
    ap.add_argument("--vllm-sleep-mode", action="store_true", help="train.py --vllm-sleep-mode")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args()
    cfg = json.load(open(a.config)) if a.config else QWEN3_8B
    p = plan(cfg, ranks=a.ranks, device_gb=a.device_gb, vllm_share=a.vllm_share, prompt=a.prompt,
             response=a.response, micro_batch=a.micro_batch_size, checkpointing=not a.no_checkpointing,
             logprob_chunk=a.logprob_chunk, micro_batch_tokens=a.micro_batch_tokens, sequences=a.sequences,
             vllm_sleep=a.vllm_sleep_mode)
    if a.json:
        print(json.dumps(p, indent=2))
        return
    r, u = p["resident"], p["update_parts"]
    micro = f"{a.micro_batch_tokens} tokens" if a.micro_batch_tokens else f"{a.micro_batch_size} x ({a.prompt} + {a.response}) tokens"
    print(f"{p['parameters_billion']:.2f}B parameters, {a.ranks} ranks x {a.device_gb:.1f} GB, micro-batch "
          f"{micro}, checkpointing {'off' if a.no_checkpointing else 'on'}")
    print(f"  resident: master {r['master_weights']:.1f} + AdamW {r['adam_moments']:.1f} + reference {r['reference']:.1f}"
          f" + vLLM share {r['vllm_share']:.1f} GB (its KV cache: {p['vllm_kv_cache_gb']:.1f} GB, "
          f"~{p['vllm_kv_cache_tokens']:,} tokens: ~{p['vllm_kv_tokens_per_sequence']:,} per sequence when "
          f"{a.sequences} sample at once)")
    print(f"  generation  {p['generation_gb']:6.1f} GB")
    print(f"  update      {p['update_gb']:6.1f} GB  (+ gradients {u['gradients']:.1f}, gathered layers "
          f"{u['gathered_layers']:.1f}, gathered root {u['gathered_root']:.1f}, LM head gradient "
          f"{u['lm_head_gradient']:.1f}, activations {u['activations']:.1f}, LM head chunk {u['lm_head_chunk']:.1f})")
    print(f"  weight sync {p['sync_gb']:6.1f} GB")
    worst = max(p["generation_gb"], p["update_gb"], p["sync_gb"])
    print(f"  peak {worst:.1f} of {a.device_gb:.1f} GB: {'fits' if worst < 0.95 * a.device_gb else 'DOES NOT FIT'} "
          "(leave a few GB for CUDA, NCCL and fragmentation)")


if __name__ == "__main__":
    main()
