"""Jobs on one worker are independent: no job can run another job's code, leave anything for a later job,
or break the run dir for it; a job's verdicts do not depend on which jobs ran before it. Both isolation
modes (each `sandbox` fixture has one worker, so every job here runs on the same worker)."""

from __future__ import annotations

import os

import pytest
from hostile_jobs import (
    ATTACKS,
    DEEP_TREE,
    FILL_AND_LOCK,
    PROBES,
    RUN_DIR_READ_ONLY,
    SECRET,
    SIBLING,
    STASH_IN_LOCKED_DIR,
    STASH_IN_READONLY_RUN_DIR,
    STASH_IN_RUN_DIR_METADATA,
    STASH_IN_SHARED_MEMORY,
    STASH_READER,
    THIEF,
    WRITER,
    WRITER_TEST,
)
from sandbox_helpers import asserts, make_sandbox

from coral.sandbox import Job


def _run(sandbox, code: str, test: str, timeout_s: float = 5.0):
    return sandbox.run(code, asserts(test), entry_point="f", timeout_s=timeout_s)


def test_a_program_cannot_find_a_sibling_jobs_code(sandbox):
    assert _run(sandbox, SIBLING, f"assert candidate() == {SECRET!r}").passed
    result = _run(sandbox, THIEF, f"assert candidate() == {SECRET!r}")
    assert result.tests[0].verdict == "fail", result


def test_a_stdio_program_cannot_find_a_sibling_jobs_code(sandbox):
    from coral.trajectory import TestCase

    assert _run(sandbox, SIBLING, f"assert candidate() == {SECRET!r}").passed
    result = sandbox.run(THIEF + "\nprint(f())\n", [TestCase("stdio", expected_stdout=SECRET)], timeout_s=5.0)
    assert result.tests[0].verdict == "fail", result


@pytest.mark.parametrize("stasher", [STASH_IN_LOCKED_DIR, STASH_IN_READONLY_RUN_DIR, STASH_IN_SHARED_MEMORY,
                                     STASH_IN_RUN_DIR_METADATA],
                         ids=["locked_dir", "read_only_run_dir", "shared_memory", "run_dir_metadata"])
def test_a_program_cannot_stash_answers_for_a_later_job(sandbox, stasher):
    _run(sandbox, stasher, "assert candidate() == 1")
    result = _run(sandbox, STASH_READER, f"assert candidate() == {SECRET!r}")
    assert result.tests[0].verdict != "pass", result


def _leaves_a_mess_for_nobody(sandbox, breaker: str, chmods: bool = False) -> None:
    first = _run(sandbox, breaker, "assert candidate() == 1")
    if chmods and sandbox.isolation == "none":  # the fallback denies chmod (Landlock cannot confine it)
        assert first.tests[0].verdict == "error" and "PermissionError" in first.tests[0].message, first
    else:
        assert first.passed, first  # it is a correct program: leaving a mess is not an infrastructure failure
    assert _run(sandbox, WRITER, WRITER_TEST).passed


def test_a_read_only_run_dir_does_not_reach_the_next_job(sandbox):
    _leaves_a_mess_for_nobody(sandbox, RUN_DIR_READ_ONLY, chmods=True)


def test_a_tree_too_deep_for_recursion_does_not_break_the_worker(bwrap_sandbox):
    _leaves_a_mess_for_nobody(bwrap_sandbox, DEEP_TREE)


@pytest.mark.slow  # the fallback's run dir is on the host disk, where removing a deep tree takes seconds
def test_a_tree_too_deep_for_recursion_does_not_break_the_fallback_worker():
    sandbox = make_sandbox("none")
    try:
        _leaves_a_mess_for_nobody(sandbox, DEEP_TREE)
    finally:
        sandbox.close()


def test_a_full_and_locked_run_dir_is_fresh_for_the_next_job(bwrap_sandbox):
    # bwrap only: in the fallback the run dir is on the host disk, which this would fill
    assert _run(bwrap_sandbox, FILL_AND_LOCK, "assert candidate() == 1").passed
    assert _run(bwrap_sandbox, WRITER, WRITER_TEST).passed


# the fallback's run dir is on the host disk: a deep tree takes seconds to remove there
@pytest.mark.parametrize("isolation", ["bwrap", pytest.param("none", marks=pytest.mark.slow)])
def test_the_verdicts_of_a_job_do_not_depend_on_the_jobs_before_it(isolation):
    probes = [Job(code, asserts(test), "f", timeout_s=5.0) for _, code, test in PROBES]
    attacks = [Job(code, asserts(test), "f", timeout_s=5.0) for _, code, test in ATTACKS]
    fresh = make_sandbox(isolation)
    try:
        alone = [fresh.run_many([probe])[0] for probe in probes]
    finally:
        fresh.close()
    used = make_sandbox(isolation)
    try:
        used.run_many(attacks)  # one worker: every attack runs before the probes, on the same worker
        after = [used.run_many([probe])[0] for probe in probes]
    finally:
        used.close()
    verdicts = [[t.verdict for t in r.tests] for r in alone]
    assert verdicts == [["fail"], ["fail"], ["pass"], ["pass"], ["fail"]], alone
    assert [[t.verdict for t in r.tests] for r in after] == verdicts, after


def test_shared_memory_segments_cannot_be_created(sandbox):
    assert os.environ.get("CORAL_SANDBOX_FORCE_FALLBACK") != "1"  # the fixture restored it
    code = "import ctypes\ndef f():\n    return ctypes.CDLL(None).shmget(0x5EC2E8, 4096, 0o1600) >= 0\n"
    assert _run(sandbox, code, "assert candidate() is False").passed
