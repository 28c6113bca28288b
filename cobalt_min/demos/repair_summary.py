"""The self-repair demo's closing summary (demo_repair.sh ends with it): the paper's three multi-turn results
at toy scale, per model (the warm-up model, COBALT, COBALT-PTB, FT) on the held-out repair problems.

    python -m cobalt_min.demos.repair_summary demo_repair_out      # writes repair_summary.json and repair.png
    python -m cobalt_min.demos.repair_summary out_seed0 out_seed1 out_seed2   # several runs (seeds): side by side

1. Per turn, with true feedback: Pass@1 (its standard error over problems), the gain of each turn over turn 0
   paired over problems, the programs repaired and broken at each turn (metrics.turn_changes); turn 3 is
   beyond the training horizon (training contexts hold at most 3 programs).
2. COBALT against the warm-up model it starts from: Pass@1 at each turn, paired over problems; repair counts.
3. With perturbed public tests (evaluate.py --perturbed, paper §7): Pass@1 per turn and its change from turn 0
   (the drop, paired over problems), hacking candidates per turn; COBALT-PTB's drop against COBALT's.
4. Per model and turn, the responses without a code block and the degenerate ones (metrics.is_degenerate); a
   trained model whose share of either is COLLAPSE_POINTS or more above the warm-up model's at some turn is
   named as collapsed.
5. Per held-out set (SETS: the family's problems, the random variants of its templates): Pass@1 per turn and
   the differences at the last turn.
6. From the training runs' metrics.jsonl (training problems only, never the held-out ones): response length,
   responses without code, pass rate, and what COBALT's contexts offered to learn repair from
   (train.feedback_counts: failing feedback, its repairs, the groups where some but not all programs repair).
"""

import json
import sys
from pathlib import Path

from cobalt_min.jsonl import read_jsonl
from cobalt_min.metrics import (gain_over_turn0, paired_change_per_turn, pass1_per_turn, pass1_se_per_turn,
                                rate_text, response_health, solved_at, solved_share, standard_error, turn_at,
                                turn_changes)
from cobalt_min.perturbation import wrong_feedback_per_turn

MODELS = {"warm-up": "warmup", "COBALT": "cobalt", "COBALT-PTB": "cobalt_ptb", "FT": "ft"}  # name: eval_<folder>
COLLAPSE_POINTS = 10.0  # a trained model's share of responses without code (or degenerate) this far above the warm-up's
SETS = {"family": "demo/", "variants": "warmup/"}  # held-out sets by id: the family's problems; random template variants
SE_BAR = 3.0  # the demo's bar: standard errors of COBALT minus the warm-up model and minus FT at the last turn
NO_CODE_BAR = 5.0  # the demo's bar: no trained model's share of responses without code this far above the warm-up's


def drop_difference(a: list[dict], b: list[dict], n_turns: int) -> dict:
    """(b's change from turn 0 to the last turn) minus (a's), paired over the problems both evaluated (points):
    under perturbed feedback, how much less (positive) or more one model loses than the other."""
    by_id = {rec["problem_id"]: rec for rec in a}
    last = n_turns - 1
    diffs = [100 * ((solved_share(rec, last) - solved_share(rec, 0))
                    - (solved_share(by_id[rec["problem_id"]], last) - solved_share(by_id[rec["problem_id"]], 0)))
             for rec in b if rec["problem_id"] in by_id]
    return {"problems": len(diffs), "difference": sum(diffs) / len(diffs) if diffs else 0.0,
            "se": standard_error(diffs)}


def resubmissions(records: list[dict]) -> dict:
    """Over turns t >= 1: how often the program at t is the program at t-1 again (same code, stripped), after
    feedback that said every public test passed and after feedback that showed a failing one:
    {"after_passing": [unchanged, programs], "after_failing": [unchanged, programs]}."""
    out = {"after_passing": [0, 0], "after_failing": [0, 0]}
    for rec in records:
        for traj in rec["samples"]:
            for prev, cur in zip(traj["turns"], traj["turns"][1:]):
                if not prev["program"] or not cur["program"] or not prev["public"]:
                    continue
                key = "after_passing" if all(r["passed"] for r in prev["public"]) else "after_failing"
                out[key][0] += prev["program"].strip() == cur["program"].strip()
                out[key][1] += 1
    return out


