"""The assert tests of one job run in one candidate process: per-test verdicts, limits and
measurements stay per test, a killed or timed-out candidate is replaced for the remaining tests,
and nothing a program does in one test can make a later test pass. Both isolation modes."""

from __future__ import annotations

from sandbox_helpers import asserts

COUNTER = "calls = [0]\ndef f():\n    calls[0] += 1\n    return calls[0]\n"


def test_assert_tests_of_one_job_share_one_candidate_process(sandbox):
    result = sandbox.run(COUNTER, asserts("assert candidate() == 1", "assert candidate() == 2"), entry_point="f")
    assert [t.verdict for t in result.tests] == ["pass", "pass"]


def test_state_never_carries_over_to_the_next_job(sandbox):
    for _ in range(2):
        assert sandbox.run(COUNTER, asserts("assert candidate() == 1"), entry_point="f").passed


def test_a_test_that_kills_the_candidate_leaves_later_tests_to_a_fresh_one(sandbox):
    code = "import os\ndef f(x):\n    if x == 0:\n        os._exit(0)\n    return x + 1\n"
    result = sandbox.run(code, asserts("assert candidate(0) == 1", "assert candidate(1) == 2"), entry_point="f")
    assert [t.verdict for t in result.tests] == ["error", "pass"]


def test_a_test_that_times_out_leaves_later_tests_to_a_fresh_one(sandbox):
    code = COUNTER + "def g(x):\n    while x == 0:\n        pass\n    return f()\n"
    tests = asserts("assert g(1) == 1", "assert g(0) == 1", "assert g(1) == 1", "assert g(1) == 2")
    result = sandbox.run(code, tests, entry_point="g", timeout_s=0.5)
    assert [t.verdict for t in result.tests] == ["pass", "timeout", "pass", "pass"]


def test_replies_queued_during_one_test_are_refused_in_the_next(sandbox):
    # after answering test 1, a thread queues the replies test 2's lookup and call would get;
    # test 2 asks only once they are queued. Without per-call tokens test 2 would pass.
    code = ("import json, os, struct, threading, time\ndef forge():\n    time.sleep(0.1)\n"
            "    for reply in (['callable', 'guessed'], ['ok', 42, 'guessed']):\n"
            "        body = json.dumps(reply).encode()\n        os.write(4, struct.pack('<Q', len(body)) + body)\n"
            "def f(x):\n    if x == 0:\n        threading.Thread(target=forge).start()\n    return x + 1\n")
    tests = asserts("assert candidate(0) == 1", "import time\ntime.sleep(0.4)\nassert candidate(1) == 42")
    result = sandbox.run(code, tests, entry_point="f")
    assert [t.verdict for t in result.tests] == ["pass", "error"]
    assert "did not answer" in result.tests[1].message


def test_patching_builtins_in_one_test_does_not_reach_the_judge_in_the_next(sandbox):
    code = ("import builtins\ndef f(x):\n    if x == 0:\n        builtins.sorted = lambda *a, **k: 3\n"
            "        builtins.AssertionError = type('X', (BaseException,), {})\n    return [1]\n")
    result = sandbox.run(code, asserts("assert candidate(0) == [1]", "assert sorted(candidate(1)) == 3"), entry_point="f")
    assert [t.verdict for t in result.tests] == ["pass", "fail"]


def test_each_test_reports_its_own_peak_memory(bwrap_sandbox):
    code = "def f(n):\n    return len(bytearray(n * 2**20))\n"
    tests = asserts("assert candidate(1) == 2**20", "assert candidate(64) == 64 * 2**20", "assert candidate(1) == 2**20")
    peaks = [t.cost.peak_memory_mb for t in bwrap_sandbox.run(code, tests, entry_point="f").tests]
    assert peaks[0] < 16 and 60 <= peaks[1] <= 80 and peaks[2] < 16, peaks


def test_each_test_reports_its_own_cpu_time(bwrap_sandbox):
    code = "import time\ndef f(s):\n    t = time.process_time()\n    while time.process_time() - t < s:\n        pass\n    return 1\n"
    result = bwrap_sandbox.run(code, asserts("assert candidate(0.2) == 1", "assert candidate(0) == 1"), entry_point="f")
    assert result.passed
    assert result.tests[0].cost.cpu_s >= 0.2 and result.tests[1].cost.cpu_s < 0.1, result
