"""Random-weight chat models saved as real Hugging Face folders, for checks on machines that cannot
download weights (tests, bench/gpu_check.py): a byte-level BPE tokenizer with a ChatML template, and a
Llama, Qwen2 or Qwen3 model of any size built from its config."""
import os


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def chatml_tokenizer():
    """A byte-level tokenizer (256 bytes + 3 specials), no merges: every text is encodable, nothing to download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
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
    return hf_tok


def make_random_chat_model(path, *, seed=0, family="llama", layers=2, hidden=32, heads=4, kv_heads=2,
                           head_dim=None, logit_scale=1.0, dtype=None):
    """Save a random chat model folder at `path` and return it (a str). logit_scale multiplies the
    (untied) LM head: a random model's next-token logits are nearly flat, so greedy decoding flips with
    rounding noise between two kernels; spread logits make greedy tokens comparable across engines."""
    import torch
    from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                              Qwen3ForCausalLM)
    tok = chatml_tokenizer()
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<pad>")
    config_cls, model_cls = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
                             "qwen3": (Qwen3Config, Qwen3ForCausalLM)}[family]
    cfg = config_cls(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                     num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim or hidden // heads,
                     max_position_embeddings=8192, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
                     tie_word_embeddings=logit_scale == 1.0)
    torch.manual_seed(seed)
    model = model_cls(cfg)
    with torch.no_grad():  # biases (Qwen2's q, k and v) start at zero: random ones, so that they count
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.normal_(0.0, 0.5)
    if logit_scale != 1.0:
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(logit_scale)
    if dtype is not None:
        model.to(dtype)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)
