"""Run by tests/test_distributed.py under `torchrun --nproc_per_node 2` (gloo, CPU): the pieces of
train.py --fsdp, with the functions train.py calls, against the unsharded model. Prints "fsdp pieces ok"."""
import copy
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from accelerate import Accelerator  # noqa: E402

from cobalt_min.cli import end_rank  # noqa: E402
from cobalt_min.generation import load_model  # noqa: E402
from cobalt_min.logprobs import LogprobModel, pack_groups  # noqa: E402
from cobalt_min.training.checkpoint import save_final_policy  # noqa: E402
from cobalt_min.training.sharding import (broadcast_from_rank0, fill_from_rank0, full_norm,  # noqa: E402
                                          full_weights, shard_model)

accelerator = Accelerator(cpu=True)
assert accelerator.num_processes == 2 and dist.get_world_size() == 2
tokenizer, lm = load_model(sys.argv[1], dtype=torch.float32)
plain = copy.deepcopy(lm)  # the unsharded model, for comparison
mesh = init_device_mesh("cpu", (2,))
policy = shard_model(LogprobModel(lm, chunk_tokens=5), mesh)
ref = shard_model(LogprobModel(copy.deepcopy(plain).requires_grad_(False).eval(), chunk_tokens=5), mesh)

# 1. Every weight of policy and reference is a shard on this rank's device, split over both ranks.
for model in (policy, ref):
    for p in model.parameters():
        assert isinstance(p, DTensor) and p.device_mesh.size() == 2 and p.to_local().device.type == accelerator.device.type

# 2. Log-probs and their gradients equal the unsharded model's (each rank its own rows, as in train.py).
batch = pack_groups([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14], [15, 16], [17, 18, 19, 20]], [0, 0, 1, 1], 0)
rows = torch.arange(dist.get_rank(), 4, 2)
mine = batch.select(rows)
logp = policy(*mine.fields(), 0.7)
want = LogprobModel(plain, chunk_tokens=5)(*mine.fields(), 0.7)
assert torch.allclose(logp, want, atol=1e-5), (logp, want)
with torch.no_grad():
    assert torch.allclose(ref(*mine.fields(), 0.7), want, atol=1e-5)
# A no-gradient forward leaves FSDP2's root unit (embeddings, LM head) gathered; learner.batched_logprobs
# gives its shards back (the reference would otherwise hold them all run long).
assert not all(isinstance(p, DTensor) for p in ref.parameters())
from cobalt_min.training.learner import batched_logprobs  # noqa: E402
assert torch.allclose(batched_logprobs(ref, mine, 0.7, [torch.arange(len(rows))]), want, atol=1e-5)
assert all(isinstance(p, DTensor) for p in ref.parameters())
logp.sum().backward()  # FSDP averages the ranks' gradients: that of the whole batch's sum / 2
whole = LogprobModel(plain, chunk_tokens=5)(*batch.fields(), 0.7)
(whole.sum() / 2).backward()
norm = full_norm(torch.nn.utils.clip_grad_norm_(policy.parameters(), 1e9))
want_norm = float(torch.nn.utils.clip_grad_norm_(plain.parameters(), 1e9))
assert abs(norm - want_norm) < 1e-4 * max(1.0, want_norm), (norm, want_norm)
for (name, p), q in zip(policy.lm.named_parameters(), plain.parameters()):
    assert torch.allclose(p.grad.full_tensor(), q.grad, atol=1e-5), name

# 3. The weight stream: lazy (a generator), one full parameter per item, all of them, the model's names.
stream = full_weights(policy.lm)
assert iter(stream) is stream
largest = max(p.numel() for p in plain.parameters())
names = []
for name, tensor in stream:
    assert not isinstance(tensor, DTensor) and tensor.numel() <= largest
    assert torch.equal(tensor, dict(plain.named_parameters())[name])
    names.append(name)
    del tensor  # one full parameter alive at a time
