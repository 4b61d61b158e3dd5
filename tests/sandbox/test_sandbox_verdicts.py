"""Verdicts, measurements, stdio comparison, load errors, caching and the public API."""

from __future__ import annotations

import pytest
from sandbox_helpers import asserts

from coral.sandbox import Job, Sandbox, run_task
from coral.trajectory import Task, TestCase

ADD = "def add(a, b):\n    return a + b\n"
ECHO_SUM = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n"


def test_correct_function_passes_and_wrong_assert_fails(bwrap_sandbox):
    result = bwrap_sandbox.run(ADD, asserts("assert candidate(1, 2) == 3", "assert candidate(1, 2) == 4"), entry_point="add")
    assert [t.verdict for t in result.tests] == ["pass", "fail"]
    assert "candidate(1, 2) == 4" in result.tests[1].message


def test_exception_raised_by_the_program_is_an_error_naming_it(bwrap_sandbox):
    result = bwrap_sandbox.run("def f(x):\n    raise ValueError('boom')\n", asserts("assert candidate(1) == 1"), entry_point="f")
    assert result.tests[0].verdict == "error"
    assert "ValueError: boom" in result.tests[0].message


def test_tests_can_catch_the_builtin_exception_the_program_raises(bwrap_sandbox):
    test = "try:\n    candidate(-1)\n    assert False\nexcept ValueError:\n    pass"
    result = bwrap_sandbox.run("def f(x):\n    if x < 0:\n        raise ValueError\n", asserts(test), entry_point="f")
    assert result.passed


def test_syntax_error_sets_error_and_every_test_is_error(bwrap_sandbox):
    result = bwrap_sandbox.run("def add(a, b) return", asserts("assert candidate(1, 1) == 2", "assert True"), entry_point="add")
    assert "SyntaxError" in result.error
    assert [t.verdict for t in result.tests] == ["error", "error"]


def test_import_time_crash_sets_error(bwrap_sandbox):
    result = bwrap_sandbox.run("import no_such_module_xyz\n" + ADD, asserts("assert candidate(1, 1) == 2"), entry_point="add")
    assert "ModuleNotFoundError" in result.error
    assert result.tests[0].verdict == "error"


def test_test_setup_runs_before_the_tests_and_check_bodies_are_accepted(bwrap_sandbox):
    setup = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
    result = bwrap_sandbox.run(ADD, asserts("check(candidate)"), entry_point="add", test_setup=setup)
    assert result.passed


def test_tests_may_call_other_functions_of_the_solution_by_name(bwrap_sandbox):
    code = "def helper(x):\n    return x * 2\ndef f(x):\n    return helper(x) + 1\n"
    assert bwrap_sandbox.run(code, asserts("assert candidate(2) == helper(2) + 1"), entry_point="f").passed


def test_rich_builtin_values_round_trip_exactly(bwrap_sandbox):
    code = "def f():\n    return (1, 2.5, 'a', b'z', None, {1: [True]}, {3}, frozenset({4}), 1j, 10**30, range(3))\n"
    test = "assert candidate() == (1, 2.5, 'a', b'z', None, {1: [True]}, {3}, frozenset({4}), 1j, 10**30, range(3))"
    assert bwrap_sandbox.run(code, asserts(test), entry_point="f").passed


def test_int_and_float_are_distinguished_like_python_does(bwrap_sandbox):
    result = bwrap_sandbox.run("def f():\n    return True\n", asserts("assert candidate() is True", "assert type(candidate()) is int"), entry_point="f")
    assert [t.verdict for t in result.tests] == ["pass", "fail"]


def test_stdio_output_is_compared_after_trailing_whitespace_strip(bwrap_sandbox):
    tests = [TestCase("stdio", stdin="1 2 3\n", expected_stdout="6"), TestCase("stdio", stdin="1 2\n", expected_stdout="3  \n\n"),
             TestCase("stdio", stdin="1 1\n", expected_stdout="3\n")]
    result = bwrap_sandbox.run(ECHO_SUM, tests)
    assert [t.verdict for t in result.tests] == ["pass", "pass", "fail"]


def test_stdio_program_that_crashes_is_an_error_with_the_exception(bwrap_sandbox):
    result = bwrap_sandbox.run("raise KeyError('k')\n", [TestCase("stdio", stdin="", expected_stdout="")])
    assert result.tests[0].verdict == "error"
    assert "KeyError" in result.tests[0].message


def test_stdio_large_input_and_output_pass(bwrap_sandbox):
    numbers = " ".join(str(i) for i in range(200_000))
    code = "import sys\nfor x in sys.stdin.read().split():\n    print(x)\n"
    expected = "\n".join(numbers.split())
    assert bwrap_sandbox.run(code, [TestCase("stdio", stdin=numbers, expected_stdout=expected)], timeout_s=5.0).passed


