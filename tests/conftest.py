import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from cobalt_min import sandbox  # noqa: E402
from random_model import make_random_chat_model  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running integration test (runs in CI; skip with -m 'not slow')")


@pytest.fixture(params=["bwrap", "process"])
def isolation(request):
    """Both isolation modes; bwrap is skipped where it cannot run (CI installs it)."""
    if request.param == "bwrap" and not sandbox.bwrap_available():
        pytest.skip("bubblewrap is not available here")
    if request.param == "process" and os.geteuid() != 0:
        pytest.skip("the process mode makes namespaces: it needs root")
    return request.param


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A real (random-weight) chat model folder: byte-level tokenizer with a ChatML template and a tiny
    Llama. Loads and generates in well under a second on CPU."""
    return make_random_chat_model(tmp_path_factory.mktemp("tiny-model"))


def drop_model_weights(folder):
    """The end of a passing end-to-end test: delete the model weights and training checkpoints it wrote
    (gigabytes; pytest keeps the last three runs' folders), keeping its logs, summaries and reports."""
    for checkpoints in list(Path(folder).rglob("checkpoints")):
        shutil.rmtree(checkpoints)
    for weights in list(Path(folder).rglob("*.safetensors")):
        weights.unlink()


def tensorboard_scalars(folder) -> dict:
    """{tag: {step: value}} from the TensorBoard event files a --log-with tensorboard run wrote under folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    scalars = {}
    for events in Path(folder).rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events.parent))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            scalars.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return scalars


def tiny_lm(vocab=64, tie=False, seed=0):
    """A tiny random Qwen3 language model (2 layers, float32) built from a config."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=tie,
                      max_position_embeddings=256)
    return Qwen3ForCausalLM(cfg).float()


def rows_logprobs(model, prompts, completions, **kw):
    """completion_logprobs of one completion per prompt -> ((R, C) log-probs, (R, C) completion mask)."""
    from cobalt_min.logprobs import completion_logprobs, pack_groups
    batch = pack_groups(prompts, completions, list(range(len(prompts))), pad_id=0)
    return completion_logprobs(model, batch, **kw), batch.completion_mask


def start_script(script: str, *args):
    """Start one of the repository's scripts (collect.py, evaluate.py, ...) with this Python, output piped."""
    import subprocess
    return subprocess.Popen([sys.executable, os.path.join(ROOT, script), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