assert names == [n for n, _ in plain.named_parameters()]

# 4. The gathered final save loads as the unsharded model.
folder = os.path.join(tempfile.gettempdir(), f"fsdp-final-{os.environ['MASTER_PORT']}")
save_final_policy(accelerator, policy, tokenizer, folder)
if accelerator.is_main_process:
    _, saved = load_model(folder, dtype=torch.float32)
    for (name, p), q in zip(saved.named_parameters(), plain.parameters()):
        assert torch.equal(p, q), name
    shutil.rmtree(folder)
accelerator.wait_for_everyone()

# 5. Only rank 0 reads the weights (learner.load_policy): rank 1 builds the model on the meta device and
#    fill_from_rank0 gives it its shards and the buffers (the rotary inv_freq is in no state dict): the same
#    as the shards of a model both ranks read; broadcast_from_rank0 makes a full copy the same way.
_, lm2 = load_model(sys.argv[1], dtype=torch.float32, meta=not accelerator.is_main_process)
assert all(p.is_meta for p in lm2.parameters()) == (not accelerator.is_main_process)
state = {"lm." + k: v for k, v in lm2.state_dict().items()} if accelerator.is_main_process else {}
full_copy = broadcast_from_rank0(copy.deepcopy(lm2), accelerator.device)
filled = shard_model(LogprobModel(lm2, chunk_tokens=5), mesh)
fill_from_rank0(filled, state, accelerator.device)
assert len(list(filled.parameters())) == len(list(ref.parameters())) and len(list(full_copy.parameters())) == \
    len(list(plain.parameters()))  # a tied LM head still the embedding
for (name, p), q in zip(filled.named_parameters(), ref.parameters()):  # ref: sharded from the model as read
    assert torch.equal(p.to_local(), q.to_local()), name
for model in (filled.lm, full_copy):
    for (name, b), c in zip(model.named_buffers(), plain.buffers()):
        assert b.dtype == c.dtype == torch.float32 and torch.equal(b, c), name
for (name, p), q in zip(full_copy.named_parameters(), plain.parameters()):
    assert torch.equal(p, q), name

# 6. An untied model: its input embedding is a unit of its own, sharded again while the decoder layers run
#    (in the root unit it stayed gathered from the first forward to the end of backward), with log-probs and
#    gradients unchanged; a tied one stays in the root (sections 1-2: its embedding is the LM head).
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402
config = AutoConfig.from_pretrained(sys.argv[1])
config.tie_word_embeddings = False
torch.manual_seed(0)
untied = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
untied_plain = copy.deepcopy(untied)
sharded = shard_model(LogprobModel(untied, chunk_tokens=5), mesh)
embedding = sharded.lm.get_input_embeddings()
seen = []  # per decoder-layer forward: whether the embedding's weight is its shard (a DTensor) or gathered
for layer in sharded.lm.get_decoder().layers:
    layer.register_forward_pre_hook(lambda *_: seen.append(isinstance(embedding.weight, DTensor)))
logp = sharded(*mine.fields(), 0.7)
assert seen and all(seen), seen
assert not isinstance(sharded.lm.get_output_embeddings().weight, DTensor)  # the root (LM head) is gathered
assert torch.allclose(logp, LogprobModel(untied_plain, chunk_tokens=5)(*mine.fields(), 0.7), atol=1e-5)
logp.sum().backward()
(LogprobModel(untied_plain, chunk_tokens=5)(*batch.fields(), 0.7).sum() / 2).backward()
for (name, p), q in zip(sharded.lm.named_parameters(), untied_plain.parameters()):
    assert isinstance(p, DTensor) and torch.allclose(p.grad.full_tensor(), q.grad, atol=1e-5), name
print("fsdp pieces ok", flush=True)
end_rank()  # as train.py ends (a rank leaving through the interpreter's shutdown may abort: cli.py says why)
