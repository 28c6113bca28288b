"""Problem sets: the Problem record, loaders for TACO / TACO-Cobalt / LiveCodeBench / our JSONL, and the
bundled demo set; `python -m cobalt_min.taco_cleaning` runs the paper's TACO cleaning.

    problems = load_problems("demo")                                   # bundled, offline
    problems = load_problems("data/taco_clean.jsonl")                  # our JSONL (or any supported file)
    problems = load_problems("BAAI/TACO", split="test")                # hub: downloads the data files
    problems = load_problems("livecodebench/code_generation_lite", version="v6")
    python -m cobalt_min.taco_cleaning --input BAAI/TACO --problem-split train --out data/taco_clean.jsonl --dev-out data/taco_dev.jsonl

Every test set is a TACO `input_output` dict ({"inputs", "outputs", "fn_name"?}) that the sandbox runs
as is. Bad records are skipped and counted by reason; a report is printed (paper §8).
"""

import argparse
import base64
import collections
import dataclasses
import hashlib
import io
import json
import pickle
import random
import re
import sys
import zlib
from pathlib import Path

from cobalt_min.cli import count, distinct, output_file, renamed, source
from cobalt_min.jsonl import write_jsonl

DATA_DIR = Path(__file__).parent / "data"
PUBLIC_TESTS = 4  # the paper: 4 public tests (feedback), the rest hidden


@dataclasses.dataclass
class Problem:
    """One programming problem. Tests are TACO input_output dicts (fn_name inside for call-based)."""
    id: str
    question: str
    public_tests: dict
    hidden_tests: dict
    starter_code: str = ""
    fn_name: str | None = None
    difficulty: str = ""
    source: str = ""
    solutions: list = dataclasses.field(default_factory=list)
    feedback_tests: dict | None = None  # public tests as SHOWN to the model when they differ (perturbed sets)

    def all_tests(self) -> dict:
        """Public and hidden tests together (the reward's pass rate is over these, paper §3)."""
        return join_tests(self.public_tests, self.hidden_tests)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def join_tests(a: dict, b: dict) -> dict:
    """Concatenate two input_output dicts of the same kind."""
    out = {"inputs": list(a["inputs"]) + list(b["inputs"]), "outputs": list(a["outputs"]) + list(b["outputs"])}
    for key in ("fn_name", "taco_wrapped_outputs"):
        if a.get(key) or b.get(key):
            out[key] = a.get(key) or b.get(key)
    return out


def split_tests(tests: dict, n_public: int) -> tuple[dict, dict]:
    """First n_public tests public, the rest hidden."""
    extra = {k: v for k, v in tests.items() if k not in ("inputs", "outputs")}
    public = dict(extra, inputs=tests["inputs"][:n_public], outputs=tests["outputs"][:n_public])
    hidden = dict(extra, inputs=tests["inputs"][n_public:], outputs=tests["outputs"][n_public:])
    return public, hidden


class BadRecord(ValueError):
    """A record that cannot become a Problem; the message is the skip reason (counted in the report)."""


# ----------------------------------------------------------------------------- our JSONL


def save_problems(problems: list, path) -> None:
    """Write problems as JSONL (one Problem per line)."""
    write_jsonl(path, (p.to_dict() for p in problems))


def _check_tests(tests, what) -> dict:
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except ValueError:
            raise BadRecord(f"{what} are not valid JSON") from None
    if not isinstance(tests, dict) or not isinstance(tests.get("inputs"), list) \
            or not isinstance(tests.get("outputs"), list):
        raise BadRecord(f"{what} lack inputs/outputs lists")
    if len(tests["inputs"]) != len(tests["outputs"]):
        raise BadRecord("inputs and outputs of different lengths")
    fn_name = tests.get("fn_name")
    if fn_name:
        if not all(isinstance(x, list) for x in tests["inputs"]):
            raise BadRecord("call-based inputs are not argument lists (GeeksforGeeks style)")
    elif not all(isinstance(x, str) for x in tests["inputs"]) or not all(isinstance(y, str) for y in tests["outputs"]):
        raise BadRecord("stdin/stdout tests that are not strings")
    return tests


