"""The self-repair demo's summary (cobalt_min/demos/repair_summary.py) on hand-made evaluations: Pass@1 per turn, the
gain over turn 0, COBALT against the warm-up model, the perturbed drop of COBALT-PTB against COBALT's, the bar."""
import json

import pytest

from cobalt_min.demos import repair_summary


def record(pid, solved, perturbed=False):  # solved[s][t]: does sample s pass every hidden test at turn t
    rec = {"problem_id": pid, "samples": [{"turns": [{"hidden_pass_rate": float(x), "pass_rate": float(x), "public": [],
                                                      "program": "p", "feedback": ""} for x in row]} for row in solved]}
    if perturbed:
        rec["perturbed"] = {"indices": [0, 1]}
    return rec


def write(folder, records):
    folder.mkdir(parents=True)
    (folder / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_summary_by_hand(tmp_path):
    # warm-up: a repairs half its conversations at turn 1; b never. COBALT: a always at turn 1, b once at turn 2.
    write(tmp_path / "eval_warmup", [record("a", [[0, 1, 1], [0, 0, 0]]), record("b", [[0, 0, 0], [0, 0, 0]])])
    write(tmp_path / "eval_cobalt", [record("a", [[0, 1, 1], [0, 1, 1]]), record("b", [[0, 0, 1], [0, 0, 0]])])
    write(tmp_path / "eval_cobalt_perturbed", [record("a", [[1, 0, 0]], True), record("b", [[1, 1, 0]], True)])
    write(tmp_path / "eval_cobalt_ptb_perturbed", [record("a", [[1, 1, 1]], True), record("b", [[1, 1, 0]], True)])
    write(tmp_path / "eval_cobalt_ptb", [record("a", [[0, 0, 0]]), record("b", [[0, 0, 0]])])
    result = repair_summary.summarize(tmp_path)
    assert set(result["models"]) == {"warm-up", "COBALT", "COBALT-PTB"} and result["turns"] == 3
    assert result["models"]["warm-up"]["pass1_per_turn"] == [0.0, 25.0, 25.0]
    assert result["models"]["COBALT"]["pass1_per_turn"] == [0.0, 50.0, 75.0]
    gain = result["models"]["COBALT"]["gain_over_turn0"][-1]  # per problem +100 and +50
    assert gain["gain"] == pytest.approx(75.0) and gain["se"] == pytest.approx(25.0)
    bar = result["bar"]
    assert bar["cobalt_minus_warmup_last_turn"] == pytest.approx(50.0)  # a +50, b +50
    # repairs over turns 1 and 2: warm-up 1 of 4 then 0 of 3; COBALT 2 of 4 then 1 of 2
    assert bar["repaired"] == {"warm-up": 1, "COBALT": 3} and bar["repair_chances"] == {"warm-up": 7, "COBALT": 6}
    assert bar["repair_rate_above_warmup"] and bar["gain_at_least_5_points_and_2_se"]  # 75 >= 5 and >= 2 x 25
    # perturbed: COBALT loses 100 on a and 100 on b; COBALT-PTB 0 on a and 100 on b: PTB's change minus COBALT's +50
    d = result["ptb_drop_minus_cobalt_drop"]
    assert d["problems"] == 2 and d["difference"] == pytest.approx(50.0) and d["se"] == pytest.approx(50.0)
    drops = result["models"]["COBALT"]["perturbed"]["change_from_turn0"]
    assert [g["gain"] for g in drops] == pytest.approx([0.0, -50.0, -100.0])
    text = repair_summary.report(result)
    assert "COBALT minus the warm-up model at turn 2: +50.0 (s.e. 0.0)" in text

    assert "COBALT-PTB's change from turn 0 to turn 2 under perturbed feedback minus COBALT's: +50.0" in text


def test_a_model_whose_responses_lose_their_code_is_named_collapsed(tmp_path):
    def recs(text_at_turn):  # two problems x 2 samples x 2 turns; text_at_turn(t) -> (response, program)
        out = []
        for pid in "ab":
            rec = record(pid, [[0, 0], [0, 0]])
            for traj in rec["samples"]:
                for t, turn in enumerate(traj["turns"]):
                    turn["response"], turn["program"] = text_at_turn(t)
            out.append(rec)
        return out
    code = ("Here is the fix.\n```python\ndef f(x):\n    return x\n```", "def f(x):\n    return x")
    babble = ("可以用format()函数，可以在函数内部定美化，可以在函数体中定美化，可以在函数体中定美化", None)
    write(tmp_path / "eval_warmup", recs(lambda t: code))
    write(tmp_path / "eval_cobalt", recs(lambda t: code if t == 0 else babble))  # collapsed after feedback
    write(tmp_path / "eval_ft", recs(lambda t: code))
    result = repair_summary.summarize(tmp_path)
    health = result["models"]["COBALT"]["response_health"]
    assert [(h["responses"], h["no_code"], h["degenerate"]) for h in health] == [(4, 0, 0), (4, 4, 4)]
    assert result["collapsed"] == {"COBALT": [1]}  # FT wrote code as the warm-up model did
    text = repair_summary.report(result)
    assert "collapse: COBALT at turn(s) 1 writes 10+ points more" in text and "COBALT      t0 0 / 0  t1 100 / 100" in text


def test_the_command_writes_the_summary_and_a_figure_of_three_panels(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from PIL import Image
    write(tmp_path / "eval_warmup", [record("a", [[0, 1, 1], [0, 0, 0]]), record("b", [[0, 0, 0], [0, 0, 0]])])
    write(tmp_path / "eval_cobalt", [record("a", [[0, 1, 1], [0, 1, 1]]), record("b", [[0, 0, 1], [0, 0, 0]])])
    write(tmp_path / "eval_cobalt_perturbed", [record("a", [[1, 0, 0]], True), record("b", [[1, 1, 0]], True)])
    repair_summary.main([str(tmp_path)])
    assert json.loads((tmp_path / "repair_summary.json").read_text())["models"]["COBALT"]["pass1_per_turn"] == \
        [0.0, 50.0, 75.0]
    width, height = Image.open(tmp_path / "repair.png").size
    assert width > 3.5 * height  # true feedback, perturbed feedback, COBALT's differences, repaired / broken
    assert "Self-repair demo: held-out Pass@1" in capsys.readouterr().out


def test_the_held_out_sets_the_training_data_and_the_bar(tmp_path):
    # two family problems (demo/) and one random variant (warmup/); metrics.jsonl of COBALT's and FT's training
    write(tmp_path / "eval_warmup", [record("demo/a", [[0, 1], [0, 0]]), record("demo/b", [[0, 0], [0, 0]]),
                                     record("warmup/hello-3", [[1, 1], [0, 0]])])
    write(tmp_path / "eval_cobalt", [record("demo/a", [[0, 1], [0, 1]]), record("demo/b", [[0, 1], [0, 0]]),
                                     record("warmup/hello-3", [[1, 1], [1, 1]])])
    write(tmp_path / "eval_ft", [record("demo/a", [[0, 0], [0, 0]]), record("demo/b", [[0, 0], [0, 0]]),
                                 record("warmup/hello-3", [[1, 1], [0, 0]])])
    step = {"pass_rate": 0.1, "no_code": 0.0, "zero_std_groups": 0.5, "response_len": 40.0}
    for folder, rows in (("cobalt", [dict(step, n_failing_feedback_contexts=2, n_failing_feedback_repairs=3,
                                          n_failing_feedback_mixed=1, n_passing_feedback_contexts=1,
                                          n_passing_feedback_kept=4),
                                     dict(step, response_len=60.0, no_code=0.25, n_failing_feedback_contexts=1,
                                          n_failing_feedback_repairs=0, n_failing_feedback_mixed=0,
                                          n_passing_feedback_contexts=0, n_passing_feedback_kept=0)]),
                         ("ft", [step, dict(step, response_len=90.0)])):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (tmp_path / folder / "settings.json").write_text(json.dumps({"group_size": 8}))
    result = repair_summary.summarize(tmp_path)
    family, variants = result["sets"]["family"], result["sets"]["variants"]
    assert family["problems"] == 2 and variants["problems"] == 1
    assert family["pass1_per_turn"]["COBALT"] == [0.0, 75.0]
    assert family["cobalt_minus_warmup"]["change"] == pytest.approx(50.0)  # a +50, b +50
    assert family["cobalt_minus_ft"]["change"] == pytest.approx(75.0)  # a +100, b +50
    assert variants["cobalt_minus_warmup"]["change"] == pytest.approx(50.0)
    cobalt, ft = result["training"]["COBALT"], result["training"]["FT"]
    assert (cobalt["steps"], cobalt["response_len_first"], cobalt["response_len_last"], cobalt["no_code_max"]) == \
        (2, 40.0, 60.0, 25.0)
    assert cobalt["feedback"] == {"failing_feedback_contexts": 3, "failing_feedback_repairs": 3,
                                  "failing_feedback_mixed": 1, "passing_feedback_contexts": 1,
                                  "passing_feedback_kept": 4, "group_size": 8}
    assert "feedback" not in ft and ft["response_len_max"] == 90.0  # FT trains on first turns: no feedback
    bar = result["bar"]
    assert bar["cobalt_minus_ft_last_turn"] == pytest.approx(200 / 3)  # +100, +50, +50 over the three problems
    assert not bar["se_at_most_bar"]  # three problems: standard errors far above 3 points
    assert bar["no_code_above_warmup"] == {"COBALT": 0.0, "FT": 0.0} and bar["no_code_within_bar"]
    text = repair_summary.report(result)
    assert "family    (2 problems): warm-up 0.0 / 25.0" in text
    assert "COBALT's contexts after failing feedback: 3, 3 of their 24 programs repair, 1 groups" in text


def test_a_step_counts_what_its_contexts_offer_to_learn_repair_from():
    import train
    from cobalt_min.prompts import ALL_PUBLIC_PASSED

    def context(turn, feedback):
        return {"turn": turn, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "p"}]
                + ([{"role": "assistant", "content": "x"}, {"role": "user", "content": feedback}] if turn else [])}
    contexts = [context(0, ""), context(1, "Test 1 failed: expected 2, got 3"), context(2, ALL_PUBLIC_PASSED)]
    rates = [1.0, 0.0,   1.0, 0.5,   1.0, None]  # G = 2 programs per context; None: no code block
    assert train.feedback_counts(contexts, rates, 2) == {
        "n_failing_feedback_contexts": 1, "n_failing_feedback_repairs": 1, "n_failing_feedback_mixed": 1,
        "n_passing_feedback_contexts": 1, "n_passing_feedback_kept": 1}


