"""JSONL files that survive being killed: append + flush + fsync per record, and a reader that
repairs a half-written last line (what a killed writer leaves) instead of failing. write_jsonl writes
a whole file at once (outputs derived from finished work, rebuilt if lost)."""

import json
import os
from pathlib import Path


def read_jsonl(path, repair: bool = False) -> list[dict]:
    """All complete records of a JSONL file ([] if it does not exist). A broken LAST line is a record
    being written when the writer died: it is dropped, and with repair=True cut from the file so that
    appending can resume. A broken line elsewhere is an error naming the file and line."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    out, good_end = [], 0
    lines = data.split(b"\n")
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                if n == len(lines) or (n == len(lines) - 1 and not lines[-1]):
                    break
                raise SystemExit(f"error: {path} line {n} is not valid JSON") from None
        good_end += len(line) + 1
    if repair and good_end < len(data):
        with open(path, "r+b") as f:
            f.truncate(min(good_end, len(data)))
    return out


def write_jsonl(path, records) -> None:
    """Write a whole JSONL file (one record per line), making its folder if needed. The file is written
    beside and then renamed over the old one: a kill leaves the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    with open(part, "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)


def append_jsonl(path, record: dict) -> None:
    """Append one record and make it durable before returning."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())