def _from_ours(row: dict, where: str) -> Problem:
    fields = {f.name for f in dataclasses.fields(Problem)}
    missing = {"id", "question", "public_tests", "hidden_tests"} - row.keys()
    if missing:
        raise BadRecord(f"missing fields {sorted(missing)}")
    if not isinstance(row["question"], str):
        raise BadRecord(f"the question must be a string, not {type(row['question']).__name__}")
    p = Problem(**{k: v for k, v in row.items() if k in fields})
    p.public_tests = _check_tests(p.public_tests, "public tests")
    p.hidden_tests = _check_tests(p.hidden_tests, "hidden tests")
    if not p.hidden_tests["inputs"]:
        raise BadRecord("no hidden tests")
    return p


# ----------------------------------------------------------------------------- TACO


def _from_taco(row: dict, where: str, public_count: int = PUBLIC_TESTS) -> Problem:
    """A BAAI/TACO row: string columns question, solutions (JSON list), starter_code, input_output
    (JSON), difficulty, source, ... Call-based outputs are TACO-wrapped (see graders.strict_value_matches)."""
    if not row.get("question"):
        raise BadRecord("no question")
    if not row.get("input_output"):
        raise BadRecord("missing tests")
    tests = _check_tests(row["input_output"], "tests")
    source = row.get("source") or ""
    fn_name = tests.get("fn_name") or None
    if source == "geeksforgeeks" and not fn_name:
        raise BadRecord("GeeksforGeeks problem that needs the site's driver code")
    if len(tests["inputs"]) < 2:
        raise BadRecord("fewer than 2 tests")
    tests = {"inputs": tests["inputs"], "outputs": tests["outputs"]}
    if fn_name:
        tests.update(fn_name=fn_name, taco_wrapped_outputs=True)
    solutions = row.get("solutions") or []
    if isinstance(solutions, str):
        try:
            solutions = json.loads(solutions)
        except ValueError:
            solutions = []
    public, hidden = split_tests(tests, min(public_count, len(tests["inputs"]) - 1))
    # BAAI/TACO rows have no id: one made from the problem itself, the same however its file was named or reached
    # (a path as typed would make data/taco.jsonl:1 and /abs/.../taco.jsonl:1 two problems).
    content = json.dumps([row["question"], row["input_output"]], sort_keys=True).encode()
    problem_id = str(row.get("id") or "taco-" + hashlib.sha1(content).hexdigest()[:16])
    return Problem(id=problem_id, question=row["question"], public_tests=public, hidden_tests=hidden,
                   starter_code=row.get("starter_code") or "", fn_name=fn_name,
                   difficulty=str(row.get("difficulty") or ""), source=f"taco/{source}" if source else "taco",
                   solutions=[s for s in solutions if isinstance(s, str)])


def _from_taco_cobalt(row: dict, where: str, public_count: int = PUBLIC_TESTS) -> Problem:
    """The authors' processed rows (osunlp/TACO-Cobalt, -PTB): id, difficulty, question or instruction,
    and test_cases, or public_test_cases + hidden_test_cases, each a JSON {"inputs", "outputs"}. The
    authors turned call-based tests into stdin/stdout text, so these are all stdin/stdout. -PTB rows also
    hold perturbed_public_test_cases (the two swapped tests first, then the rest: their
    modified_test_cases are those two): they become the feedback tests, perturbed indices [0, 1]."""
    question = row.get("question") or row.get("instruction")
    if not question:
        raise BadRecord("no question")
    if row.get("public_test_cases") and row.get("hidden_test_cases"):
        public = _check_tests(row["public_test_cases"], "public tests")
        hidden = _check_tests(row["hidden_test_cases"], "hidden tests")
    elif row.get("test_cases"):
        tests = _check_tests(row["test_cases"], "tests")
        if len(tests["inputs"]) < 2:
            raise BadRecord("fewer than 2 tests")
        public, hidden = split_tests(tests, min(public_count, len(tests["inputs"]) - 1))
    else:
        raise BadRecord("missing tests")
    if not hidden["inputs"]:
        raise BadRecord("no hidden tests")
    feedback = None
    if row.get("perturbed_public_test_cases"):  # osunlp/TACO-Cobalt-PTB: the authors' perturbed public tests,
        feedback = _check_tests(row["perturbed_public_test_cases"], "perturbed public tests")  # swapped pair first
        feedback["perturbed"] = [0, 1]
        if len(feedback["inputs"]) < 2:
            raise BadRecord("fewer than 2 perturbed public tests")
    return Problem(id=str(row.get("id", where)), question=question, public_tests=public, hidden_tests=hidden,
                   difficulty=str(row.get("difficulty") or ""), source="taco-cobalt", feedback_tests=feedback)


