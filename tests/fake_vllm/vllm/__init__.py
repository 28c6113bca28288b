"""A stand-in for the vllm package (tests only; vLLM needs a GPU): LLM and SamplingParams record the
arguments they are given in $FAKE_VLLM_LOG/rank<RANK>.json and answer with fixed completions."""
import json
import os
from types import SimpleNamespace

_LOG = {"llm": None, "sampling": [], "rpc": [], "reset_prefix_cache": 0, "calls": []}


def _save():
    path = os.path.join(os.environ["FAKE_VLLM_LOG"], f"rank{os.environ.get('RANK', '0')}.json")
    with open(path, "w") as f:
        json.dump(_LOG, f)


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class LLM:
    def __init__(self, model, **kwargs):
        from transformers import AutoTokenizer
        _LOG["llm"] = dict(kwargs, model=model, env_multiprocessing=os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING"))
        self._kwargs = kwargs
        self._tokenizer = AutoTokenizer.from_pretrained(model)
        _save()

    def get_tokenizer(self):
        return self._tokenizer

    asleep = set()  # what sleep mode has discarded: "weights", "kv_cache" (vLLM's tags)

    def sleep(self, level=1):
        assert self._kwargs.get("enable_sleep_mode") and not self.asleep, "sleep without sleep mode, or twice"
        self.asleep = {"weights", "kv_cache"}
        _LOG["calls"].append(f"sleep:{level}")
        _save()

    def wake_up(self, tags=None):
        for tag in tags or ["weights", "kv_cache"]:
            assert tag in self.asleep, f"wake_up({tag}) while awake"
            assert tag != "kv_cache" or "weights" not in self.asleep, "the KV cache woken before the weights"
            self.asleep = self.asleep - {tag}
            _LOG["calls"].append(f"wake_up:{tag}")
        _save()

    def generate(self, prompts, params, use_tqdm=True):
        assert not self.asleep, "generate while asleep"
        _LOG["calls"].append("generate")
        params = params if isinstance(params, list) else [params] * len(prompts)
        _LOG["sampling"].append([p.kwargs for p in params])
        _save()
        return [SimpleNamespace(outputs=[SimpleNamespace(text="```python\nprint(1)\n```", token_ids=[1, 2],
                                                         finish_reason="stop") for _ in range(p.kwargs["n"])])
                for p in params]

    def collective_rpc(self, method, kwargs=None, **_):
        assert "weights" not in self.asleep, "weights pushed into memory that sleep gave back"
        _LOG["calls"].append(method)
        names = [name for name, _ in kwargs["weights_iterator"]]
        _LOG["rpc"].append({"method": method, "names": names, "is_checkpoint_format": kwargs["is_checkpoint_format"]})
        _save()

    def reset_prefix_cache(self):
        _LOG["calls"].append("reset_prefix_cache")
        _LOG["reset_prefix_cache"] += 1
        _save()
        return True
