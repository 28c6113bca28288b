"""The repair warm-up (cobalt_min/warmup.py, train.py --method sft): which failing attempts become
demonstrations and with what feedback and target; that one sft step IS a step of AdamW on the targets'
token-mean negative log-likelihood (the GRPO update with advantage 1 and ratio 1); the refusals."""
import json
import os
import subprocess
import sys

import pytest
import torch

from cobalt_min import warmup
from cobalt_min.problems import load_problems
from cobalt_min.prompts import ALL_PUBLIC_PASSED, NO_CODE, feedback_message, first_turn_messages
from cobalt_min.sandbox import run_tests
from test_train import ROOT, metrics

CODE = "```python\n{}\n```"


def problem(pid):
    return next(p for p in load_problems("demo", verbose=False) if p.id == pid)


def turn(program, rate, feedback, response=None):
    return {"response": response or (CODE.format(program) if program else "no code"), "program": program,
            "pass_rate": rate, "feedback": feedback}


def test_demonstrations_from_failing_first_attempts_with_their_real_feedback():
    p = problem("demo/greeting")  # greet(name) -> 'Hello, {name}!'
    wrong = "def greet(name):\n    return 'Hi ' + name"
    shown = feedback_message(run_tests(wrong, p.public_tests), p.public_tests)["content"]
    assert 'Expected output:\nHello, Ann!' in shown
    record = {"problem_id": p.id, "samples": [
        {"turns": [turn(wrong, 0.0, shown), turn(wrong, 0.0, shown)]},              # kept (turn 0 only)
        {"turns": [turn(wrong, 0.0, shown)]},                                       # the same program: once
        {"turns": [turn(p.solutions[0], 1.0, ALL_PUBLIC_PASSED)]},                  # passes: not a failure
        {"turns": [turn(None, 0.0, NO_CODE)]},                                      # no code: nothing to repair
        {"turns": [turn("def greet(name):\n    return 'Hello, ' + name + '!'", 0.5, ALL_PUBLIC_PASSED)]},  # hidden only
        {"turns": [{**turn(wrong + "  # other", None, "x"), "infra_error": "runner died"}]}]}  # no verdict
    assert warmup.own_attempts([record], p.id) == [(CODE.format(wrong), shown)]
    guess = "return 'Hello ' + name"  # make_demo.GUESSES["greeting"]
    demos = warmup.repair_demonstrations([p], [record], {"demo/greeting": guess}.get, style="code")
    assert sorted(d["attempt"] for d in demos) == ["guess", "own"]
    by = {d["attempt"]: d["messages"] for d in demos}
    assert by["own"][:2] == first_turn_messages(p.question, p.starter_code, p.fn_name)
    assert by["own"][2:] == [{"role": "assistant", "content": CODE.format(wrong)}, {"role": "user", "content": shown},
                             {"role": "assistant", "content": f"```python\n{p.solutions[0].rstrip()}\n```"}]
    # the hand-written guess is run for its real feedback: the expected output it shows
    assert by["guess"][2]["content"] == f"```python\n{p.starter_code}    {guess}\n```"
    assert "Your output:\n\"Hello Ann\"\nExpected output:\nHello, Ann!" in by["guess"][3]["content"]
    quoted = warmup.repair_demonstrations([p], [record], {}.get, style="quote")
    assert [d["messages"][-1]["content"].splitlines()[0] for d in quoted] == \
        ["The test expected Hello, Ann!, so the program must return exactly that."]
    assert warmup.repair_demonstrations([p], [record], {}.get, per_problem=1, style="code")[0]["attempt"] == "own"


