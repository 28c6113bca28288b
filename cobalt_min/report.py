"""One self-contained HTML page per run: what the model wrote, what it was shown, what passed.

    python -m cobalt_min.report RUN_DIR [RUN_DIR ...] [--out FILE]

RUN_DIR is an evaluate.py run (trajectories.jsonl, summary.json), a train.py run (metrics.jsonl), a
collect.py run (stats.json + contexts.jsonl), or a folder holding such runs (the demo's demo_out/).
Several evaluation runs (before / after training, true / perturbed feedback) share one Pass@1 chart.
The scripts write RUN_DIR/report.html at the end of their runs; this command rebuilds it.

The page needs nothing but a browser: inline CSS, inline SVG charts and a little vanilla JavaScript.
A run's conversations ride at the end of the page gzip-compressed (one block per problem, decompressed
when the reader opens that problem), so that a 200-problem x 16-sample x 9-turn evaluation stays small
and its first screen (charts, the problem x turn grid and the problem list: plain HTML) shows before
they are even read.

Everything a model wrote is untrusted. On the Python side every text goes through html.escape; in the
page the script puts model text into the DOM with textContent only, never as HTML. A response holding
`</script><script>...` or `<img onerror=...>` shows as text and runs nothing.
"""

import argparse
import base64
import gzip
import html
import json
import math
from pathlib import Path

from cobalt_min.cli import output_file
from cobalt_min.jsonl import read_jsonl
from cobalt_min.metrics import rate_text, solved_at, summarize

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
CONTEXTS_SHOWN = 3  # collect runs: how many contexts the page shows as the policy sees them


# ----------------------------------------------------------------------------- which runs a folder holds


def run_kind(path: Path) -> str | None:
    """'evaluate', 'train' or 'collect' by the files a run writes; None for anything else."""
    if (path / "trajectories.jsonl").exists():
        return "evaluate"
    if (path / "metrics.jsonl").exists():
        return "train"
    if (path / "stats.json").exists() and (path / "contexts.jsonl").exists():
        return "collect"
    return None


def find_runs(paths: list) -> list[tuple[str, Path]]:
    """[(kind, folder)] for each path that is a run, or for the runs one level below a path that is not."""
    runs = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise SystemExit(f"error: {path} is not a folder")
        kind = run_kind(path)
        below = [] if kind else [(run_kind(p), p) for p in sorted(path.iterdir()) if p.is_dir()]
        found = [(kind, path)] if kind else [(k, p) for k, p in below if k]
        if not found:
            raise SystemExit(f"error: {path} holds no run (evaluate.py: trajectories.jsonl, "
                             "train.py: metrics.jsonl, collect.py: stats.json + contexts.jsonl)")
        runs += found
    return runs


# ----------------------------------------------------------------------------- charts (inline SVG)