def repairs_going_back(records: list[dict], n_turns: int) -> list[dict]:
    """Per turn t >= 2: of the repairs at t (failing the hidden tests at t-1, passing at t), how many are a program
    the conversation already wrote before t-1 (same code, stripped): a return to an earlier program rather than
    a fix of the one that just failed. [{"turn": t, "earlier_program": k, "repaired": n}]."""
    out = []
    for t in range(2, n_turns):
        earlier = repaired = 0
        for rec in records:
            for traj in rec["samples"]:
                if solved_at(traj, t - 1) or not solved_at(traj, t):
                    continue
                repaired += 1
                before = {turn["program"].strip() for turn in traj["turns"][:t - 1] if turn["program"]}
                earlier += turn_at(traj, t)["program"].strip() in before
        out.append({"turn": t, "earlier_program": earlier, "repaired": repaired})
    return out


def model_entry(records: list[dict], perturbed: list[dict] | None, n_turns: int) -> dict:
    """One model's numbers: true feedback, then (when evaluated) perturbed feedback."""
    entry = {"pass1_per_turn": [100 * x for x in pass1_per_turn(records, n_turns)],
             "pass1_se_per_turn": pass1_se_per_turn(records, n_turns),
             "gain_over_turn0": gain_over_turn0(records, n_turns), "turn_changes": turn_changes(records, n_turns),
             "response_health": response_health(records, n_turns), "resubmitted": resubmissions(records),
             "repairs_going_back": repairs_going_back(records, n_turns)}
    if perturbed is not None:
        entry["perturbed"] = {"pass1_per_turn": [100 * x for x in pass1_per_turn(perturbed, n_turns)],
                              "pass1_se_per_turn": pass1_se_per_turn(perturbed, n_turns),
                              "change_from_turn0": gain_over_turn0(perturbed, n_turns),
                              "wrong_feedback": wrong_feedback_per_turn(perturbed, n_turns)}
    return entry


def collapsed(models: dict) -> dict:
    """{trained model: the turns where its share of responses without code, or of degenerate ones, is
    COLLAPSE_POINTS or more above the warm-up model's}, for the models that have such turns."""
    start = models["warm-up"]["response_health"]
    found = {}
    for name, entry in models.items():
        turns = [h["turn"] for h, h0 in zip(entry["response_health"], start) if name != "warm-up" and (
            h["no_code_share"] - h0["no_code_share"] >= COLLAPSE_POINTS
            or h["degenerate_share"] - h0["degenerate_share"] >= COLLAPSE_POINTS)]
        if turns:
            found[name] = turns
    return found


def held_out_sets(records: dict, n_turns: int) -> dict:
    """Per held-out set (SETS): its problems, each model's Pass@1 per turn, COBALT minus the warm-up model and
    minus FT at the last turn (paired over the set's problems)."""
    out = {}
    for name, prefix in SETS.items():
        part = {m: [r for r in recs if r["problem_id"].startswith(prefix)] for m, recs in records.items()}
        if not part["warm-up"]:
            continue
        entry = {"problems": len(part["warm-up"]),
                 "pass1_per_turn": {m: [100 * x for x in pass1_per_turn(recs, n_turns)] for m, recs in part.items()}}
        for other, key in (("warm-up", "cobalt_minus_warmup"), ("FT", "cobalt_minus_ft")):
            if "COBALT" in part and other in part:
                entry[key] = paired_change_per_turn(part[other], part["COBALT"], n_turns)[-1]
        out[name] = entry
    return out


def training_summary(out: Path) -> dict:
    """Per trained model, from its metrics.jsonl (training problems): steps, response length (first step, last
    step, largest), the most responses without code in a step (%), the mean pass rate (%), the mean share of
    groups whose rewards are all equal; COBALT's train.feedback_counts summed over its steps, with G."""
    result = {}
    for name, folder in MODELS.items():
        path = out / folder / "metrics.jsonl"
        if name == "warm-up" or not path.exists():
            continue
        rows = [r for r in read_jsonl(path) if "pass_rate" in r]
        if not rows:
            continue
        lengths = [r["response_len"] for r in rows]
        entry = {"steps": len(rows), "response_len_first": lengths[0], "response_len_last": lengths[-1],
                 "response_len_max": max(lengths), "no_code_max": 100 * max(r["no_code"] for r in rows),
                 "pass_rate_mean": 100 * sum(r["pass_rate"] for r in rows) / len(rows),
                 "zero_std_groups_mean": sum(r["zero_std_groups"] for r in rows) / len(rows)}
        counts = {k: sum(r.get(k, 0) for r in rows) for k in rows[0] if k.startswith("n_")}
        if counts.get("n_failing_feedback_contexts") or counts.get("n_passing_feedback_contexts"):
            settings = json.loads((out / folder / "settings.json").read_text())
            entry["feedback"] = {**{k.removeprefix("n_"): v for k, v in counts.items()}, "group_size": settings["group_size"]}
        result[name] = entry
    return result


