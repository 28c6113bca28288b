import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from cobalt_min import sandbox  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running integration test (runs in CI; skip with -m 'not slow')")


@pytest.fixture(params=["bwrap", "process"])
def isolation(request):
    """Both isolation modes; bwrap is skipped where it cannot run (CI installs it)."""
    if request.param == "bwrap" and not sandbox.bwrap_available():
        pytest.skip("bubblewrap is not available here")
    return request.param


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def make_tiny_chat_model(path, seed=0, layers=2, hidden=32):
    """A real (random-weight) chat model folder: byte-level BPE tokenizer with a ChatML template and a
    tiny Llama. Loads and generates in well under a second on CPU."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {c: i for i, c in enumerate(sorted(alphabet))}
    for special in ("<|im_start|>", "<|im_end|>", "<pad>"):
        vocab[special] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>", "<pad>"])
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>")
    hf_tok.chat_template = CHATML
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=8192, eos_token_id=vocab["<|im_end|>"], pad_token_id=vocab["<pad>"],
                      bos_token_id=None, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    model.generation_config.eos_token_id = vocab["<|im_end|>"]
    model.generation_config.pad_token_id = vocab["<pad>"]
    model.save_pretrained(path)
    hf_tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return make_tiny_chat_model(tmp_path_factory.mktemp("tiny-model"))