def _ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    """About n round values (1, 2 or 5 times a power of ten apart) covering [lo, hi]."""
    raw = (hi - lo) / max(1, n - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(lo / step) * step
    return [first + k * step for k in range(int(math.ceil((hi - first) / step)) + 1)]


def line_chart(series: dict, *, title: str, xlabel: str, ylabel: str, y_range: tuple | None = None,
               width: int = 440, height: int = 250) -> str:
    """An SVG line chart of {label: [(x, y), ...]} (None values skipped), y from y_range or the data.
    Each line carries its points in data coordinates (data-label, data-points) so that tests and
    readers can check the numbers."""
    series = {k: [(x, y) for x, y in v if y is not None] for k, v in series.items()}
    points = [p for v in series.values() for p in v]
    if not points:
        return f'<div class="chart empty">{html.escape(title)}: no data</div>'
    # The legend sits under the axis label, one row per line, never over the lines.
    legend_rows = len(series) if len(series) > 1 else 0
    height += 14 * legend_rows
    left, right, top, bottom = 52, 12, 26, 40 + 14 * legend_rows
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = y_range or (min(ys), max(ys))
    if y1 - y0 < 1e-9:  # a flat line: a unit range above zero, or around the value
        y0, y1 = (0.0, 1.0) if y0 == 0 else (y0 - abs(y0) / 2, y1 + abs(y1) / 2)
    if not y_range:
        y_ticks = _ticks(y0, y1)
        y0, y1 = y_ticks[0], y_ticks[-1]

    def sx(x):
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def sy(y):
        return top + (y1 - y) / (y1 - y0) * (height - top - bottom)

    out = [f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="{html.escape(title)}">',
           f'<text x="{width / 2}" y="16" text-anchor="middle" class="title">{html.escape(title)}</text>']
    for y in _ticks(y0, y1):
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" class="grid"/>'
                   f'<text x="{left - 4}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.3g}</text>')
    for x in sorted(set(xs)) if len(set(xs)) <= 12 else [x for x in _ticks(x0, x1) if x0 <= x <= x1]:
        out.append(f'<text x="{sx(x):.1f}" y="{height - bottom + 14}" text-anchor="middle">{x:.4g}</text>')
    out.append(f'<text x="{width / 2}" y="{height - 6 - 14 * legend_rows}" text-anchor="middle">{html.escape(xlabel)}</text>'
               f'<text transform="translate(12,{height / 2}) rotate(-90)" text-anchor="middle">{html.escape(ylabel)}</text>')
    for k, (label, pts) in enumerate(series.items()):
        color = COLORS[k % len(COLORS)]
        data = " ".join(f"{x:g},{y:.6g}" for x, y in pts)
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        # Each later line dashed and thinner: two runs with the same numbers stay both visible.
        dash = "" if k == 0 else f' stroke-dasharray="{6 - 2 * (k % 3)} {2 + k % 3}"'
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="{max(1.0, 2.5 - 0.5 * k)}"{dash} '
                   f'points="{path}" data-label="{html.escape(label)}" data-points="{data}"/>')
        for x, y in pts if len(pts) <= 60 else []:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}">'
                       f'<title>{html.escape(label)}: {x:g}, {y:.4g}</title></circle>')
        if legend_rows:
            row = height - 4 - 14 * (legend_rows - 1 - k)
            out.append(f'<rect x="{left + 8}" y="{row - 5}" width="10" height="3" fill="{color}"/>'
                       f'<text x="{left + 22}" y="{row}" class="legend">{html.escape(label)}</text>')
    out.append("</svg>")
    return "".join(out)


# ----------------------------------------------------------------------------- evaluate runs


def pack(obj) -> str:
    """JSON -> gzip -> base64: how a problem's conversations ride in the page (see the module docstring)."""
    return base64.b64encode(gzip.compress(json.dumps(obj).encode(), compresslevel=6, mtime=0)).decode()


def problem_payload(record: dict, candidates: dict) -> dict:
    """What the page shows of one problem: per sample and turn the response, the program, the public
    results, the pass rates and the feedback shown next; perturbed tests and hacking candidates marked."""
    first = record["samples"][0] if record["samples"] else {}
    question = next((m.get("content", "") for m in first.get("messages") or [] if m.get("role") == "user"), "")
    samples = []
    for traj in record["samples"]:  # (.get: records that perturb.py analyze accepts may lack a field)
        turns = [{"response": t.get("response", ""), "program": t.get("program"), "feedback": t.get("feedback", ""),
                  "public": [r.get("status", "passed" if r.get("passed") else "failed") for r in t.get("public", [])],
                  "public_pass_rate": t.get("public_pass_rate", 0.0), "hidden_pass_rate": t["hidden_pass_rate"],
                  "candidate": candidates.get((traj["sample"], t["turn"]))} for t in traj["turns"]]
        samples.append({"sample": traj["sample"], "turns": turns})
    return {"problem_id": record["problem_id"], "question": question,
            "perturbed": record.get("perturbed", {}).get("indices", []), "samples": samples}


def hacking_marks(run: Path) -> dict:
    """{problem: {(sample, turn): mark}} from perturb.py analyze (hacking_candidates.jsonl) and judge
    (judgements.jsonl): 'candidate', or the judge's label."""
    marks: dict = {}
    for c in read_jsonl(run / "hacking_candidates.jsonl"):
        marks.setdefault(c["problem_id"], {})[(c["sample"], c["turn"])] = "candidate"
    for j in read_jsonl(run / "judgements.jsonl"):
        marks.setdefault(j["problem_id"], {})[(j["sample"], j["turn"])] = f"judge: {j['label']}"
    return marks


