"""The comparison run's summary (compare.sh): the base model, COBALT, single-turn GRPO (the paper's FT
stage: the control that sees no feedback in training) and the online multi-turn baselines GRPO-MT and
VeRPO-MT on the same held-out problems, and what each training run cost per example.

    python -m cobalt_min.demos.compare compare_out      # writes compare_out/comparison.json and comparison.png

Per method: held-out Pass@1 per turn with its standard error over problems, its gain over turn 0 and the
programs repaired and broken at each turn (what feedback did), the paired change against the base model
(Pass@1 averaged over turns, per problem), and from train.py's metrics.jsonl the cost of training:
programs sampled online, wall seconds, generated tokens and sandbox seconds per program trained on and per
problem. COBALT minus each other method, averaged over turns and per turn, paired over problems (minus FT:
what COBALT's feedback contexts add to training on first turns alone). COBALT's offline collection
(collect.py, by the base model) is reported apart: it is paid once, before training, and the paper counts
training cost per example.
"""

import json
import sys
from pathlib import Path

from cobalt_min.jsonl import read_jsonl
from cobalt_min.metrics import (feedback_lines, gain_over_turn0, paired_change, paired_change_per_turn,
                                pass1_se_per_turn, turn_changes)

METHODS = {"base": "eval_base", "COBALT": "eval_cobalt", "FT": "eval_ft", "GRPO-MT": "eval_grpo_mt",
           "VeRPO-MT": "eval_verpo_mt"}
TRAIN_RUNS = {"COBALT": "cobalt", "FT": "ft", "GRPO-MT": "grpo_mt", "VeRPO-MT": "verpo_mt"}
BASELINES = ("FT", "GRPO-MT", "VeRPO-MT")
# What metrics.jsonl's reward_mean averages for each method: not the same quantity, so not comparable across methods.
REWARD_IS = {"COBALT": "the immediate reward of each program sampled for a context (rewards.training_reward)",
             "FT": "the reward of each first-turn program (rewards.training_reward at prev_best 0)",
             "GRPO-MT": "each conversation's return (grpo_mt.returns, --credit; outcome: its last program's reward)",
             "VeRPO-MT": "the staged reward of each conversation's last program (its advantages are VeRPO's)"}


def training_cost(metrics: list[dict]) -> dict:
    """Totals of a training run (metrics.jsonl) and its cost per program trained on and per problem."""
    total = {k: sum(m[k] for m in metrics) for k in ("step_s", "generate_s", "execute_s", "update_s", "logprob_s",
                                                     "generated_tokens", "programs_trained", "programs_run", "problems")}
    n, problems = max(total["programs_trained"], 1), max(total["problems"], 1)
    return {"steps": len(metrics), **total, "s_per_program": total["step_s"] / n,
            "tokens_per_program": total["generated_tokens"] / n, "sandbox_s_per_program": total["execute_s"] / n,
            "s_per_problem": total["step_s"] / problems, "tokens_per_problem": total["generated_tokens"] / problems}


def compare(out) -> dict:
    """comparison.json's content from the runs in `out` (see the module docstring)."""
    out = Path(out)
    records = {name: read_jsonl(out / folder / "trajectories.jsonl") for name, folder in METHODS.items()}
    summaries = {name: json.loads((out / folder / "summary.json").read_text()) for name, folder in METHODS.items()}
    n_turns = len(summaries["base"]["pass@1"])
    result = {"held_out_problems": len(records["base"]), "samples": summaries["base"].get("samples"), "methods": {}}
    for name in METHODS:
        entry = {"pass1_per_turn": summaries[name]["pass@1"],
                 "pass1_se_per_turn": pass1_se_per_turn(records[name], n_turns),
                 "gain_over_turn0": gain_over_turn0(records[name], n_turns),
                 "turn_changes": turn_changes(records[name], n_turns)}
        if name != "base":
            entry["paired_change_vs_base"] = paired_change(records["base"], records[name], n_turns)
            metrics = read_jsonl(out / TRAIN_RUNS[name] / "metrics.jsonl")
            entry["training"] = training_cost(metrics)
            entry["training"]["reward_per_step"] = [m["reward_mean"] for m in metrics]
            entry["training"]["reward_per_step_is"] = REWARD_IS[name]
        result["methods"][name] = entry
    stats = out / "collect" / "stats.json"
    if stats.exists():
        result["methods"]["COBALT"]["offline_collection"] = json.loads(stats.read_text())
    cobalt = result["methods"]["COBALT"]["training"]["s_per_program"]
    for name in BASELINES:  # COBALT against each baseline: cost per program, Pass@1 paired over problems
        key = name.lower().replace("-", "_")
        other = result["methods"][name]["training"]["s_per_program"]
        result[f"cost_ratio_cobalt_over_{key}_per_program"] = cobalt / other if other else None
        change = paired_change(records[name], records["COBALT"], n_turns)
        result[f"cobalt_minus_{key}"] = {"change": change["change"], "se": change["se"],
                                         "per_turn": paired_change_per_turn(records[name], records["COBALT"], n_turns)}
    return result


