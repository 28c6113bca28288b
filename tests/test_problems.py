"""Problem sets: the bundled demo set (executed), each loader on fixtures written in the exact real
formats, skip reasons, clear errors, the hub path after the download. (The TACO cleaning: test_taco_cleaning.py.)"""
import base64
import collections
import json
import pickle
import zlib

import pytest

from cobalt_min import problems as P
from cobalt_min.data import make_demo
from cobalt_min.sandbox import run_batch


# ----------------------------------------------------------------------------- demo set


def test_demo_set_shape():
    probs = P.load_problems("demo")
    assert len(probs) >= 40
    assert len({p.id for p in probs}) == len(probs)
    for p in probs:
        assert len(p.public_tests["inputs"]) == 4 and len(p.hidden_tests["inputs"]) >= 4, p.id  # >= 8 tests
        assert p.solutions and ("Input" in p.question or p.fn_name), p.id
    stdin = [p for p in probs if not p.difficulty.endswith(" function")]
    assert len(stdin) >= 40 and sum(p.difficulty == "very easy" for p in stdin) >= len(stdin) // 3 - 1
    assert sum(p.fn_name is not None for p in stdin) >= 5
    # the learning demo's set: very easy call-based functions, enough for 30 training + 16 held-out problems
    functions = [p for p in probs if p.difficulty == "very easy function"]
    assert len(functions) >= 46 and all(p.fn_name and p.starter_code.startswith(f"def {p.fn_name}(") for p in functions)


def test_demo_reference_solutions_pass_all_tests_and_wrong_ones_fail():
    probs = {p.id: p for p in P.load_problems("demo")}
    results = run_batch([(p.solutions[0], p.all_tests()) for p in probs.values()], timeout_s=4.0)
    for p, res in zip(probs.values(), results):
        assert all(r.passed for r in res), (p.id, [(r.status, r.stderr[-200:]) for r in res if not r.passed])
    wrong = [(probs[f"demo/{pid}"], prog) for pid, prog in make_demo.WRONG.items()]
    assert len(wrong) >= 5
    public = run_batch([(prog, p.public_tests) for p, prog in wrong])
    hidden = run_batch([(prog, p.hidden_tests) for p, prog in wrong])
    for (p, _), pub, hid in zip(wrong, public, hidden):
        assert all(r.passed for r in pub), p.id  # a plausible first attempt...
        assert not all(r.passed for r in hid), p.id  # ...that the hidden tests catch


def test_the_repair_family_shows_its_open_detail_in_the_first_feedback():
    """Each 'repair function' problem leaves one detail open; a first attempt that guesses it wrong fails the
    first public test with a wrong answer, so the feedback the model reads holds the expected output."""
    from cobalt_min.prompts import feedback_text
    probs = {p.id: p for p in P.load_problems("demo") if p.difficulty == "repair function"}
    assert set(probs) == {f"demo/{pid}" for pid in make_demo.GUESSES} == set(make_demo.DETAIL_KIND)
    kinds = list(make_demo.DETAIL_KIND.values())
    assert len(probs) == 109 and {k: kinds.count(k) for k in set(kinds)} \
        == {"wording": 45, "separator": 24, "case": 9, "counting": 6, "rounding": 5, "answer": 20}
    # every problem has an answer of its own (a template's variants differ on the first public test)
    firsts = {(p.fn_name, json.dumps(p.public_tests["inputs"][0]), json.dumps(p.public_tests["outputs"][0])) for p in probs.values()}
    assert len(firsts) == len(probs)
    guesses = [(probs[f"demo/{pid}"], f"{probs[f'demo/{pid}'].starter_code}    {body}\n") for pid, body in make_demo.GUESSES.items()]
    results = run_batch([(prog, p.public_tests) for p, prog in guesses], timeout_s=4.0)
    for (p, prog), res in zip(guesses, results):
        assert res[0].status == "wrong_answer", (p.id, res[0].status, res[0].stderr[-200:])
        shown = feedback_text(res, p.public_tests)
        expected = p.public_tests["outputs"][0]
        assert "Expected output:\n" + (expected if isinstance(expected, str) else json.dumps(expected)) in shown, (p.id, shown)