# ----------------------------------------------------------------------------- LiveCodeBench


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Unpickles plain data only: any global (a class, a function such as os.system) is refused,
    so a poisoned file cannot run code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")


def decode_lcb_tests(blob: str) -> list:
    """LiveCodeBench private tests: JSON, or base64 -> zlib -> pickle (a str) -> JSON."""
    try:
        return json.loads(blob)
    except ValueError:
        pass
    try:
        raw = _NoGlobalsUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(blob)))).load()
        return json.loads(raw)
    except Exception as e:  # noqa: BLE001 - any failure means: not decodable
        raise BadRecord(f"undecodable private tests ({type(e).__name__})") from None


# LeetCode's "Example 1:" starts a line; AtCoder's and Codeforces' "Sample Input 1" may follow the statement on
# the same line (LiveCodeBench's record 1873_A: "...otherwise.Sample Input 1:").
_EXAMPLES = re.compile(r"^[ \t]*Example\s*1\b|Sample Input\s*1\b", re.MULTILINE)


def cut_examples(text: str) -> str:
    """LiveCodeBench question text up to its worked examples (paper §2: the prompt omits them)."""
    m = _EXAMPLES.search(text)
    return text[:m.start()].rstrip() if m else text


def _lcb_tests(cases: list, fn_name: str | None) -> dict:
    inputs, outputs = [], []
    for case in cases:
        if not isinstance(case, dict) or "input" not in case or "output" not in case:
            raise BadRecord("test case without input/output")
        if case.get("testtype") == "functional":
            if not fn_name:
                raise BadRecord("functional test without func_name in metadata")
            try:
                inputs.append([json.loads(line) for line in case["input"].split("\n") if line.strip()])
                outputs.append(json.loads(case["output"]))
            except ValueError:
                raise BadRecord("functional test that is not JSON") from None
        else:
            inputs.append(case["input"])
            outputs.append(case["output"])
    tests = {"inputs": inputs, "outputs": outputs}
    if fn_name:
        tests["fn_name"] = fn_name
    return tests


def _from_lcb(row: dict, where: str) -> Problem:
    """A livecodebench/code_generation_lite row (testN.jsonl). Hidden tests = the private tests."""
    metadata = row.get("metadata") or {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata) if metadata.strip() else {}
        except ValueError:
            raise BadRecord("metadata is not JSON") from None
    public_cases = row.get("public_test_cases") or "[]"
    try:
        public_cases = json.loads(public_cases) if isinstance(public_cases, str) else public_cases
    except ValueError:
        raise BadRecord("public_test_cases is not JSON (cut short?)") from None
    private = row.get("private_test_cases")
    if not private:
        raise BadRecord("missing tests")
    private_cases = decode_lcb_tests(private) if isinstance(private, str) else private
    functional = any(c.get("testtype") == "functional" for c in list(public_cases) + list(private_cases)
                     if isinstance(c, dict))
    fn_name = metadata.get("func_name") if functional else None
    public = _lcb_tests(public_cases, fn_name)
    hidden = _lcb_tests(private_cases, fn_name)
    if not hidden["inputs"]:
        raise BadRecord("no hidden tests")
    return Problem(id=str(row.get("question_id") or where), question=cut_examples(row.get("question_content", "")),
                   public_tests=public, hidden_tests=hidden, starter_code=row.get("starter_code") or "",
                   fn_name=fn_name, difficulty=str(row.get("difficulty") or ""),
                   source=f"livecodebench/{row.get('platform', '')}".rstrip("/"))


# ----------------------------------------------------------------------------- files and detection


PARSERS = {"cobalt": _from_ours, "taco": _from_taco, "taco-cobalt": _from_taco_cobalt, "lcb": _from_lcb}


