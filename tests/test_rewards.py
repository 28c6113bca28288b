"""The reward of paper §3, term by term, against hand-computed values."""
import pytest

from cobalt_min.rewards import (correctness_reward, count_reflection_keywords, format_reward, has_repetition,
                                split_response, training_reward, validation_reward)


def words(text):
    return len(text.split())


@pytest.mark.parametrize("pr,p,expected", [
    (1.0, 0.0, 1.0), (1.0, 0.5, 1.0),            # all pass: 1.0, no improvement term
    (0.5, 0.0, 0.2), (0.75, 0.0, 0.2),           # >= 0.5
    (0.25, 0.0, 0.0), (0.0, 0.0, -0.1),          # (0, 0.5) and 0
    (0.75, 0.5, 0.2 + 0.1 * 0.25 / 0.5),         # gain: + 0.1 (pr - p) / (1 - p)
    (0.25, 0.2, 0.0 + 0.1 * 0.05 / 0.8),
    (0.5, 0.5, -0.1),                            # no gain: replaced by -0.1 + 0.1 (pr - p) / p
    (0.25, 0.5, -0.1 + 0.1 * (-0.25) / 0.5),     # regression
    (0.0, 0.8, -0.1 + 0.1 * (-0.8) / 0.8),       # lost everything: -0.2
    (0.9, 1.0, -0.1 + 0.1 * (-0.1) / 1.0),       # a previous program already passed all tests
])
def test_correctness_reward(pr, p, expected):
    assert correctness_reward(pr, p) == pytest.approx(expected)


def test_repetition_detector():
    block = "abcdefghijklmnopqrstuvwxyz012345"  # 32 characters
    assert has_repetition("intro " + block * 8 + " outro")
    assert not has_repetition("intro " + block * 7 + " outro")
    assert not has_repetition(("abcdefghijklmnopqrstuvwxyz01234" + "\n") [:31] * 8)  # a block under 32 chars...
    assert has_repetition("ab" * 200)  # ...but a short period repeated long enough also repeats 32-char blocks
    import random
    rng = random.Random(0)
    assert not has_repetition("".join(rng.choice("abcdefgh \n") for _ in range(5000)))
    assert has_repetition("x" * 10 + ("é✓" * 16) * 8)  # counted in characters, not bytes


GOOD_THINK = "<think>Let me think. Wait, is n zero? I verify it.</think>\nHere:\n```python\nprint(1)\n```\nDone."


def test_split_response_rules():
    reasoning, answer, code, expl = split_response(GOOD_THINK, thinking=True)
    assert reasoning.startswith("<think>Let me") and code == "\nprint(1)" and expl == "Done."
    assert split_response(GOOD_THINK.replace("</think>", ""), thinking=True) is None  # no </think>
    assert split_response(GOOD_THINK + "</think>", thinking=True) is None  # two
    assert split_response("<think>a</think>no code", thinking=True) is None
    two_blocks = "<think>a</think>```python\nx=1\n```\n```python\nx=2\n```"
    assert split_response(two_blocks, thinking=True) is None
    assert split_response("<think>a</think>```python\nprint(`x`)\n```", thinking=True) is None  # stray backtick
    assert split_response("<think>a</think>```python\nprint(1)\n", thinking=True) is None  # unclosed
    plain = "I will sum.\n```python\nprint(1)\n```\nThat is all."
    reasoning, _, code, expl = split_response(plain, thinking=False)
    assert reasoning == "I will sum." and code == "\nprint(1)" and expl == "That is all."
    assert split_response(plain, thinking=True) is None  # a thinking model must close its thoughts


def test_keywords_counted_once_each_when_used_one_to_four_times():
    assert count_reflection_keywords("Wait. But wait, however... wrong!") == 4
    assert count_reflection_keywords("but " * 5 + "error") == 1  # 'but' five times: no credit
    assert count_reflection_keywords("butter awaiting") == 0  # whole words only


def test_format_reward_values():
    fr = lambda text, c, thinking=True: format_reward(text, c, count_tokens=words, thinking=thinking)  # noqa: E731
    assert fr(GOOD_THINK, 1.0) == 0.0
    assert fr(GOOD_THINK, 0.2) == 0.0
    assert fr(GOOD_THINK.replace("</think>", ""), 1.0) == -0.9
    assert fr(GOOD_THINK + ("0123456789abcdefghijklmnopqrstuvwxyz" * 8), 1.0) == -0.9
    long_reasoning = "<think>" + " ".join(f"step{i}" for i in range(5000)) + "</think>```python\nprint(1)\n```"
    assert fr(long_reasoning, 1.0) == -0.01
    long_expl = "<think>ok</think>```python\nprint(1)\n```\n" + " ".join(f"because{i}" for i in range(600))
    assert fr(long_expl, 0.0) == -0.01
    # Negative correctness: effort bonus 0.075 tanh(n / 1024) + 0.005 per keyword (wait, verify)
    n = words(split_response(GOOD_THINK, True)[0])
    import math
    assert fr(GOOD_THINK, -0.1) == pytest.approx(0.075 * math.tanh(n / 1024) + 0.010)
    assert fr(long_reasoning, -0.1) == pytest.approx(-0.1)
    assert fr(long_expl, -0.1) == pytest.approx(0.075 * math.tanh(1 / 1024) - 0.1)
    many = "<think>wait but however error verify wrong retry</think>```python\nprint(1)\n```"
    assert fr(many, -0.1) == pytest.approx(0.075 * math.tanh(7 / 1024) + 0.025)  # capped at 0.025


def test_training_and_validation_reward():
    kw = dict(count_tokens=words, thinking=True)
    assert training_reward("no code at all", None, 0.0, **kw) == -1.0
    assert training_reward(GOOD_THINK, 1.0, 0.0, **kw) == 1.0
    import math
    n = words(split_response(GOOD_THINK, True)[0])
    expected = -0.1 + 0.1 * (-0.25) / 0.75 + 0.075 * math.tanh(n / 1024) + 0.01
    assert training_reward(GOOD_THINK, 0.5, 0.75, **kw) == pytest.approx(expected)
    assert training_reward(GOOD_THINK.replace("</think>", ""), 0.0, 0.9, **kw) == -1.0  # clipped: -0.2 - 0.9
    assert training_reward(GOOD_THINK.replace("</think>", ""), 1.0, 0.0, **kw) == pytest.approx(0.1)
    assert validation_reward(1.0) == 1.0 and validation_reward(0.99) == 0.0 and validation_reward(None) == 0.0