def test_several_runs_side_by_side(tmp_path, capsys):
    for seed, solved in ((0, [[0, 1], [0, 1]]), (1, [[0, 0], [0, 1]])):
        run = tmp_path / f"s{seed}"
        write(run / "eval_warmup", [record("demo/a", [[0, 0], [0, 0]]), record("demo/b", [[0, 0], [0, 0]])])
        write(run / "eval_cobalt", [record("demo/a", solved), record("demo/b", [[0, 0], [0, 0]])])
        repair_summary.main([str(run)])
    with pytest.raises(SystemExit, match="no repair_summary.json in"):
        repair_summary.main([str(tmp_path / "s0"), str(tmp_path)])
    capsys.readouterr()
    repair_summary.main([str(tmp_path / "s0"), str(tmp_path / "s1")])
    text = capsys.readouterr().out
    # seed 0: a +100, b 0 -> +50 (s.e. 50); seed 1: a +50, b 0 -> +25 (s.e. 25); mean +37.5, s.e. sqrt(50^2 + 25^2) / 2
    assert "s0: turn 1 Pass@1 warm-up 0.0, COBALT 50.0; COBALT - warm-up +50.0 (50.0)" in text
    assert f"COBALT - warm-up at the last turn, mean over 2 runs: +37.5 (s.e. {(50 ** 2 + 25 ** 2) ** 0.5 / 2:.1f})" in text
    assert f"per turn: t0 +0.0 (0.0), t1 +37.5 ({(50 ** 2 + 25 ** 2) ** 0.5 / 2:.1f})" in text