def detect_format(row: dict) -> str:
    """Which parser a record needs, from its fields."""
    if "public_tests" in row and "hidden_tests" in row:
        return "cobalt"
    if "question_content" in row and ("private_test_cases" in row or "public_test_cases" in row):
        return "lcb"
    if "input_output" in row:
        return "taco"
    if "test_cases" in row or "hidden_test_cases" in row:
        return "taco-cobalt"
    raise BadRecord(f"unknown record format (fields: {sorted(row)[:8]})")


def _read_arrow(path: Path):
    try:
        import pyarrow as pa
        import pyarrow.ipc
    except ImportError:
        raise SystemExit(f"error: reading {path} needs pyarrow: pip install pyarrow") from None
    try:
        with pa.memory_map(str(path)) as source:
            try:
                reader = pa.ipc.open_stream(source)
            except pa.ArrowInvalid:
                reader = pa.ipc.open_file(source)
            table = reader.read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise SystemExit(f"error: {path} is not a readable Arrow file: {e}") from None
    for i, row in enumerate(table.to_pylist()):
        yield f"{path}#{i}", row


def _read_parquet(path: Path):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SystemExit(f"error: reading {path} needs pyarrow: pip install pyarrow") from None
    for i, row in enumerate(pq.read_table(str(path)).to_pylist()):
        yield f"{path}#{i}", row