def summarize(out) -> dict:
    """repair_summary.json's content from the evaluations in `out` (eval_<model>, eval_<model>_perturbed)."""
    out = Path(out)
    records = {name: read_jsonl(out / f"eval_{folder}" / "trajectories.jsonl") for name, folder in MODELS.items()
               if (out / f"eval_{folder}" / "trajectories.jsonl").exists()}
    perturbed = {name: read_jsonl(out / f"eval_{folder}_perturbed" / "trajectories.jsonl") for name, folder in MODELS.items()
                 if (out / f"eval_{folder}_perturbed" / "trajectories.jsonl").exists()}
    n_turns = max(len(s["turns"]) for recs in records.values() for r in recs for s in r["samples"])
    result = {"held_out_problems": len(records["warm-up"]), "turns": n_turns,
              "samples": min(len(r["samples"]) for r in records["warm-up"]),
              "models": {name: model_entry(recs, perturbed.get(name), n_turns) for name, recs in records.items()}}
    result["collapsed"] = collapsed(result["models"])
    if "COBALT" in records:
        result["cobalt_minus_warmup"] = paired_change_per_turn(records["warm-up"], records["COBALT"], n_turns)
        if "FT" in records:
            result["cobalt_minus_ft"] = paired_change_per_turn(records["FT"], records["COBALT"], n_turns)
        gain = result["models"]["COBALT"]["gain_over_turn0"][-1]
        versus = result["cobalt_minus_warmup"][-1]
        repaired = {name: sum(c["repaired"] for c in result["models"][name]["turn_changes"]) for name in ("warm-up", "COBALT")}
        chances = {name: sum(c["failing_before"] for c in result["models"][name]["turn_changes"]) for name in ("warm-up", "COBALT")}
        result["bar"] = {"cobalt_gain_last_turn": gain["gain"], "cobalt_gain_se": gain["se"],
                         "gain_at_least_5_points_and_2_se": gain["gain"] >= 5 and gain["gain"] >= 2 * gain["se"],
                         "cobalt_minus_warmup_last_turn": versus["change"], "cobalt_minus_warmup_se": versus["se"],
                         "repaired": repaired, "repair_chances": chances,
                         "repair_rate_above_warmup": repaired["COBALT"] / max(1, chances["COBALT"])
                         > repaired["warm-up"] / max(1, chances["warm-up"])}
    result["sets"] = held_out_sets(records, n_turns)
    result["training"] = training_summary(out)
    if "bar" in result:
        b, start = result["bar"], result["models"]["warm-up"]["response_health"]
        if "cobalt_minus_ft" in result:
            b.update(cobalt_minus_ft_last_turn=result["cobalt_minus_ft"][-1]["change"],
                     cobalt_minus_ft_se=result["cobalt_minus_ft"][-1]["se"])
        b["se_at_most_bar"] = all(b[k] <= SE_BAR for k in ("cobalt_minus_warmup_se", "cobalt_minus_ft_se") if k in b)
        b["no_code_above_warmup"] = {name: max(h["no_code_share"] - h0["no_code_share"]
                                               for h, h0 in zip(e["response_health"], start))
                                     for name, e in result["models"].items() if name != "warm-up"}
        b["no_code_within_bar"] = all(x <= NO_CODE_BAR for x in b["no_code_above_warmup"].values())
    if "COBALT" in perturbed and "COBALT-PTB" in perturbed:
        result["ptb_drop_minus_cobalt_drop"] = drop_difference(perturbed["COBALT"], perturbed["COBALT-PTB"], n_turns)
    return result


