"""Each harness's output rule, on hand-made outputs, and its use by judge() on stdio programs."""

from __future__ import annotations

import dataclasses

import pytest
from bench_helpers import FIXTURES

from coral.benchmarks import load_benchmark
from coral.benchmarks.outputs import OUTPUT_MATCHES
from coral.sandbox import Sandbox
from coral.trajectory import TestCase
from coral.workflows.common import judge

# (rule, got, expected, match?)
CASES = [
    ("lines", "1 \n2\n\n", "1\n2", True),
    ("lines", " 1", "1", False),
    ("livecodebench", "\n 1 \n", "1", True),  # the whole output and each line stripped
    ("livecodebench", "1.0 2\n1e2", "1 2.00\n100", True),  # token by token as Decimals
    ("livecodebench", "1\n\n2", "1\n2", False),  # a line more
    ("livecodebench", "0.3333333", "0.33333334", False),  # Decimals are exact
    ("apps", "2\n1", "1\n2", True),  # as sets of lines
    ("apps", "1 1 2", "2 1", True),  # ... of sets of tokens
    ("apps", "0.3333333", "0.33333334", True),  # floats, close
    ("apps", "0.1235", "0.12345", True),  # tokens rounded to 3 decimals
    ("apps", "yes", "no", False),
    ("codecontests", "YES\n", "yes", True),  # lowercased tokens
    ("codecontests", "1.000001  2", "1.0000015\n2", True),  # within 1e-5
    ("codecontests", "3", "3.0", True),  # int and float, within 1e-5
    ("codecontests", "12345678901234567", "12345678901234568", True),  # past int32: as doubles (as its tester)
    ("codecontests", "2147483646", "2147483647", False),  # int32: exact
    ("codecontests", "abc", "abd", False),
    ("codecontests", "1", "1 2", False),
]


@pytest.mark.parametrize("rule, got, expected, match", CASES)
def test_each_rule_matches_what_its_harness_matches(rule, got, expected, match):
    assert OUTPUT_MATCHES[rule](got, expected) is match


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sb:
        yield sb


def stdio_task(name: str, file: str, expected: str):
    task = next(t for t in load_benchmark(f"{name}:{FIXTURES / file}") if t.entry_point == "")
    case = TestCase("stdio", stdin="", expected_stdout=expected)
    return dataclasses.replace(task, public_tests=(case,), private_tests=(case,))


@pytest.mark.parametrize("name, file, program, expected", [
    ("livecodebench", "livecodebench.jsonl", "print(' 1.0')", "1"),
    ("apps", "apps.jsonl", "print('2 1')\nprint(Counter('aab')['a'])", "2\n1 2"),  # Counter: APPS's header
    ("codecontests", "code_contests.jsonl", "import sys\nprint('YES', file=sys.stderr)\nprint('YES 3.0')", "yes 3"),
])
def test_a_stdio_output_the_benchmarks_rule_accepts_passes_and_the_plain_rule_fails_it(
        sandbox, name, file, program, expected):
    task = stdio_task(name, file, expected)
    assert judge(sandbox, [task], [program])[0].private.passed
    plain = dataclasses.replace(task, output_match="lines", program_prefix="")
    assert not judge(sandbox, [plain], [task.program(program)])[0].private.passed


def test_the_benchmarks_rule_still_fails_a_wrong_output_and_keeps_no_output(sandbox):
    result = judge(sandbox, [stdio_task("codecontests", "code_contests.jsonl", "yes")], ["print('no')"])[0].private
    assert result.tests[0].verdict == "fail" and result.tests[0].output == result.tests[0].stdout == ""


def test_a_program_printing_the_stderr_marker_is_judged_on_its_whole_stdout(sandbox):
    # the sandbox's output holds stdout, "[stderr]" and stderr's tail; a rule cutting at the marker would
    # compare only "yes" here and pass the program
    task = stdio_task("codecontests", "code_contests.jsonl", "yes")
    result = judge(sandbox, [task], ["print('yes')\nprint('[stderr]')\nprint('no')"])[0].private
    assert result.tests[0].verdict == "fail"


def test_a_livecodebench_functional_tuple_counts_as_the_list_it_holds(sandbox):
    leetcode = load_benchmark(f"livecodebench:{FIXTURES / 'livecodebench.jsonl'}")[1]
    code = "class Solution:\n    def countEven(self, nums):\n        return sum(len(str(x)) % 2 == 0 for x in nums)\n"
    assert judge(sandbox, [leetcode], [code])[0].private.passed  # sanity: the plain answer
    pairs = "class Solution:\n    def countEven(self, nums):\n        return (1, 2)\n"
    case = TestCase("assert", code="assert _lcb_equal(candidate().countEven(*[[1]]), [1, 2])")
    task = dataclasses.replace(leetcode, public_tests=(case,), private_tests=(case,))
    assert judge(sandbox, [task], [pairs])[0].private.passed


def test_apps_gives_json_object_keys_back_as_ints_and_takes_a_list_of_tuples_for_a_list_of_lists(tmp_path):
    import json

    record = {"problem_id": 1, "question": "q", "starter_code": "def f(d):\n    pass\n",
              "input_output": json.dumps({"fn_name": "f", "inputs": [[{"1": "a"}]], "outputs": [[[[1, 2]]]]})}
    (tmp_path / "apps.jsonl").write_text(json.dumps(record) + "\n")
    task = load_benchmark(f"apps:{tmp_path / 'apps.jsonl'}")[0]
    assert "candidate(*[{1: 'a'}])" in task.private_tests[0].code
    with Sandbox(workers=1) as sb:
        assert judge(sb, [task], ["def f(d):\n    return [(k, 2) for k in d]\n"])[0].private.passed
