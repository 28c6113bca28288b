"""The transformers engine's fast path (generation_speed.py) samples what the plain loop samples: the same tokens
for the same seeds, whatever the batch, the refills or the keys and values it reuses; a feedback turn runs only
its new tokens; new weights empty its cache; the decoder written out computes the model's logits (Llama, Qwen2,
Qwen3), and a model it does not compute right samples through the plain loop."""
import pytest
import torch

from cobalt_min import generation_speed
from cobalt_min.generation import HFEngine
from cobalt_min.generation_speed import Decoder, PrefixCache, Slots, check_decoder, plan_fast_path
from random_model import make_random_chat_model


@pytest.fixture(scope="module", params=["llama", "qwen2", "qwen3"])
def chat_model(request, tmp_path_factory):
    """A random chat model of each written-out family (Qwen2: biases on q, k and v; Qwen3: q and k normalised per
    head), 2 kv heads for 4."""
    return make_random_chat_model(tmp_path_factory.mktemp(request.param), family=request.param, hidden=64, heads=4,
                                  kv_heads=2)


def both_paths(path, **kw):
    return (HFEngine(path, device="cpu", decode="fast", dtype="float32", **kw),
            HFEngine(path, device="cpu", decode="plain", **kw))


def tokens(outs):
    return [[c.token_ids for c in cs] for cs in outs]


SYSTEM = {"role": "system", "content": "You write Python programs for the user's problems, carefully. " * 2}


def conversations(k):
    return [[SYSTEM, {"role": "user", "content": "problem " + "x" * (3 * i + 1)}] for i in range(k)]


def test_the_fast_path_samples_what_the_plain_loop_samples(chat_model):
    # 5 prompts x 3 samples through 4 rows: rows finish at different lengths and waiting requests take their slots
    fast, plain = both_paths(chat_model, batch_size=4)
    assert fast.fast is not None and plain.fast is None and "fast decoder" in fast.description
    fast.eos_ids = plain.eos_ids = set(range(0, len(fast.tokenizer), 7))  # rows end after 1 to 12 tokens
    prompts = [fast.prompt_ids(c) for c in conversations(5)]
    for kw in (dict(temperature=1.0, top_p=0.9), dict(temperature=0.7, top_p=1.0), dict(temperature=0.0)):
        got = fast.sample(prompts, n=3, max_new_tokens=12, seed=4, **kw)
        assert tokens(got) == tokens(plain.sample(prompts, n=3, max_new_tokens=12, seed=4, **kw)), kw
        assert [[c.text for c in cs] for cs in got] == [[fast.tokenizer.decode(c.token_ids, skip_special_tokens=True)
                                                          for c in cs] for cs in got]
        if kw["temperature"] == 1.0:
            assert len({len(c.token_ids) for cs in got for c in cs}) > 3  # (rows ended at many lengths)
    assert fast.stats["decode_steps"] > 0 and fast.stats["reused_tokens"] > 0  # (the prompts share the system one)


def test_a_feedback_turn_runs_only_its_new_tokens(chat_model):
    # Turn 1's prompt = turn 0's prompt, the response and the feedback: what turn 0 computed is reused, token for
    # token; the samples stay the plain loop's.
    fast, plain = both_paths(chat_model, batch_size=8)
    convs = conversations(3)
    first = fast.sample([fast.prompt_ids(c) for c in convs], n=2, temperature=1.0, max_new_tokens=16, seed=1)
    feedback = {"role": "user", "content": "Your program failed a test. Think step by step and fix it."}
    second = [c + [{"role": "assistant", "content": out.text}, feedback] for c, outs in zip(convs, first) for out in outs]
    prompts = [fast.prompt_ids(c) for c in second]
    kept = [fast.prompt_ids(c) + out.token_ids[:-1] for c, outs in zip(convs, first) for out in outs]
    shared = [min(generation_speed.common_prefix_length([p, k]), len(p) - 1) for p, k in zip(prompts, kept)]
    before = dict(fast.stats)
    got = fast.sample(prompts, n=1, temperature=1.0, max_new_tokens=16, seed=2)
    reused = fast.stats["reused_tokens"] - before["reused_tokens"]
    run = fast.stats["prefill_tokens"] - before["prefill_tokens"]
    assert reused + run == sum(len(p) for p in prompts)
    assert reused >= sum(shared) - PrefixCache.BLOCK * len(prompts)  # at most a block short of each longest match
    assert run < sum(len(p) for p in prompts) / 2
    assert tokens(got) == tokens(plain.sample(prompts, n=1, temperature=1.0, max_new_tokens=16, seed=2))