def test_stdio_runs_main_guard(bwrap_sandbox):
    code = "def main():\n    print(input()[::-1])\nif __name__ == '__main__':\n    main()\n"
    assert bwrap_sandbox.run(code, [TestCase("stdio", stdin="abc\n", expected_stdout="cba")]).passed


def test_peak_memory_and_times_are_measured(bwrap_sandbox):
    code = "def f():\n    x = b'x' * (64 * 2**20)\n    return len(x)\n"
    result = bwrap_sandbox.run(code, asserts("assert candidate() == 64 * 2**20"), entry_point="f")
    test = result.tests[0]
    assert test.passed and 60 <= test.cost.peak_memory_mb <= 80
    assert 0 < test.cost.cpu_s <= test.cost.wall_s + 0.05


def test_memory_limit_of_a_job_overrides_the_default(bwrap_sandbox):
    code = "def f():\n    return len(bytearray(200 * 2**20))\n"
    result = bwrap_sandbox.run(code, asserts("assert candidate() > 0"), entry_point="f", memory_mb=64)
    assert result.tests[0].verdict == "memory"


def test_run_many_returns_results_in_job_order(bwrap_sandbox):
    jobs = [Job(f"def f():\n    return {i}\n", asserts(f"assert candidate() == {i % 3}"), "f") for i in range(7)]
    assert [r.passed for r in bwrap_sandbox.run_many(jobs)] == [i % 3 == i for i in range(7)]


def test_run_task_selects_the_split():
    task = Task("t", "", "add", public_tests=asserts("assert candidate(1, 1) == 2"),
                private_tests=asserts("assert candidate(2, 2) == 4", "assert candidate(0, 0) == 1"))
    with Sandbox(workers=1) as sb:
        assert len(run_task(sb, task, ADD, split="public").tests) == 1
        assert run_task(sb, task, ADD, split="private").num_passed == 1
        assert run_task(sb, task, ADD, split="all").num_passed == 2
        with pytest.raises(ValueError, match="split"):
            run_task(sb, task, ADD, split="train")


def test_results_are_cached_by_code_and_tests():
    with Sandbox(workers=1, cache=True) as sb:
        first = sb.run(ADD, asserts("assert candidate(1, 1) == 2"), entry_point="add")
        assert sb.run(ADD, asserts("assert candidate(1, 1) == 2"), entry_point="add") is first
        assert sb.run(ADD, asserts("assert candidate(1, 1) == 3"), entry_point="add") is not first


def test_identical_jobs_in_one_batch_run_once_when_the_cache_is_on(monkeypatch):
    from coral.sandbox import Job

    ran = []
    original = Sandbox._run_on
    monkeypatch.setattr(Sandbox, "_run_on", lambda self, worker, job: ran.append(job.code) or original(self, worker, job))
    good, bad = Job(ADD, asserts("assert candidate(1, 1) == 2"), "add"), Job(ADD, asserts("assert candidate(1, 1) == 3"), "add")
    with Sandbox(workers=2, cache=True) as sb:
        results = sb.run_many([good, bad, good, good])
    assert len(ran) == 2  # good once, bad once
    assert [r.tests[0].verdict for r in results] == ["pass", "fail", "pass", "pass"]
    assert results[0] is results[2] is results[3]
    ran.clear()
    with Sandbox(workers=2, cache=False) as sb:  # no cache: every job runs
        assert [r.tests[0].verdict for r in sb.run_many([good, good, bad])] == ["pass", "pass", "fail"]
    assert len(ran) == 3


def test_invalid_configuration_names_the_field():
    with pytest.raises(ValueError, match="workers"):
        Sandbox(workers=0)


def test_broken_test_code_is_an_error_not_a_failure(bwrap_sandbox):
    result = bwrap_sandbox.run(ADD, asserts("assert candidate(1, 1) ==", "assert candidate(1, 1) == 2"), entry_point="add")
    assert [t.verdict for t in result.tests] == ["error", "pass"]
    assert "test setup failed: SyntaxError" in result.tests[0].message


def test_a_candidates_syntax_warnings_do_not_reach_our_stderr(capfd):
    from sandbox_helpers import make_sandbox

    # `1if` is an "invalid decimal literal" SyntaxWarning when compiled; the program still runs.
    # A sandbox of its own: servers started earlier write to the stderr pytest had then, not capfd's
    capfd.readouterr()
    sandbox = make_sandbox("bwrap")
    try:
        result = sandbox.run("def f(x):\n    return 1if x else 2\n", asserts("assert candidate(True) == 1"),
                             entry_point="f")
    finally:
        sandbox.close()
    assert result.passed
    assert "SyntaxWarning" not in capfd.readouterr().err
