"""What train.py trains with, on any number of ranks: the policy (DDP through Accelerate, or FSDP2 shards),
the frozen reference policy, AdamW, and the sampler; how the policy samples, how a batch is cut into
micro-batches that every rank runs the same number of, the no-gradient log-prob pass, the optimizer
step that skips a non-finite gradient, and the weight push to a sampler holding its own copy. Plumbing:
nothing here changes what is learned (train.py says what is).

    tokenizer, policy_lm = load_policy(accelerator, model_path, dtype, fsdp)  # under fsdp: rank 0 reads it
    learner = make_learner(accelerator, model_path, tokenizer, policy_lm, compute_dtype, lr=..., engine="hf", ...)
    completions = sample_from_policy(learner, prompts, n=G, temperature=1.0, ...)  # completions[b][k]
    plan = micro_batches(sequences, row_ids, args, accelerator)                    # index tensors
    norm = optimizer_step(learner.policy, learner.optimizer, grad_clip)            # None: skipped
"""

import contextlib
import copy
import dataclasses
import math

import torch
from accelerate import Accelerator
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule

from cobalt_min.engines import make_engine
from cobalt_min.generation import load_model, request_seeds
from cobalt_min.logprobs import LogprobModel, SequenceBatch, enable_checkpointing
from cobalt_min.training.sharding import broadcast_from_rank0, fill_from_rank0, full_norm, full_weights, shard_model


@dataclasses.dataclass
class Learner:
    """What a training run holds: the policy being trained (DDP through Accelerate, or FSDP2 shards),
    the frozen reference policy (None without a KL term), the optimizer and the sampler."""
    accelerator: Accelerator
    policy: torch.nn.Module   # LogprobModel around the language model, wrapped for the ranks
    ref: torch.nn.Module | None
    optimizer: torch.optim.Optimizer
    tokenizer: object
    engine: object            # HFEngine or VLLMEngine
    engine_has_copy: bool     # the engine samples from its own copy of the weights (vLLM; --fsdp): push them each step
    compute_dtype: torch.dtype = torch.float32  # what forwards and backwards compute in
    nonfinite_in_a_row: int = 0  # optimizer steps skipped for a non-finite gradient norm, in a row


