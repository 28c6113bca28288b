"""Run one of the repository's scripts (argv[1], its flags after it) with a fault injected, for the tests of
what a fault must not do:
- FAULT=rank (tests/test_problem_shards.py): on the rank named by FAIL_RANK, the rollout of that rank's
  second block of problems raises, as an engine out of memory would. Every other rank runs the real script.
- FAULT=sandbox (tests/test_infra_errors.py): every response's program is `print(1)` (a random model writes
  none), and the sandbox fails on the first program of every batch it judges, as one whose runner died on
  both tries does (sandbox.InfraFailure). Everything else is real: the other programs run in the sandbox."""
import os
import runpy
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cobalt_min.prompts  # noqa: E402  (patched before anything imports what is patched)

if os.environ["FAULT"] == "sandbox":
    cobalt_min.prompts.extract_code = lambda text: "print(1)"
    import cobalt_min.sandbox.verdicts  # noqa: E402  (where run_programs calls run_batch)
    real_run_batch = cobalt_min.sandbox.verdicts.run_batch

    def failing_run_batch(jobs, **kw):
        results = real_run_batch(jobs, **kw)
        results[0] = cobalt_min.sandbox.InfraFailure("the sandbox runner died (injected by tests/inject_fault.py)")
        return results
    cobalt_min.sandbox.verdicts.run_batch = failing_run_batch
elif os.environ["FAULT"] == "rank" and os.environ["RANK"] == os.environ["FAIL_RANK"]:
    import cobalt_min.rollout  # noqa: E402
    real_rollout, calls = cobalt_min.rollout.rollout, []

    def failing_rollout(*args, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("CUDA out of memory (injected by tests/inject_fault.py)")
        return real_rollout(*args, **kw)
    cobalt_min.rollout.rollout = failing_rollout  # before the script imports it
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
