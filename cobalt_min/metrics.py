"""Evaluation metrics (paper §6): Pass@1 per turn, its change from turn 0, and unbiased pass@k."""

import math

from cobalt_min.rewards import has_repetition


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n - c, k) / C(n, k) (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def turn_at(traj: dict, t: int) -> dict | None:
    """The record of the CURRENT program at turn t (not best-so-far): a conversation that stopped
    early keeps its last program. None when the trajectory has no turn at all."""
    turns = traj["turns"]
    return turns[min(t, len(turns) - 1)] if turns else None


def solved_at(traj: dict, t: int) -> bool:
    """Does the current program at turn t pass all hidden tests?"""
    turn = turn_at(traj, t)
    return turn is not None and turn["hidden_pass_rate"] >= 1.0


def solved_share(record: dict, t: int) -> float:
    """The share of a problem's samples whose current program at turn t passes all hidden tests."""
    return sum(solved_at(tr, t) for tr in record["samples"]) / len(record["samples"])


def standard_error(values: list[float]) -> float:
    """Standard error of the mean: sample std (n - 1) / sqrt(n); nan for fewer than two values."""
    n = len(values)
    if n < 2:
        return float("nan")
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def pass1_per_turn(problem_records: list[dict], n_turns: int) -> list[float]:
    """Pass@1 at each turn: fraction of a problem's samples solved, averaged over problems."""
    out = []
    for t in range(n_turns):
        per_problem = [solved_share(rec, t) for rec in problem_records]
        out.append(sum(per_problem) / len(per_problem) if per_problem else 0.0)
    return out


def summarize(problem_records: list[dict], n_turns: int) -> dict:
    """Pass@1 per turn (in %), its change from turn 0 (points and relative %; gain_over_turn0: paired over
    problems, with its standard error), what feedback did at each turn (turn_changes: repair and break
    rates), and pass@k at turn 0."""
    p1 = [100 * x for x in pass1_per_turn(problem_records, n_turns)]
    n = min((len(r["samples"]) for r in problem_records), default=0)
    pass_k = {}
    for k in range(1, n + 1):
        vals = [pass_at_k(len(r["samples"]), sum(solved_at(tr, 0) for tr in r["samples"]), k) for r in problem_records]
        pass_k[k] = 100 * sum(vals) / len(vals)
    mean_rate = []  # partial credit: mean pass rate over all tests of the current program
    for t in range(n_turns):
        per_problem = [sum(turn_at(tr, t)["pass_rate"] if tr["turns"] else 0.0
                           for tr in r["samples"]) / len(r["samples"]) for r in problem_records]
        mean_rate.append(100 * sum(per_problem) / len(per_problem) if per_problem else 0.0)
    return {"problems": len(problem_records), "samples": n, "turns": n_turns,
            "pass@1": p1, "pass@1_se": pass1_se_per_turn(problem_records, n_turns), "mean_test_pass_rate": mean_rate,
            "change_points": [x - p1[0] for x in p1] if p1 else [],
            "change_relative_pct": [100 * (x - p1[0]) / p1[0] if p1 and p1[0] > 0 else None for x in p1],
            "pass@k_turn0": pass_k, "gain_over_turn0": gain_over_turn0(problem_records, n_turns),
            "turn_changes": turn_changes(problem_records, n_turns)}


def turn_changes(problem_records: list[dict], n_turns: int) -> list[dict]:
    """What feedback did at each turn t >= 1, over all conversations pooled: of those whose current program
    at t-1 fails the hidden tests, how many pass at t (repaired; repair_rate = repaired / failing); of
    those that passed at t-1, how many fail at t (broken; break_rate = broken / passing). A rate is None
    when nothing is in its denominator. A conversation that stopped early keeps its last program (turn_at),
    so it neither repairs nor breaks after it stopped."""
    out = []
    for t in range(1, n_turns):
        failing = repaired = passing = broken = 0
        for rec in problem_records:
            for traj in rec["samples"]:
                before, after = solved_at(traj, t - 1), solved_at(traj, t)
                failing += not before
                repaired += (not before) and after
                passing += before
                broken += before and not after
        out.append({"turn": t, "failing_before": failing, "repaired": repaired,
                    "repair_rate": 100 * repaired / failing if failing else None,
                    "passing_before": passing, "broken": broken,
                    "break_rate": 100 * broken / passing if passing else None})
    return out


DEGENERATE_REPEATS = 3  # (the format reward asks for 8: a 128-token response holds 3-4 repeats of a sentence)


def is_degenerate(response: str) -> bool:
    """Text a collapsed model writes: it repeats itself (a block of 32+ characters DEGENERATE_REPEATS times in a
    row, rewards.has_repetition's test) or it is mostly not ASCII (more than a third of its non-space characters;
    the prompts and the programs asked for are English and Python)."""
    visible = [c for c in response if not c.isspace()]
    return (has_repetition(response, min_repeats=DEGENERATE_REPEATS)
            or (bool(visible) and sum(not c.isascii() for c in visible) > len(visible) / 3))


def response_health(problem_records: list[dict], n_turns: int) -> list[dict]:
    """Per turn t, over the conversations that reached it: the responses, those without a complete code block
    (no program: the turn scores 0 and the feedback says so) and the degenerate ones (is_degenerate), with the
    shares in percent. A trained model whose shares rise well above its starting model's has collapsed."""
    out = []
    for t in range(n_turns):
        turns = [traj["turns"][t] for rec in problem_records for traj in rec["samples"] if len(traj["turns"]) > t]
        no_code = sum(turn["program"] is None for turn in turns)
        degenerate = sum(is_degenerate(turn.get("response", "")) for turn in turns)
        n = max(1, len(turns))
        out.append({"turn": t, "responses": len(turns), "no_code": no_code, "no_code_share": 100 * no_code / n,
                    "degenerate": degenerate, "degenerate_share": 100 * degenerate / n})
    return out


def gain_over_turn0(problem_records: list[dict], n_turns: int) -> list[dict]:
    """Pass@1 at turn t minus Pass@1 at turn 0 (points), paired over problems: the mean of the problems'
    own changes and its standard error (std of the changes / sqrt(n)), for every turn t."""
    out = []
    for t in range(n_turns):
        changes = [100 * (solved_share(rec, t) - solved_share(rec, 0)) for rec in problem_records]
        out.append({"turn": t, "gain": sum(changes) / len(changes) if changes else 0.0,
                    "se": standard_error(changes) if t else 0.0})
    return out


def rate_text(count: int, total: int, rate: float | None) -> str:
    """`repaired/failing (rate %)`, or `-` when nothing was in the denominator."""
    return f"{count}/{total} ({rate:.0f}%)" if rate is not None else "-"


def format_table(summary: dict, title: str = "") -> str:
    """A plain-text table of Pass@1 per turn, its gain over turn 0 paired over problems (with its standard
    error), and the repairs and breaks feedback caused at each turn."""
    lines = [title] if title else []
    lines.append(f"{summary['problems']} problems x {summary['samples']} samples")
    lines.append(f"{'turn':>4}  {'Pass@1 %':>8}  {'vs t=0 (s.e.)':>14}  {'rel. %':>7}  {'repaired':>14}  {'broken':>14}")
    gains = summary.get("gain_over_turn0") or [{"gain": d, "se": float("nan")} for d in summary["change_points"]]
    changes = [None] + list(summary.get("turn_changes", []))
    for t, (p, g, r) in enumerate(zip(summary["pass@1"], gains, summary["change_relative_pct"])):
        rel = f"{r:+7.1f}" if r is not None else f"{'n/a':>7}"
        c = changes[t] if t < len(changes) else None
        repaired = rate_text(c["repaired"], c["failing_before"], c["repair_rate"]) if c else ""
        broken = rate_text(c["broken"], c["passing_before"], c["break_rate"]) if c else ""
        gain = f"{g['gain']:+.2f} ({g['se']:.2f})" if t else f"{0:+.2f}"
        lines.append(f"{t:>4}  {p:8.2f}  {gain:>14}  {rel}  {repaired:>14}  {broken:>14}")
    lines.append("repaired: programs failing the hidden tests at t-1 that pass at t; broken: passing at t-1, failing at t")
    if summary["pass@k_turn0"]:
        ks = summary["pass@k_turn0"]
        shown = [k for k in ks if k in (1, 2, 4, 8, 16) or k == max(ks)]
        lines.append("turn 0 pass@k: " + ", ".join(f"k={k}: {ks[k]:.2f}" for k in shown))
    return "\n".join(lines)



def feedback_lines(gains: list[dict], changes: list[dict]) -> list[str]:
    """One line per turn t >= 1: the gain over turn 0 (s.e.), programs repaired and broken."""
    return [f"turn {c['turn']}: {g['gain']:+.1f} points over turn 0 (s.e. {g['se']:.1f}); repaired "
            f"{rate_text(c['repaired'], c['failing_before'], c['repair_rate'])}, broken "
            f"{rate_text(c['broken'], c['passing_before'], c['break_rate'])}" for g, c in zip(gains[1:], changes)]

def per_problem_pass1(problem_records: list[dict], n_turns: int) -> dict:
    """{problem id: Pass@1 of that problem averaged over turns} (the unit of the paired comparison)."""
    return {rec["problem_id"]: sum(solved_share(rec, t) for t in range(n_turns)) / n_turns for rec in problem_records}


def paired_change(before: list[dict], after: list[dict], n_turns: int) -> dict:
    """Pass@1 averaged over turns, before and after, paired over the problems evaluated in both (in
    points): the mean per-problem change and its standard error (std of the changes / sqrt(n))."""
    b, a = per_problem_pass1(before, n_turns), per_problem_pass1(after, n_turns)
    common = sorted(set(a) & set(b))
    changes = [100 * (a[p] - b[p]) for p in common]
    n = len(changes)
    return {"problems": n, "before": 100 * sum(b[p] for p in common) / max(1, n),
            "after": 100 * sum(a[p] for p in common) / max(1, n), "change": sum(changes) / n if n else 0.0,
            "se": standard_error(changes),
            "improved": sum(c > 0 for c in changes), "worse": sum(c < 0 for c in changes)}


def paired_change_per_turn(before: list[dict], after: list[dict], n_turns: int) -> list[dict]:
    """Pass@1 at each turn, after minus before, paired over the problems evaluated in both (in points): per
    turn the mean of the problems' own changes and its standard error."""
    b = {rec["problem_id"]: rec for rec in before}
    pairs = [(b[rec["problem_id"]], rec) for rec in after if rec["problem_id"] in b]
    out = []
    for t in range(n_turns):
        changes = [100 * (solved_share(a, t) - solved_share(x, t)) for x, a in pairs]
        out.append({"turn": t, "change": sum(changes) / len(changes) if changes else 0.0,
                    "se": standard_error(changes)})
    return out


def pass1_se_per_turn(problem_records: list[dict], n_turns: int) -> list[float]:
    """Standard error over problems of Pass@1 at each turn (in points)."""
    per_turn = [[100 * solved_share(rec, t) for rec in problem_records] for t in range(n_turns)]
    return [standard_error(vals) if len(vals) > 1 else 0.0 for vals in per_turn]


def plot_pass_at_1(curves: dict, path, title: str = "Pass@1 per turn", errors: dict | None = None,
                   note: str = "") -> bool:
    """Plot one or more Pass@1 curves ({label: [values per turn]}) to a PNG, with error bars (errors: {label:
    [standard errors]}) where given, integer turns on the x axis, 0-100 % on the y axis, `note` (e.g. the
    number of problems and samples) under the title; False (with a message) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: skipping {path} (pip install matplotlib)")
        return False
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for label, values in curves.items():
        err = (errors or {}).get(label)
        ax.errorbar(range(len(values)), values, yerr=err, marker="o", capsize=3, label=label)
    turns = max((len(v) for v in curves.values()), default=1)
    ax.set_xticks(range(turns))
    ax.set_xlim(-0.3, turns - 0.7)
    ax.set_ylim(0, 100)
    ax.set_xlabel("turn")
    ax.set_ylabel("Pass@1 (%)")
    ax.set_title(title + (f"\n{note}" if note else ""), fontsize=10)
    ax.grid(alpha=0.3)
    if len(curves) > 1:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