def test_the_command_writes_demonstrations_of_the_training_problems_only(tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(problem(pid).to_dict()) + "\n" for pid in ("demo/greeting", "demo/loud-text")))
    proc = subprocess.run([sys.executable, "-m", "cobalt_min.warmup", "--problems", str(train), "--out",
                           str(tmp_path / "d.jsonl")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    demos = [json.loads(x) for x in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert sorted(d["problem_id"] for d in demos) == ["demo/greeting", "demo/loud-text"]
    assert "wrote 2 demonstrations of 2 problems" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "cobalt_min.warmup", "--problems", str(train), "--no-guesses", "--out",
                          str(tmp_path / "e.jsonl")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "no demonstration" in bad.stderr


def demonstrations(path, count=2):
    rows = []
    for k in range(count):
        rows.append({"problem_id": f"p{k}", "messages": [{"role": "user", "content": f"Write program {k}."},
                                                         {"role": "assistant", "content": f"print({k})"},
                                                         {"role": "user", "content": "Wrong: expected 7."},
                                                         {"role": "assistant", "content": CODE.format(f"print({7 + k})")}]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_one_sft_step_is_adamw_on_the_targets_negative_log_likelihood(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from safetensors.torch import load_file
    rows = demonstrations(tmp_path / "d.jsonl")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--method", "sft", "--model", tiny_model_dir,
                           "--demonstrations", str(tmp_path / "d.jsonl"), "--batch-size", "2", "--micro-batch-size", "1",
                           "--max-steps", "1", "--lr", "1e-2", "--engine", "hf", "--out", str(tmp_path / "run")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 steps of 2 demonstrations (supervised fine-tuning" in proc.stderr
    [m] = metrics(tmp_path / "run")
    assert m["method"] == "sft" and m["programs_trained"] == 2 and "reward_mean" not in m and m["programs_run"] == 0
    # by hand: the token-mean NLL of each target's tokens (its text, then EOS) after the chat-templated prompt
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    nll, count = 0.0, 0
    for r in rows:
        prompt = tok(tok.apply_chat_template(r["messages"][:-1], add_generation_prompt=True, tokenize=False),
                     add_special_tokens=False)["input_ids"]
        target = tok(r["messages"][-1]["content"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        logits = model(torch.tensor([prompt + target])).logits[0, len(prompt) - 1:-1].float()
        nll = nll - torch.log_softmax(logits, -1).gather(1, torch.tensor(target)[:, None]).sum()
        count += len(target)
    loss = nll / count
    assert -m["logp"] == pytest.approx(loss.item(), rel=1e-4)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01).step()
    trained = load_file(str(tmp_path / "run" / "final" / "model.safetensors"))
    mine = model.state_dict()
    # (AdamW's step of an element whose gradient is near its eps, 1e-8, is sensitive to the gradient's last bits:
    # summed in another order on another CPU it moves by up to a few 1e-5; a wrong step moves by about lr, 1e-2)
    assert all(torch.allclose(trained[k], mine[k], atol=2e-4) for k in trained), "not one AdamW step on the NLL"
    assert any(not torch.allclose(trained[k], AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()[k])
               for k in trained)


def test_sft_refusals(tiny_model_dir, tmp_path):
    demonstrations(tmp_path / "d.jsonl")
    base = [sys.executable, os.path.join(ROOT, "train.py"), "--model", tiny_model_dir, "--engine", "hf"]
    no_data = subprocess.run(base + ["--method", "sft", "--out", str(tmp_path / "a")], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
    assert no_data.returncode != 0 and "--method sft trains on --demonstrations only" in no_data.stderr
    other = subprocess.run(base + ["--contexts", str(tmp_path / "d.jsonl"), "--demonstrations", str(tmp_path / "d.jsonl"), "--out",
                                   str(tmp_path / "b")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert other.returncode != 0 and "--demonstrations are --method sft's" in other.stderr
    (tmp_path / "bad.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                                                 {"role": "user", "content": "again"}]}) + "\n")
    bad = subprocess.run(base + ["--method", "sft", "--demonstrations", str(tmp_path / "bad.jsonl"), "--out",
                                 str(tmp_path / "c")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "bad.jsonl line 1 does not end with an assistant message" in bad.stderr


def test_warm_up_problems_are_random_variants_none_equal_to_a_problem_of_the_family():
    from cobalt_min.data import make_demo
    from cobalt_min.sandbox import run_batch
    drawn = make_demo.warmup_problems(24, seed=3)
    assert len(drawn) == 24 and drawn == make_demo.warmup_problems(24, seed=3)  # seeded
    family = [p for p in load_problems("demo", verbose=False) if p.difficulty == "repair function"]
    taken = {(p.fn_name, json.dumps(p.public_tests["outputs"][0])) for p in family}
    mine = [(p.fn_name, json.dumps(p.public_tests["outputs"][0])) for p in drawn]
    assert not set(mine) & taken and len(set(mine)) == len(mine)  # none of the family's, no two alike
    assert len({p.id.rsplit("-", 1)[0] for p in drawn}) >= 5  # several templates
    # each reference solution passes its tests; its template's wrong guess fails the first public test, showing it
    solved = run_batch([(p.solutions[0], p.all_tests()) for p in drawn])
    assert all(r.passed for results in solved for r in results)
    guesses = run_batch([(f"{p.starter_code}    {make_demo.guess_of(p.id)}\n", p.public_tests) for p in drawn])
    assert all(results[0].status == "wrong_answer" for results in guesses)
    assert make_demo.guess_of("demo/greeting") == make_demo.GUESSES["greeting"] and make_demo.guess_of("demo/x") is None
