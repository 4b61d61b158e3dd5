"""Third red-team round (2026-12-05): honest programs the sandbox judged wrongly, and what one job's
leftovers did to the next. Before the fixes:
- LeetCode-style tests (`candidate().twoSum(...)`, LiveCodeBench functional and APPS class-based tasks)
  were "error" for every program: the judge refused the `Solution()` instance as a value;
- programs and tests were compiled under the sandbox's own `from __future__ import annotations`, and
  there was no `solution` module, so a correct program with a `@dataclass` failed to load;
- a program that forged a load error kept running (and burning a core) after its job had returned;
- tests with large literals filled the judge's compiled-code cache until later jobs got MemoryError.
Both isolation modes where it applies."""

from __future__ import annotations

import time

import pytest
from sandbox_helpers import asserts, make_sandbox, processes_named

from coral.trajectory import TestCase

SOLUTION = "class Solution:\n    def twoSum(self, a, b):\n        return a + b\n"


def _verdicts(sandbox, code: str, *tests: str, entry_point: str = "Solution") -> list[str]:
    result = sandbox.run(code, asserts(*tests), entry_point=entry_point, timeout_s=2.0)
    return [t.verdict for t in result.tests]


def test_leetcode_style_method_calls_on_the_solution_class_are_judged(sandbox):
    tests = ("assert candidate().twoSum(*[1, 2]) == 3", "assert candidate().twoSum(*[2, 2]) == 4")
    assert _verdicts(sandbox, SOLUTION, *tests) == ["pass", "pass"]
    assert _verdicts(sandbox, SOLUTION.replace("a + b", "a - b"), *tests) == ["fail", "fail"]
    assert _verdicts(sandbox, SOLUTION, "assert candidate().threeSum(1) == 1") == ["error"]  # AttributeError


def test_the_constructed_object_keeps_its_state_within_a_test_and_is_released_after_it(sandbox):
    code = ("class Solution:\n    def __init__(self):\n        self.n = 0\n"
            "    def add(self, k):\n        self.n += k\n        return self.n\n")
    test = "s = candidate()\ns.add(1)\nassert s.add(2) == 3 and s.n == 3 and candidate().n == 0"
    assert _verdicts(sandbox, code, test) == ["pass"]
    # each test's Solution() holds 24 MB: kept for the whole job, ten of them passed the 256 MB cap
    hog = "class Solution:\n    def solve(self, n):\n        self.dp = [i for i in range(n)]\n        return self.dp[-1]\n"
    assert _verdicts(sandbox, hog, *["assert candidate().solve(3_000_000) == 2_999_999"] * 10) == ["pass"] * 10


def test_only_the_entry_point_called_without_arguments_hands_out_an_object(sandbox):
    # anything else the wire refuses stays an error, as before: a class entry point with arguments (a
    # wrong program posing as a function whose result answers every predicate), a module or object the
    # test borrows by name, an attribute or a method result that is not a builtin value
    yes = "class _Yes:\n    def __getattr__(self, name):\n        return lambda *a, **k: True\n"
    posing = yes + "class f(_Yes):\n    def __init__(self, *a):\n        pass\n"
    for test in ("assert candidate('12').isdigit()", "assert candidate([1, 2]).issubset({1, 2, 3})"):
        assert _verdicts(sandbox, posing, test, entry_point="f") == ["error"], test
    borrowed = "import math\nmath.isclose = lambda *a, **k: True\ndef f(r):\n    return 0\n"
    assert _verdicts(sandbox, borrowed, "assert math.isclose(candidate(5), 78.5)", entry_point="f") == ["error"]
    nested = yes + "class Solution:\n    inner = _Yes()\n    def make(self):\n        return _Yes()\n"
    for test in ("assert candidate().inner.ok()", "assert candidate().make().ok()"):
        assert _verdicts(sandbox, nested, test) == ["error"], test


