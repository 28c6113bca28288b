"""The demo's closing summary (demo.sh ends with it): held-out Pass@1 before and after training, the
paired change with its standard error, the training reward's rise, the learning figure, and where the
time went (each step of demo.sh; train.py's phases).

    python -m cobalt_min.demos.demo_summary demo_out
"""

import argparse
import json
from pathlib import Path

from cobalt_min.jsonl import read_jsonl
from cobalt_min.metrics import feedback_lines, paired_change, pass1_se_per_turn, plot_pass_at_1
from cobalt_min.perturbation import wrong_feedback_text


def reward_trend(steps: list[dict]) -> dict:
    """Mean training reward over the first and the last quarter of the steps, and the difference."""
    rewards = [m["reward_mean"] for m in steps]
    q = max(1, len(rewards) // 4)
    first, last = sum(rewards[:q]) / q, sum(rewards[-q:]) / q
    return {"steps": len(rewards), "quarter": q, "first_quarter": first, "last_quarter": last, "rise": last - first}


def plot_learning(steps: list[dict], before: dict, after: dict, path, se_before=None, se_after=None) -> bool:
    """Two panels: the training reward per step (and its moving mean); held-out Pass@1 per turn before
    and after training (error bars: standard error over problems). False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: skipping {path} (pip install matplotlib)")
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    x = [m["step"] for m in steps]
    r = [m["reward_mean"] for m in steps]
    left.plot(x, r, marker="o", alpha=0.6, label="mean reward of the step")
    w = max(2, len(r) // 4)  # a quarter of the run, as the first/last-quarter comparison
    if len(r) >= 2 * w:
        moving = [sum(r[max(0, i - w + 1):i + 1]) / len(r[max(0, i - w + 1):i + 1]) for i in range(len(r))]
        left.plot(x, moving, linewidth=2, label=f"moving mean ({w} steps)")
    left.set_xlabel("GRPO step")
    left.set_ylabel("training reward")
    left.set_title("Training reward (its whole range, [-1, 1])")
    left.set_ylim(-1.05, 1.05)
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    for label, s, se in (("before training", before, se_before), ("after training", after, se_after)):
        turns = range(len(s["pass@1"]))
        right.errorbar(turns, s["pass@1"], yerr=se, marker="o", capsize=3, label=label)
    right.set_xticks(list(range(len(before["pass@1"]))))
    right.set_ylim(0, 100)
    right.set_xlabel("turn")
    right.set_ylabel("Pass@1 (%)")
    right.set_title("Held-out Pass@1 per turn (bars: standard error)")
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def runs_table(summaries: dict) -> list[str]:
    """Lines of a table with one column per run: Pass@1 per turn, then the mean share of tests passed."""
    n_turns = max(len(s["pass@1"]) for s in summaries.values())
    some = next(iter(summaries.values()))

    def rows(key):
        return [f"{t:>4}  " + "  ".join(f"{s[key][t]:17.2f}" if t < len(s.get(key, [])) else f"{'':>17}"
                                        for s in summaries.values()) for t in range(n_turns)]
    return ([f"{'turn':>4}  " + "  ".join(f"{k:>17}" for k in summaries)] + rows("pass@1")
            + [f"({some['problems']} held-out problems x {some['samples']} samples)",
               "mean share of tests passed (%) by the current program (partial credit):"]
            + rows("mean_test_pass_rate"))


def step_seconds(out) -> dict:
    """Seconds per demo step from OUT/step_seconds.tsv (demo.sh appends `step<TAB>seconds` as each step
    finishes; a step run in parts, interrupted then resumed, is summed), in the order the steps ran."""
    path = Path(out) / "step_seconds.tsv"
    seconds = {}
    if path.exists():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            name, _, value = line.partition("\t")
            if not value.strip().isdigit():
                raise ValueError(f"{path} line {n} is not `step<TAB>seconds`: {line!r}")
            seconds[name] = seconds.get(name, 0) + int(value)
    return seconds


def train_phase_seconds(steps: list[dict]) -> dict:
    """train.py's own phases summed over the steps (metrics.jsonl): sampling, running programs in the
    sandbox, log-probs, the update, the weight sync, and whole steps."""
    keys = ("generate_s", "execute_s", "logprob_s", "update_s", "sync_s", "step_s")
    return {k: round(sum(m.get(k, 0.0) for m in steps), 1) for k in keys if any(k in m for m in steps)}


def time_lines(steps_s: dict, train_s: dict) -> list[str]:
    """Where the demo's time went: each step, then the training step's phases."""
    lines = ["time per step (s): " + ", ".join(f"{k} {v}" for k, v in steps_s.items())
             + f"; total {sum(steps_s.values())}"] if steps_s else []
    if train_s:
        lines.append("training phases summed over steps (s): " + ", ".join(f"{k[:-2]} {v}" for k, v in train_s.items()))
    return lines


def demo_summary(out) -> str:
    """The demo's closing report: held-out Pass@1 per turn before/after training (and with perturbed
    feedback), the paired change over problems with its standard error, the training reward's rise from
    the first to the last quarter of the steps, and where the files are. Writes OUT/learning.png
    (reward per step; Pass@1 per turn before/after) and OUT/pass_at_1_demo.png."""
    out = Path(out)
    runs = {"before": out / "eval_before", "after": out / "eval_after", "after, perturbed": out / "eval_after_ptb",
            "before, perturbed": out / "eval_before_ptb"}
    summaries = {k: json.loads((d / "summary.json").read_text()) for k, d in runs.items() if (d / "summary.json").exists()}
    lines = ["", "=" * 72, "COBALT demo: held-out Pass@1 (%) per turn", "=" * 72]
    if summaries:
        lines += runs_table(summaries)
        plot_pass_at_1({k: s["pass@1"] for k, s in summaries.items()}, out / "pass_at_1_demo.png",
                       title="Held-out Pass@1, before and after COBALT",
                       errors={k: s["pass@1_se"] for k, s in summaries.items() if "pass@1_se" in s},
                       note=f"{next(iter(summaries.values()))['problems']} problems; bars: s.e. over problems")
        lines.append("")
        lines.append("what feedback did (gain over turn 0 paired over problems; programs repaired / broken per turn):")
        for k, s in summaries.items():
            if s.get("turn_changes"):
                lines += [f"  {k}: {line}" for line in feedback_lines(s["gain_over_turn0"], s["turn_changes"])]
            if s.get("wrong_feedback"):
                lines += [f"  {k}: {line}" for line in wrong_feedback_text(s["wrong_feedback"]).splitlines()]
    records = {k: read_jsonl(runs[k] / "trajectories.jsonl") for k in ("before", "after")
               if (runs[k] / "trajectories.jsonl").exists()}
    result = {}
    if len(records) == 2 and "before" in summaries:
        n_turns = len(summaries["before"]["pass@1"])
        change = paired_change(records["before"], records["after"], n_turns)
        result["pass1_change"] = change
        lines.append("")
        lines.append(f"Pass@1 averaged over the {n_turns} turns, paired over {change['problems']} problems: "
                     f"{change['before']:.1f} -> {change['after']:.1f}, change {change['change']:+.1f} points "
                     f"(standard error {change['se']:.1f}; {change['improved']} problems better, {change['worse']} worse)")
    steps = read_jsonl(out / "train" / "metrics.jsonl")
    if steps:
        trend = reward_trend(steps)
        result["reward_trend"] = trend
        lines.append(f"training reward: first quarter ({trend['quarter']} steps) {trend['first_quarter']:+.3f}, last "
                     f"quarter {trend['last_quarter']:+.3f}: {trend['rise']:+.3f}")
        lines.append("")
        lines.append("training: step, mean reward, pass rate of sampled programs, share without code")
        for m in steps:
            lines.append(f"  step {m['step']:>3}: reward {m['reward_mean']:+.3f}  pass rate {m['pass_rate']:.3f}  "
                         f"no code {m['no_code']:.2f}")
        if "pass1_change" in result:
            plot_learning(steps, summaries["before"], summaries["after"], out / "learning.png",
                          pass1_se_per_turn(records["before"], n_turns), pass1_se_per_turn(records["after"], n_turns))
    times = {"step_seconds": step_seconds(out), "train_phase_seconds": train_phase_seconds(steps)}
    if any(times.values()):
        result.update(times)
        lines += [""] + time_lines(times["step_seconds"], times["train_phase_seconds"])
    if result:
        (out / "learning.json").write_text(json.dumps(result, indent=2))
    stats = out / "collect" / "stats.json"
    if stats.exists():
        st = json.loads(stats.read_text())
        lines.append(f"collection: {st['problems']} problems, {st['dropped_all_pass']} dropped (all first programs "
                     f"pass), {st['trajectories_kept']} trajectories kept, {st['contexts']} contexts")
    lines.append("")
    lines.append("files:")
    for name in ["eval_before/summary.json", "eval_before/trajectories.jsonl", "collect/raw.jsonl",
                 "collect/contexts.jsonl", "collect/perturbed_contexts.jsonl", "train/metrics.jsonl", "train/final",
                 "eval_after/summary.json", "eval_after_ptb/hacking_report.json", "learning.png", "learning.json",
                 "pass_at_1_demo.png"]:
        if (out / name).exists():
            lines.append(f"  {out / name}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cobalt_min.demos.demo_summary",
                                 description="Print the closing summary of a demo.sh run (demo.sh prints it itself).")
    ap.add_argument("demo_out", help="the demo's output folder (DEMO_OUT, default demo_out)")
    args = ap.parse_args(argv)
    if not (Path(args.demo_out) / "eval_before" / "summary.json").exists():
        raise SystemExit(f"error: {args.demo_out} is not a demo's output folder (no eval_before/summary.json): this "
                         "summarises what demo.sh wrote; python -m cobalt_min.report makes a page of any runs")
    print(demo_summary(args.demo_out))


if __name__ == "__main__":
    main()
