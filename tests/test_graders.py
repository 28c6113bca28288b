"""The grader profiles (cobalt_min/graders.py) against their references' own verdicts.

tests/data/grader_corpus.json holds problems in LiveCodeBench's record format and programs that probe each
rule, with the verdict of every test by LiveCodeBench's lcb_runner and by the authors' remote_reward_server,
both run as they are (bench/reference_graders.py). Each profile must agree with its reference on every pair,
but for the pairs that docs/departures.md names, where it must disagree in the named way: the
reference's harness fails a program that a plain python3 runs correctly, and the profile passes it."""
import json
from pathlib import Path

import pytest

from cobalt_min import graders
from cobalt_min.problems import parse_rows
from cobalt_min.sandbox import run_batch, run_tests

ROOT = Path(__file__).resolve().parent.parent
CORPUS = json.loads((ROOT / "tests" / "data" / "grader_corpus.json").read_text())
DEPARTURES = " ".join((ROOT / "docs" / "departures.md").read_text().split())  # (words, whatever the line breaks)


@pytest.fixture(scope="module", params=list(graders.GRADERS))
def judged(request):
    """(grader name, the pairs its reference judged, our verdicts on each of their tests)."""
    name = request.param
    problems = {p.id: p for p in parse_rows([(f"corpus:{k}", row) for k, row in enumerate(CORPUS["problems"])], "lcb")}
    pairs = [pair for pair in CORPUS["pairs"] if pair[name] is not None]
    results = run_batch([(pair["program"], problems[pair["problem"]].all_tests()) for pair in pairs],
                        grader=name, workers=2)
    return name, pairs, [[r.passed for r in res] for res in results]


def agrees(reference: list, ours: list) -> bool:
    """Same verdict on every test the reference ran (LiveCodeBench stops at a failure: None after it), and
    the same verdict on the program."""
    return len(reference) == len(ours) and all(t is None or t == o for t, o in zip(reference, ours)) \
        and all(t is True for t in reference) == all(ours)


def test_each_profile_agrees_with_its_reference_but_where_readme_departs(judged):
    name, pairs, ours = judged
    disagree = [(pair["id"], pair[name], verdicts) for pair, verdicts in zip(pairs, ours)
                if agrees(pair[name], verdicts) == bool(pair["departures"].get(name))]
    assert not disagree, disagree
    departed = [pair for pair in pairs if pair["departures"].get(name)]
    for pair, verdicts in zip(pairs, ours):
        if pair["departures"].get(name):
            assert all(verdicts), (pair["id"], verdicts)  # the profile judges as a plain python3 would
    if name == "livecodebench":
        assert len(departed) == 7, [p["id"] for p in departed]


def test_the_departures_page_lists_every_departure():
    named = {d for pair in CORPUS["pairs"] for d in pair["departures"].values()}
    assert named, "the corpus names no departure"
    for departure in named:
        assert departure in DEPARTURES, departure


def test_the_corpus_probes_what_the_issue_found():
    # Rules the two references differ on, each shown by the references themselves.
    by_id = {pair["id"]: pair for pair in CORPUS["pairs"]}
    passes = lambda pair, name: all(t is True for t in by_id[pair][name])  # noqa: E731
    assert passes("sum-exit", "livecodebench") and not passes("sum-exit", "authors")  # exit() is None there
    assert not passes("sum-quit", "livecodebench") and not passes("sum-quit", "authors")
    assert passes("sum-prelude-names", "livecodebench") and not passes("sum-prelude-names", "authors")
    assert passes("half-float", "livecodebench") and not passes("half-float", "authors")  # 3.0 is 3 as a Decimal
    assert passes("pal-int", "livecodebench")  # 1 == True
    assert passes("bigpow-print", "livecodebench") and not passes("bigpow-print", "authors")  # 50000 digits
    assert passes("depth-recursive", "livecodebench") and not passes("depth-recursive", "authors")
    assert passes("slow-5s", "livecodebench") and not passes("slow-5s", "authors")  # 6 s against 4 s
    assert passes("long-print", "authors") and passes("long-print", "livecodebench")  # 1.2 MB of output
    assert not passes("sum-numpy", "authors")  # python3 -S: no site-packages
    assert not passes("sum-future-import", "authors") and not passes("sum-future-import", "livecodebench")