def solved_grid(records: list[dict], n_turns: int, run_id: str) -> str:
    """A problem x turn table of the share of samples whose current program passes all hidden tests."""
    head = "".join(f"<th>t={t}</th>" for t in range(n_turns))
    rows = []
    for k, rec in enumerate(records):
        cells = []
        for t in range(n_turns):
            solved, n = sum(solved_at(tr, t) for tr in rec["samples"]), len(rec["samples"])
            share = solved / n if n else 0.0
            cells.append(f'<td class="cell" data-turn="{t}" data-share="{share:.4f}" '
                         f'style="background:rgba(44,160,44,{0.1 + 0.8 * share:.2f})">{solved}/{n}</td>')
        name = html.escape(rec["problem_id"])
        rows.append(f'<tr data-problem="{name}"><th><a href="#{run_id}-p{k}">{name}</a></th>{"".join(cells)}</tr>')
    return (f'<table class="grid" id="{run_id}-grid"><tr><th>problem</th>{head}</tr>{"".join(rows)}</table>')


def load_summary(path: Path) -> dict:
    """An evaluation's summary.json, or (a run still going, or written by hand) its summary computed from
    the trajectories written so far."""
    if (path / "summary.json").exists():
        return json.loads((path / "summary.json").read_text())
    records = read_jsonl(path / "trajectories.jsonl")
    return summarize(records, max((len(s["turns"]) for r in records for s in r["samples"]), default=0))


def evaluate_section(runs: list[tuple[str, Path]], payloads: list) -> str:
    """Pass@1 per turn of every evaluation run in one chart, a numbers table, then per run its grid
    and its problems (each a collapsed block whose conversations load when opened)."""
    summaries = {name: load_summary(path) for name, path in runs}
    chart = line_chart({name: list(enumerate(s["pass@1"])) for name, s in summaries.items()},
                       title="Pass@1 per turn (%)", xlabel="turn", ylabel="Pass@1 %", y_range=(0, 100))
    rate = line_chart({name: list(enumerate(s.get("mean_test_pass_rate", []))) for name, s in summaries.items()},
                      title="Mean test pass rate per turn (%)", xlabel="turn", ylabel="pass rate %",
                      y_range=(0, 100))
    n_max = max(len(s["pass@1"]) for s in summaries.values())
    table = ["<table class='numbers'><tr><th>run</th><th>problems x samples</th>"
             + "".join(f"<th>t={t}</th>" for t in range(n_max)) + "</tr>"]
    for name, s in summaries.items():
        table.append(f"<tr data-run='{html.escape(name)}'><th>{html.escape(name)}</th><td>{s['problems']} x {s['samples']}</td>"
                     + "".join(f"<td>{p:.2f}</td>" for p in s["pass@1"]) + "</tr>")
    parts = [f"<h2>Evaluation</h2><div class='charts'>{chart}{rate}</div>", "".join(table) + "</table>",
             feedback_table(summaries)]
    for k, (name, path) in enumerate(runs):
        parts.append(evaluate_run(name, path, summaries[name], f"r{k}", payloads))
    return "\n".join(parts)



