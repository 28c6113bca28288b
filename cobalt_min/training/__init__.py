"""train.py's machinery, on any number of ranks: nothing here decides what is learned (train.py, grpo.py,
rewards.py and logprobs.py do). A reader of the paper can skip this package.

launch.py: the checks that can refuse a run before anything loads, Accelerate, --resume. data.py: the
contexts (or problems, or demonstrations) a step trains on, in a seeded epoch order. learner.py: the policy
wrapped for the ranks (DDP or FSDP2), the frozen reference, AdamW, the sampler, micro-batches and the
optimizer step. monitoring.py: each step's metrics and the validation. checkpoint.py: checkpoints and the
final policy (`python -m cobalt_min.training.checkpoint export`). sharding.py: FSDP2 shards, full weights.
"""
