"""The API engine (--engine api) against a small local OpenAI-compatible server (tests/fake_openai.py): retries
and what a failure becomes, the start checks, seeds, usage, thinking and the stop rule; then evaluate.py and
collect.py end to end, the key written nowhere, a server that stops answering mid-run and --resume; train.py's
refusal. (Against a real `vllm serve`: tests/test_vllm_cpu.py, make test-vllm-cpu.)"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("openai")
sys.path.insert(0, os.path.dirname(__file__))
from fake_openai import FakeOpenAI  # noqa: E402

from cobalt_min.engines.api import APIEngine  # noqa: E402
from cobalt_min.problems import load_problems  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HELLO = [{"role": "user", "content": "hello"}]
SECRET = "sk-cobalt-test-0123456789-secret"


def engine(server, **kw):
    return APIEngine(server.url, "tiny-model", **{"backoff": 0.01, "progress": False, "concurrency": 4, **kw})


def test_each_fault_is_retried_and_retry_after_is_honoured():
    plan = [("status", 429, {"Retry-After": "0.6"}), ("status", 503, {}), ("malformed",), ("reset",),
            ("slow", 2.0, "too late")]
    stamps = []

    def answer(body):
        stamps.append(time.monotonic())
        return plan.pop(0) if plan else f"seed {body['seed']}"

    with FakeOpenAI(answer) as server:
        eng = engine(server, concurrency=1, timeout=1.0)
        out = eng.sample([HELLO], n=1, seed=[7])
    assert out[0][0].text == "seed 7" and out[0][0].error is None and out[0][0].finished
    assert stamps[1] - stamps[0] >= 0.55  # the server's Retry-After, not the 0.01 s backoff
    assert eng.usage == {"requests": 1, "prompt_tokens": 10, "completion_tokens": 3, "retries": 5,
                         "failed_requests": 0}


def test_a_request_that_keeps_failing_comes_back_as_an_error_not_as_a_text():
    with FakeOpenAI(lambda body: ("status", 500, {}) if body["seed"] == 1 else
                    ("status", 400, {}) if body["seed"] == 2 else "fine") as server:
        eng = engine(server, retries=2)
        out = eng.sample([HELLO], n=3, seed=[0])
        attempts = [b["seed"] for _, _, b in server.requests]
    assert out[0][0].text == "fine" and out[0][0].error is None
    assert out[0][1].text == "" and "HTTP 500" in out[0][1].error and "after 3 attempts" in out[0][1].error
    assert "HTTP 400" in out[0][2].error and "after 1 attempts" in out[0][2].error  # a 400 is not retried
    assert attempts.count(1) == 3 and attempts.count(2) == 1
    assert eng.usage["failed_requests"] == 2 and eng.usage["retries"] == 2


def test_seeds_sampling_parameters_usage_thinking_and_the_stop_rule():
    def answer(body):
        return {"role": "assistant", "reasoning_content": "let me think",
                "content": f"s{body['seed']} t{body['temperature']} p{body['top_p']} m{body['max_tokens']}\n"
                           "```python\nprint(1)\n```\nand more text"}

    with FakeOpenAI(answer) as server:
        eng = engine(server, stop_after_code=True, thinking=True)
        out = eng.sample([HELLO, HELLO], n=2, temperature=0.6, top_p=0.95, max_new_tokens=64, seed=5)
    texts = [c.text for cs in out for c in cs]
    base = 5 * 1_000_003  # generation.request_seeds: sample j of request i is seeded seeds[i] + j
    assert [t.split()[0] for t in [x.removeprefix("<think>let me think</think>") for x in texts]] == \
        [f"s{base}", f"s{base + 1}", f"s{base + 2}", f"s{base + 3}"]
    assert all(t.startswith("<think>let me think</think>") and t.endswith("```") and "t0.6 p0.95 m64" in t
               for t in texts)
    assert eng.usage["requests"] == 4 and eng.usage["prompt_tokens"] == 40 and eng.usage["completion_tokens"] == 12


def test_a_server_that_is_down_or_lacks_the_model_is_one_line_before_any_work():
    with FakeOpenAI(lambda body: "x") as server:
        url = server.url
        with pytest.raises(SystemExit, match="does not serve 'other'; it serves: tiny-model"):
            APIEngine(url, "other")
    with pytest.raises(SystemExit, match=f"no OpenAI-compatible server answers at {url}"):
        APIEngine(url, "tiny-model", retries=0, timeout=2)


def test_a_refused_key_names_its_variable_and_a_silent_server_is_one_line_within_the_start_bound(monkeypatch):
    from cobalt_min.engines import api
    with FakeOpenAI(lambda body: "x", key="right-key") as server:
        monkeypatch.delenv("MY_KEY", raising=False)
        with pytest.raises(SystemExit, match=r"refused the key \(HTTP 401\): \$MY_KEY is empty; set it, or name"):
            APIEngine(server.url, "tiny-model", key_env="MY_KEY")
        monkeypatch.setenv("MY_KEY", "wrong-key")
        with pytest.raises(SystemExit, match=r"\$MY_KEY holds a key the server refuses"):
            APIEngine(server.url, "tiny-model", key_env="MY_KEY")
        monkeypatch.setenv("MY_KEY", "right-key")
        assert APIEngine(server.url, "tiny-model", key_env="MY_KEY").sample([HELLO], seed=0)[0][0].text == "x"
    monkeypatch.setattr(api, "START_TIMEOUT_S", 0.5)
    with FakeOpenAI(lambda body: "x") as server:
        server.silent = True
        start = time.monotonic()
        with pytest.raises(SystemExit, match="accepted the connection but did not answer within 0.5 s"):
            APIEngine(server.url, "tiny-model", timeout=600)  # (the requests' own bound: not what the start waits)
        assert time.monotonic() - start < 10


def test_one_convention_for_models_behind_an_api(tmp_path):
    # --api-base belongs to --engine api (refused without it, before anything loads: else the model would be loaded
    # here, a hub id downloaded); a served name that looks like a path is taken as it is under --engine api
    served = "openrouter/meta-llama/llama-3-8b"
    for name, extra in (("evaluate.py", ["--problems", "demo"]), ("collect.py", ["--problems", "demo"])):
        proc = subprocess.run([sys.executable, str(ROOT / name), "--model", "runs/nothing/final", *extra,
                               "--api-base", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "o")],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 2 and "--api-base is --engine api's: add --engine api" in proc.stderr, proc.stderr
        proc = subprocess.run([sys.executable, str(ROOT / name), "--model", served, *extra, "--out", str(tmp_path / "o")],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 2 and "argument --model: openrouter/meta-llama/llama-3-8b does not exist" in proc.stderr
    with FakeOpenAI(lambda body: "```python\nprint(1)\n```", models=[served]) as server:
        proc = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--engine", "api", "--api-base", server.url,
                               "--model", served, "--problems", "demo", "--limit", "1", "--turns", "1", "--samples", "1",
                               "--out", str(tmp_path / "eval")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "eval" / "summary.json").read_text())["model"] == served


def test_a_server_that_stops_answering_stops_the_call():
    with FakeOpenAI(lambda body: "x") as server:
        eng = engine(server, retries=1)
        server.down = True
        with pytest.raises(SystemExit, match="stopped answering .* run the same command with --resume"):
            eng.sample([HELLO], n=2, seed=0)


def script(name, args, server, tmp_path):
    env = dict(os.environ, OPENAI_API_KEY=SECRET)
    return subprocess.run([sys.executable, str(ROOT / name), *args, "--engine", "api", "--api-base", server.url,
                           "--model", "tiny-model", "--api-retries", "1"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


def solutions_server(problems, wrong_first=False, fail_seed=None):
    """Answers with each problem's reference solution (wrong_first: a wrong program at turn 0);
    every request seeded fail_seed gets HTTP 500."""
    by_question = {p.question: p.solutions[0] for p in problems}

    def answer(body):
        if body["seed"] == fail_seed:
            return ("status", 500, {})
        first = body["messages"][0]["content"] if body["messages"][0]["role"] == "user" else body["messages"][1][
            "content"]
        question = next(q for q in by_question if q in first)
        turn0 = sum(m["role"] == "assistant" for m in body["messages"]) == 0
        program = "print('no idea')" if wrong_first and turn0 else by_question[question]
        return f"Here it is.\n```python\n{program}\n```"
    return answer


def no_secret_in(folder: Path, *texts):
    for path in folder.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert all(SECRET not in t for t in texts)


def test_evaluate_end_to_end_a_failed_request_is_an_infrastructure_failure_never_a_wrong_answer(tmp_path):
    problems = load_problems("demo", verbose=False)[:2]
    with FakeOpenAI(solutions_server(problems, fail_seed=1)) as server:  # problem 0, sample 1, turn 0
        proc = script("evaluate.py", ["--problems", "demo", "--limit", "2", "--samples", "2", "--turns", "2",
                                      "--max-new-tokens", "64", "--out", "ev"], server, tmp_path)
        auths = {a for _, a, _ in server.requests}
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
    assert summary["pass@1"] == [100.0, 100.0]  # the lost conversation is left out, not scored 0
    assert summary["infra_errors"] == 1 and summary["api_usage"]["failed_requests"] == 1
    assert summary["api_usage"]["requests"] == 2 * 2 * 2 - 2  # 2 problems x 2 samples x 2 turns; one lost at turn 0
    record = json.loads((tmp_path / "ev" / "trajectories.jsonl").read_text().splitlines()[0])
    assert len(record["samples"]) == 1 and "HTTP 500" in record["infra_failed"][0]["infra_error"]
    assert "API usage: 6 requests" in proc.stdout
    assert auths == {f"Bearer {SECRET}"}
    no_secret_in(tmp_path, proc.stdout, proc.stderr)


def test_collect_end_to_end_and_a_server_gone_mid_run_then_resume(tmp_path):
    problems = load_problems("demo", verbose=False)[:2]
    answer = solutions_server(problems, wrong_first=True)
    count = {"n": 0}

    def dies_after_first_problem(body):  # --batch-problems 1: the first block is 2 x 2 requests
        count["n"] += 1
        if count["n"] > 4:
            server.down = True
            return ("reset",)
        return answer(body)

    args = ["--problems", "demo", "--limit", "2", "--trajectories", "2", "--turns", "2", "--max-new-tokens", "64",
            "--batch-problems", "1", "--out", "co"]
    with FakeOpenAI(dies_after_first_problem) as server:
        proc = script("collect.py", args, server, tmp_path)
        assert proc.returncode != 0 and f"the server at {server.url} stopped answering" in proc.stderr
        assert len((tmp_path / "co" / "raw.jsonl").read_text().splitlines()) == 1  # the finished block is kept
        server.down, server.answer = False, answer
        before = len(server.requests)
        proc = script("collect.py", args + ["--resume"], server, tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert len(server.requests) - before == 4  # only the second problem
    raw = [json.loads(x) for x in (tmp_path / "co" / "raw.jsonl").read_text().splitlines()]
    assert [r["problem_id"] for r in raw] == [p.id for p in problems]
    stats = json.loads((tmp_path / "co" / "stats.json").read_text())
    assert stats["contexts"] > 0 and stats["api_usage"]["requests"] == 4  # wrong, then repaired: turn-1 contexts
    # an API model's name is not a tokenizer: said at the start, before any request
    warning = proc.stderr.index("the contexts' prompt budget (--prompt-budget 10000) will not be checked")
    assert warning < proc.stderr.index("resuming:")
    no_secret_in(tmp_path, proc.stdout, proc.stderr)


def test_train_refuses_the_api_engine(tmp_path):
    (tmp_path / "c.jsonl").write_text("")
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "--model", "x", "--contexts", "c.jsonl",
                           "--engine", "api", "--out", "runs"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert proc.returncode != 0
    assert "error: train.py cannot learn from a model behind an API (--engine api)" in proc.stderr