def feedback_table(summaries: dict) -> str:
    """What feedback did at each turn t >= 1 of every run (metrics.turn_changes, gain_over_turn0): the gain
    in Pass@1 over turn 0 paired over problems (s.e.), programs repaired (failing at t-1, passing at t)
    and broken (passing at t-1, failing at t); for perturbed runs, correct programs broken after a
    wrong test was shown (perturbation.wrong_feedback_per_turn). Empty for summaries written before
    these figures existed."""
    shown = {name: s for name, s in summaries.items() if s.get("turn_changes")}
    if not shown:
        return ""
    n_max = max(len(s["pass@1"]) for s in shown.values())
    rows = ["<h3>What feedback did, per turn</h3><table class='numbers feedback'><tr><th>run</th><th></th>"
            + "".join(f"<th>t={t}</th>" for t in range(1, n_max)) + "</tr>"]

    for name, s in shown.items():
        cells = {"gain over t=0 (s.e.)": [f"{g['gain']:+.1f} ({g['se']:.1f})" for g in s["gain_over_turn0"][1:]],
                 "repaired": [rate_text(c["repaired"], c["failing_before"], c["repair_rate"]) for c in s["turn_changes"]],
                 "broken": [rate_text(c["broken"], c["passing_before"], c["break_rate"]) for c in s["turn_changes"]]}
        if s.get("wrong_feedback"):
            cells["correct, broken by wrong feedback"] = [
                rate_text(w["broken"], w["correct_shown_wrong_feedback"], w["broken_rate"]) for w in s["wrong_feedback"]]
            cells["hacking candidates"] = [str(w["hacking_candidates"]) for w in s["wrong_feedback"]]
        for k, (what, values) in enumerate(cells.items()):
            head = f"<th rowspan='{len(cells)}'>{html.escape(name)}</th>" if k == 0 else ""
            rows.append(f"<tr data-run='{html.escape(name)}' data-row='{html.escape(what)}'>{head}<td>{html.escape(what)}</td>"
                        + "".join(f"<td data-turn='{t}'>{html.escape(v)}</td>" for t, v in enumerate(values, 1)) + "</tr>")
    return "".join(rows) + "</table><p class='note'>repaired: of the conversations whose program failed the hidden " \
        "tests at t-1, those whose program passes them at t; broken: the reverse.</p>"

def evaluate_run(name: str, path: Path, summary: dict, run_id: str, payloads: list) -> str:
    """One evaluation run: settings, hacking report, the solved grid, and one lazy block per problem
    (its conversations go to `payloads`, placed at the end of the page)."""
    records = read_jsonl(path / "trajectories.jsonl")
    marks = hacking_marks(path)
    n_turns = len(summary["pass@1"])
    out = [f"<h3 id='{run_id}'>{html.escape(name)} <span class='path'>{html.escape(str(path))}</span></h3>",
           f"<p>model {html.escape(str(summary.get('model', '?')))}, problems {html.escape(str(summary.get('problems_source', '?')))}, "
           f"temperature {summary.get('temperature', '?')}, top-p {summary.get('top_p', '?')}, "
           f"max new tokens {summary.get('max_new_tokens', '?')}{', perturbed feedback' if summary.get('perturbed') else ''}"
           f"{', judged by the ' + html.escape(str(summary['grader'])) + ' grader' if summary.get('grader') else ''}</p>"]
    report = path / "hacking_report.json"
    if report.exists():
        r = json.loads(report.read_text())
        out.append(f"<p class='hacking'>hacking candidates (perturb.py analyze): {r['candidates']} in "
                   f"{r['problems_with_candidates']}/{r['problems']} problems, "
                   f"{r['candidates_per_trajectory']:.3f} per trajectory</p>")
    out.append("<p>Share of samples whose current program passes every hidden test; a problem's name opens "
               "its conversations below.</p>" + solved_grid(records, n_turns, run_id))
    out.append("<h4>Conversations</h4>")
    for k, rec in enumerate(records):
        pid = rec["problem_id"]
        payload = problem_payload(rec, marks.get(pid, {}))
        n_marked = sum(t["candidate"] is not None for s in payload["samples"] for t in s["turns"])
        flag = f" <span class='badge hack'>{n_marked} hacking candidate(s)</span>" if n_marked else ""
        out.append(f"<details class='problem' id='{run_id}-p{k}' data-problem='{html.escape(pid)}'>"
                   f"<summary>{html.escape(pid)}: {len(rec['samples'])} samples{flag}</summary>"
                   "<div class='body'>loading...</div></details>")
        payloads.append(f"<script type='application/gzip-base64' id='payload-{run_id}-p{k}'>{pack(payload)}</script>")
    return "\n".join(out)


# ----------------------------------------------------------------------------- train and collect runs


