"""Run by tests/test_vllm_engine.py under `torchrun --nproc_per_node 2` (gloo, CPU) with the stand-in
vllm module first on sys.path: each rank builds its VLLMEngine, samples, and pushes weights, as
train.py does on every rank. The stand-in records what vLLM was given."""
import os
import sys

import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cobalt_min.engines.vllm import VLLMEngine  # noqa: E402
from cobalt_min.generation import load_model  # noqa: E402
from cobalt_min.training.sharding import full_weights  # noqa: E402

model_dir = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
engine = VLLMEngine(model_dir, seed=0, max_num_seqs=5)
prompts = [engine.prompt_ids([{"role": "user", "content": "x" * (k + 1)}]) for k in range(3)]
engine.sample(prompts, n=2, temperature=1.0, top_p=1.0, max_new_tokens=5, seed=rank)  # a call seed per rank
_, model = load_model(model_dir)
engine.load_weights(full_weights(model))
dist.barrier()
dist.destroy_process_group()
