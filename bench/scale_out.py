"""How long collect.py and evaluate.py take on N nodes of G GPUs at the paper's settings: arithmetic that
follows the code (cobalt_min/problem_shards.py), not a measurement. Each GPU is one rank with its own
engine; the problems are dealt to the ranks in blocks of --batch-problems; within a block each turn is one
generate call and then one sandbox batch, one after the other, on the rank's share of the node's cores.

    python bench/scale_out.py                                  # collection: TACO train, 16 x 3 programs
    python bench/scale_out.py --what evaluate --problems 175 --samples 16 --turns 9 --tokens 4000
    python bench/scale_out.py --nodes 2 --gpus 8 --tokens-per-s 9000

The assumed rates are flags: --tokens-per-s (one engine's decode throughput at a large batch; 9,000 is
what "0.8B tokens in about a day on one H100" in docs/full_scale.md means), --test-s (a test's wall time
in the sandbox, per core), --tests (tests per program run: public for feedback + all for the score).
"""

import argparse
import math


def estimate(a) -> dict:
    ranks = a.nodes * a.gpus
    programs = a.problems * a.samples * a.turns
    blocks = math.ceil(a.problems / a.batch_problems)
    blocks_per_rank = math.ceil(blocks / ranks)  # the slowest rank's share (round-robin by position)
    programs_per_rank = min(blocks_per_rank * a.batch_problems, a.problems) * a.samples * a.turns
    generate_s = programs_per_rank * a.tokens / a.tokens_per_s
    cores_per_rank = max(1, a.cores // a.gpus)
    execute_s = programs_per_rank * a.tests * a.test_s / cores_per_rank
    return {"ranks": ranks, "programs": programs, "tokens": programs * a.tokens, "blocks": blocks,
            "blocks_per_rank": blocks_per_rank, "generate_h": generate_s / 3600, "execute_h": execute_s / 3600,
            "total_h": (generate_s + execute_s) / 3600}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--what", choices=["collect", "evaluate"], default="collect")
    ap.add_argument("--problems", type=int, default=5800, help="TACO train after cleaning (about 5.8k)")
    ap.add_argument("--samples", type=int, default=16, help="trajectories (collect) or samples (evaluate)")
    ap.add_argument("--turns", type=int, default=3, help="programs per conversation")
    ap.add_argument("--tokens", type=int, default=3000, help="mean tokens per response (a thinking 8B model)")
    ap.add_argument("--batch-problems", type=int, default=8)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--gpus", type=int, default=8, help="GPUs (ranks) per node")
    ap.add_argument("--cores", type=int, default=96, help="CPU cores per node (the sandbox's)")
    ap.add_argument("--tokens-per-s", type=float, default=9000.0, help="one engine's decode throughput")
    ap.add_argument("--tests", type=int, default=30, help="tests run per program")
    ap.add_argument("--test-s", type=float, default=0.05, help="seconds per test per core")
    a = ap.parse_args(argv)
    e = estimate(a)
    print(f"{a.what}: {a.problems} problems x {a.samples} x {a.turns} programs = {e['programs']:,} programs, "
          f"{e['tokens'] / 1e9:.2f}B tokens")
    print(f"{a.nodes} node(s) x {a.gpus} GPUs = {e['ranks']} ranks; {e['blocks']} blocks of {a.batch_problems} "
          f"problems, at most {e['blocks_per_rank']} per rank")
    print(f"per rank: generation {e['generate_h']:.1f} h + sandbox {e['execute_h']:.1f} h "
          f"({max(1, a.cores // a.gpus)} cores) = {e['total_h']:.1f} h wall clock")
    one = estimate(argparse.Namespace(**{**vars(a), "nodes": 1, "gpus": 1, "cores": max(1, a.cores // a.gpus)}))
    print(f"one GPU with the same cores per rank: {one['total_h']:.1f} h ({one['total_h'] / e['total_h']:.1f}x)")


if __name__ == "__main__":
    main()
