"""training/data.py: perturbed contexts added to the training set (all, or a share), long contexts dropped."""
import pytest


def test_perturbed_contexts_given_are_used():
    from cobalt_min.training.data import drop_long_contexts, mix_perturbed
    clean, perturbed = [{"c": i} for i in range(6)], [{"p": i} for i in range(4)]
    assert mix_perturbed(clean, perturbed, None, 0) == clean + perturbed  # default: all of them, as the paper
    mixed = mix_perturbed(clean, perturbed, 0.25, 0)  # 2 perturbed : 6 clean
    assert mixed[:6] == clean and len(mixed) == 8 and all("p" in c for c in mixed[6:])
    for useless in (0.0, -0.1, 1.0, 0.01):  # a fraction that adds nothing (or everything) is an error
        with pytest.raises(SystemExit):
            mix_perturbed(clean, perturbed, useless, 0)
    kept, dropped = drop_long_contexts([{"messages": "ab"}, {"messages": "abcdef"}], len, 4)
    assert kept == [{"messages": "ab"}] and dropped == 1
