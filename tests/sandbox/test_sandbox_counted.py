"""Counted costs (Job.count_steps): the steps and allocation peak of a test's calls are exact counts, the same
on every run of a deterministic program, on a quiet and on a loaded machine; and string hashes are the same
in every worker, so a program's behaviour does not depend on which worker start ran it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sandbox_helpers import asserts, make_sandbox

from coral.sandbox import Job
from coral.trajectory import TestCase, TestCost, TestResult

LOOP = "def f(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n"
LISTS = "def f(n):\n    return len([i * 2 for i in range(n)])\n"


def _counted(sandbox, code: str, test: str) -> TestCost:
    result = sandbox.run_many([Job(code, asserts(test), "f", count_steps=True)])[0]
    assert result.passed, result
    return result.tests[0].cost


def test_a_loop_costs_two_steps_an_iteration(sandbox):
    empty, ten = _counted(sandbox, LOOP, "assert candidate(0) == 0"), _counted(sandbox, LOOP, "assert candidate(10) == 45")
    assert empty.steps == 3  # s = 0; the for line once; return s
    assert ten.steps - empty.steps == 2 * 10  # the for line and the body, each iteration


def test_counts_repeat_exactly_and_allocations_grow_with_the_data(sandbox):
    small = [_counted(sandbox, LISTS, "assert candidate(1000) == 1000") for _ in range(2)]
    big = _counted(sandbox, LISTS, "assert candidate(200000) == 200000")
    assert (small[0].steps, small[0].alloc_peak_kb) == (small[1].steps, small[1].alloc_peak_kb)
    assert big.steps > 100 * small[0].steps and big.alloc_peak_kb > 1024 > small[0].alloc_peak_kb


def test_counts_do_not_move_when_other_processes_load_the_cpus(sandbox):
    quiet = _counted(sandbox, LISTS, "assert candidate(50000) == 50000")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        loaded = [_counted(sandbox, LISTS, "assert candidate(50000) == 50000") for _ in range(3)]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert {(c.steps, c.alloc_peak_kb) for c in loaded} == {(quiet.steps, quiet.alloc_peak_kb)}


def test_a_job_that_does_not_ask_is_not_counted(sandbox):
    result = sandbox.run_many([Job(LOOP, asserts("assert candidate(3) == 3"), "f")])[0]
    assert result.passed and result.steps is None and result.alloc_peak_kb is None


def test_counting_is_refused_for_stdio_tests():
    with pytest.raises(ValueError, match="count_steps.*stdio"):
        Job("print(1)", (TestCase("stdio", expected_stdout="1"),), count_steps=True)


def test_results_compare_by_verdict_not_by_cost():
    assert TestResult("pass", cost=TestCost(wall_s=0.1)) == TestResult("pass", cost=TestCost(wall_s=0.9, steps=3))
    assert TestResult("pass") != TestResult("fail")


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_string_hashes_are_the_same_in_every_worker_start(isolation):
    """The sandbox asks for PYTHONHASHSEED=0; `python -I` ignored it, so set and dict orders of strings (and
    what a program computes from them) changed with each worker start."""
    expected = subprocess.run([sys.executable, "-c", "print(hash('coral'))"], env={"PYTHONHASHSEED": "0"},
                              capture_output=True, text=True, check=True).stdout.strip()
    for _ in range(2):
        fresh = make_sandbox(isolation)
        try:
            result = fresh.run("def f():\n    return hash('coral')\n", asserts(f"assert candidate() == {expected}"),
                               entry_point="f")
        finally:
            fresh.close()
        assert result.passed, result
