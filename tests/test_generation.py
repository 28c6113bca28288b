"""The transformers engine samples exactly softmax(logits / T) within top-p, one random stream per
request, whatever the batch, the padding, the KV cache or the model's generation_config."""
import contextlib
import os
from pathlib import Path

import pytest
import torch

from cobalt_min.generation import HFEngine, request_seeds, sample_tokens


@pytest.mark.parametrize("vocab", [5, 300])
def test_sample_tokens_draws_the_nucleus_distribution_exactly(vocab):
    # vocab 300: a flat tail, so that some nuclei reach beyond the NUCLEUS_SCREEN most likely tokens
    # (the whole vocabulary is ordered) and others do not (only the screen is)
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0] + [-0.5 + 0.001 * i for i in range(vocab - 5)]])
    n = 20000
    uniforms = (torch.arange(n, dtype=torch.float64) + 0.5) / n  # an even grid: counts = n * probabilities
    for temperature, top_p in [(1.0, 1.0), (0.7, 1.0), (1.0, 0.8), (1.3, 0.5), (0.2, 0.9), (0.2, 0.999)]:
        probs = torch.softmax(logits[0] / temperature, -1)
        ranked = probs.argsort(descending=True).tolist()
        kept, mass = [], 0.0
        for t in ranked:  # the smallest set of most likely tokens whose mass reaches top_p
            kept.append(t)
            mass += probs[t].item()
            if mass >= top_p:
                break
        expected = torch.zeros_like(probs)
        expected[kept] = probs[kept] / probs[kept].sum()
        picks = sample_tokens(logits.expand(n, -1), uniforms, temperature, top_p)
        counts = torch.bincount(picks, minlength=vocab).double() / n
        assert torch.allclose(counts, expected.double(), atol=2 / n), (temperature, top_p, counts, expected)
    assert sample_tokens(logits, torch.tensor([0.99]), 0.0, 0.5).tolist() == [0]  # temperature 0: argmax
    rows, u = torch.cat([logits * 5, logits]), torch.tensor([0.3, 0.7])  # one row ordered alone, one not: same draws
    assert sample_tokens(rows, u, 1.0, 0.9).tolist() == [sample_tokens(rows[k:k + 1], u[k:k + 1], 1.0, 0.9).item()
                                                         for k in range(2)]


def reference_sample(model, prompt, seed, temperature, top_p, max_new_tokens, eos):
    """The definition: one sequence, no padding, no cache, a full forward per token."""
    generator = torch.Generator().manual_seed(seed)
    ids, out = list(prompt), []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(input_ids=torch.tensor([ids])).logits[:, -1]
            u = torch.rand((), generator=generator).reshape(1)
            t = sample_tokens(logits, u, temperature, top_p).item()
            out.append(t)
            ids.append(t)
            if t in eos:
                break
    return out


def _prompts(engine):
    convs = [[{"role": "user", "content": text}] for text in ("a", "a much longer question here", "mid one")]
    return [engine.prompt_ids(c) for c in convs]


@pytest.mark.parametrize("decode", ["plain", "fast"])
def test_engine_samples_equal_the_definition_whatever_the_batch(tiny_model_dir, decode):
    engine = HFEngine(tiny_model_dir, device="cpu", batch_size=8, decode=decode, dtype="float32")
    prompts = _prompts(engine)
    kw = dict(n=3, temperature=1.0, top_p=0.9, max_new_tokens=12, seed=5)
    batched = engine.sample(prompts, **kw)
    engine.batch_size = 1
    assert [[c.token_ids for c in cs] for cs in engine.sample(prompts, **kw)] == \
        [[c.token_ids for c in cs] for cs in batched]
    seeds = request_seeds(5, len(prompts), 3)
    for i, prompt in enumerate(prompts):
        for j in range(3):
            ref = reference_sample(engine.model, prompt, seeds[i] + j, 1.0, 0.9, 12, engine.eos_ids)
            assert batched[i][j].token_ids == ref, (i, j)