def test_the_stored_outputs_are_the_reference_solutions_outputs():
    # make_demo builds expected outputs with Sandbox.outputs: what a reference solution prints or returns.
    probs = P.load_problems("demo")
    for p in [next(p for p in probs if not p.fn_name), next(p for p in probs if p.fn_name)]:
        tests = p.all_tests()
        assert make_demo.reference_outputs(p.solutions[0], tests["inputs"], p.fn_name) == tests["outputs"], p.id


def test_jsonl_round_trip(tmp_path):
    probs = P.load_problems("demo", limit=3, verbose=False)
    P.save_problems(probs, tmp_path / "x.jsonl")
    again = P.load_problems(tmp_path / "x.jsonl", verbose=False)
    assert [p.to_dict() for p in again] == [p.to_dict() for p in probs]


# ----------------------------------------------------------------------------- TACO


def taco_row(i, **over):
    row = {"question": f"Problem {i}: read a and b and print their sum. " + "x" * 100,
           "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)\n"]),
           "starter_code": "",
           "input_output": json.dumps({"inputs": [f"{k} {k}\n" for k in range(10)],
                                       "outputs": [f"{2 * k}\n" for k in range(10)]}),
           "difficulty": "EASY", "raw_tags": "[]", "name": None, "source": "codeforces", "tags": "[]",
           "skill_types": "[]", "url": "https://example.org", "Expected Auxiliary Space": None,
           "time_limit": "1 second", "date": None, "picture_num": None, "memory_limit": "256 megabytes",
           "Expected Time Complexity": None}
    row.update(over)
    return row


TACO_ROWS = [
    taco_row(0),
    taco_row(1, input_output=json.dumps({"fn_name": "double", "inputs": [[1], [2], [3]], "outputs": [[2], [4], [6]]}),
             solutions=json.dumps(["def double(x):\n    return 2 * x\n"]), source="codewars"),
    taco_row(2, input_output=json.dumps({"inputs": ["1\n", "2\n"], "outputs": ["1\n"]})),  # lengths differ
    taco_row(3, input_output=""),  # missing tests
    taco_row(4, input_output=json.dumps({"fn_name": "f", "inputs": ["4\n1 2 3 4"], "outputs": ["10"]}),
             source="geeksforgeeks"),  # GeeksforGeeks-style input: not an argument list
    taco_row(5, input_output="{not json"),
]


def write_taco_arrow(path, rows):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.ipc
    table = pa.table({k: pa.array([r[k] for r in rows], type=pa.string()) for k in rows[0]})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def check_taco(probs, skipped):
    assert [p.source for p in probs] == ["taco/codeforces", "taco/codewars"]
    stdin, call = probs
    assert stdin.fn_name is None and len(stdin.public_tests["inputs"]) == 4 and len(stdin.hidden_tests["inputs"]) == 6
    assert call.fn_name == "double" and call.hidden_tests["taco_wrapped_outputs"] is True
    assert call.solutions == ["def double(x):\n    return 2 * x\n"]
    assert skipped == {"inputs and outputs of different lengths": 1, "missing tests": 1,
                       "call-based inputs are not argument lists (GeeksforGeeks style)": 1, "tests are not valid JSON": 1}
    # TACO's wrapped outputs are accepted by the sandbox for TACO data
    res = run_batch([(s.solutions[0], s.all_tests()) for s in probs])
    assert all(r.passed for rs in res for r in rs)


def test_taco_arrow_stream_shard(tmp_path, capsys):
    shard = tmp_path / "train" / "data-00000-of-00001.arrow"
    shard.parent.mkdir()
    write_taco_arrow(shard, TACO_ROWS)
    probs = P.load_problems(tmp_path, split="train")
    err = capsys.readouterr().err
    assert "loaded 2 problems" in err and "skipped 1: missing tests" in err
    skipped = collections.Counter()
    P.parse_rows(P._read_file(shard), skipped=skipped)
    check_taco(probs, skipped)


