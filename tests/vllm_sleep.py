"""Run by tests/test_vllm_engine.py with the stand-in vllm module first on sys.path: train.py's sampling
steps (learner.sample_from_policy, sync_sampler) with a VLLMEngine in sleep mode (--vllm-sleep-mode) on one
CPU process. The stand-in records the calls and fails on any made out of vLLM's order."""
import os
import sys

import torch
from accelerate import Accelerator

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cobalt_min.engines.vllm import VLLMEngine  # noqa: E402
from cobalt_min.generation import load_model  # noqa: E402
from cobalt_min.logprobs import LogprobModel  # noqa: E402
from cobalt_min.training.learner import Learner, sample_from_policy, sync_sampler  # noqa: E402

model_dir = sys.argv[1]
engine = VLLMEngine(model_dir, seed=0, sleep_mode=True)
tokenizer, lm = load_model(model_dir)
accelerator = Accelerator(cpu=True)
learner = Learner(accelerator, LogprobModel(lm), None, torch.optim.AdamW(lm.parameters()), tokenizer, engine, True)
prompts = [engine.prompt_ids([{"role": "user", "content": "x"}])]
for step in range(2):  # a step: sample, (the update), then the sampler follows the policy
    sample_from_policy(learner, prompts, n=2, temperature=1.0, top_p=1.0, max_new_tokens=4, seed=step)
    assert engine.asleep
    sync_sampler(learner)
