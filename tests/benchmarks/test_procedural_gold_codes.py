"""The procedural family's several gold codes per task (idioms), the gold code nearest to a wrong code, and
tests whose failure reports the value the function returned."""

from __future__ import annotations

import random

import pytest

from coral.benchmarks.gold_codes import gold_codes, gold_solutions, nearest_gold, task_gold_codes
from coral.benchmarks.primitives import PRIMITIVES, compile_expr
from coral.benchmarks.procedural import (
    ProceduralConfig,
    _edge_inputs,
    _random_input,
    build_task,
    make_tasks,
    parse_composition,
)
from coral.sandbox import Sandbox
from coral.workflows.common import judge


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as box:
        yield box


def test_every_idiom_of_every_primitive_computes_what_its_canonical_expression_does():
    rng = random.Random(0)
    for (family, name), prim in PRIMITIVES.items():
        inputs = [_random_input(rng, family, 8) for _ in range(200)] + _edge_inputs(rng, family)
        for alt in prim.alts:
            fn = compile_expr(family, alt)
            for x in inputs:
                assert fn(x) == prim.fn(x), f"{name}: {alt!r} differs from {prim.expr!r} on {x!r}"


def test_a_two_step_composition_has_the_product_of_its_idioms_as_gold_codes_canonical_first():
    comp = parse_composition("list", ["keep_even", "mul_3", "sum"])
    codes = gold_codes(comp)
    # keep_even has 3 idioms, mul 3, sum 1
    assert len(codes) == 9 and len(set(codes)) == 9
    assert codes[0] == ("def f(xs: list[int]) -> int:\n    xs = [x for x in xs if x % 2 == 0]\n"
                        "    xs = [x * 3 for x in xs]\n    return sum(xs)\n")
    assert "    xs = list(map(lambda x: x * 3, xs))\n" in codes[1] + codes[2]
    assert gold_codes(comp, limit=4) == codes[:4]


def test_every_gold_code_of_a_task_passes_all_its_tests(sandbox):
    tasks = make_tasks(40, "train", seed=3)
    for task in tasks:
        golds = task_gold_codes(task)
        for verdicts in judge(sandbox, [task] * len(golds), golds):
            assert verdicts.public.passed and verdicts.private.passed, task.prompt


def test_gold_solutions_draws_distinct_gold_codes_and_one_means_the_reference():
    task = next(t for t in make_tasks(50, "train", seed=0) if len(task_gold_codes(t)) >= 4)
    assert gold_solutions(task, 1, seed=0) == [task.reference]
    drawn = gold_solutions(task, 3, seed=0)
    assert len(set(drawn)) == 3 and set(drawn) <= set(task_gold_codes(task))
    assert gold_solutions(task, 3, seed=0) == drawn  # seeded
    assert sorted(gold_solutions(task, 100, seed=0)) == sorted(task_gold_codes(task))  # all, when k exceeds them


def test_nearest_gold_fixes_the_wrong_line_in_the_idiom_the_code_was_written_in():
    comp = parse_composition("list", ["keep_even", "mul_3", "sum"])
    task = build_task(comp, seed=0)
    wrong = ("def f(xs: list[int]) -> int:\n    xs = list(filter(lambda x: x % 2 == 0, xs))\n"
             "    xs = list(map(lambda x: x * 4, xs))\n    return sum(xs)\n")
    assert nearest_gold(task, wrong) == wrong.replace("x * 4", "x * 3")


def test_a_failing_test_reports_the_returned_value_and_feedback_shows_input_expected_and_actual(sandbox):
    task = build_task(parse_composition("list", ["mul_3", "ret_list"]), seed=0)
    wrong = "def f(xs: list[int]) -> list[int]:\n    return [x * 4 for x in xs]\n"
    (verdicts,) = judge(sandbox, [task], [wrong])
    feedback = verdicts.public.feedback(task.public_tests)
    case = task.public_tests[0].code  # assert (got := candidate([...])) == [...], repr(got)
    x = eval(case[case.index("candidate(") + len("candidate("):case.index(")) ==")])  # noqa: S307 - our own test
    assert f"candidate({x!r})) == {[3 * v for v in x]!r}" in feedback
    assert f"AssertionError: {[4 * v for v in x]!r}" in feedback
    assert " at `" not in feedback  # the failing line is the test already shown: not repeated


def test_report_output_false_keeps_the_plain_assert():
    task = build_task(parse_composition("list", ["mul_3", "ret_list"]), seed=0, cfg=ProceduralConfig(report_output=False))
    assert all(t.code.startswith("assert candidate(") for t in task.all_tests)


def test_gold_codes_of_a_task_that_is_not_procedural_are_refused_by_name():
    from coral.trajectory import Task

    task = Task(id="he/1", prompt="p", entry_point="f", public_tests=(), private_tests=(), reference="def f(): pass\n")
    with pytest.raises(ValueError, match="he/1.*not procedural"):
        task_gold_codes(task)
    assert gold_solutions(task, 3, seed=0) == [task.reference]