def test_taco_json_rows(tmp_path):
    path = tmp_path / "taco.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in TACO_ROWS))
    skipped = collections.Counter()
    probs = P.parse_rows(P._read_file(path), skipped=skipped)
    check_taco(probs, skipped)
    (tmp_path / "taco.json").write_text(json.dumps(TACO_ROWS))
    assert len(P.load_problems(tmp_path / "taco.json", verbose=False)) == 2
    # Ids come from the problems, not from how the file was named: the same rows read through another path
    # (relative, absolute, another file name) are the same problems.
    import os
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "other.jsonl").write_text(path.read_text())
    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        ids = [[p.id for p in P.load_problems(source, verbose=False)]
               for source in ("taco.jsonl", str(path), "./copy/../taco.jsonl", "copy/other.jsonl")]
    finally:
        os.chdir(here)
    assert ids[0] == ids[1] == ids[2] == ids[3] and all(i.startswith("taco-") for i in ids[0]) and len(set(ids[0])) == 2


# ----------------------------------------------------------------------------- TACO-Cobalt


def test_taco_cobalt_rows(tmp_path):
    tests = {"inputs": [f"{k}\n" for k in range(9)], "outputs": [f"{k * k}\n" for k in range(9)]}
    rows = [{"id": 17, "difficulty": "MEDIUM", "question": "Square it.", "test_cases": json.dumps(tests)},
            {"id": 18, "difficulty": "EASY", "instruction": "Square it (PTB).",  # an osunlp/TACO-Cobalt-PTB row
             "public_test_cases": json.dumps({"inputs": ["1\n", "2\n", "0\n"], "outputs": ["1\n", "4\n", "0\n"]}),
             "perturbed_public_test_cases": json.dumps({"inputs": ["2\n", "1\n", "0\n"],
                                                        "outputs": ["1\n", "4\n", "0\n"]}),
             "modified_test_cases": json.dumps({"inputs": ["2\n", "1\n"], "outputs": ["1\n", "4\n"]}),
             "hidden_test_cases": json.dumps({"inputs": ["3\n"], "outputs": ["9\n"]})},
            {"id": 19, "question": "nothing to test"}]
    path = tmp_path / "validation.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    probs = P.load_problems(path, verbose=False)
    assert [p.id for p in probs] == ["17", "18"]
    assert probs[0].public_tests["inputs"] == tests["inputs"][:4] and len(probs[0].hidden_tests["inputs"]) == 5
    assert probs[1].question == "Square it (PTB)." and probs[1].public_tests["outputs"] == ["1\n", "4\n", "0\n"]
    # the authors' perturbed public tests are what the model is shown (evaluate.py --perturbed), not new ones
    assert probs[0].feedback_tests is None
    assert probs[1].feedback_tests == {"inputs": ["2\n", "1\n", "0\n"], "outputs": ["1\n", "4\n", "0\n"],
                                       "perturbed": [0, 1]}
    from cobalt_min.perturbation import perturbed_feedback_tests
    kept, shown, info, dropped = perturbed_feedback_tests(probs[1:], seed=0)
    assert shown["18"] is probs[1].feedback_tests and info["18"]["indices"] == [0, 1] and dropped == 0


# ----------------------------------------------------------------------------- LiveCodeBench


def encode_private(cases):
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases), protocol=4))).decode()


class Exploit:
    def __reduce__(self):
        import os
        return (os.system, ("touch /tmp/cobalt_min_pwned_by_pickle",))


