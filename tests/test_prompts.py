"""Prompts (paper §2): code extraction, the history kept of thinking models, truncation, the feedback of the
first failing public test, the first turn."""
from cobalt_min import prompts as PR
from cobalt_min.sandbox import TestResult


def test_extract_code_tricky_responses():
    assert PR.extract_code("text\n```python\na = 1\n```\nmore\n```python\nb = 2\n```\nbye") == "b = 2"
    assert PR.extract_code("```\nplain fence\n```") == "plain fence"
    assert PR.extract_code("no code here") is None
    assert PR.extract_code("```python\nx = 1\n```\nthen cut off: ```python\ny = ") == "x = 1"  # unclosed last
    assert PR.extract_code("```python\nprint(1)\n") is None
    assert PR.extract_code("```python\n\n```") is None
    thinking = "<think>maybe ```python\nwrong = 1\n```</think>Answer:\n```py\nright = 2\n```"
    assert PR.extract_code(thinking) == "right = 2"


def test_history_keeps_text_after_think_for_thinking_models():
    resp = "<think>" + "long reasoning " * 100 + "</think>\nFinal:\n```python\nx=1\n```"
    assert PR.history_text(resp, thinking=True) == "Final:\n```python\nx=1\n```"
    assert PR.history_text(resp, thinking=False) == resp
    assert len(PR.history_text("<think>a</think>" + "z" * 7000, thinking=True)) == 6000


def test_truncate():
    assert PR.truncate("a" * 400) == "a" * 400
    t = PR.truncate("a" * 200 + "b" * 50 + "c" * 200)
    assert t == "a" * 200 + "...(truncated) ..." + "c" * 200
    # stripped first (the authors strip every field): surrounding whitespace neither shows nor counts
    assert PR.truncate("\n  " + "a" * 400 + "  \n\n") == "a" * 400
    assert PR.truncate(" " * 300 + "a" * 500 + "\n" * 300) == "a" * 200 + "...(truncated) ..." + "a" * 200


def _r(status, stdout="", stderr="", returned=None):
    return TestResult(status == "passed", status, stdout, stderr, returned=returned)


def test_feedback_shows_first_failing_public_test_only():
    tests = {"inputs": ["1 2\n", "3 4\n", "5 6\n"], "outputs": ["3\n", "7\n", "11\n"]}
    fb = PR.feedback_text([_r("passed"), _r("wrong_answer", "8\n"), _r("runtime_error", stderr="boom")], tests)
    assert fb == "Input:\n3 4\nYour output:\n8\nExpected output:\n7"
    fb = PR.feedback_text([_r("runtime_error", "partial\n", "Traceback...\nValueError: x"), _r("passed"), _r("passed")],
                          tests)
    assert "Input:\n1 2" in fb and "Your output:\npartial" in fb and "Error:\nTraceback...\nValueError: x" in fb
    assert PR.feedback_text([_r("timeout"), _r("passed"), _r("passed")], tests) == \
        "Input:\n1 2\nThe program timed out after 4 seconds."
    assert PR.feedback_text([_r("passed")] * 3, tests) == PR.ALL_PUBLIC_PASSED
    long = PR.feedback_text([_r("wrong_answer", "x" * 1000)] + [_r("passed")] * 2, tests)
    assert "x" * 200 + "...(truncated) ..." + "x" * 200 in long
    call = {"inputs": [[1, [2, 3]]], "outputs": [[5]], "fn_name": "f"}
    fb = PR.feedback_text([_r("wrong_answer", returned="[6]")], call)
    assert fb == "Input:\n1, [2, 3]\nYour output:\n[6]\nExpected output:\n[5]"
    msg = PR.feedback_message(None, tests)
    assert msg["role"] == "user" and PR.NO_CODE in msg["content"]
    assert PR.says_all_public_passed(PR.feedback_message([_r("passed")] * 3, tests))


def test_first_turn_messages():
    msgs = PR.first_turn_messages("Print 1.")
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "standard input" in msgs[1]["content"] and msgs[1]["content"].endswith("Print 1.")
    msgs = PR.first_turn_messages("Add.", "def add(a, b):\n", "add")
    assert "def add(a, b):" in msgs[1]["content"]