def test_new_weights_empty_the_cache(chat_model):
    fast, plain = both_paths(chat_model)
    prompt = [fast.prompt_ids(conversations(1)[0])]
    kw = dict(n=2, temperature=1.0, max_new_tokens=8, seed=0)
    fast.sample(prompt, **kw)
    before = fast.stats["reused_tokens"]
    fast.sample(prompt, **kw)
    assert fast.stats["reused_tokens"] - before == len(prompt[0]) - 1  # the same weights: all of it reused
    with torch.no_grad():  # an update in place, as train.py's optimizer step
        for p in fast.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    plain.model.load_state_dict(fast.model.state_dict())
    before = fast.stats["reused_tokens"]
    got = fast.sample(prompt, **kw)
    assert fast.stats["reused_tokens"] == before  # nothing of the old weights' keys and values
    assert tokens(got) == tokens(plain.sample(prompt, **kw))


def test_the_prefix_cache_finds_the_longest_shared_run_within_its_bytes():
    def kv(tokens):  # keys and values that name their token: (1 layer, 2, 1 head, n, 1)
        return torch.tensor(tokens, dtype=torch.float32).view(1, 1, 1, -1, 1).expand(1, 2, 1, -1, 1).clone()
    a, b = list(range(100, 150)), list(range(100, 120)) + list(range(500, 530))
    cache = PrefixCache(max_bytes=kv(a).nbytes * 2)
    cache.add(a, kv(a))
    cache.add(b, kv(b))
    m, found = cache.find(a[:35] + [7, 8, 9])
    assert m == 35 and found[0, 0, 0, :, 0].tolist() == a[:35]
    assert cache.find(b[:25] + [1] * 20)[0] == 25
    assert cache.find([100, 101, 999] + a[3:])[0] == 0  # the first block differs: nothing
    assert cache.find(a[:10])[0] == 0  # shorter than a block: not looked up
    cache.find(a)  # a is now the more recently used
    c = list(range(700, 740))
    cache.add(c, kv(c))  # over the bound: b, the least recently used, leaves
    assert cache.find(b)[0] < len(b) and cache.find(a)[0] == len(a) and cache.find(c)[0] == len(c)
    assert cache.bytes <= cache.max_bytes
    cache.add(a + [1, 2, 3], kv(a + [1, 2, 3]))  # it extends a entirely: a leaves, the longer one stays
    assert len(cache.entries) == 2 and cache.find(a + [1, 2, 3])[0] == len(a) + 3


def test_the_written_out_decoder_computes_the_models_logits(chat_model):
    # check_decoder (a prefill then decode steps, one row) and a batch of rows of different lengths, each row's
    # logits against the model's own forward over its whole sequence.
    fast = HFEngine(chat_model, device="cpu", decode="fast", dtype="float32")
    model = fast.model
    assert check_decoder(model) is None
    decoder = Decoder(model, torch.float32)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist() for n in (5, 19, 11)]
    slots = Slots(decoder, 3, 8)
    for row, seq in enumerate(seqs):
        slots.put(row, decoder.prefill(seq[:-1], None)[1])
    got = decoder.step(torch.tensor([s[-1] for s in seqs]), slots)  # (3, V)
    for row, seq in enumerate(seqs):
        want = model(input_ids=torch.tensor([seq])).logits[0, -1]
        assert torch.allclose(got[row], want, atol=1e-4), row
    assert slots.lengths.tolist() == [len(s) for s in seqs]


def test_a_model_it_does_not_compute_right_samples_through_the_plain_loop(tiny_model_dir):
    engine = HFEngine(tiny_model_dir, device="cpu", decode="plain")
    model = engine.model
    model.config.rms_norm_eps = 10.0  # the decoder would read this; the model's norms keep their own
    assert "differ" in check_decoder(model)
    options, description = plan_fast_path(model, "auto", "float32", 0.0)
    assert options is None and "plain decode loop" in description and "differ" in description
    with pytest.raises(SystemExit, match="--hf-decode fast cannot run this model"):
        plan_fast_path(model, "fast", "float32", 0.0)
    model.config.rms_norm_eps = 1e-6
    model.config.model_type = "gpt_neox"
    assert "model type 'gpt_neox'" in plan_fast_path(model, "auto", "auto", 0.0)[1]


def test_dtype_auto_samples_in_bfloat16_where_the_cpu_multiplies_it(tiny_model_dir, monkeypatch):
    engine = HFEngine(tiny_model_dir, device="cpu", decode="plain")
    for native, want in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(generation_speed, "cpu_multiplies_bf16", lambda: native)
        options, description = plan_fast_path(engine.model, "auto", "auto", 1.0)
        assert options["dtype"] == want and str(want).removeprefix("torch.") in description
        assert options["cache_bytes"] == 2**30
    assert plan_fast_path(engine.model, "auto", "float32", 1.0)[0]["dtype"] == torch.float32  # as asked
    # bfloat16 products, float32 logits: close to the float32 decoder's
    ids = list(range(3, 20))
    want = Decoder(engine.model, torch.float32).prefill(ids, None)[0]
    got = Decoder(engine.model, torch.bfloat16).prefill(ids, None)[0]
    assert got.dtype == torch.float32 and (got - want).abs().max() < 0.05 * want.abs().max()
