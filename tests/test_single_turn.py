"""Single-turn GRPO (train.py --method single-turn, the paper's FT stage): its training set is every problem's
first turn with prev_best 0; a step's batch computed by hand (the staged reward at prev_best 0, the group
advantages, which prompt each row continues); steps of train.py on a tiny random model in one process and on
two ranks, with the authors' single-turn defaults; the refusals."""
import contextlib
import json
import os
import statistics
import subprocess
import sys
import types

import pytest
import torch

import train
from cobalt_min.generation import Completion
from cobalt_min.problems import Problem, load_problems
from cobalt_min.prompts import first_turn_messages
from cobalt_min.trajectories import first_turn_contexts
from test_grpo_mt import problems  # noqa: F401  (the fixture: four demo problems)
from test_train import ROOT, metrics

# Double a number: 4 tests, 2 public and 2 hidden; the reward's pass rate is over all 4.
DOUBLE = Problem("double", "Read n and print 2 * n.", {"inputs": ["1\n", "2\n"], "outputs": ["2\n", "4\n"]},
                 {"inputs": ["3\n", "4\n"], "outputs": ["6\n", "8\n"]})
ECHO = Problem("echo", "Read a line and print it.", {"inputs": ["a\n"], "outputs": ["a\n"]},
               {"inputs": ["b\n"], "outputs": ["b\n"]})


def test_the_training_set_is_every_problem_s_first_turn_at_prev_best_0():
    call = load_problems("demo", verbose=False, limit=40)
    call = next(p for p in call if p.fn_name)
    contexts = first_turn_contexts([DOUBLE, call])
    assert contexts[0] == {"problem_id": "double", "messages": first_turn_messages(DOUBLE.question), "prev_best": 0.0,
                           "turn": 0, "tests": {"inputs": ["1\n", "2\n", "3\n", "4\n"],
                                                "outputs": ["2\n", "4\n", "6\n", "8\n"]}}
    # a call-based problem keeps its starter code and function name, in the prompt and in the tests
    assert contexts[1]["messages"] == first_turn_messages(call.question, call.starter_code, call.fn_name)
    assert contexts[1]["tests"]["fn_name"] == call.fn_name and contexts[1]["prev_best"] == 0.0


class ScriptedEngine:
    """Scripted responses per problem (matched by the question in the prompt); a prompt is its messages."""
    def __init__(self, script):
        self.script, self.calls = script, []

    def prompt_ids(self, messages):
        return messages

    def sample(self, prompts, *, n, temperature, top_p, max_new_tokens, seed):
        self.calls.append({"prompts": prompts, "n": n, "temperature": temperature, "seed": seed})
        return [[Completion(text, [1, 2], True) for text in next(v for k, v in self.script.items()
                                                                 if k in p[1]["content"])][:n] for p in prompts]


def fenced(body):
    return f"```python\n{body}\n```"  # no text before the code: no reasoning bonus in the format term


def test_a_single_turn_batch_by_hand():
    script = {"Read n and print 2 * n.": [fenced("print(2 * int(input()))"),                     # 4/4 pass: 1.0
                                          fenced("n = int(input())\nprint(2 * n if n < 3 else 0)"),  # 2/4: 0.2
                                          fenced("n = int(input())\nprint(2 * n if n < 2 else 0)"),  # 1/4: 0.0
                                          "I cannot solve this."],                                  # no code: -1.0
              "Read a line and print it.": [fenced("print(input())"), fenced("print('a')"),         # 1.0, 0.2
                                            fenced("print('x')"), fenced("print(input())")]}         # -0.1, 1.0
    engine = ScriptedEngine(script)
    lm = torch.nn.Linear(1, 1)
    accelerator = types.SimpleNamespace(process_index=0, num_processes=1, device=torch.device("cpu"),
                                        unwrap_model=lambda m: m, autocast=contextlib.nullcontext)
    tokenizer = lambda text, add_special_tokens=False: {"input_ids": text.split()}  # noqa: E731
    learner = types.SimpleNamespace(accelerator=accelerator, policy=types.SimpleNamespace(lm=lm), engine=engine,
                                    tokenizer=tokenizer)
    args = train.parse_args(["--method", "single-turn", "--model", "m", "--problems", "p", "--out", "o",
                             "--batch-size", "2", "--group-size", "4", "--seed", "3"])
    batch = train.cobalt_batch(learner, first_turn_contexts([DOUBLE, ECHO]), step=0, args=args, timings={}, workers=2)
    assert engine.calls[0]["prompts"] == [first_turn_messages(DOUBLE.question), first_turn_messages(ECHO.question)]
    assert engine.calls[0]["n"] == 4 and engine.calls[0]["temperature"] == 1.0
    assert batch.rates == [1.0, 0.5, 0.25, None, 1.0, 0.5, 0.0, 1.0]  # over public AND hidden tests
    rewards = [[1.0, 0.2, 0.0, -1.0], [1.0, 0.2, -0.1, 1.0]]  # the staged reward at prev_best 0 (paper §3)
    assert batch.group_rewards.flatten().tolist() == pytest.approx(rewards[0] + rewards[1])
    want = [(r - statistics.mean(g)) / (statistics.stdev(g) + 1e-6) for g in rewards for r in g]
    assert batch.advantages.tolist() == pytest.approx(want, rel=1e-5)
    assert batch.prompt_of == [0, 0, 0, 0, 1, 1, 1, 1] and batch.problems == 2 and batch.infra_errors == 0
    assert [c.text for c in batch.completions] == (script["Read n and print 2 * n."]
                                                   + script["Read a line and print it."])


