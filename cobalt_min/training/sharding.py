"""train.py --fsdp: the policy and the reference split over the ranks (FSDP2), and the policy's weights
streamed to a sampler that holds its own copy (vLLM, or the transformers engine under --fsdp).
Plumbing: nothing here changes what is learned.

    mesh = init_device_mesh(device_type, (world,))
    shard_model(LogprobModel(lm), mesh, compute_dtype=torch.bfloat16)  # each decoder layer, then the rest
    engine.load_weights(full_weights(lm))                              # one parameter at a time

FSDP2 (torch.distributed.fsdp.fully_shard) is applied here, by train.py itself, not by an accelerate
FSDP config: accelerate turns FSDP on only for GPU-like devices, and train.py's sharded path must run
the same way on CPU ranks (gloo, in the tests) as on GPUs (NCCL). Each decoder layer is one unit:
its weights are gathered just before its forward (and again in backward) and freed after, so a rank
holds its 1/world share of every weight, gradient and optimizer state plus one layer in full (and the
root unit: the LM head, shard_model says why).
"""

import itertools
from collections.abc import Iterator

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor


def shard_model(model: torch.nn.Module, mesh, compute_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """Shard a LogprobModel in place with FSDP2 over `mesh`: each decoder layer of model.lm is one unit; so
    is the input embedding unless the LM head shares its weight (then gathered for the lookup at the start
    of a forward and again for its gradient at the end of backward, instead of through the whole step:
    vocabulary x hidden, 1.2 GB in bf16 for Qwen3-8B); the rest (final norm, LM head, a tied embedding) is
    the root unit. The LM head stays in the root: the chunked head (logprobs._ChunkedTokenLogprob) reads its
    weight outside the head's own forward, and that weight is needed from the end of the forward through
    the start of backward, where memory peaks, in any case.
    compute_dtype (e.g. bfloat16): weights are cast to it for forward and backward while the sharded master
    weights and the optimizer state keep their own dtype; gradients are reduced in float32. Returns the
    model (now FSDP-managed)."""
    policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32 if compute_dtype else None)
    for layer in model.lm.get_decoder().layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    embedding, head = model.lm.get_input_embeddings(), model.lm.get_output_embeddings()
    if head is None or embedding.weight is not head.weight:
        fully_shard(embedding, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def fill_from_rank0(model: torch.nn.Module, full_state: dict, device) -> None:
    """Every rank's shards of a model that only rank 0 read from disk (learner.load_policy): rank 0 passes its
    full weights (`full_state`, taken before sharding), the others {} and a model built on the meta device,
    which gets memory for its shards here. The weights go one tensor at a time from rank 0 into the shards
    (set_model_state_dict, broadcast_from_rank0), then the buffers, which are not sharded and, when not
    persistent (the rotary inv_freq), in no state dict. A collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    if any(t.is_meta for t in itertools.chain(model.parameters(), model.buffers())):
        model.to_empty(device=device)
    set_model_state_dict(model, full_state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    for buffer in model.buffers():
        torch.distributed.broadcast(buffer, src=0)


def broadcast_from_rank0(model: torch.nn.Module, device) -> torch.nn.Module:
    """A full (unsharded) copy of a Hugging Face model that only rank 0 read from disk, on every rank: the
    others' meta copy gets memory, then every parameter and buffer comes from rank 0. Returns it on `device`."""
    if any(t.is_meta for t in model.parameters()):
        model = model.to_empty(device=device)
        model.tie_weights()  # (to_empty makes a new tensor for each module's parameter, a tied one too)
    else:
        model = model.to(device)
    for t in itertools.chain(model.parameters(), model.buffers()):
        torch.distributed.broadcast(t.data, src=0)
    return model


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether the model's weights are FSDP2 shards (DTensors)."""
    return any(isinstance(p, DTensor) for p in model.parameters())


def full_weights(lm: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full weight) of every parameter of a Hugging Face model, one at a time: a sharded one is
    gathered from all ranks for this item only, so a rank never holds more than one full parameter
    beyond its shards (the largest, the embedding, is vocabulary x hidden). Under sharding every
    rank must consume the whole stream in the same order: each item is a collective. Names are the
    model's own (no wrapper prefixes: FSDP2 and the unwrapped DDP model add none); a tied LM head is
    not repeated (it is the embedding)."""
    for name, p in lm.named_parameters():
        yield name, (p.full_tensor() if isinstance(p, DTensor) else p).detach()


def full_norm(norm: torch.Tensor) -> float:
    """A gradient norm as a float: under FSDP2 clip_grad_norm_ returns a DTensor of the global norm."""
    return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)