def frozen(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A frozen copy of `model` with its PARAMETERS in `dtype` and its buffers exactly as they are: a
    module's .to(dtype) would also cast floating buffers, such as the rotary inv_freq that Llama and Qwen
    keep in float32, and the copy would then not compute the policy's function (its KL to the policy at
    step 1, where they are the same weights, must be exactly 0). As from_pretrained(dtype=...) loads."""
    # Each parameter copied straight into `dtype` (deepcopy's memo): no transient full copy in the policy's
    # float32 (33 GB of host memory for an 8B model, per rank).
    memo = {id(p): torch.nn.Parameter(p.detach().to(dtype, copy=True), requires_grad=False)
            for p in model.parameters()}
    return copy.deepcopy(model, memo).requires_grad_(False).eval()


def load_policy(accelerator, model_path: str, dtype: torch.dtype, fsdp: bool):
    """(tokenizer, policy_lm: the language model to train) in `dtype`. Under --fsdp on several ranks only
    rank 0 reads the weights; the others build the model on the meta device (no memory) and make_learner
    fills their shards from rank 0: host memory for one full copy of the model on rank 0, not one per rank
    (65 GB per rank for an 8B model)."""
    meta = fsdp and accelerator.num_processes > 1 and not accelerator.is_main_process
    return load_model(model_path, dtype=dtype, trainable=True, meta=meta)


def make_learner(accelerator, model_path: str, tokenizer, policy_lm, compute_dtype, *, lr: float, weight_decay: float,
                 kl_coef: float, fsdp: bool, logprob_chunk: int, gradient_checkpointing: bool, engine: str,
                 engine_options: dict) -> Learner:
    """Wrap the policy for the ranks: policy_lm in a LogprobModel (Learner.policy; logprob_chunk tokens at a
    time), through Accelerate's DDP or in FSDP2 shards (fsdp); the frozen reference (only with kl_coef != 0);
    AdamW at a constant learning rate (as the paper); and the sampler: make_engine(engine, model_path,
    **engine_options), engine "vllm" (its own copy of the weights) or "hf" (the policy's weights)."""
    use_vllm = engine == "vllm"
    if gradient_checkpointing:
        enable_checkpointing(policy_lm)
    policy_lm.config.use_cache = False
    # The reference policy (only with a KL term): the initial weights, frozen, computing exactly the policy's
    # function. Under --fsdp both run in the compute dtype (FSDP2 casts the policy's weights to it), so the
    # reference is stored in it; otherwise the policy runs under Accelerate's autocast with float32 weights
    # (a float32 residual stream), and so does the reference: same weights, same arithmetic.
    ref_lm = frozen(policy_lm, compute_dtype if fsdp else policy_lm.dtype) if kl_coef != 0.0 else None
    # Under --fsdp the policy's weights are shards: the transformers engine samples from a full copy.
    sampler_lm = frozen(policy_lm, compute_dtype) if fsdp and not use_vllm else None
    if fsdp:
        # Only rank 0 read the weights (load_policy): its full ones fill every rank's shards once sharded.
        many, device = accelerator.num_processes > 1, accelerator.device
        states = [{"lm." + k: v for k, v in lm.state_dict().items()}
                  if lm is not None and many and accelerator.is_main_process else {} for lm in (policy_lm, ref_lm)]
        if sampler_lm is not None:
            sampler_lm = broadcast_from_rank0(sampler_lm, device) if many else sampler_lm.to(device)
        mesh = init_device_mesh(device.type, (accelerator.num_processes,))
        wrapped = shard_model(LogprobModel(policy_lm, logprob_chunk), mesh,
                              compute_dtype if compute_dtype != policy_lm.dtype else None)
        ref = shard_model(LogprobModel(ref_lm, logprob_chunk), mesh) if ref_lm is not None else None
        if many:
            for model, state in zip((wrapped, ref), states):
                if model is not None:
                    fill_from_rank0(model, state, device)
            del states  # (rank 0: the full weights it read go now)
    else:
        wrapped = accelerator.prepare(LogprobModel(policy_lm, logprob_chunk))  # DDP across ranks
        # (not prepared: a frozen model needs no gradient sync, and is then not saved in checkpoints)
        ref = LogprobModel(ref_lm, logprob_chunk).to(accelerator.device) if ref_lm is not None else None
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=lr, weight_decay=weight_decay)
    if use_vllm:
        sampler = make_engine("vllm", model_path, dtype=compute_dtype, **engine_options)
    else:  # the transformers engine samples with the policy's own weights (under --fsdp a full copy of them)
        sampler = make_engine("hf", model_path, model=sampler_lm if fsdp else accelerator.unwrap_model(wrapped).lm,
                              tokenizer=tokenizer, device=accelerator.device, **engine_options)
    if accelerator.is_main_process and getattr(sampler, "description", None):
        print(sampler.description, flush=True)  # (the transformers engine: which path samples, in which dtype)
    accelerator.wait_for_everyone()  # every rank's engine is up before the first collective
    return Learner(accelerator, wrapped, ref, optimizer, tokenizer, sampler, use_vllm or fsdp, compute_dtype)


# ----------------------------------------------------------------------------- sampling


@contextlib.contextmanager
def policy_sampling(learner: Learner):
    """The engine samples with the current policy's weights: the policy in eval mode, in the update's
    autocast on GPUs. On a CPU the sampler keeps float32 under --mixed-precision bf16: a decode step
    multiplies a few rows by every weight, and there oneDNN's packed float32 kernels (packed_linears) are
    about twice as fast as its bfloat16 ones, while the update's long matrices run 1.5x faster in bf16.
    vLLM in sleep mode (--vllm-sleep-mode) wakes up here with the policy's current weights and sleeps after:
    outside sampling it holds no GPU memory (every rank takes part: the weights are gathered from the shards)."""
    lm = learner.accelerator.unwrap_model(learner.policy).lm
    if getattr(learner.engine, "asleep", False):
        learner.engine.wake_up(full_weights(lm))
    lm.eval()
    cpu = learner.accelerator.device.type == "cpu"
    with learner.accelerator.autocast() if not cpu else contextlib.nullcontext():
        yield
    lm.train()
    if getattr(learner.engine, "sleep_mode", False):
        learner.engine.sleep()


def sample_from_policy(learner: Learner, prompts: list, **sampling) -> list:
    """engine.sample with the current policy's weights: completions[b][k]."""
    with policy_sampling(learner):
        return learner.engine.sample(prompts, **sampling)


def seeds_of_share(call_seed: int, n_global: int, n: int, rank: int, world: int) -> list[int]:
    """This rank's request seeds: those of its positions (rank, rank + world, ...) in the global batch of
    n_global requests. A context's samples then depend on where it stands in the batch, not on the
    number of ranks (one process draws exactly what two would)."""
    return request_seeds(call_seed, n_global, n)[rank::world]


def sync_sampler(learner: Learner) -> None:
    """The engine samples from its own copy of the weights (vLLM; the transformers engine under --fsdp):
    push the updated policy to it, one parameter at a time (every rank takes part: under FSDP each
    parameter is gathered from the shards). A sleeping vLLM gets them when it wakes up (policy_sampling)."""
    if not getattr(learner.engine, "asleep", False):
        learner.engine.load_weights(full_weights(learner.accelerator.unwrap_model(learner.policy).lm))


