"""How the base model does on the self-repair demo family, kind by kind: the measurement that chose it.

    python evaluate.py --model demo_out/smollm2 --problems FAMILY.jsonl --turns 3 --samples 4 \
        --max-new-tokens 128 --stop-after-code --engine hf --out runs/family_base
    python bench/repair_family.py runs/family_base

FAMILY.jsonl: the demo set's "repair function" problems (`python -m cobalt_min.problems split demo
--difficulty "repair function" ...`). Prints, per kind of open detail (make_demo.DETAIL_KIND) and in all:
Pass@1 at each turn, and the repairs and breaks at each feedback turn (metrics.turn_changes); per
problem, the share solved at each turn. A kind whose repair rate is zero leaves GRPO nothing to reinforce.
"""

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cobalt_min.data.make_demo import DETAIL_KIND  # noqa: E402
from cobalt_min.jsonl import read_jsonl  # noqa: E402
from cobalt_min.metrics import feedback_lines, gain_over_turn0, solved_share, summarize, turn_changes  # noqa: E402


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="an evaluate.py --out folder (its trajectories.jsonl)")
    run = ap.parse_args(argv).run
    records = read_jsonl(Path(run) / "trajectories.jsonl")
    if not records:
        raise SystemExit(f"error: no trajectories in {run}")
    n_turns = max(len(s["turns"]) for r in records for s in r["samples"])
    by_kind = collections.defaultdict(list)
    for r in records:
        by_kind[DETAIL_KIND.get(r["problem_id"], "other")].append(r)
    for kind, recs in sorted(by_kind.items()) + [("all", records)]:
        s = summarize(recs, n_turns)
        print(f"{kind:10s} {len(recs):2d} problems  Pass@1 per turn: " + " / ".join(f"{p:.1f}" for p in s["pass@1"]))
        for line in feedback_lines(gain_over_turn0(recs, n_turns), turn_changes(recs, n_turns)):
            print(f"{'':14s}{line}")
    print("\nper problem, share solved at each turn:")
    for r in sorted(records, key=lambda r: (DETAIL_KIND.get(r["problem_id"], "other"), r["problem_id"])):
        shares = " ".join(f"{solved_share(r, t):.2f}" for t in range(n_turns))
        print(f"  {DETAIL_KIND.get(r['problem_id'], 'other'):10s} {r['problem_id']:28s} {shares}")


if __name__ == "__main__":
    main()