def lcb_rows():
    stdin_row = {"question_title": "Add", "question_content": "Given A and B, print A+B.\n\nExample 1\n\nInput: 1 2",
                 "platform": "atcoder", "question_id": "abc001_a", "contest_id": "abc001",
                 "contest_date": "2025-02-01T00:00:00", "starter_code": "", "difficulty": "easy",
                 "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
                 "private_test_cases": encode_private([{"input": "5 6\n", "output": "11\n", "testtype": "stdin"}]),
                 "metadata": "{}"}
    func_row = dict(stdin_row, question_id="lc1", platform="leetcode", contest_date="2025-03-05T00:00:00",
                    question_content="Return a+b.\nSample Input 1\n...",
                    starter_code="class Solution:\n    def add(self, a: int, b: int) -> int:\n        ",
                    public_test_cases=json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional"}]),
                    private_test_cases=json.dumps([{"input": "[1, 2]\n[3]", "output": "[1, 2, 3]",
                                                    "testtype": "functional"}]),
                    metadata=json.dumps({"func_name": "add"}))
    poisoned = dict(stdin_row, question_id="evil", contest_date="2025-01-10T00:00:00",
                    private_test_cases=base64.b64encode(zlib.compress(pickle.dumps(Exploit()))).decode())
    old = dict(stdin_row, question_id="old", contest_date="2024-06-01T00:00:00")
    return [stdin_row, func_row, poisoned, old]


def test_livecodebench_rows(tmp_path, capsys):
    import os
    path = tmp_path / "test6.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lcb_rows()))
    probs = P.load_problems(path, start_date="2025-01-01", end_date="2025-04-30")
    assert "skipped 1: undecodable private tests (UnpicklingError)" in capsys.readouterr().err
    assert not os.path.exists("/tmp/cobalt_min_pwned_by_pickle")  # the poisoned pickle ran nothing
    assert [p.id for p in probs] == ["abc001_a", "lc1"]
    stdin, func = probs
    assert stdin.question == "Given A and B, print A+B." and func.question == "Return a+b."
    assert stdin.hidden_tests == {"inputs": ["5 6\n"], "outputs": ["11\n"]}
    assert func.fn_name == "add" and func.public_tests["inputs"] == [[1, 2]] and func.public_tests["outputs"] == [3]
    assert func.hidden_tests["inputs"] == [[[1, 2], [3]]] and func.hidden_tests["outputs"] == [[1, 2, 3]]
    program = "class Solution:\n    def add(self, a, b):\n        return a + b\n"
    [pub, hid] = run_batch([(program, func.public_tests), (program, func.hidden_tests)])
    assert pub[0].passed and hid[0].passed


# ----------------------------------------------------------------------------- errors