def test_comparison_rules_by_hand():
    lcb, authors = graders.livecodebench_stdout_matches, graders.authors_stdout_matches
    for same in (lcb, authors):  # what no rule accepts: order, duplicates, joins, missing or extra lines
        assert same("1\n2\n", "1\n2") and same("\n1\n2\n\n", "1\n2\n")
        assert not same("2\n1\n", "1\n2\n") and not same("1\n1\n2\n", "1\n2\n") and not same("12\n", "1\n2\n")
        assert not same("1\n", "1\n2\n") and not same("1\n2\n3\n", "1\n2\n") and not same("", "0\n")
        for sep in ("\x0b", "\x0c", "\x1c", "\x85", "\u2028"):  # lines end at "\n" (and "\r") only
            assert not same(f"1{sep}2\n", "1\n2\n"), repr(sep)
    # LiveCodeBench: lines stripped one by one, numbers by value.
    assert lcb("3.0\n", "3\n") and lcb("+3 003\n", "3 3\n") and lcb("1e2\n", "100\n")
    assert lcb("  #\n#\n", "#\n #\n") and lcb("1 \r\n2\r\n", "1\n2\n")
    assert not lcb("1\n2\n", "1 2\n") and not lcb("1\r2\n", "1\n2\n") and not lcb("x\n", "y\n")
    assert not lcb("nan\n", "nan\n".replace("nan", "NaN")) or lcb("nan\n", "nan\n")  # (text equal first)
    # The authors: the whole stripped, "\r\n" and "\r" of the output read as "\n".
    assert authors("  3 \n", "3\n") and authors("1\r\n2\r\n", "1\n2\n") and authors("1\r2", "1\n2")
    assert not authors("3.0\n", "3\n") and not authors("1 \n2\n", "1\n2\n") and not authors("1\n2\n", "1\r\n2\r\n")
    # Call-based values.
    assert graders.livecodebench_value_matches(1, True) and graders.livecodebench_value_matches(3.0, 3)
    assert not graders.strict_value_matches(1, True) and not graders.strict_value_matches(3.0, 3)
    assert graders.strict_value_matches([[0, 1]], [[0, 1]]) and graders.strict_value_matches(7, [7], taco_wrapped=True)
    assert not graders.strict_value_matches(float("nan"), float("nan"))
    assert not graders.strict_value_matches(float("inf"), float("inf")) and graders.strict_value_matches(10 ** 400, 10 ** 400)
    assert lcb("1" + "0" * 400 + "\n", "1e400\n") and not lcb("inf\n", "1" + "0" * 400 + "\n")  # Decimals, not floats
    nested = [1, 1]
    for _ in range(5000):
        nested = [[nested[0]], [nested[1]]]
    for rule in (graders.strict_value_matches, graders.livecodebench_value_matches):
        assert not rule(*nested)  # deeper than the grader compares: a failure, not a RecursionError


@pytest.mark.parametrize("grader", list(graders.GRADERS))
def test_programs_are_compiled_with_their_own_flags(grader):
    # The sandbox's own files use `from __future__ import annotations`; a program must not inherit it: an
    # annotation read at run time is the object, not a string, as in a plain python3.
    program = "def read(text: int):\n    return text\nprint(read.__annotations__['text']('4') + 1)\n"
    [r] = run_tests(program, {"inputs": [""], "outputs": ["5\n"]}, grader=grader)
    assert r.passed, r


def test_unknown_grader_is_refused():
    with pytest.raises(ValueError, match="unknown grader"):
        graders.get("taco")
    assert graders.get("livecodebench", timeout_s=2.5).timeout_s == 2.5 and graders.get().name == "authors"