def plot(result: dict, path) -> bool:
    """Pass@1 per turn of the five models with standard-error bars; seconds per program trained on."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [2, 1]})
    for name, entry in result["methods"].items():
        turns = range(len(entry["pass1_per_turn"]))
        ax.errorbar(turns, entry["pass1_per_turn"], yerr=entry["pass1_se_per_turn"], marker="o", capsize=4, label=name)
    ax.set_xlabel("turn")
    ax.set_ylabel("held-out Pass@1 (%)")
    ax.set_xticks(list(turns))
    ax.set_ylim(0, 100)
    ax.legend()
    ax.set_title(f"{result['held_out_problems']} held-out problems (error bars: 1 s.e.)")
    names = [n for n in result["methods"] if "training" in result["methods"][n]]
    bx.bar(names, [result["methods"][n]["training"]["s_per_program"] for n in names],
           color=[f"C{k + 1}" for k in range(len(names))])
    bx.tick_params(axis="x", labelrotation=20, labelsize=8)
    bx.set_ylabel("seconds per program trained on")
    bx.set_title("training cost")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def report(result: dict) -> str:
    """The comparison as a few lines of text."""
    lines = ["", "=" * 72, "COBALT vs FT (single-turn GRPO), GRPO-MT and VeRPO-MT: held-out Pass@1 (%) per turn (s.e.)",
             "=" * 72]
    for name, entry in result["methods"].items():
        cells = "  ".join(f"{p:5.1f} ({s:.1f})" for p, s in zip(entry["pass1_per_turn"], entry["pass1_se_per_turn"]))
        lines.append(f"{name:8s} {cells}")
    lines.append("")
    lines.append("what feedback did (gain over turn 0 paired over problems; programs repaired / broken per turn):")
    for name, entry in result["methods"].items():
        lines += [f"{name:8s} {line}" for line in feedback_lines(entry["gain_over_turn0"], entry["turn_changes"])]
    lines.append("")
    for name in TRAIN_RUNS:
        entry = result["methods"][name]
        c, t = entry["paired_change_vs_base"], entry["training"]
        lines.append(f"{name:8s} vs base: {c['change']:+.1f} points (s.e. {c['se']:.1f}; {c['improved']} problems "
                     f"better, {c['worse']} worse); training: {t['programs_trained']} programs trained on, "
                     f"{t['s_per_program']:.2f} s, {t['tokens_per_program']:.0f} tokens, "
                     f"{t['sandbox_s_per_program']:.3f} sandbox s per program; {t['s_per_problem']:.1f} s per problem")
    for name in BASELINES:
        key = name.lower().replace("-", "_")
        d = result[f"cobalt_minus_{key}"]
        turns = ", ".join(f"turn {c['turn']} {c['change']:+.1f} ({c['se']:.1f})" for c in d["per_turn"])
        lines.append(f"COBALT - {name}: {d['change']:+.1f} points averaged over turns (s.e. {d['se']:.1f}; {turns}); "
                     f"COBALT's cost per program is {result[f'cost_ratio_cobalt_over_{key}_per_program']:.2f}x {name}'s")
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit("usage: python -m cobalt_min.demos.compare COMPARE_OUT_DIR")
    out = Path(argv[0])
    missing = [str(out / f / "summary.json") for f in METHODS.values() if not (out / f / "summary.json").exists()]
    missing += [str(out / f / "metrics.jsonl") for f in TRAIN_RUNS.values() if not (out / f / "metrics.jsonl").exists()]
    if missing:
        raise SystemExit(f"error: {out} is not a finished comparison run (compare.sh): missing {', '.join(missing)}")
    result = compare(out)
    (out / "comparison.json").write_text(json.dumps(result, indent=2))
    drew = plot(result, out / "comparison.png")
    print(report(result))
    print(f"wrote {out / 'comparison.json'}" + (f" and {out / 'comparison.png'}" if drew else ""))


if __name__ == "__main__":
    main()
