"""VeRPO-MT's weights, rewards and advantages (cobalt_min/verpo.py) against values computed by hand."""

import math

import pytest
import torch

from cobalt_min import verpo


def rows(*bits):
    return torch.tensor([[int(b) for b in row] for row in bits])


def test_a_worked_example_of_one_turn():
    # 4 single-turn samples, 5 tests, worked out by hand: rho = 1, 1, .5, .5, 0; sigma = 0.1871
    passes = rows("11110", "11010", "11100", "11000")
    w = verpo.weights_per_test(passes)
    assert w.tolist() == pytest.approx([.06582, .06582, .17650, .17650, .94676], abs=5e-5)
    out = verpo.group_advantages(passes[:, None, :], torch.tensor([1, 1, 1, 1]))
    assert out["turn_rewards"][:, 0].tolist() == pytest.approx([.48463, .30813, .30813, .13163], abs=5e-5)
    assert out["outcomes"].tolist() == [0, 0, 0, 0]  # no sample passes test 5: no outcome term
    assert out["advantages"][:, 0].tolist() == pytest.approx([.17650, 0, 0, -.17650], abs=5e-5)


def test_two_conversations_of_two_turns_by_hand():
    # A: [0 1] then [1 1] (solved at its last turn, L = 2); B: [0 0] then [0 1] (not solved).
    # rho = (1/4, 3/4); w = e^-0.5, e^-1.5; sigma = 0.25 / 2; both densities 1 + e^-8.
    passes = torch.tensor([[[0, 1], [1, 1]], [[0, 0], [0, 1]]])
    out = verpo.group_advantages(passes, torch.tensor([2, 2]))
    d = 1 + math.exp(-8) + 1e-6
    w1, w2 = math.exp(-0.5) / d, math.exp(-1.5) / d
    assert out["weights"].tolist() == pytest.approx([w1, w2])
    r = [[w2, w1 + w2], [0.0, w2]]
    assert out["turn_rewards"].flatten().tolist() == pytest.approx(sum(r, []))
    mean_turn = (w2 + w1 + w2 + w2) / 4
    assert out["outcomes"].tolist() == pytest.approx([0.95 ** 2, 0.0])
    a_traj = [0.95 ** 2 / 2, -0.95 ** 2 / 2]
    expected = [[a_traj[i] + r[i][t] - mean_turn for t in range(2)] for i in range(2)]
    assert out["advantages"].flatten().tolist() == pytest.approx(sum(expected, []))
    assert out["advantages"].flatten().tolist() == pytest.approx([.35543, .96176, -.77012, -.54707], abs=5e-5)


def test_turns_past_a_conversations_end_count_nowhere():
    # A solved at once (L = 1; its second row is padding, even if it says "passed"); B took two turns.
    passes = torch.tensor([[[1, 1], [1, 1]], [[0, 0], [0, 1]]])
    out = verpo.group_advantages(passes, torch.tensor([1, 2]))
    # rho over the M = 3 real turns: (1/3, 2/3)
    expected = verpo.weights_per_test(torch.tensor([[1, 1], [0, 0], [0, 1]]))
    assert out["weights"].tolist() == pytest.approx(expected.tolist())
    assert out["turn_rewards"][0, 1] == 0 and out["advantages"][0, 1] == 0
    assert out["outcomes"].tolist() == pytest.approx([0.95, 0.0])  # an earlier success decays less
    a_turn = out["advantages"] - (out["outcomes"] - out["outcomes"].mean())[:, None] * torch.tensor([[1, 0], [1, 1]])
    assert float(a_turn.sum()) == pytest.approx(0, abs=1e-6)  # the turn term is centred over the 3 real turns


@pytest.mark.parametrize("passes,expected", [
    # every turn passes every test: rho = 1 for both, equal, sigma = 0 -> each density 2: w' = e^-2 / 2
    (rows("11", "11"), [math.exp(-2) / 2] * 2),
    # no turn passes any test: w' = 1 / 2 each
    (rows("00", "00", "00"), [0.5, 0.5]),
    # one test: density 1, w' = e^(-2 rho)
    (rows("1", "0", "0", "0"), [math.exp(-0.5)]),
    # all pass rates equal (0.5) though the turns differ: density 3 each
    (rows("101", "010"), [math.exp(-1) / 3] * 3),
])
def test_edge_cases_of_the_weights(passes, expected):
    assert verpo.weights_per_test(passes).tolist() == pytest.approx(expected, rel=1e-5)


def test_a_group_where_nothing_differs_has_no_advantage():
    for bits in ("11", "00"):
        out = verpo.group_advantages(rows(bits, bits, bits)[:, None, :], torch.tensor([1, 1, 1]))
        assert out["advantages"].abs().max() == 0


def test_a_real_rollout_gives_every_turn_its_verdicts_and_verpo_its_groups():
    """rollout(keep_tokens=True) keeps each turn's verdict on every true test (real sandbox runs); VeRPO-MT's
    groups come from them: a conversation ends at its first fully passing program."""
    from cobalt_min.problems import load_problems
    from cobalt_min.rollout import rollout
    from test_rollout import ReplayEngine, code
    [p] = [p for p in load_problems("demo", verbose=False) if p.id == "demo/sum-two"]
    sub, add = "a, b = map(int, input().split())\nprint(a - b)", "a, b = map(int, input().split())\nprint(a + b)"
    engine = ReplayEngine({p.id: {"question": p.question,
                                  "samples": [[code(sub, 0), code(add, 0)], [code(add, 1), code(add, 1)]]}})
    [trajs], _ = rollout([p], engine, samples=2, feedback_turns=1, keep_tokens=True, progress=False)
    zero = [x == "0 0\n" for x in p.all_tests()["inputs"]]  # a - b is right for "0 0" only
    assert sum(zero) == 1 and len(zero) == 8
    assert [t["tests_passed"] for t in trajs[0]["turns"]] == [zero, [True] * 8]
    assert [t["tests_passed"] for t in trajs[1]["turns"]] == [[True] * 8] * 2
    out = verpo.batch_advantages([trajs])
    # conversation 1 solved at turn 0 (L = 1: its turn 1 counts nowhere), conversation 0 at turn 1 (L = 2).
    # Over the M = 3 real turns "0 0" is passed by all (rho 1), the other 7 tests by 2 (rho 2/3): sigma =
    # sqrt(7)/48, the 7 weigh e^(-4/3) / 7 each and "0 0" e^-2 (the densities' cross terms are e^-18.3).
    assert out["outcomes"].flatten().tolist() == pytest.approx([0.95 ** 2, 0.95])
    assert out["turn_rewards"].flatten().tolist() == pytest.approx([.135335, .398932, .398932, 0], abs=1e-5)
    assert out["advantages"].flatten().tolist() == pytest.approx([-.199481, .064116, .111616, 0], abs=1e-5)
