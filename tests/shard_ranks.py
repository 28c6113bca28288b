"""Run collect.py or evaluate.py (argv[1], its flags after it) with a fault injected on one rank, for
tests/test_problem_shards.py: on the rank named by FAIL_RANK, the rollout of that rank's second block of
problems raises, as an engine out of memory would. Every other rank runs the real script."""
import os
import runpy
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cobalt_min.rollout  # noqa: E402

real_rollout = cobalt_min.rollout.rollout
calls = 0


def failing_rollout(*args, **kw):
    global calls
    calls += 1
    if calls == 2:
        raise RuntimeError("CUDA out of memory (injected by tests/shard_ranks.py)")
    return real_rollout(*args, **kw)


if os.environ["RANK"] == os.environ["FAIL_RANK"]:
    cobalt_min.rollout.rollout = failing_rollout  # before the script imports it
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