def report(result: dict) -> str:
    """The summary as text."""
    T = result["turns"]
    lines = ["", "=" * 78, f"Self-repair demo: held-out Pass@1 (%) per turn, {result['held_out_problems']} problems x "
             f"{result['samples']} samples (s.e. over problems); turn {T - 1} lies beyond the training horizon", "=" * 78]
    for name, e in result["models"].items():
        cells = "  ".join(f"{p:5.1f} ({s:.1f})" for p, s in zip(e["pass1_per_turn"], e["pass1_se_per_turn"]))
        g = e["gain_over_turn0"][-1]
        lines.append(f"{name:11s} {cells}   turn {T - 1} - turn 0: {g['gain']:+.1f} (s.e. {g['se']:.1f})")
    lines.append("\nrepaired / broken at turns 1.." + str(T - 1) + " (failing at t-1 and passing at t / the reverse):")
    for name, e in result["models"].items():
        lines.append(f"{name:11s} " + "; ".join(f"t{c['turn']} {rate_text(c['repaired'], c['failing_before'], c['repair_rate'])}"
                                               f" / {rate_text(c['broken'], c['passing_before'], c['break_rate'])}"
                                               for c in e["turn_changes"]))
    lines.append("\nthe same program again at turns 1.." + str(T - 1) + ", after feedback that said every public test passed / "
                 "after a failing public test:")
    for name, e in result["models"].items():
        r = e["resubmitted"]
        lines.append(f"{name:11s} " + " / ".join(f"{n}/{of} ({100 * n / of:.0f}%)" if of else "-"
                                               for n, of in (r["after_passing"], r["after_failing"])))
    if T > 2:
        lines.append(f"repairs at turns 2..{T - 1} that go back to a program written before the turn that failed:")
        for name, e in result["models"].items():
            lines.append(f"{name:11s} " + "; ".join(f"t{r['turn']} {r['earlier_program']}/{r['repaired']}"
                                                   for r in e["repairs_going_back"]))
    lines.append("\nresponses without a code block / degenerate (%; metrics.is_degenerate) per turn:")
    for name, e in result["models"].items():
        lines.append(f"{name:11s} " + "  ".join(f"t{h['turn']} {h['no_code_share']:.0f} / {h['degenerate_share']:.0f}"
                                               for h in e["response_health"]))
    for name, turns in result.get("collapsed", {}).items():
        lines.append(f"collapse: {name} at turn(s) {', '.join(map(str, turns))} writes {COLLAPSE_POINTS:g}+ points more "
                     "responses without code, or degenerate, than the warm-up model; its Pass@1 there measures that, "
                     "not repair")
    if "bar" in result:
        b = result["bar"]
        lines.append(f"\nCOBALT, turn {T - 1} minus turn 0: {b['cobalt_gain_last_turn']:+.1f} points (s.e. "
                     f"{b['cobalt_gain_se']:.1f}); COBALT minus the warm-up model at turn {T - 1}: "
                     f"{b['cobalt_minus_warmup_last_turn']:+.1f} (s.e. {b['cobalt_minus_warmup_se']:.1f}); repairs: COBALT "
                     f"{b['repaired']['COBALT']}/{b['repair_chances']['COBALT']}, warm-up "
                     f"{b['repaired']['warm-up']}/{b['repair_chances']['warm-up']}")
        per_turn = ", ".join(f"t{c['turn']} {c['change']:+.1f} ({c['se']:.1f})" for c in result["cobalt_minus_warmup"])
        lines.append(f"COBALT minus warm-up per turn: {per_turn}")
        if "cobalt_minus_ft" in result:
            per_turn = ", ".join(f"t{c['turn']} {c['change']:+.1f} ({c['se']:.1f})" for c in result["cobalt_minus_ft"])
            lines.append(f"COBALT minus FT (single-turn GRPO, no feedback in training) per turn: {per_turn}")
    if len(result.get("sets", {})) > 1:
        lines.append(f"\nper held-out set, Pass@1 (%) turn 0 / turn {T - 1}, and COBALT's differences at turn {T - 1} (s.e.):")
        for name, st in result["sets"].items():
            cells = ", ".join(f"{m} {v[0]:.1f} / {v[-1]:.1f}" for m, v in st["pass1_per_turn"].items())
            diffs = "; ".join(f"{label} {st[key]['change']:+.1f} ({st[key]['se']:.1f})" for key, label in
                              (("cobalt_minus_warmup", "minus warm-up"), ("cobalt_minus_ft", "minus FT")) if key in st)
            lines.append(f"{name:9s} ({st['problems']} problems): {cells}; COBALT {diffs}")
    if result.get("training"):
        lines.append("\ntraining (training problems; metrics.jsonl): response length first / last / largest step (tokens), "
                     "most responses without code in a step, mean pass rate, groups with equal rewards")
        for name, t in result["training"].items():
            lines.append(f"{name:11s} {t['response_len_first']:.0f} / {t['response_len_last']:.0f} / {t['response_len_max']:.0f}; "
                         f"{t['no_code_max']:.0f} %; {t['pass_rate_mean']:.1f} %; {t['zero_std_groups_mean']:.2f}  ({t['steps']} steps)")
        for name, t in result["training"].items():
            f = t.get("feedback")
            if f:
                G = f["group_size"]
                lines.append(f"{name}'s contexts after failing feedback: {f['failing_feedback_contexts']}, "
                             f"{f['failing_feedback_repairs']} of their {G * f['failing_feedback_contexts']} programs "
                             f"repair, {f['failing_feedback_mixed']} groups with some but not all repairing (the only ones "
                             f"whose advantages favour repair); after \"passed all public tests\": "
                             f"{f['passing_feedback_contexts']}, {f['passing_feedback_kept']} of "
                             f"{G * f['passing_feedback_contexts']} programs still pass every test")
    if "bar" in result and "se_at_most_bar" in result["bar"]:
        b = result["bar"]
        lines.append(f"\nbar: s.e. of COBALT minus warm-up / minus FT at turn {T - 1} "
                     f"{b['cobalt_minus_warmup_se']:.1f} / {b.get('cobalt_minus_ft_se', float('nan')):.1f} "
                     f"(<= {SE_BAR:g}: {'yes' if b['se_at_most_bar'] else 'no'}); responses without code above the "
                     "warm-up model's, most at a turn: " + ", ".join(f"{m} {x:+.0f}" for m, x in b["no_code_above_warmup"].items())
                     + f" (<= {NO_CODE_BAR:g}: {'yes' if b['no_code_within_bar'] else 'no'})")
    if any("perturbed" in e for e in result["models"].values()):
        lines.append("\nperturbed public tests (the feedback shows a wrong expected output): Pass@1 per turn, change "
                     "from turn 0 (s.e.), hacking candidates per turn")
        for name, e in result["models"].items():
            if "perturbed" not in e:
                continue
            p = e["perturbed"]
            cells = " / ".join(f"{x:.1f}" for x in p["pass1_per_turn"])
            drops = ", ".join(f"t{g['turn']} {g['gain']:+.1f} ({g['se']:.1f})" for g in p["change_from_turn0"][1:])
            hacks = ", ".join(f"t{w['turn']} {w['hacking_candidates']}" for w in p["wrong_feedback"])
            lines.append(f"{name:11s} {cells}; change {drops}; hacking candidates {hacks}")
    if "ptb_drop_minus_cobalt_drop" in result:
        d = result["ptb_drop_minus_cobalt_drop"]
        lines.append(f"COBALT-PTB's change from turn 0 to turn {T - 1} under perturbed feedback minus COBALT's: "
                     f"{d['difference']:+.1f} points (s.e. {d['se']:.1f}, {d['problems']} problems)")
    return "\n".join(lines)


