"""Metrics (paper §6) against hand-computed values: pass@k, the paired change over problems, the reward trend."""
import pytest

from cobalt_min.metrics import pass_at_k


def test_pass_at_k():
    assert pass_at_k(4, 0, 2) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)


def test_paired_change_and_reward_trend_by_hand():
    from cobalt_min.demo_summary import reward_trend
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
