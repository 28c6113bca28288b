"""The HTML report (cobalt_min/report.py) on runs written in the exact formats of evaluate.py, perturb.py
analyze/judge, train.py and collect.py; checked in the page's text and, rendered, in headless Chromium
(Debian's `chromium`, which .ci/run installs): the numbers, a trajectory's diff and feedback, and
hostile model text that must show as text and run nothing."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest

from cobalt_min.jsonl import write_jsonl
from cobalt_min.metrics import summarize
from cobalt_min.report import find_runs, main, write_report

SCRIPT_ATTACK = "</script><script>document.title='PWNED-SCRIPT'</script>"
IMG_ATTACK = "<img src=x onerror=\"document.title='PWNED-IMG'\">"
OLD = "a, b = map(int, input().split())\nprint(a - b)\n"
NEW = "a, b = map(int, input().split())\nprint(a + b)\n"


def turn(t, response, program, public, hidden, feedback):
    return {"turn": t, "response": response, "program": program,
            "public": [{"status": s, "passed": s == "passed"} for s in public],
            "public_pass_rate": sum(s == "passed" for s in public) / max(1, len(public)), "hidden_pass_rate": hidden,
            "pass_rate": hidden, "feedback": feedback}


def make_eval_run(path: Path, perturbed: bool = False) -> dict:
    """An evaluate.py run of 2 problems x 2 samples x 2 turns; problem 'p/<b>1</b>' sample 0 goes from a
    wrong program to a right one, its response carrying the hostile strings."""
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Add two numbers " + IMG_ATTACK}]
    fix = {"problem_id": "p/<b>1</b>", "sample": 0, "stopped": False, "messages": messages, "turns": [
        turn(0, "first try\n```python\n" + OLD + "```\n" + SCRIPT_ATTACK, OLD, ["wrong_answer", "passed"], 0.0,
             "FEEDBACK-MARKER: test 0 expected 3, got -1"),
        turn(1, "fixed " + IMG_ATTACK + "\n```python\n" + NEW + "```", NEW, ["passed", "passed"], 1.0, "all passed")]}
    other = {"problem_id": "p/<b>1</b>", "sample": 1, "stopped": False, "messages": messages, "turns": [
        turn(0, "no code", None, [], 0.0, "no code block"), turn(1, "still none", None, [], 0.0, "no code block")]}
    second = [{"problem_id": "p2", "sample": s, "stopped": False, "messages": messages, "turns": [
        turn(0, "```python\nprint(1)\n```", "print(1)\n", ["passed", "passed"], 1.0, ""),
        turn(1, "```python\nprint(1)\n```", "print(1)\n", ["passed", "passed"], 1.0, "")]} for s in range(2)]
    records = [{"problem_id": "p/<b>1</b>", "samples": [fix, other]}, {"problem_id": "p2", "samples": second}]
    if perturbed:
        for r in records:
            r["perturbed"] = {"indices": [0, 1], "tests": {}}
    path.mkdir(parents=True)
    write_jsonl(path / "trajectories.jsonl", records)
    summary = summarize(records, 2)
    summary.update(model="m", problems_source="s", perturbed=perturbed, temperature=0.6, top_p=0.95, max_new_tokens=9)
    (path / "summary.json").write_text(json.dumps(summary))
    return summary


def make_train_run(path: Path):
    path.mkdir(parents=True)
    write_jsonl(path / "metrics.jsonl", [
        {"step": s, "reward_mean": -0.5 + 0.25 * s, "pass_rate": 0.1 * s, "kl": 0.01 * s, "clip_frac_low": 0.0,
         "clip_frac_high": 0.02, "response_len": 50 + s, "generate_s": 10.0, "update_s": 5.0, "step_s": 16.0,
         **({"val_reward": 0.3} if s == 3 else {})} for s in (1, 2, 3)])


def make_collect_run(path: Path):
    path.mkdir(parents=True)
    (path / "stats.json").write_text(json.dumps({"problems": 2, "contexts": 1, "contexts_per_turn": {"0": 1}}))
    write_jsonl(path / "contexts.jsonl", [{"problem_id": "p2", "turn": 1, "prev_best": 0.5, "tests": {}, "messages": [
        {"role": "user", "content": "CONTEXT-MARKER " + SCRIPT_ATTACK}]}])


def test_the_page_holds_the_numbers_and_escapes_everything(tmp_path):
    before = make_eval_run(tmp_path / "eval_before")
    make_train_run(tmp_path / "train")
    make_collect_run(tmp_path / "collect")
    page = write_report(tmp_path).read_text()
    assert [k for k, _ in find_runs([tmp_path])] == ["collect", "evaluate", "train"]
    # Pass@1 per turn as a chart line, in data coordinates
    line = re.search(r'data-label="eval_before" data-points="([^"]+)"', page).group(1)
    assert [float(p.split(",")[1]) for p in line.split()] == pytest.approx(before["pass@1"]) == [50.0, 75.0]
    # what feedback did at turn 1: p/1 sample 0 repaired (of 2 failing), nothing broken (of 2 passing), gain
    # paired over problems +50 and 0: +25, standard error 25
    assert "<td data-turn='1'>+25.0 (25.0)</td>" in page
    assert re.search(r"data-row='repaired'>.*?<td data-turn='1'>1/2 \(50%\)</td>", page)
    assert re.search(r"data-row='broken'><td>broken</td><td data-turn='1'>0/2 \(0%\)</td>", page)
    assert 'data-label="reward_mean" data-points="1,-0.25 2,0 3,0.25"' in page
    assert 'data-label="val_reward" data-points="3,0.3"' in page
    # the grid: problem 1 solved by 0/2 then 1/2 samples; problem names escaped
    assert re.search(r'p/&lt;b&gt;1&lt;/b&gt;</a></th><td class="cell" data-turn="0" data-share="0.0000"[^>]*>0/2</td>'
                     r'<td class="cell" data-turn="1" data-share="0.5000"[^>]*>1/2</td>', page)
    # collected contexts are escaped server-side; nothing a model wrote appears as markup
    assert "CONTEXT-MARKER &lt;/script&gt;&lt;script&gt;" in page
    assert "<b>1</b>" not in page and "PWNED" not in page.replace("CONTEXT-MARKER &lt;/script&gt;&lt;script&gt;"
                                                                   "document.title=&#x27;PWNED-SCRIPT", "")


def test_command_line_and_clear_errors(tmp_path, capsys):
    make_eval_run(tmp_path / "a")
    make_eval_run(tmp_path / "b", perturbed=True)
    main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "both.html")])
    page = (tmp_path / "both.html").read_text()
    assert 'data-label="a"' in page and 'data-label="b"' in page  # two runs side by side in one chart
    (tmp_path / "a" / "summary.json").unlink()  # a run still going: Pass@1 from the trajectories so far
    page = write_report(tmp_path / "a").read_text()
    assert 'data-label="a" data-points="0,50 1,75"' in page
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="holds no run"):
        main([str(tmp_path / "empty")])
    with pytest.raises(SystemExit, match="is not a folder"):
        main([str(tmp_path / "missing")])


def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run must install it (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return exe


def rendered_dom(page: Path, fragment: str = "") -> str:
    """The DOM after the page's script ran (and the opened problem was decompressed and drawn)."""
    proc = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--virtual-time-budget=10000", "--dump-dom", page.as_uri() + fragment],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "<body" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


