"""Hostile programs against both isolation modes. The programs run from tests/hostile_programs.py in
a throw-away pid namespace (`unshare --pid --fork --mount-proc`): whatever escapes the sandbox dies
with that namespace and cannot signal anything on the machine running the tests."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from cobalt_min import sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 1.0  # hostile_programs.TIMEOUT
MARGIN = 2.5  # what a hostile program may cost beyond its timeouts (runner restart, kill, reporting)


def _run_harness(isolation, tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("hostile-program tests need root and unshare, to run inside a throw-away pid namespace")
    if isolation == "bwrap" and not sandbox.bwrap_available():
        pytest.skip("bubblewrap is not available here")
    canary = tmp_path_factory.mktemp(f"canary-{isolation}")
    os.chmod(canary, 0o755)
    (canary / "canary.txt").write_text("original")
    proc = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable,
                           os.path.join(HERE, "hostile_programs.py"), "--isolation", isolation, str(canary)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), canary


@pytest.fixture(scope="module", params=["bwrap", "process"])
def hostile(request, tmp_path_factory):
    return _run_harness(request.param, tmp_path_factory)


def _statuses(run, name):
    return [r["status"] for r in run[name]["results"]]


def _check_contained(run, name, n_tests=2):
    """Judged, did not disturb the next program, left no process behind, cost bounded time."""
    case = run[name]
    assert [r["status"] for r in case["after"]] == ["passed"], (name, case["after"])
    assert case["leftover"] == [], (name, case["leftover"])
    assert case["elapsed_s"] < n_tests * TIMEOUT + MARGIN, (name, case["elapsed_s"])


@pytest.mark.parametrize("name", ["infinite_loop", "sleep", "ignore_sigalrm", "catch_base_exception",
                                  "fork_bomb", "lingering_thread"])
def test_programs_that_never_finish_time_out(hostile, name):
    run, _ = hostile
    assert _statuses(run, name) == ["timeout", "timeout"]
    for r in run[name]["results"]:
        assert TIMEOUT * 0.9 <= r["time_s"] < TIMEOUT + 0.5
    _check_contained(run, name)


def test_filling_the_process_limit_does_not_starve_the_next_test(hostile):
    run, _ = hostile
    assert _statuses(run, "fill_process_limit") == ["passed"] * 4, run["fill_process_limit"]["results"]
    _check_contained(run, "fill_process_limit", n_tests=4)


def test_memory_bombs(hostile):
    run, _ = hostile
    assert _statuses(run, "memory_bomb") == ["memory_limit", "memory_limit"]
    # Growing to the limit costs real page faults; on a slow machine it may hit the clock first.
    assert set(_statuses(run, "memory_growth")) <= {"memory_limit", "timeout"}
    _check_contained(run, "memory_bomb")
    _check_contained(run, "memory_growth")


@pytest.mark.parametrize("name", ["daemon_child", "subprocess_holding_stdout", "daemon_thread"])
def test_detached_children_neither_block_nor_survive(hostile, name):
    run, _ = hostile
    assert _statuses(run, name) == ["passed", "passed"]  # the answer is right; the test is not held open
    for r in run[name]["results"]:
        assert r["time_s"] < 0.5
    _check_contained(run, name)


def test_huge_output_and_closed_stdout(hostile):
    run, _ = hostile
    assert _statuses(run, "huge_output") == ["output_limit", "output_limit"]
    assert all(len(r["stdout"]) < 10_000 for r in run["huge_output"]["results"])
    assert _statuses(run, "closed_stdout") == ["runtime_error", "runtime_error"]
    _check_contained(run, "huge_output")
    _check_contained(run, "closed_stdout")


def test_files_outside_the_sandbox_are_untouched(hostile):
    run, canary = hostile
    assert _statuses(run, "write_outside") == ["passed", "passed"]
    assert _statuses(run, "delete_outside") == ["passed", "passed"]
    assert (canary / "canary.txt").read_text() == "original"
    assert sorted(os.listdir(canary)) == ["canary.txt"]
    assert not os.path.exists("/pwned") and not os.path.exists("/usr/pwned")


def test_environment_secrets_do_not_leak(hostile):
    run, _ = hostile
    assert _statuses(run, "read_env_secrets") == ["wrong_answer", "wrong_answer"]
    out = "".join(r["stdout"] for r in run["read_env_secrets"]["results"])
    assert "PATH" in out  # the program did print its environment...
    assert run["_secret"] not in out  # ...but the grader's secret is not in it


def test_no_network(hostile):
    run, _ = hostile
    assert all(r["stdout"].startswith("blocked") for r in run["network"]["results"]), run["network"]
    assert run["_connections"] == 0


@pytest.mark.parametrize("name", ["kill_parent", "kill_everything", "stop_parent"])
def test_signalling_the_sandbox_costs_one_test_only(hostile, name):
    run, _ = hostile
    first, second = run[name]["results"]
    assert not first["passed"] and first["status"] in ("runtime_error", "timeout")
    assert second["status"] == "passed"  # the runner was replaced and went on
    _check_contained(run, name)


def test_os_exit_segfault_recursion_eof(hostile):
    run, _ = hostile
    assert _statuses(run, "os_exit") == ["passed", "runtime_error"]  # os._exit(0) after a flush is fine
    assert _statuses(run, "segfault") == ["runtime_error", "runtime_error"]
    assert set(_statuses(run, "deep_recursion")) <= {"runtime_error", "timeout", "memory_limit"}
    assert _statuses(run, "read_past_eof") == ["runtime_error", "runtime_error"]
    assert "EOFError" in run["read_past_eof"]["results"][0]["stderr"]
    for name in ["os_exit", "segfault", "deep_recursion", "read_past_eof"]:
        _check_contained(run, name)


def test_expected_output_cannot_be_found(hostile):
    run, _ = hostile
    [r] = run["hunt_expected"]["results"]
    assert r["status"] == "wrong_answer" and r["stdout"].startswith("not found"), r


def test_nothing_left_running(hostile):
    run, _ = hostile
    assert run["_leftover"] == []
