"""Metrics (paper §6) against hand-computed values: pass@k, Pass@1 per turn with its gain over turn 0, repair and
break rates, the paired change over problems, the reward trend."""
import pytest

from cobalt_min.metrics import format_table, pass_at_k, summarize


def test_pass_at_k():
    assert pass_at_k(4, 0, 2) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)


def test_paired_change_and_reward_trend_by_hand():
    from cobalt_min.demos.demo_summary import reward_trend
    from cobalt_min.metrics import paired_change, pass1_se_per_turn

    def record(pid, solved):  # solved[s][t]: does sample s pass every hidden test at turn t
        return {"problem_id": pid, "samples": [{"turns": [{"hidden_pass_rate": float(x)} for x in row]}
                                               for row in solved]}
    before = [record("a", [[0, 0], [0, 1]]), record("b", [[0, 0], [0, 0]]), record("c", [[1, 1], [1, 1]])]
    after = [record("a", [[1, 1], [1, 1]]), record("b", [[0, 1], [0, 0]]), record("c", [[1, 1], [1, 1]]),
             record("only-after", [[1, 1]])]
    # per problem, Pass@1 averaged over 2 turns: a 0.25 -> 1, b 0 -> 0.25, c 1 -> 1; changes 75, 25, 0 points
    change = paired_change(before, after, 2)
    assert change["problems"] == 3 and change["change"] == pytest.approx(100 / 3)
    assert change["se"] == pytest.approx(((75 - 100 / 3) ** 2 + (25 - 100 / 3) ** 2 + (100 / 3) ** 2) ** 0.5
                                         / 2 ** 0.5 / 3 ** 0.5)
    assert change["before"] == pytest.approx(125 / 3) and change["improved"] == 2 and change["worse"] == 0
    # per turn: turn 0 changes a +100, b 0, c 0; turn 1 a +50, b +50, c 0 (the problem only in `after` is left out)
    from cobalt_min.metrics import paired_change_per_turn
    [t0, t1] = paired_change_per_turn(before, after, 2)
    assert (t0["turn"], t0["change"], t1["turn"], t1["change"]) == (0, pytest.approx(100 / 3), 1, pytest.approx(100 / 3))
    assert t0["se"] == pytest.approx((2 * (100 / 3) ** 2 + (200 / 3) ** 2) ** 0.5 / 2 ** 0.5 / 3 ** 0.5)
    assert t1["se"] == pytest.approx((2 * (50 / 3) ** 2 + (100 / 3) ** 2) ** 0.5 / 2 ** 0.5 / 3 ** 0.5)
    # turn 0 Pass@1 per problem before: 0, 0, 100 -> standard error = std / sqrt(3)
    assert pass1_se_per_turn(before, 2)[0] == pytest.approx((2 * (100 / 3) ** 2 + (200 / 3) ** 2) ** 0.5 / 2 ** 0.5 / 3 ** 0.5)
    trend = reward_trend([{"reward_mean": r} for r in (-0.5, -0.3, 0.0, 0.1, 0.2, 0.3, 0.4, 0.6)])
    assert trend["quarter"] == 2 and trend["first_quarter"] == pytest.approx(-0.4)
    assert trend["last_quarter"] == pytest.approx(0.5) and trend["rise"] == pytest.approx(0.9)


def test_pass_at_1_per_turn_gain_repairs_and_breaks_by_hand():
    # Two problems x two conversations x three turns, as test_rollout.py's scripted rollout gives them:
    # sum-two s0 fails, passes, fails; s1 passes, fails, fails; reverse-string s0 always passes, s1 never (half the
    # hidden tests: the palindromes).
    def sample(hidden):
        return {"turns": [{"hidden_pass_rate": h, "pass_rate": h} for h in hidden]}
    records = [{"problem_id": "sum-two", "samples": [sample([0.0, 1.0, 0.0]), sample([1.0, 0.0, 0.0])]},
               {"problem_id": "reverse-string", "samples": [sample([1.0] * 3), sample([0.5] * 3)]}]
    summary = summarize(records, 3)
    assert summary["pass@1"] == pytest.approx([50.0, 50.0, 25.0])
    assert summary["change_points"] == pytest.approx([0, 0, -25.0])
    # What feedback did, conversations pooled: turn 1 repaired sum-two s0 (of sum s0, reverse s1 failing)
    # and broke sum-two s1 (of sum s1, reverse s0 passing); turn 2 repaired nothing and broke sum-two s0.
    assert summary["turn_changes"] == [
        {"turn": 1, "failing_before": 2, "repaired": 1, "repair_rate": 50.0, "passing_before": 2, "broken": 1,
         "break_rate": 50.0},
        {"turn": 2, "failing_before": 2, "repaired": 0, "repair_rate": 0.0, "passing_before": 2, "broken": 1,
         "break_rate": 50.0}]
    # Gain over turn 0 paired over problems: sum-two 50 -> 50 -> 0, reverse 50 throughout; at turn 2 the
    # changes are -50 and 0: mean -25, sample std 35.36, standard error 35.36 / sqrt(2) = 25.
    assert [g["gain"] for g in summary["gain_over_turn0"]] == pytest.approx([0.0, 0.0, -25.0])
    assert [g["se"] for g in summary["gain_over_turn0"]] == pytest.approx([0.0, 0.0, 25.0])
    table = format_table(summary)
    assert "1/2 (50%)" in table and "-25.00 (25.00)" in table
    assert summary["pass@k_turn0"][2] == pytest.approx(100.0)


def test_the_degenerate_rule():
    from cobalt_min.metrics import is_degenerate
    assert not is_degenerate("I swap the separator.\n```python\ndef join(xs):\n    return '|'.join(xs)\n```")
    assert not is_degenerate("")
    assert not is_degenerate("Le résultat attendu est « 3 » : je corrige la boucle.")  # a few accents
    assert is_degenerate("可以用format()函数，可以在函数内部定美化，可以在函数体中定美化")  # mostly not ASCII
    # the self-repair demo's FT and COBALT: the reasoning said again and again before (or instead of) the code
    said = "The test expected farewell(name), so the program must return exactly that.\n\n"
    assert is_degenerate(said * 3 + "```python\ndef farewell(name):\n    return 'Farewell'\n```")
    assert not is_degenerate(said * 2 + "```python\ndef farewell(name):\n    return 'Farewell'\n```")
    assert not is_degenerate("ok, " * 20)  # 80 characters: no block of 32 or more three times in a row
