"""Run untrusted, model-written Python programs against test cases, safely and fast.

    results = run_tests(program, {"inputs": ["1 2\n"], "outputs": ["3\n"]})   # list[TestResult]
    batches = run_batch([(program, tests), ...], workers=2, progress=True)    # one list per job
    python -m cobalt_min.sandbox solution.py tests.json [--timeout 4] [--memory-mb 1024]

What it guarantees (in the bwrap and process modes; docs/sandbox.md says how, and what each mode gives):
- a program sees no network, no file of yours, no environment, no earlier program and not its own
  expected outputs (the grader compares, in your process); nothing it leaves (files, processes, shared
  memory, keys) reaches the next test;
- every test has its wall clock, CPU time, memory, processes and output bounded, and a program that kills
  or freezes the sandbox costs its own test only;
- a failure of the sandbox itself is a SandboxError (or, in batches, an InfraFailure that callers leave out
  of rewards and Pass@1), never a verdict;
- no mode ever falls back to a weaker one: 'unsafe' (limits only) runs only when asked for by name.
What it does not: protect against kernel exploits (bubblewrap is not a VM), keep timings exact on a loaded
machine, or close the page-cache channel between programs (docs/sandbox.md measures it).

The package: verdicts.py decides verdicts (by a grader profile's rules: graders.py) and holds what callers
use; process.py starts the runner processes and talks to them, isolation.py chooses and builds their
isolation (bubblewrap, namespaces, cgroups, uid leases); runner.py with jail.py is the one program that
lives inside the sandbox; types.py the shared vocabulary. Imports run one way, in that order. A reader of
the paper needs only the names below.
"""

from cobalt_min.sandbox.isolation import (CGROUP_SLACK_MB, ISOLATIONS, SANDBOX_UID_BASE, UNSAFE_ENV, bwrap_available,
                                          cgroup_support, require_safe_sandbox, resolve_isolation)
from cobalt_min.sandbox.process import imported_modules
from cobalt_min.sandbox.types import OUT_OF_TIME, STATUSES, InfraFailure, Limits, SandboxError, TestResult
from cobalt_min.sandbox.verdicts import (Sandbox, default_workers, grade_test, pass_rate, run_batch, run_programs,
                                         run_tests, waited_out)

__all__ = ["run_tests", "run_batch", "run_programs", "pass_rate", "require_safe_sandbox", "default_workers",
           "Sandbox", "grade_test", "waited_out", "imported_modules", "TestResult", "InfraFailure", "SandboxError",
           "Limits", "STATUSES", "OUT_OF_TIME", "ISOLATIONS", "resolve_isolation", "bwrap_available",
           "cgroup_support", "SANDBOX_UID_BASE", "CGROUP_SLACK_MB", "UNSAFE_ENV"]