def _read_json(path: Path):
    """(where, row) for each record of a .json / .jsonl file; a broken line is a clear error."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"error: cannot read {path}: {e}") from None
    stripped = text.lstrip()
    if path.suffix == ".json" and stripped.startswith(("[", "{")):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise SystemExit(f"error: {path} is not valid JSON: {e}") from None
        for i, row in enumerate(data if isinstance(data, list) else [data]):
            yield f"{path}#{i}", row
        return
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{n}", json.loads(line)
        except ValueError as e:
            raise SystemExit(f"error: {path} line {n} is not valid JSON: {e}") from None


def _read_file(path: Path):
    if path.suffix == ".arrow":
        return _read_arrow(path)
    if path.suffix == ".parquet":
        return _read_parquet(path)
    return _read_json(path)


SUFFIXES = (".jsonl", ".json", ".arrow", ".parquet")


def _files(path: Path, split: str | None) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    if split:
        files = [p for p in files if split in p.relative_to(path).parts or p.name.startswith(split)]
    return files


def parse_rows(rows, format: str | None = None, *, public_count: int = PUBLIC_TESTS, skipped=None,
               first_skipped: dict | None = None) -> list[Problem]:
    """Rows (where, dict) -> Problems, counting skipped records by reason in `skipped` and keeping where
    the first of each reason was (file:line) in `first_skipped`."""
    skipped = collections.Counter() if skipped is None else skipped
    first_skipped = {} if first_skipped is None else first_skipped
    out = []
    for where, row in rows:
        try:
            if not isinstance(row, dict):
                raise BadRecord("record is not a JSON object")
            fmt = format or detect_format(row)
            parser = PARSERS[fmt]
            p = parser(row, where, public_count) if fmt in ("taco", "taco-cobalt") else parser(row, where)
        except BadRecord as e:
            skipped[str(e)] += 1
            first_skipped.setdefault(str(e), where)
            continue
        out.append(p)
    return out


def print_summary(source, problems, skipped, first_skipped: dict | None = None) -> None:
    """Print (to stderr) what was loaded and what was skipped, by reason, with the first such record."""
    print(f"loaded {len(problems)} problems from {source}", file=sys.stderr)
    for reason, n in skipped.most_common():
        where = (first_skipped or {}).get(reason)
        print(f"  skipped {n}: {reason}" + (f" (first: {where})" if where else ""), file=sys.stderr)


# ----------------------------------------------------------------------------- hub


HUB_SETS = {"BAAI/TACO": "taco", "osunlp/TACO-Cobalt": "taco-cobalt", "osunlp/TACO-Cobalt-PTB": "taco-cobalt",
            "livecodebench/code_generation_lite": "lcb"}
LCB_FILES = ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 7)]


def _lcb_files(version: str) -> list[str]:
    """'v6' -> the problems added in release 6 only (test6.jsonl; the paper's 175); 'release_v6' -> all
    releases up to 6."""
    m = re.fullmatch(r"(release_)?v(\d+)", version or "")
    if not m:
        raise SystemExit(f"error: LiveCodeBench version must look like v6 or release_v6, not {version!r}")
    n = int(m.group(2))
    if not 1 <= n <= len(LCB_FILES):
        raise SystemExit(f"error: LiveCodeBench versions go from v1 to v{len(LCB_FILES)}")
    return LCB_FILES[:n] if m.group(1) else [LCB_FILES[n - 1]]


def _hub_files(repo: str, split: str | None, version: str | None) -> list[Path]:
    """Download the data files of a hub dataset (never its loading script)."""
    try:
        from huggingface_hub import hf_hub_download, list_repo_files
    except ImportError:
        raise SystemExit("error: loading from the hub needs huggingface_hub (installed with transformers)") from None
    try:
        if repo == "livecodebench/code_generation_lite":
            names = _lcb_files(version or "v6")
        else:
            names = [f for f in list_repo_files(repo, repo_type="dataset") if f.endswith(SUFFIXES)
                     and (split is None or split in f.split("/") or Path(f).name.startswith(split))]
        return [Path(hf_hub_download(repo, name, repo_type="dataset")) for name in names]
    except Exception as e:  # noqa: BLE001 - network/auth errors: one clear sentence
        raise SystemExit(f"error: could not download {repo} from the Hugging Face hub ({type(e).__name__}: {e}); "
                         "download the data files yourself and pass their folder.") from None


# ----------------------------------------------------------------------------- the entry point


def load_problems(source, *, format: str | None = None, split: str | None = None, limit: int | None = None,
                  version: str | None = None, start_date: str | None = None, end_date: str | None = None,
                  public_count: int = PUBLIC_TESTS, verbose: bool = True) -> list[Problem]:
    """Load a problem set.

    source: "demo" (bundled), a file or folder (our JSONL, TACO .arrow/.json/.jsonl rows, TACO-Cobalt
    rows, LiveCodeBench testN.jsonl; detected from the fields unless `format` is one of cobalt, taco,
    taco-cobalt, lcb), or a hub dataset id (BAAI/TACO, osunlp/TACO-Cobalt, livecodebench/code_generation_lite
    with `version` like v6). start_date / end_date (YYYY-MM-DD) filter LiveCodeBench by contest date.
    Exits with one clear sentence when nothing usable is found."""
    if format is not None and format not in PARSERS:
        raise SystemExit(f"error: format must be one of {', '.join(PARSERS)}, not {format!r}")
    path = DATA_DIR / "demo.jsonl" if source == "demo" else Path(source)
    if path.exists():
        files = _files(path, split)
        if version is not None and path.is_dir() and any(f.name in LCB_FILES for f in files):
            # a downloaded copy of LiveCodeBench: the release asked for, as from the hub
            names = _lcb_files(version)
            files = [f for f in files if f.name in names]
            if not files:
                raise SystemExit(f"error: {path} holds none of LiveCodeBench's files for {version} ({', '.join(names)})")
    elif isinstance(source, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", source) and not source.startswith("."):
        files = _hub_files(source, split, version)
        format = format or HUB_SETS.get(source)
    else:
        raise SystemExit(f"error: problem source {source} is neither an existing file/folder nor a hub dataset id")
    if not files:
        raise SystemExit(f"error: no {'/'.join(SUFFIXES)} files in {path}" + (f" for split {split}" if split else ""))
    skipped: collections.Counter = collections.Counter()
    first_skipped: dict = {}
    problems: list[Problem] = []
    for f in files:
        rows = _read_file(f)
        if start_date or end_date:
            rows = ((w, r) for w, r in rows if _in_dates(r, start_date, end_date))
        problems += parse_rows(rows, format, public_count=public_count, skipped=skipped, first_skipped=first_skipped)
        if limit is not None and len(problems) >= limit:
            problems = problems[:limit]
            break
    if verbose:
        print_summary(source, problems, skipped, first_skipped)
    if not problems:
        reasons = "; ".join(f"{n} {r} (first: {first_skipped[r]})" for r, n in skipped.most_common(3)) or "no records"
        raise SystemExit(f"error: no usable problem in {source} ({reasons})")
    return problems


def problem_flags(group, *, required: bool, what: str = "the problems") -> None:
    """--problems and what chooses among them, the same flags in every script that reads problems."""
    group.add_argument("--problems", type=source, required=required, default=None,
                       help=f"{what}: 'demo', a file/folder, or a hub dataset id")
    group.add_argument("--problem-split", default=None, help="split of the problem source (e.g. test)")
    group.add_argument("--lcb-version", default="v6",
                       help="LiveCodeBench release, from the hub or a downloaded folder: v6 (the problems added in "
                            "release 6: the paper's 175) or release_v6 (all up to 6)")
    group.add_argument("--start-date", default=None, help="LiveCodeBench: problems from this contest date on "
                       "(YYYY-MM-DD; the paper's v6 window: 2025-01-01 to 2025-04-30)")
    group.add_argument("--end-date", default=None, help="LiveCodeBench: problems up to this contest date (YYYY-MM-DD)")
    group.add_argument("--limit", type=count, default=None, help="the first K problems only")


def problems_of(args, **kw) -> list:
    """The problems the flags of problem_flags ask for."""
    return load_problems(args.problems, split=args.problem_split, limit=args.limit, version=args.lcb_version,
                         start_date=args.start_date, end_date=args.end_date, **kw)


def _in_dates(row, start, end) -> bool:
    date = str(row.get("contest_date", ""))[:10]
    return (not start or date >= start) and (not end or date <= end)


def cmd_split(args):
    """Split a problem set in two files (e.g. training and held-out problems), at random (--seed)."""
    probs = load_problems(args.source)
    if args.difficulty:
        kinds = sorted({p.difficulty for p in probs})
        probs = [p for p in probs if p.difficulty == args.difficulty]
        if not probs:
            raise SystemExit(f"error: no problem of difficulty {args.difficulty!r} in {args.source} "
                             f"(it has: {', '.join(map(repr, kinds))})")
    if not 0 < args.heldout < len(probs):
        raise SystemExit(f"error: --heldout must be between 1 and {len(probs) - 1}")
    held = set(random.Random(args.seed).sample(range(len(probs)), args.heldout))
    save_problems([p for i, p in enumerate(probs) if i not in held], args.train_out)
    save_problems([p for i, p in enumerate(probs) if i in held], args.heldout_out)
    print(f"wrote {len(probs) - len(held)} problems to {args.train_out} and {len(held)} to {args.heldout_out}")


def cmd_show(args):
    """Load any source and print how many problems of each kind it holds."""
    probs = load_problems(args.source, format=args.format, split=args.problem_split, version=args.lcb_version)
    kinds = collections.Counter("call-based" if p.fn_name else "stdin/stdout" for p in probs)
    print(json.dumps({"problems": len(probs), **kinds}))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cobalt_min.problems",
                                 description="Problem-set tools. `show`: load any source and print a summary; "
                                             "`split`: split a set in two. (The paper's TACO cleaning: "
                                             "python -m cobalt_min.taco_cleaning.)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("clean", help="moved: python -m cobalt_min.taco_cleaning (the same flags)", add_help=False)
    s = sub.add_parser("show", help="load a source and print counts")
    s.add_argument("source")
    s.add_argument("--format", default=None, choices=sorted(PARSERS))
    s.add_argument("--problem-split", default=None, help="split of the source to read")
    renamed(s, "--split", "is now --problem-split, as in every script")
    s.add_argument("--lcb-version", default=None, help="LiveCodeBench release, e.g. v6 (as in evaluate.py)")
    sp = sub.add_parser("split", help="split a problem set into two files (e.g. training and held-out)")
    sp.add_argument("source")
    sp.add_argument("--heldout", type=count, required=True, help="problems in the held-out part (at least 1)")
    sp.add_argument("--train-out", type=output_file, required=True)
    sp.add_argument("--heldout-out", type=output_file, required=True)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--difficulty", default=None, help="keep only problems of this difficulty (e.g. 'very easy function')")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["clean"]:
        ap.error("`clean` has moved: python -m cobalt_min.taco_cleaning " + " ".join(argv[1:]) + " (the same flags)")
    args = ap.parse_args(argv)
    if args.cmd == "split":
        distinct(ap, source=args.source, **{"--train-out": args.train_out, "--heldout-out": args.heldout_out})
    {"split": cmd_split, "show": cmd_show}[args.cmd](args)

if __name__ == "__main__":
    main()