@pytest.mark.parametrize("decode", ["plain", "fast"])
def test_engine_ignores_the_models_generation_config(tiny_model_dir, decode):
    engine = HFEngine(tiny_model_dir, device="cpu", decode=decode)
    prompts = _prompts(engine)[:1]
    kw = dict(n=6, temperature=1.0, top_p=1.0, max_new_tokens=8, seed=1)
    plain = [c.token_ids for c in engine.sample(prompts, **kw)[0]]
    engine.model.generation_config.top_k = 1  # would make every sample the greedy one
    engine.model.generation_config.repetition_penalty = 5.0
    assert [c.token_ids for c in engine.sample(prompts, **kw)[0]] == plain
    assert len({tuple(t) for t in plain}) > 1


@pytest.mark.parametrize("decode", ["plain", "fast"])
def test_identical_requests_get_their_own_random_streams(tiny_model_dir, decode):
    engine = HFEngine(tiny_model_dir, device="cpu", decode=decode)
    prompt = _prompts(engine)[0]
    outs = engine.sample([prompt] * 4, n=1, temperature=1.0, top_p=1.0, max_new_tokens=8, seed=3)
    assert len({tuple(o[0].token_ids) for o in outs}) == 4
    assert engine.sample([prompt] * 4, n=1, temperature=1.0, top_p=1.0, max_new_tokens=8, seed=3) == outs
    assert len(set(request_seeds(3, 4, 1))) == 4 and request_seeds(3, 2, 5)[1] == request_seeds(3, 2, 5)[0] + 5


