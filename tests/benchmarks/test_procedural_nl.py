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


def test_steps_style_numbers_the_steps_in_plain_words_and_lists_every_public_example():
    task = build_task(parse_composition("list", ["cap_5", "ret_list"]))
    from dataclasses import replace

    task = replace(task, public_tests=(TestCase("assert", "assert candidate([8, 7]) == [5, 5]"),
                                       TestCase("assert", "assert candidate([]) == []")))
    assert nl_prompt(task, "steps") == (
        "Write a Python function `f(xs: list[int]) -> list[int]` that does the following to xs, in order:\n"
        "1. Replace each number greater than 5 with 5.\n"
        "2. Return the result.\n"
        "Examples: f([8, 7]) == [5, 5], f([]) == []\n")


def test_steps_keeps_the_phrase_of_a_primitive_without_plainer_words_and_states_a_terminal_as_a_step():
    task = _task(("assert candidate([2, 4, 5]) == 6",))
    assert nl_prompt(task, "steps").splitlines()[1:3] == ["1. Keep the even numbers.", "2. Return the sum."]


def test_steps_shot_is_the_same_prompt_after_one_solved_train_problem():
    from coral.benchmarks.procedural import split_of
    from coral.benchmarks.procedural_nl import SHOT

    task = _task(("assert candidate([2, 4, 5]) == 6",))
    assert nl_prompt(task, "steps-shot") == SHOT + nl_prompt(task, "steps")
    assert split_of(parse_composition("list", ["keep_odd", "count"])) == "train"


def test_plain_style_is_the_instruction_with_plainer_words_for_the_misread_phrases():
    task = build_task(parse_composition("list", ["keep_mult_3", "cap_5", "sum"]))
    from dataclasses import replace

    task = replace(task, public_tests=(TestCase("assert", "assert candidate([9, 3, 1]) == 8"),))
    assert nl_prompt(task, "plain") == (
        "Write a Python function `f(xs: list[int]) -> int`. Given a list of integers xs, keep only the numbers "
        "divisible by 3, then replace each number greater than 5 with 5, then return the sum.\n"
        "For example, f([9, 3, 1]) returns 8.\n")


def test_plain_shot_is_the_plain_prompt_after_one_solved_train_problem():
    from coral.benchmarks.procedural import split_of
    from coral.benchmarks.procedural_nl import PLAIN_SHOT

    task = _task(("assert candidate([2, 4, 5]) == 6",))
    assert nl_prompt(task, "plain-shot") == PLAIN_SHOT + nl_prompt(task, "plain")
    assert split_of(parse_composition("list", ["keep_odd", "count"])) == "train"


def test_sibling_shot_solves_the_same_skeleton_with_other_parameters_before_the_plain_prompt():
    from coral.benchmarks.procedural import gold_code
    from coral.benchmarks.procedural_nl import sibling

    task = build_task(parse_composition("list", ["keep_mult_3", "cap_5", "sum"]))
    names = sibling(task)
    assert names is not None and len(names) == 3 and names[2] == "sum"
    assert names[0].startswith("keep_mult_") and names[0] != "keep_mult_3"
    assert names[1].startswith("cap_") and names[1] != "cap_5"
    assert sibling(task) == names  # a hash of the task id: the same sibling every time
    shot = gold_code(parse_composition("list", names))
    prompt = nl_prompt(task, "sibling-shot")
    assert prompt.startswith("Solved example:\nWrite a Python function `f(xs: list[int]) -> int`. Given a list of "
                             f"integers xs, keep only the numbers divisible by {names[0].split('_')[-1]}, then replace")
    assert f"Solution:\n{shot}\nNow the problem to solve:\n" in prompt
    assert prompt.endswith(nl_prompt(task, "plain"))
    assert nl_tasks([task], "sibling-shot")[0].metadata["shot"] == "sibling"


def test_a_task_without_parameters_has_no_sibling_and_gets_the_fixed_shot():
    from coral.benchmarks.procedural_nl import PLAIN_SHOT, sibling

    task = _task(("assert candidate([2, 4, 5]) == 6",))  # keep_even, sum: no parameter
    assert sibling(task) is None
    assert nl_prompt(task, "sibling-shot") == PLAIN_SHOT + nl_prompt(task, "plain")
    assert nl_tasks([task], "sibling-shot")[0].metadata["shot"] == "fixed"


def test_a_sibling_never_repeats_its_task_and_keeps_its_length():
    from coral.benchmarks.procedural import make_tasks
    from coral.benchmarks.procedural_nl import sibling

    tasks = [t for t in make_tasks(60, "train", min_depth=1, max_depth=2, seed=0) if sibling(t) is not None]
    assert len(tasks) > 20
    assert all(sibling(t) != t.metadata["composition"] for t in tasks)
    assert all(len(sibling(t)) == len(t.metadata["composition"]) for t in tasks)