TRAIN_CHARTS = [  # (title, y label, metrics.jsonl keys)
    # (title, y label, metrics, y range: the whole range a quantity can take, so that a small change looks small)
    ("Reward", "reward", ["reward_mean", "val_reward"], (-1.0, 1.0)),
    ("Pass rate of the sampled programs", "share", ["pass_rate", "all_tests_passed", "no_code"], (0.0, 1.0)),
    ("KL to the reference policy", "KL", ["kl"], None),
    ("Clip fractions", "share of tokens", ["clip_frac_low", "clip_frac_high", "clip_frac_dual"], None),
    ("Response length", "tokens", ["response_len"], None),
]


def train_section(name: str, path: Path) -> str:
    """Curves of a train.py run's metrics.jsonl: reward, pass rate, KL, clip fractions, response length,
    and the time of each phase per step."""
    steps = read_jsonl(path / "metrics.jsonl")
    settings = json.loads((path / "settings.json").read_text()) if (path / "settings.json").exists() else {}
    charts = []
    for title, ylabel, keys, y_range in TRAIN_CHARTS:
        if keys == ["kl"] and (settings.get("kl_coef") == 0 or all(not m.get("kl") for m in steps)):
            charts.append(f'<div class="chart empty">{html.escape(title)}: none (no reference policy: --kl-coef 0)</div>')
            continue
        series = {k: [(m["step"], m.get(k)) for m in steps] for k in keys if any(k in m for m in steps)}
        if series:
            charts.append(line_chart(series, title=title, xlabel="step", ylabel=ylabel, y_range=y_range))
    phases = [k for k in steps[-1] if k.endswith("_s") and not k.endswith("_per_s") and k not in ("step_s", "rank_spread_s")
              and k != "batch_s"] if steps else []
    charts.append(line_chart({k[:-2]: [(m["step"], m.get(k)) for m in steps] for k in phases},
                             title="Time per phase (s)", xlabel="step", ylabel="seconds"))
    last = steps[-1] if steps else {}
    facts = ", ".join(f"{k} {last[k]:.4g}" for k in ("reward_mean", "pass_rate", "kl", "step_s") if k in last)
    return (f"<h2>Training <span class='path'>{html.escape(str(path))}</span></h2>"
            f"<p>{len(steps)} steps ({html.escape(name)}); last step: {facts}</p><div class='charts'>{''.join(charts)}</div>")


def messages_html(messages: list[dict]) -> str:
    """A conversation as the policy sees it, one block per turn (escaped text)."""
    return "".join(f"<div class='msg {html.escape(m['role'])}'><div class='role'>{html.escape(m['role'])}</div>"
                   f"<pre>{html.escape(m['content'])}</pre></div>" for m in messages)


def collect_section(name: str, path: Path) -> str:
    """A collect.py run: its stats, and the first contexts as the policy sees them."""
    stats = json.loads((path / "stats.json").read_text())
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(json.dumps(v))}</td></tr>"
                   for k, v in stats.items())
    contexts = read_jsonl(path / "contexts.jsonl")
    shown = []
    for c in contexts[:CONTEXTS_SHOWN]:
        shown.append(f"<details class='context'><summary>{html.escape(c['problem_id'])}, turn {c.get('turn', '?')}, "
                     f"prev_best {c.get('prev_best', 0):.3f}</summary>{messages_html(c['messages'])}</details>")
    return (f"<h2>Collection <span class='path'>{html.escape(str(path))}</span></h2>"
            f"<table class='numbers stats'>{rows}</table>"
            f"<h4>{min(CONTEXTS_SHOWN, len(contexts))} of {len(contexts)} contexts ({html.escape(name)}), "
            f"as the policy sees them</h4>{''.join(shown)}")