def test_packed_linears_compute_the_same_logits(tiny_model_dir):
    # packed_linears (the plain loop's oneDNN-reordered float32 weights) is speed only: the logits of a prefill
    # and of decode steps stay the plain model's; the layers are themselves again after it.
    from transformers import AutoModelForCausalLM, DynamicCache

    from cobalt_min.generation_speed import packed_linears
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids = torch.randint(3, model.config.vocab_size, (3, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # left padding

    def run(packed):
        out, m, cache = [], mask, DynamicCache(config=model.config)
        with torch.no_grad(), (packed_linears(model) if packed else contextlib.nullcontext()):
            if packed and torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
                assert all("forward" in mod.__dict__ for mod in model.modules() if isinstance(mod, torch.nn.Linear))
            logits = model(input_ids=ids, attention_mask=m, cache=cache, use_cache=True).logits
            out.append(logits)
            nxt, pos = logits[:, -1].argmax(-1), torch.full((3,), 7)
            for step in range(3):
                m = torch.cat([m, m.new_ones(len(nxt), 1)], 1)
                logits = model(input_ids=nxt[:, None], attention_mask=m, position_ids=pos[:, None], cache=cache,
                               use_cache=True).logits
                out.append(logits)
                nxt, pos = logits[:, -1].argmax(-1), pos + 1
        return out
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(run(False), run(True)))
    assert not any("forward" in mod.__dict__ for mod in model.modules())  # restored on exit


@pytest.mark.parametrize("decode", ["plain", "fast"])
def test_prompts_sharing_a_prefix_sample_as_the_definition(tiny_model_dir, decode):
    # More prompts than rows, of many lengths, all starting with the same long system prompt (the fast path runs
    # it once and reuses it for the others): samples stay those of the definition.
    engine = HFEngine(tiny_model_dir, device="cpu", decode=decode, dtype="float32", batch_size=4)
    system = {"role": "system", "content": "You are a careful assistant. " * 4}
    convs = [[system, {"role": "user", "content": "q" * (1 + 3 * k)}] for k in range(11)]
    prompts = [engine.prompt_ids(c) for c in convs]
    outs = engine.sample(prompts, n=1, temperature=1.0, top_p=1.0, max_new_tokens=6, seed=2)
    seeds = request_seeds(2, len(prompts), 1)
    for i, prompt in enumerate(prompts):
        assert outs[i][0].token_ids == reference_sample(engine.model, prompt, seeds[i], 1.0, 1.0, 6, engine.eos_ids), i


def test_non_thinking_runs_tell_the_template_so(tiny_model_dir):
    # Qwen3's template thinks unless enable_thinking is false: a run without --thinking must say false (the
    # reward then applies the non-thinking format rules to answers that hold no </think>).
    engine = HFEngine(tiny_model_dir, device="cpu", thinking=False)
    engine.tokenizer.chat_template = ("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                                      "{% if enable_thinking is defined and enable_thinking is false %}NOTHINK"
                                      "{% else %}THINK{% endif %}")
    text = lambda ids: engine.tokenizer.decode(ids)  # noqa: E731
    assert text(engine.prompt_ids([{"role": "user", "content": "q"}])).endswith("NOTHINK")
    engine.thinking = True
    assert text(engine.prompt_ids([{"role": "user", "content": "q"}])).endswith("THINK")
    import train
    assert train.parse_args(["--model", "m", "--contexts", "c", "--out", "o"]).thinking is False


@pytest.mark.parametrize("decode", ["plain", "fast"])
def test_stop_after_code_ends_a_response_with_its_first_code_block(tiny_model_dir, monkeypatch, decode):
    # The sampler is scripted (a random tiny model writes no code): the response is the sampled tokens up
    # to the one that closes the first complete fenced block, and counts as finished; without the rule,
    # or without a closed block, sampling goes on to max_new_tokens as before.
    from cobalt_min import generation
    script = "Here:\n```python\nx = 1\n```\nand then an explanation that goes on"

    def run(stop_after_code, text, max_new_tokens=80):
        tokenizer = HFEngine(tiny_model_dir, device="cpu", decode="plain").tokenizer
        ids = iter(tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.pad_token_id] * 99)
        monkeypatch.setattr(generation, "sample_tokens", lambda logits, *a: torch.tensor([next(ids) for _ in logits]))
        engine = HFEngine(tiny_model_dir, device="cpu", stop_after_code=stop_after_code, decode=decode)
        (c,), = engine.sample(_prompts(engine)[:1], n=1, max_new_tokens=max_new_tokens, seed=0)
        return c, engine.tokenizer
    c, tok = run(True, script)
    assert c.text == "Here:\n```python\nx = 1\n```" and c.finished
    assert c.token_ids == tok(c.text, add_special_tokens=False)["input_ids"]  # the sampled tokens, unchanged
    c, _ = run(False, script, max_new_tokens=len(script))
    assert c.text.startswith(script[:40]) and not c.finished  # the rule off: on to the token limit
    c, _ = run(True, "```python\nx = 1 and no closing fence", max_new_tokens=20)
    assert len(c.token_ids) == 20 and not c.finished  # an open block does not stop it
    with pytest.raises(SystemExit, match="--engine hf"):
        generation.check_stop_rule(True)


def test_hub_ids_without_a_reachable_hub_read_the_cache_at_once(tiny_model_dir, tmp_path):
    # A hub id is read from the hub cache when the hub cannot be reached (no minute of retries); a name found
    # neither here nor in the cache is one error saying so. The cache is the hub's real layout.
    import shutil
    import subprocess
    import sys
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / ("0" * 40)
    shutil.copytree(tiny_model_dir, snapshot)
    (tmp_path / "hub" / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--tiny" / "refs" / "main").write_text("0" * 40)
    script = (
        "import socket\n"
        "def refused(*a, **k): raise OSError('no route (test)')\n"
        "socket.create_connection = refused\n"
        "from cobalt_min.generation import load_model\n"
        "tok, model = load_model('org/tiny')\n"
        "print('loaded', type(model).__name__)\n"
        "try:\n    load_model('runs/missing_final')\nexcept SystemExit as e:\n    print(e)\n")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "0"}
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(name, None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         cwd=Path(__file__).parent.parent, timeout=120)
    assert "loaded LlamaForCausalLM" in out.stdout, out.stdout + out.stderr
    assert ("runs/missing_final is neither a file or folder here nor in the hub cache, and the Hugging Face hub "
            "cannot be reached") in out.stdout, out.stdout + out.stderr