def test_resubmitted_programs_after_passing_and_after_failing_feedback():
    def turn(program, passed):
        return {"program": program, "public": [{"passed": True}, {"passed": passed}]}
    rec = {"problem_id": "demo/a", "samples": [
        {"turns": [turn("x = 1", False), turn("x = 1\n", False), turn("x = 2", True), turn("x = 2", True)]},
        {"turns": [turn("x = 1", True), turn("x = 3", False), turn(None, False), turn("x = 3", False)]}]}
    # sample 0: unchanged after failing, changed after failing, unchanged after passing; sample 1: changed after
    # passing; a turn without a program (None) counts neither before nor after it
    assert repair_summary.resubmissions([rec]) == {"after_passing": [1, 2], "after_failing": [1, 2]}


def test_repairs_that_go_back_to_an_earlier_program():
    def turn(program, solved):
        return {"program": program, "public": [{"passed": solved}], "hidden_pass_rate": 1.0 if solved else 0.0}
    rec = {"problem_id": "demo/a", "samples": [
        # solved at 1, broken at 2, the turn-1 program again at 3: a repair at 3 that goes back
        {"turns": [turn("a", False), turn("b", True), turn("c", False), turn("b\n", True)]},
        # a new program repairs at 2; at 3 it stays solved (no repair)
        {"turns": [turn("a", False), turn("a", False), turn("d", True), turn("d", True)]},
        # a new program repairs at 3
        {"turns": [turn("a", False), turn("e", False), turn("f", False), turn("g", True)]}]}
    assert repair_summary.repairs_going_back([rec], 4) == [{"turn": 2, "earlier_program": 0, "repaired": 1},
                                                          {"turn": 3, "earlier_program": 1, "repaired": 2}]
