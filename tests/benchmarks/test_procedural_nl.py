"""The procedural family stated for instruct models (coral/benchmarks/procedural_nl.py): only the prompt changes."""

import pytest

from coral.benchmarks.procedural import build_task, parse_composition
from coral.benchmarks.procedural_nl import first_example, nl_prompt, nl_tasks
from coral.trajectory import TestCase


def _task(public: tuple[str, ...] = ()):
    task = build_task(parse_composition("list", ["keep_even", "sum"]))
    if public:
        from dataclasses import replace

        task = replace(task, public_tests=tuple(TestCase("assert", code) for code in public))
    return task


def test_docstring_style_is_the_signature_then_the_description_and_one_worked_example():
    task = _task(("assert candidate([1, 3]) == 0", "assert candidate([2, 4, 5]) == 6"))
    assert nl_prompt(task, "docstring") == (
        "def f(xs: list[int]) -> int:\n"
        '    """Given a list of integers xs, keep the even numbers, then return the sum.\n'
        "\n"
        "    >>> f([2, 4, 5])\n"
        "    6\n"
        '    """\n')


def test_instruction_style_names_the_function_and_gives_the_example_in_words():
    task = _task(("assert candidate([2, 4, 5]) == 6",))
    assert nl_prompt(task, "instruction") == (
        "Write a Python function `f(xs: list[int]) -> int`. Given a list of integers xs, keep the even numbers, "
        "then return the sum.\nFor example, f([2, 4, 5]) returns 6.\n")


def test_the_example_skips_empty_answers_unless_every_public_test_has_one():
    assert first_example(_task(("assert candidate([]) == 0", "assert candidate([2]) == 2"))) == ("[2]", "2")
    assert first_example(_task(("assert candidate([]) == 0",))) == ("[]", "0")
    assert first_example(_task(("assert candidate(1, 2) == 3",))) is None


def test_doc_noex_style_has_no_example():
    assert ">>>" not in nl_prompt(_task(("assert candidate([2]) == 2",)), "doc-noex")


def test_restating_tasks_keeps_ids_tests_and_reference():
    task = _task()
    [stated] = nl_tasks([task], "docstring")
    assert (stated.id, stated.public_tests, stated.private_tests, stated.reference, stated.entry_point) == \
        (task.id, task.public_tests, task.private_tests, task.reference, task.entry_point)
    assert stated.prompt != task.prompt and stated.metadata["prompt_style"] == "docstring"


def test_an_unknown_style_is_refused():
    with pytest.raises(ValueError, match="procedural-nl style"):
        nl_prompt(_task(), "poem")