@pytest.mark.parametrize("test", [
    "assert candidate(1) == 2", "assert candidate(1)", "assert candidate(1) != 2", "assert 2 == candidate(1)",
    "assert candidate(1) in [2]", "assert [candidate(1)] == [2]", "assert {candidate(1): 1}",
    "assert candidate(1) >= 2 and candidate(1) <= 2", "assert abs(candidate(1) - 2) < 1e-9",
    "assert len(candidate(1)) == 0", "assert sorted([candidate(1), 0])", "assert candidate(1).__eq__(2)",
    "assert int(candidate(1)) == 2", "assert str(candidate(1)) == '2'",
])
def test_an_object_that_claims_every_value_never_passes_in_the_judge(sandbox, test):
    # the object stays in the candidate; the judge holds a handle that refuses every comparison
    code = ("class Liar(int):\n    def __eq__(self, o): return True\n    def __ne__(self, o): return True\n"
            "    def __bool__(self): return True\n    def __hash__(self): return 0\n    def __len__(self): return 0\n"
            "    def __lt__(self, o): return True\n    __le__ = __gt__ = __ge__ = __lt__\n"
            "    def __sub__(self, o): return 0\n    def __int__(self): return 2\n    def __str__(self): return '2'\n"
            "def f(x):\n    return Liar(2)\n")
    result = sandbox.run(code, asserts(test), entry_point="f", timeout_s=2.0)
    assert not result.passed, (test, result)


def test_dataclasses_and_real_annotations_load_as_in_plain_python(sandbox):
    code = ("from dataclasses import dataclass, fields\n@dataclass\nclass P:\n    x: int\n"
            "def f(y: int) -> bool:\n    return fields(P)[0].type is int and f.__annotations__['y'] is int\n")
    assert _verdicts(sandbox, code, "assert candidate(1) is True", entry_point="f") == ["pass"]
    postponed = "from __future__ import annotations\n" + code.replace(" is int and", " == 'int' and").replace(
        "['y'] is int", "['y'] == 'int'")
    assert _verdicts(sandbox, postponed, "assert candidate(1) is True", entry_point="f") == ["pass"]
    stdio = ("from __future__ import annotations\nfrom dataclasses import dataclass\nimport sys\n@dataclass\n"
             "class P:\n    x: int\nprint(P(int(sys.stdin.read())).x + 1, __name__)\n")
    result = sandbox.run(stdio, [TestCase("stdio", stdin="41", expected_stdout="42 __main__")], timeout_s=2.0)
    assert result.passed, result


def test_test_code_is_compiled_without_the_sandboxs_future_imports(sandbox):
    test = "def g(x: int): pass\nassert g.__annotations__['x'] is int and candidate(1) == 2"
    assert _verdicts(sandbox, "def f(x):\n    return x + 1\n", test, entry_point="f") == ["pass"]


FORGED_LOAD_ERROR = ("import json, os, struct, time\nbody = json.dumps(['load_error', 'x', 'y']).encode()\n"
                     "os.write(4, struct.pack('<Q', len(body)) + body)\nt = time.time()\n"
                     "while time.time() - t < 30:\n    pass\ndef f(x):\n    return x\n")


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_a_program_that_forges_a_load_error_does_not_outlive_its_job(isolation):
    with make_sandbox(isolation, timeout_s=4.0) as sandbox:
        worker = sandbox._all[0].proc.pid
        assert sandbox.run("def f(x):\n    return x\n", asserts("assert candidate(1) == 1"), entry_point="f").passed
        result = sandbox.run(FORGED_LOAD_ERROR, asserts(*["assert candidate(1) == 1"] * 3), entry_point="f")
        assert not result.passed
        deadline = time.monotonic() + 2.0
        while processes_named(worker, "coral-candidate") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_named(worker, "coral-candidate") == []  # none left spinning until the next request


@pytest.mark.slow  # compiles 100 tests of 100,000-int literals: about 25 s
def test_tests_with_large_literals_do_not_exhaust_the_judge_for_later_jobs():
    import random

    # each test's code object holds about 6 MB; the judge's memory cap (512 MB) used to fill after 86 of them
    streams = [random.Random(i) for i in range(100)]
    numbers = [[r.randrange(10**9) for _ in range(100_000)] for r in streams]
    big = [f"assert candidate({a!r}) == {sum(a)}" for a in numbers]
    with make_sandbox("bwrap", timeout_s=10.0) as sandbox:
        result = sandbox.run("def f(a):\n    return sum(a)\n", asserts(*big), entry_point="f", timeout_s=10.0)
        assert result.num_passed == len(big), next(t.message for t in result.tests if not t.passed)
        later = sandbox.run("def g(n):\n    return list(range(n))\n",
                            asserts("assert candidate(1_500_000) == list(range(1_500_000))"), entry_point="g",
                            timeout_s=10.0)
        assert later.passed, later
