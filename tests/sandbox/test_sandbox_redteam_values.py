"""Honest values the sandbox's wire refused or changed before the red-team review, in both isolation
modes: ints beyond Python's 4300-digit int<->str limit (a correct factorial got "error") and exceptions
the tests check by exact type (`type(e) is ValueError` failed on a correct program)."""

from __future__ import annotations

from sandbox_helpers import asserts


def _run(sandbox, code: str, test: str, timeout_s: float = 2.0):
    return sandbox.run(code, asserts(test), entry_point="f", timeout_s=timeout_s)


def test_ints_beyond_the_int_to_str_digit_limit_cross_both_ways(sandbox):
    code = "import math\ndef f(n, big):\n    return math.factorial(n) if big is None else big + 1\n"
    test = "import math\nassert candidate(2000, None) == math.factorial(2000)\n" \
           "assert candidate(0, -math.factorial(1800)) == 1 - math.factorial(1800)"
    result = _run(sandbox, code, test)
    assert result.passed, result


def test_a_raised_builtin_exception_keeps_its_exact_type(sandbox):
    code = "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
    test = ("try:\n    candidate(-1)\nexcept Exception as e:\n    assert type(e) is ValueError and e.args == ('negative',)\n"
            "else:\n    assert False")
    result = _run(sandbox, code, test)
    assert result.passed, result
    # still told apart from a failing assert in the test itself
    assert _run(sandbox, "def f():\n    raise AssertionError('x')\n", "assert candidate()").tests[0].verdict == "error"