def test_rendered_in_chromium_trajectory_diff_feedback_and_hostile_text(tmp_path):
    make_eval_run(tmp_path / "ptb", perturbed=True)
    write_jsonl(tmp_path / "ptb" / "hacking_candidates.jsonl", [{"problem_id": "p/<b>1</b>", "sample": 0, "turn": 1}])
    write_jsonl(tmp_path / "ptb" / "judgements.jsonl",
                [{"problem_id": "p/<b>1</b>", "sample": 0, "turn": 1, "label": "Hard Coding"}])
    page = write_report(tmp_path / "ptb")
    dom = rendered_dom(page, "#open=" + quote("p/<b>1</b>"))
    assert "<title>cobalt-min report" in dom and "PWNED" not in dom.split("</title>")[0]
    assert re.search(r"data-first-screen-ms=\"[0-9.]+\"", dom)
    opened = re.search(r'<details class="problem" id="r0-p0" data-problem="p/&lt;b&gt;1&lt;/b&gt;"[^>]*>', dom).group(0)
    assert 'open=""' in opened and 'data-rendered="done"' in opened
    problem = dom[dom.index(opened):dom.index('id="r0-p1"')]
    # the diff of turn 1 against turn 0, the feedback shown, perturbed tests and the judge's label
    assert '<span class="del">- print(a - b)</span><span class="add">+ print(a + b)</span>' in problem
    assert "FEEDBACK-MARKER: test 0 expected 3, got -1" in problem
    assert "test 0: wrong_answer (perturbed: expected output swapped)" in problem
    assert "judge: Hard Coding" in problem and "1 hacking candidate(s)" in dom
    # hostile strings are text: shown escaped, no element made from them
    assert "&lt;/script&gt;&lt;script&gt;document.title='PWNED-SCRIPT'&lt;/script&gt;" in problem
    assert "&lt;img src=x onerror=\"document.title='PWNED-IMG'\"&gt;" in problem
    assert "<img" not in dom and "<b>1</b>" not in dom


def test_rendered_in_chromium_train_and_collect(tmp_path):
    make_train_run(tmp_path / "train")
    make_collect_run(tmp_path / "collect")
    dom = rendered_dom(write_report(tmp_path))
    for title in ("Reward", "KL to the reference policy", "Clip fractions", "Response length", "Time per phase (s)"):
        assert f'aria-label="{title}"' in dom
    assert 'data-label="generate" data-points="1,10 2,10 3,10"' in dom
    assert "CONTEXT-MARKER &lt;/script&gt;" in dom and "PWNED" not in dom.split("</title>")[0]