COLOURS = {"warm-up": "tab:gray", "COBALT": "tab:blue", "COBALT-PTB": "tab:orange", "FT": "tab:green"}


def plot(result: dict, path) -> bool:
    """repair.png: Pass@1 per turn with true feedback, the same with perturbed feedback (when evaluated), COBALT
    minus the warm-up model and minus FT per turn (paired over problems), and the programs repaired (up) and
    broken (down) at each turn with true feedback; one colour per model throughout (a difference in the colour of
    the model COBALT is compared with),
    standard errors as bars, the Pass@1 axis fitted to the data. False (with a message) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: skipping {path} (pip install matplotlib)")
        return False
    models = result["models"]
    kinds = [("true feedback", lambda e: (e["pass1_per_turn"], e["pass1_se_per_turn"]))]
    if any("perturbed" in e for e in models.values()):
        kinds.append(("perturbed feedback", lambda e: (e["perturbed"]["pass1_per_turn"], e["perturbed"]["pass1_se_per_turn"])
                      if "perturbed" in e else None))
    T = result["turns"]
    differences = [(key, other) for key, other in (("cobalt_minus_warmup", "warm-up"), ("cobalt_minus_ft", "FT"))
                   if key in result]
    panels = len(kinds) + 1 + bool(differences)
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.6))
    top = 0.0
    for ax, (kind, values_of) in zip(axes, kinds):
        for k, (name, e) in enumerate(models.items()):
            if values_of(e) is None:
                continue
            values, errors = values_of(e)
            top = max(top, max(v + s for v, s in zip(values, errors)))
            ax.errorbar([t + 0.06 * (k - 1.5) for t in range(T)], values, yerr=errors, marker="o", capsize=3,
                        color=COLOURS.get(name), label=name)
        ax.set_title(f"Pass@1 (%), {kind}", fontsize=10)
        ax.set_xlabel("turn")
    for ax in axes[:len(kinds)]:
        ax.set_ylim(0, max(5.0, 1.15 * top))
        ax.set_xticks(range(T))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="best")
    if differences:  # COBALT minus each other model, paired over problems: the comparison the demo is about
        ax = axes[len(kinds)]
        for k, (key, other) in enumerate(differences):
            ax.errorbar([t + 0.06 * (k - 0.5) for t in range(T)], [c["change"] for c in result[key]],
                        yerr=[c["se"] for c in result[key]], marker="o", capsize=3, color=COLOURS.get(other),
                        label=f"COBALT - {other}")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(range(T))
        ax.set_xlabel("turn")
        ax.set_ylabel("points")
        ax.set_title("COBALT minus another model,\nPass@1, true feedback (paired)", fontsize=10)
        ax.legend(fontsize=8, loc="best")
        ax.grid(alpha=0.3)
    ax = axes[-1]
    width = 0.8 / len(models)
    for k, (name, e) in enumerate(models.items()):
        turns = [c["turn"] + width * (k - (len(models) - 1) / 2) for c in e["turn_changes"]]
        ax.bar(turns, [c["repaired"] for c in e["turn_changes"]], width, color=COLOURS.get(name), label=name)
        ax.bar(turns, [-c["broken"] for c in e["turn_changes"]], width, color=COLOURS.get(name), alpha=0.45)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("programs")
    ax.set_xticks(range(1, T))
    ax.set_xlabel("turn")
    ax.set_title("programs repaired (up) / broken (down),\ntrue feedback", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"Self-repair demo: {result['held_out_problems']} held-out problems x {result['samples']} samples "
                 "(bars: s.e. over problems)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def across_runs(results: dict) -> str:
    """Several runs' summaries (e.g. SEED=0, 1, 2) side by side: per run the last turn's Pass@1 of each model,
    COBALT minus the warm-up model and minus FT (s.e.); then their mean over the runs, with the standard error
    of that mean from the runs' own ones (independent runs: sqrt(sum of s.e.^2) / runs)."""
    lines = []
    keys = (("cobalt_minus_warmup", "COBALT - warm-up"), ("cobalt_minus_ft", "COBALT - FT"))
    for name, r in results.items():
        T = r["turns"]
        cells = ", ".join(f"{m} {e['pass1_per_turn'][-1]:.1f}" for m, e in r["models"].items())
        diffs = "; ".join(f"{label} {r[key][-1]['change']:+.1f} ({r[key][-1]['se']:.1f})" for key, label in keys if key in r)
        lines.append(f"{name}: turn {T - 1} Pass@1 {cells}; {diffs}")
    for key, label in keys:
        per_run = [r[key] for r in results.values() if key in r]
        if len(per_run) < 2:
            continue
        means = []
        for t in range(min(len(p) for p in per_run)):
            runs = [p[t] for p in per_run]
            means.append((sum(x["change"] for x in runs) / len(runs), sum(x["se"] ** 2 for x in runs) ** 0.5 / len(runs)))
        mean, se = means[-1]
        lines.append(f"{label} at the last turn, mean over {len(per_run)} runs: {mean:+.1f} (s.e. {se:.1f}); per turn: "
                     + ", ".join(f"t{t} {m:+.1f} ({e:.1f})" for t, (m, e) in enumerate(means)))
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        raise SystemExit("usage: python -m cobalt_min.demos.repair_summary DEMO_REPAIR_OUT_DIR [MORE_RUN_DIRS ...]")
    if len(argv) > 1:
        missing = [d for d in argv if not (Path(d) / "repair_summary.json").exists()]
        if missing:
            raise SystemExit(f"error: no repair_summary.json in {', '.join(missing)}: run the summary of each first")
        print(across_runs({d: json.loads((Path(d) / "repair_summary.json").read_text()) for d in argv}))
        return
    out = Path(argv[0])
    if not (out / "eval_warmup" / "trajectories.jsonl").exists():
        raise SystemExit(f"error: {out} holds no evaluation of the warm-up model (eval_warmup): run demo_repair.sh")
    result = summarize(out)
    (out / "repair_summary.json").write_text(json.dumps(result, indent=2))
    plot(result, out / "repair.png")
    print(report(result))
    print(f"wrote {out / 'repair_summary.json'} and {out / 'repair.png'}")


if __name__ == "__main__":
    main()