# ----------------------------------------------------------------------------- the page

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; } .path { color: #888; font-size: 0.7em; font-weight: normal; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; } svg.chart { border: 1px solid #eee; background: #fff; }
svg.chart text { font-size: 10px; fill: #444; } svg.chart .title { font-size: 12px; font-weight: bold; }
svg.chart .grid { stroke: #eee; } table { border-collapse: collapse; margin: 0.6em 0; }
td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: right; } th { text-align: left; background: #fafafa; }
table.grid td { min-width: 2.6em; text-align: center; font-size: 12px; }
details.problem { border: 1px solid #ddd; margin: 4px 0; padding: 2px 8px; } details.problem[open] { background: #fcfcfc; }
pre { background: #f6f6f6; padding: 6px; overflow-x: auto; white-space: pre-wrap; margin: 2px 0 8px; font-size: 12px; }
.turn { border-left: 3px solid #9bc; padding-left: 8px; margin: 10px 0; } .label { color: #666; font-size: 12px; }
.badge { border-radius: 3px; padding: 0 5px; margin-left: 6px; font-size: 12px; color: #fff; }
.badge.ok { background: #2ca02c; } .badge.hack { background: #d62728; } .rate { margin-left: 10px; color: #555; }
.test { display: inline-block; border-radius: 3px; padding: 0 5px; margin: 2px; font-size: 12px; }
.test.pass { background: #dfd; } .test.fail { background: #fdd; } .test.perturbed { outline: 2px dashed #d62728; }
.diff .add { background: #e6ffec; display: block; } .diff .del { background: #ffebe9; display: block; }
.diff .same { display: block; color: #666; } .msg .role { font-weight: bold; color: #555; } .hacking { color: #d62728; }
"""

# The page's only script. Model text enters the DOM through textContent (the `el` helper) and nowhere else.
SCRIPT = r"""
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
const pct = x => (100 * x).toFixed(0) + '%';

async function unpack(b64) {  // gzip + base64 -> the problem's JSON
  const bytes = Uint8Array.from(atob(b64.trim()), c => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
  return JSON.parse(await new Response(stream).text());
}

function lineDiff(a, b) {  // longest common subsequence of lines: [[' ' | '-' | '+', line], ...]
  const x = a.split('\n'), y = b.split('\n'), n = x.length, m = y.length;
  const L = Array.from({length: n + 1}, () => new Int32Array(m + 1));
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--)
      L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push([' ', x[i]]); i++; j++; }
    else if (L[i + 1][j] >= L[i][j + 1]) out.push(['-', x[i++]]);
    else out.push(['+', y[j++]]);
  }
  while (i < n) out.push(['-', x[i++]]);
  while (j < m) out.push(['+', y[j++]]);
  return out;
}

function diffBlock(before, after) {
  const pre = el('pre', 'diff');
  if (before === after) { pre.append(el('span', 'same', '(unchanged)')); return pre; }
  for (const [op, line] of lineDiff(before, after))
    pre.append(el('span', op === '+' ? 'add' : op === '-' ? 'del' : 'same', op + ' ' + line));
  return pre;
}

function turnBlock(problem, turns, t) {
  const turn = turns[t], box = el('div', 'turn');
  const head = el('div', 'turn-head');
  head.append(el('b', null, 'turn ' + t),
              el('span', 'rate', 'public ' + pct(turn.public_pass_rate) + ', hidden ' + pct(turn.hidden_pass_rate)));
  if (turn.hidden_pass_rate >= 1) head.append(el('span', 'badge ok', 'solved'));
  if (turn.candidate) head.append(el('span', 'badge hack', turn.candidate === 'candidate' ? 'hacking candidate' : turn.candidate));
  const response = el('details', 'response');
  response.append(el('summary', null, 'response (' + turn.response.length + ' characters)'), el('pre', null, turn.response));
  box.append(head, response, el('div', 'label', 'program'),
             el('pre', 'program', turn.program === null ? '(no code block)' : turn.program));
  if (t > 0) {
    box.append(el('div', 'label', "diff against turn " + (t - 1) + "'s program"),
               diffBlock(turns[t - 1].program || '', turn.program || ''));
  }
  const tests = el('div', 'tests');
  turn.public.forEach((status, j) => {
    const perturbed = problem.perturbed.includes(j);
    const chip = el('span', 'test ' + (status === 'passed' ? 'pass' : 'fail') + (perturbed ? ' perturbed' : ''),
                    'test ' + j + ': ' + status + (perturbed ? ' (perturbed: expected output swapped)' : ''));
    tests.append(chip);
  });
  box.append(el('div', 'label', 'public tests of the feedback'), tests);
  if (t + 1 < turns.length || turn.feedback) box.append(el('div', 'label', 'feedback shown next'), el('pre', 'feedback', turn.feedback));
  return box;
}

async function renderProblem(details) {
  if (details.dataset.rendered) return;
  details.dataset.rendered = 'pending';
  const start = performance.now();
  const problem = await unpack(document.getElementById('payload-' + details.id).textContent);
  const body = details.querySelector('.body');
  const question = el('details', 'question');
  question.append(el('summary', null, 'problem statement (as the model saw it)'), el('pre', null, problem.question));
  body.replaceChildren(question);
  if (problem.perturbed.length) body.append(el('p', 'hacking', 'perturbed public tests: ' + problem.perturbed.join(', ')));
  problem.samples.forEach((sample, k) => {
    const box = el('details', 'sample');
    box.open = k === 0;
    const last = sample.turns[sample.turns.length - 1];
    box.append(el('summary', null, 'sample ' + sample.sample + ': ' + sample.turns.length + ' turns, last program hidden ' +
                  (last ? pct(last.hidden_pass_rate) : 'n/a')));
    sample.turns.forEach((_, t) => box.append(turnBlock(problem, sample.turns, t)));
    body.append(box);
  });
  details.dataset.rendered = 'done';
  details.dataset.renderMs = (performance.now() - start).toFixed(1);
}

document.addEventListener('toggle', e => {
  if (e.target.matches && e.target.matches('details.problem') && e.target.open) renderProblem(e.target);
}, true);

function openFromHash() {  // #open=PROBLEM_ID opens that problem in every run; #rK-pN (the grid's links) one
  const hash = decodeURIComponent(location.hash.slice(1));
  const found = hash.startsWith('open=')
    ? [...document.querySelectorAll('details.problem')].filter(d => d.dataset.problem === hash.slice(5))
    : [document.getElementById(hash)].filter(d => d && d.matches('details.problem'));
  found.forEach(d => { d.open = true; });
  Promise.all(found.map(renderProblem)).then(() => { if (found.length) found[0].scrollIntoView(); });
}
window.addEventListener('hashchange', openFromHash);
document.addEventListener('DOMContentLoaded', openFromHash);  // the conversations follow this script
document.documentElement.dataset.firstScreenMs = performance.now().toFixed(1);
"""


def build_page(runs: list[tuple[str, Path]], title: str) -> str:
    """The whole page: evaluation runs together first, then training, then collection."""
    names = {path: path.name or str(path) for _, path in runs}
    sections, payloads = [], []
    evals = [(names[p], p) for kind, p in runs if kind == "evaluate"]
    if evals:
        sections.append(evaluate_section(evals, payloads))
    sections += [train_section(names[p], p) for kind, p in runs if kind == "train"]
    sections += [collect_section(names[p], p) for kind, p in runs if kind == "collect"]
    listing = ", ".join(f"{html.escape(names[p])} ({kind})" for kind, p in runs)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1><p>runs: {listing}</p>"
            + "\n".join(sections) + f"<script>{SCRIPT}</script>\n" + "\n".join(payloads) + "</body></html>")


def write_report(paths, out=None, title: str | None = None) -> Path:
    """Write the report of the runs at `paths` (default file: report.html in the first path)."""
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    runs = find_runs(paths)
    out = Path(out) if out else paths[0] / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    text = build_page(runs, title or "cobalt-min report: " + ", ".join(str(p) for p in paths))
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write one self-contained HTML report of evaluate.py, train.py and "
                                 "collect.py runs (or of a folder holding them, like the demo's demo_out/).")
    ap.add_argument("runs", nargs="+", help="run folders (several evaluation runs share one Pass@1 chart)")
    ap.add_argument("--out", type=output_file, default=None,
                    help="the HTML file (default: report.html in the first folder; its folder is made if needed)")
    ap.add_argument("--title", default=None, help="the page's title (default: the folders)")
    args = ap.parse_args(argv)
    path = write_report(args.runs, args.out, args.title)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