def test_clear_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a"}) + "\n{oops\n")
    with pytest.raises(SystemExit, match=r"bad.jsonl line 2 is not valid JSON"):
        P.load_problems(bad)
    useless = tmp_path / "useless.jsonl"
    useless.write_text(json.dumps(taco_row(0, input_output="")) + "\n")
    with pytest.raises(SystemExit, match=r"no usable problem in .*useless.jsonl \(1 missing tests \(first: .*useless.jsonl:1\)\)"):
        P.load_problems(useless, verbose=False)
    with pytest.raises(SystemExit, match="neither an existing file"):
        P.load_problems(tmp_path / "nope.jsonl")
    with pytest.raises(SystemExit, match="format must be one of"):
        P.load_problems("demo", format="csv")


# ----------------------------------------------------------------------------- the hub path, after the download


def test_hub_sources_download_the_right_files(tmp_path, monkeypatch):
    import huggingface_hub
    shards = {"train/data-00000-of-00009.arrow": TACO_ROWS[:1], "test/data-00000-of-00001.arrow": TACO_ROWS[:2]}
    for name, rows in shards.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        write_taco_arrow(tmp_path / name, rows)
    (tmp_path / "test6.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lcb_rows()[:2]))
    asked = []
    monkeypatch.setattr(huggingface_hub, "list_repo_files", lambda repo, repo_type: list(shards) + ["README.md"])

    def download(repo, name, repo_type):
        asked.append((repo, name, repo_type))
        return str(tmp_path / name)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    probs = P.load_problems("BAAI/TACO", split="test", verbose=False)
    assert asked == [("BAAI/TACO", "test/data-00000-of-00001.arrow", "dataset")] and len(probs) == 2
    asked.clear()
    probs = P.load_problems("livecodebench/code_generation_lite", version="v6", verbose=False)
    assert asked == [("livecodebench/code_generation_lite", "test6.jsonl", "dataset")] and len(probs) == 2
    assert P._lcb_files("release_v3") == ["test.jsonl", "test2.jsonl", "test3.jsonl"]


def test_split_by_difficulty_is_disjoint_and_complete(tmp_path, capsys):
    train, held = tmp_path / "train.jsonl", tmp_path / "held.jsonl"
    P.main(["split", "demo", "--difficulty", "very easy function", "--heldout", "16", "--seed", "0",
            "--train-out", str(train), "--heldout-out", str(held)])
    a, b = P.load_problems(str(train)), P.load_problems(str(held))
    assert len(b) == 16 and not {p.id for p in a} & {p.id for p in b}
    assert {p.id for p in a + b} == {p.id for p in P.load_problems("demo") if p.difficulty == "very easy function"}
    with pytest.raises(SystemExit, match="no problem of difficulty 'nope' in demo"):
        P.main(["split", "demo", "--difficulty", "nope", "--heldout", "1", "--train-out", str(train),
                "--heldout-out", str(held)])


def test_worked_examples_are_cut_wherever_they_start():
    # LeetCode starts a line with "Example 1:"; Codeforces' and AtCoder's samples may follow the statement on
    # the same line (the layout of LiveCodeBench's record 1873_A); "example 1" inside prose stays.
    from cobalt_min.problems import cut_examples
    leetcode = "Return the sum.\n \nExample 1:\n\nInput: nums = [1]\nOutput: 1\n"
    assert cut_examples(leetcode) == "Return the sum."
    codeforces = ("Output \"YES\" if it is possible, and \"NO\" otherwise.Sample Input 1:\n6\nabc\n\n"
                  "Sample Output 1:\n\nYES\n")
    assert cut_examples(codeforces) == "Output \"YES\" if it is possible, and \"NO\" otherwise."
    atcoder = "Print the answer.\n\nSample Input 1\n\n3\n\nSample Output 1\n\n6\n"
    assert cut_examples(atcoder) == "Print the answer."
    prose = "As the example 1 shows, print it.\nConstraints\n1 <= N"
    assert cut_examples(prose) == prose


def test_a_local_livecodebench_folder_loads_the_release_asked_for(tmp_path):
    # A downloaded copy of code_generation_lite (test.jsonl ... test6.jsonl): --lcb-version v6 is test6.jsonl
    # only (the paper's 175), release_v2 the first two files, as from the hub.
    stdin_row = lcb_rows()[0]
    for k, name in enumerate(P.LCB_FILES):
        (tmp_path / name).write_text(json.dumps(dict(stdin_row, question_id=f"q{k}")) + "\n")
    assert [p.id for p in P.load_problems(tmp_path, version="v6", verbose=False)] == ["q5"]
    assert [p.id for p in P.load_problems(tmp_path, version="release_v2", verbose=False)] == ["q0", "q1"]
    assert len(P.load_problems(tmp_path, verbose=False)) == 6  # no version: every file
    (tmp_path / "test6.jsonl").unlink()
    with pytest.raises(SystemExit, match="none of LiveCodeBench's files for v6"):
        P.load_problems(tmp_path, version="v6", verbose=False)


def test_skipped_records_are_named_and_a_cut_record_is_skipped_not_a_crash(tmp_path, capsys):
    good, cut = lcb_rows()[0], dict(lcb_rows()[0], question_id="cut")
    cut["public_test_cases"] = cut["public_test_cases"][:20]  # a file cut short mid-record
    path = tmp_path / "test6.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(cut) + "\n" + json.dumps({"title": "?"}) + "\n")
    probs = P.load_problems(path)
    assert [p.id for p in probs] == ["abc001_a"]
    err = capsys.readouterr().err
    assert f"skipped 1: public_test_cases is not JSON (cut short?) (first: {path}:2)" in err, err
    assert f"(first: {path}:3)" in err and "unknown record format" in err
