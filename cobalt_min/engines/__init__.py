"""Which engine samples, and building it: --engine auto|vllm|hf|api in every script.

    engine = make_engine("auto", "Qwen/Qwen3-8B")                 # vLLM if importable and a GPU is present
    engine = make_engine("hf", "path/or/hub-id", gguf_file=None)   # transformers, our decode loop (CPU or GPU)
    engine = make_engine("api", "served-name", api_base="http://127.0.0.1:8000/v1")   # an OpenAI-compatible server
    texts = engine.generate(conversations, n=4, temperature=0.6, top_p=0.95, max_new_tokens=512, seed=0)

Above the three engines: generation.HFEngine (transformers, our own decode loop), vllm.py's VLLMEngine and
api.py's APIEngine (this package), none of which imports make_engine. train.py's learner, collect.py,
evaluate.py and perturb.py build theirs through make_engine.
"""

from cobalt_min.engines.api import APIEngine
from cobalt_min.engines.vllm import VLLMEngine, require_vllm, vllm_usable
from cobalt_min.generation import HFEngine, check_stop_rule, gguf_location


def engine_kind(kind: str, model_path: str) -> str:
    """--engine auto|vllm|hf -> "vllm" or "hf": auto takes vLLM when usable, never for GGUF checkpoints
    (vLLM reads them only through a plugin); an explicit vllm is checked here."""
    if kind not in ("auto", "vllm", "hf"):
        raise SystemExit(f"error: --engine must be auto, vllm, hf or api, not {kind!r}")
    gguf = str(model_path).endswith(".gguf")
    if kind == "vllm":
        if gguf:
            raise SystemExit("error: vLLM does not load GGUF checkpoints here: convert the model first "
                             "(python -m cobalt_min.generation OUT_FOLDER --gguf FILE) or use --engine hf.")
        require_vllm()
        return "vllm"
    return "vllm" if kind == "auto" and vllm_usable() and not gguf else "hf"


def make_engine(kind: str, model_path: str, **kw):
    """kind: auto (vLLM when usable, else transformers), vllm, hf, or api (model_path: the model's name on the
    server at kw["api_base"]). Each engine takes the keywords it knows; hf may also take a loaded `model` and
    its `tokenizer` (train.py's sampler shares the policy's weights)."""
    if kind == "api":
        if not kw.get("api_base"):
            raise SystemExit("error: --engine api needs --api-base URL (the server's OpenAI-compatible base URL, "
                             "e.g. http://127.0.0.1:8000/v1)")
        akw = {k: kw[k] for k in ("key_env", "concurrency", "retries", "timeout", "thinking", "stop_after_code")
               if kw.get(k) is not None}
        return APIEngine(kw["api_base"], model_path, **akw)
    folder, gguf_file = gguf_location(model_path, kw.get("gguf_file"))
    if engine_kind(kind, gguf_file or model_path) == "vllm":
        check_stop_rule(kw.get("stop_after_code", False))
        vkw = {k: kw[k] for k in ("thinking", "tensor_parallel_size", "gpu_memory_utilization", "dtype", "seed",
                                  "max_model_len", "max_num_seqs", "sleep_mode") if k in kw}
        return VLLMEngine(model_path, **vkw)
    hkw = {k: kw[k] for k in ("thinking", "dtype", "device", "batch_size", "stop_after_code", "model", "tokenizer",
                              "decode", "kv_cache_gb") if kw.get(k) is not None}
    return HFEngine(folder, gguf_file=gguf_file, **hkw)