# ----------------------------------------------------------------------------- forward, backward, step


def micro_batches(sequences: SequenceBatch, row_ids: torch.Tensor, args, accelerator) -> list:
    """The rows `row_ids` in micro-batches (index tensors): --micro-batch-size rows each, or with
    --micro-batch-tokens as many whole contexts as fit in that many tokens, a context's prompt counted once
    (its rows share it in the forward); a context larger than the budget is split into runs of rows. Every
    rank gets as many micro-batches (under FSDP each forward is a collective): one with fewer halves its
    largest until it has as many. Rows are in context order (a context's rows are consecutive)."""
    if args.micro_batch_tokens is None:
        return [row_ids[i:i + args.micro_batch_size] for i in range(0, len(row_ids), args.micro_batch_size)]
    budget, index = args.micro_batch_tokens, sequences.prompt_index.tolist()
    prompt_len, row_len = sequences.prompt_mask.sum(1).tolist(), sequences.completion_mask.sum(1).tolist()
    contexts = []  # runs of consecutive rows continuing one prompt
    for r in row_ids.tolist():
        if contexts and index[contexts[-1][-1]] == index[r]:
            contexts[-1].append(r)
        else:
            contexts.append([r])
    plan, cost = [], 0
    for ctx in contexts:
        prompt = prompt_len[index[ctx[0]]]
        if not plan or cost + prompt + sum(row_len[r] for r in ctx) > budget:
            plan.append([])  # the whole context in a micro-batch of its own when it does not fit this one
            cost = 0
        for k, r in enumerate(ctx):
            add = row_len[r] + (prompt if k == 0 else 0)
            if plan[-1] and cost + add > budget:  # a context over the budget: a new run of its rows
                plan.append([])
                cost, add = 0, row_len[r] + prompt
            plan[-1].append(r)
            cost += add
    plan = [p for p in plan if p]
    most = int(accelerator.gather(torch.tensor([len(plan)], device=accelerator.device)).max())
    while len(plan) < most:
        k = max(range(len(plan)), key=lambda i: len(plan[i]))
        plan[k:k + 1] = [plan[k][:len(plan[k]) // 2], plan[k][len(plan[k]) // 2:]]
    return [torch.tensor(p, device=row_ids.device) for p in plan]


def batched_logprobs(model, batch: SequenceBatch, temperature, plan: list) -> torch.Tensor:
    """Completion token log-probs of every row, one forward per micro-batch of `plan` (no gradient) -> (R, C)."""
    out = torch.zeros(batch.completion_ids.shape, dtype=torch.float32, device=batch.completion_ids.device)
    with torch.no_grad():
        for row_ids in plan:
            logp = model(*batch.select(row_ids).fields(), temperature)
            out[row_ids, :logp.shape[1]] = logp
    if isinstance(model, FSDPModule):
        model.reshard()  # FSDP2 keeps its root unit (embeddings, LM head) gathered after a forward, for the
        # backward it expects: a no-gradient pass has none (the reference's would stay gathered all run long)
    return out


def optimizer_step(policy: torch.nn.Module, optimizer, grad_clip: float) -> float | None:
    """Clip the gradients to grad_clip and take the optimizer step; the gradient norm, or None when it is
    not finite (one NaN or inf anywhere would make every weight NaN for the rest of the run): then the
    step is skipped, as the authors' veRL does. The norm is the global one on every rank (DDP's gradients
    are already averaged, FSDP2's clip_grad_norm_ reduces it), so the ranks agree without a collective."""
    norm = full_norm(torch.nn.utils.clip_grad_norm_(policy.parameters(), grad_clip))
    finite = math.isfinite(norm)
    if finite:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm if finite else None


def count_nonfinite(learner: Learner, norm: float | None, most_in_a_row: int) -> None:
    """Count an optimizer step skipped for a non-finite gradient norm (None); stop the run after
    `most_in_a_row` of them in a row (--max-nonfinite-steps). A finite norm resets the count."""
    if norm is not None:
        learner.nonfinite_in_a_row = 0
        return
    learner.nonfinite_in_a_row += 1
    if learner.nonfinite_in_a_row >= most_in_a_row:
        raise SystemExit(f"error: {learner.nonfinite_in_a_row} optimizer steps in a row had a non-finite "
                         "gradient norm (NaN or inf) and were skipped: the run stops (its last checkpoint "
                         "is kept). Lower --lr, check the data, or raise --max-nonfinite-steps.")
