"""Hostile programs against both isolation modes. The programs run from tests/hostile_programs.py in
a throw-away pid namespace (`unshare --pid --fork --mount-proc`): whatever escapes the sandbox dies
with that namespace and cannot signal anything on the machine running the tests."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import hostile_programs
from cobalt_min import sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = hostile_programs.TIMEOUT
MARGIN = 2.5  # what a hostile program may cost beyond its timeouts (runner restart, kill, reporting)


USER = 1000  # the non-root grader of the "bwrap-user" runs


def _run_harness(mode, tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("hostile-program tests need root and unshare, to run inside a throw-away pid namespace")
    isolation, as_user = {"bwrap": ("bwrap", None), "process": ("process", None), "bwrap-user": ("bwrap", USER)}[mode]
    if isolation == "bwrap" and not sandbox.bwrap_available():
        pytest.skip("bubblewrap is not available here")
    if as_user is None:
        canary = tmp_path_factory.mktemp(f"canary-{mode}")
    else:  # a folder the non-root grader can reach, holding a file it owns (so only the sandbox protects it)
        canary = Path(tempfile.mkdtemp(prefix="cobalt-canary-"))
        os.chown(canary, as_user, as_user)
    os.chmod(canary, 0o755)
    (canary / "canary.txt").write_text("original")
    if as_user is not None:
        os.chown(canary / "canary.txt", as_user, as_user)
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, os.path.join(HERE, "hostile_programs.py"),
           "--isolation", isolation, str(canary)]
    if as_user is not None:
        cmd[-1:-1] = ["--as-user", str(as_user)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), canary


@pytest.fixture(scope="module", params=["bwrap", "process", "bwrap-user"])
def hostile(request, tmp_path_factory):
    run, canary = _run_harness(request.param, tmp_path_factory)
    yield run, canary
    if request.param == "bwrap-user":  # (its canary is outside pytest's folders, which pytest prunes itself)
        shutil.rmtree(canary, ignore_errors=True)


def _statuses(run, name):
    return [r["status"] for r in run[name]["results"]]


def _check_contained(run, name, n_tests=2, margin=MARGIN):
    """Judged, did not disturb the next program, left no process behind, cost bounded time."""
    case = run[name]
    assert [r["status"] for r in case["after"]] == ["passed"], (name, case["after"])
    assert [r["status"] for r in case["after_wrong"]] == ["wrong_answer"], (name, case["after_wrong"])
    assert case["leftover"] == [], (name, case["leftover"])
    assert case["elapsed_s"] < n_tests * TIMEOUT + margin, (name, case["elapsed_s"])


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


def test_cli_tests_file_and_demo_data_are_out_of_reach(hostile):
    run, _ = hostile
    [r] = run["cli_hunt"]["results"]
    assert r["status"] == "wrong_answer" and r["stdout"].startswith("not found"), run["cli_hunt"]


def test_no_process_a_test_reaches_holds_a_channel_to_the_grader(hostile):
    # Forged jobs and a flood written to every descriptor of every process the program can open: the
    # next programs are judged on their own output.
    run, _ = hostile
    assert _statuses(run, "forge_grader_job") == ["passed", "passed"]
    _check_contained(run, "forge_grader_job")


def test_nothing_a_test_allocates_outlives_it(hostile):
    run, _ = hostile
    assert _statuses(run, "leave_ipc_and_shm") == ["passed", "passed"], run["leave_ipc_and_shm"]["results"]
    _check_contained(run, "leave_ipc_and_shm", n_tests=2)


def test_a_poisoned_scratch_folder_is_restored(hostile):
    run, _ = hostile
    assert _statuses(run, "poison_scratch") == ["passed"] * 10, run["poison_scratch"]["results"]
    _check_contained(run, "poison_scratch", n_tests=10)


def test_nothing_outside_the_scratch_folder_is_writable(hostile):
    run, _ = hostile
    assert _statuses(run, "plant_outside") == ["passed", "passed"], run["plant_outside"]["results"]
    _check_contained(run, "plant_outside")


def test_no_state_survives_in_the_kernel_keyring(hostile):
    run, _ = hostile
    results = run["keyring_cache"]["results"]
    assert [r["stdout"] for r in results] == ["blocked\n", "absent\n"], results
    _check_contained(run, "keyring_cache")


# ----------------------------------------------------------------------------- the second red team


def test_a_test_that_stops_its_clock_still_times_out(hostile):
    # It stops its parent (and pid 1), works past its limit, prints the right answer, and has a helper
    # resume the parent: whatever it stopped, the measured time decides.
    run, _ = hostile
    assert _statuses(run, "stop_the_clock") == ["timeout", "timeout"], run["stop_the_clock"]["results"]
    _check_contained(run, "stop_the_clock", n_tests=2)


def test_memory_is_bounded_for_all_processes_of_a_test_together(hostile):
    # 12 processes x 90 MiB, each under the 256 MiB per-process limit, 1080 MiB together. With a cgroup
    # (root here) the test ends memory_limit and the machine's available memory drops by about the limit +
    # the sandbox's slack (320 MiB) plus what the sandbox's own processes take (measured 97-380 MiB in all
    # on CI-like machines); without one (no delegated cgroup for a non-root grader) the per-process limit
    # is all there is, as docs/sandbox.md says, and it drops by most of the 1080 MiB. The machine-wide figure is
    # noisy, so the line between the two lies halfway.
    run, _ = hostile
    case = run["memory_together"]
    bound = hostile_programs.MEMORY_MB + sandbox.CGROUP_SLACK_MB
    line = (bound + hostile_programs.TOGETHER_PROCS * hostile_programs.TOGETHER_MB) / 2
    if run["_cgroup"]:
        assert _statuses(run, "memory_together") == ["memory_limit"], case["results"]
        assert case["memory_drop_mb"] < line, case["memory_drop_mb"]
    else:
        assert _statuses(run, "memory_together") == ["passed"] and case["memory_drop_mb"] > line, case
    _check_contained(run, "memory_together", n_tests=4)  # (its timeout is 4 s: writing 1080 MiB takes a while)


def test_the_test_runner_cannot_be_reached_or_interrupted(hostile):
    run, _ = hostile
    assert _statuses(run, "reach_pid_1") == ["passed"], run["reach_pid_1"]["results"]
    assert _statuses(run, "interrupt_pid_1") == ["passed", "passed"], run["interrupt_pid_1"]["results"]
    _check_contained(run, "reach_pid_1", n_tests=1)


def test_a_leftover_writer_cannot_hand_answers_to_the_next_program(hostile):
    run, _ = hostile
    first, *later = run["leftover_writer"]["jobs"]
    assert [r["status"] for r in first] == ["passed"]
    for results in later:
        assert [(r["status"], r["stdout"]) for r in results] == [("wrong_answer", "none\n")], later
    assert run["leftover_writer"]["leftover"] == []


def test_counters_and_attributes_carry_nothing_between_programs(hostile):
    # Inode numbers of new files (scratch folder, /dev/shm), pid numbers, extended attributes: a program
    # sees the same whatever the one before it did.
    run, _ = hostile
    before, spoil, after = run["side_channels"]["jobs"]
    assert before[0]["stdout"] == after[0]["stdout"], (before[0]["stdout"], after[0]["stdout"])
    assert "no-xattr" in after[0]["stdout"]


# ----------------------------------------------------------------------------- the third red team


def test_no_program_finds_an_earlier_programs_source_in_its_memory(hostile):
    # A test is a fork of the process that received its job: that process must never have held the source
    # of an earlier program, freed or not.
    run, _ = hostile
    finds = [results[0]["stdout"] for results in run["previous_source"]["jobs"][1::2]]
    assert finds == ["none\n"] * len(hostile_programs.SOURCE_LENGTHS), finds
    assert all(results[0]["status"] == "passed" for results in run["previous_source"]["jobs"][::2])


def test_network_state_carries_nothing_between_programs(hostile):
    # Connections left in TIME_WAIT and the network counters: a fresh network namespace per program.
    run, _ = hostile
    before, spoil, after = run["network_state"]["jobs"]
    assert spoil[0]["status"] == "passed", spoil
    assert before[0]["stdout"] == after[0]["stdout"], (before[0]["stdout"], after[0]["stdout"])


def test_the_page_cache_cannot_be_evicted_or_probed_without_blocking(hostile):
    run, _ = hostile
    assert _statuses(run, "page_cache_channel") == ["passed"], run["page_cache_channel"]["results"]


def test_memory_outside_the_address_space_is_refused_or_counted(hostile):
    run, _ = hostile
    assert _statuses(run, "nested_namespaces") == ["passed"], run["nested_namespaces"]["results"]
    assert _statuses(run, "socket_buffers") == ["passed"], run["socket_buffers"]["results"]
    # About 1 GiB of memory files: with a cgroup the sandbox's memory limit holds and the verdict says so,
    # whichever process the kernel chose to kill; without one, docs/sandbox.md's per-process bound is all there is.
    expected = ["memory_limit"] if run["_cgroup"] else ["passed"]
    assert _statuses(run, "memfd_hoard") == expected, run["memfd_hoard"]["results"]
    for name in ("nested_namespaces", "socket_buffers"):
        _check_contained(run, name)
    # The kernel freeing ~1 GiB of memory files after the kill took 21-22 s in 2 of 6 runs on a 2-core VM (in
    # process mode, the machine idle after long runs), well under a second otherwise: bounded, not by the timeout.
    _check_contained(run, "memfd_hoard", margin=30.0)


def test_a_busy_neighbour_does_not_time_out_correct_programs(hostile):
    # 57 busy processes, each in a session of its own, on one worker; six correct programs needing 0.3 s of
    # CPU each on the other, with a 1.5 s limit.
    run, _ = hostile
    case = run["noisy_neighbours"]
    assert [r["status"] for r in case["hog"]] == ["timeout"] * 3, case["hog"]
    assert [results[0]["status"] for results in case["correct"]] == ["passed"] * 6, case["correct"]


def test_a_transient_fault_is_a_sandbox_error_never_a_weaker_sandbox(hostile):
    # Process mode: the first sandbox meets a full TMPDIR (an infrastructure failure: an error, not six
    # runtime_error verdicts); once the fault is gone, the next sandbox isolates as ever.
    run, _ = hostile
    if "grader_fault" not in run:
        pytest.skip("a full TMPDIR concerns the process mode only")
    case = run["grader_fault"]
    assert str(case.get("first")).startswith("SandboxError"), case
    assert case.get("second") == ["blocked\n"], case


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_stopped_grader_leaves_no_cgroup_or_folder(hostile, signame):
    run, _ = hostile
    case = run["stopped"][signame]
    assert case["cgroups_left"] == [] and case["tmp_left"] == [], case
    if run["_cgroup"]:  # (one cgroup per sandbox, a folder per controller)
        assert len({os.path.basename(c) for c in case["cgroups_made"]}) == 2, case
    assert case["stop_s"] < 15, case