def st_args(model, problems, out, *extra):
    return [os.path.join(ROOT, "train.py"), "--method", "single-turn", "--model", model, "--problems", str(problems),
            "--batch-size", "2", "--group-size", "3", "--max-new-tokens", "8", "--max-steps", "2", "--mini-batches", "1",
            "--micro-batch-size", "3", "--kl-coef", "0.01", "--engine", "hf", "--out", str(out), *extra]


def test_single_turn_steps_in_one_process_and_on_two_ranks(tiny_model_dir, problems, tmp_path):  # noqa: F811
    one = subprocess.run([sys.executable, *st_args(tiny_model_dir, problems, tmp_path / "one")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    assert "2 steps of 2 problems x 3 first-turn programs (single-turn GRPO)" in one.stderr
    assert "4 training contexts" in one.stderr  # the four problems' first turns
    settings = json.loads((tmp_path / "one" / "settings.json").read_text())
    assert settings["epochs"] == 4 and settings["max_prompt_tokens"] == 2048  # the authors' single-turn defaults
    rows = metrics(tmp_path / "one")
    assert [m["step"] for m in rows] == [1, 2] and all(m["method"] == "single-turn" for m in rows)
    assert all(m["programs_trained"] == 6 and m["problems"] == 2 for m in rows)
    assert (tmp_path / "one" / "final" / "model.safetensors").exists()
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          "29628", *st_args(tiny_model_dir, problems, tmp_path / "two")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600, env=dict(os.environ, ACCELERATE_USE_CPU="true"))
    assert two.returncode == 0, two.stderr[-3000:]
    assert "on 2 process(es)" in two.stderr
    both = metrics(tmp_path / "two")
    assert [m["programs_trained"] for m in both] == [6, 6]
    for key in ("reward_mean", "pass_rate", "response_len", "no_code"):
        assert [m[key] for m in both] == pytest.approx([m[key] for m in rows], abs=1e-6), key  # the same samples
    for key in ("loss", "grad_norm", "kl"):
        assert [m[key] for m in both] == pytest.approx([m[key] for m in rows], rel=1e-4, abs=1e-6), key


def test_single_turn_refusals(tiny_model_dir, problems, tmp_path):  # noqa: F811
    (tmp_path / "c.jsonl").write_text("")
    bad = subprocess.run([sys.executable, *st_args(tiny_model_dir, problems, tmp_path / "a"), "--contexts",
                          str(tmp_path / "c.jsonl")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "--method single-turn trains on the first turns of --problems" in bad.stderr
    long = subprocess.run([sys.executable, *st_args(tiny_model_dir, problems, tmp_path / "b"), "--max-prompt-tokens", "20"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert long.returncode != 0 and "every training context is longer than --max-prompt-tokens 20" in long.stderr
    defaults = train.parse_args(["--model", "m", "--contexts", "c", "--out", "o"])
    assert (defaults.epochs, defaults.max_prompt_tokens) == (2, 10240)  # COBALT's own
