"""The procedural family: references pass their tests, mutants fail them, splits are disjoint."""

from __future__ import annotations

import random
import re

import pytest
from bench_helpers import run_trusted

from coral.benchmarks.mutants import mutants
from coral.benchmarks.primitives import PRIMITIVES, STEPS
from coral.benchmarks.procedural import (
    ProceduralConfig,
    build_task,
    make_tasks,
    parse_composition,
    seed_slot_of,
    skeleton,
    skeleton_unit,
    split_of,
)


@pytest.fixture(scope="module")
def train_tasks():
    return make_tasks(300, "train", seed=0)


@pytest.fixture(scope="module")
def test_tasks():
    return make_tasks(200, "test", seed=0)


def _composition(task):
    return parse_composition(task.metadata["family"], task.metadata["composition"])


def test_reference_solutions_pass_all_their_public_and_private_tests(train_tasks, test_tasks):
    for task in train_tasks + test_tasks:
        assert all(run_trusted(task, task.reference, task.all_tests)), task.id


def _random_inputs(family: str, n: int) -> list:
    rng = random.Random(123)
    if family == "list":
        return [[]] + [[rng.randint(-12, 15) for _ in range(rng.randint(1, 9))] for _ in range(n)]
    return [""] + ["".join(rng.choice("abcdeiouxyzAEB 12!") for _ in range(rng.randint(1, 11))) for _ in range(n)]


def _outputs(code: str, inputs: list) -> list:
    ns: dict = {}
    exec(code, ns)
    out = []
    for x in inputs:
        try:
            out.append(repr(ns["f"](x)))
        except Exception as e:
            out.append(type(e).__name__)
    return out


def test_private_tests_kill_the_mutants_that_random_inputs_can_tell_apart(train_tasks):
    # Some mutants are equivalent (`x > -3` vs `x > -2` after `abs`); only those that differ from the
    # reference on some of 300 random inputs are expected to fail a private test.
    distinguishable = killed = 0
    for task in train_tasks:
        inputs = _random_inputs(task.metadata["family"], 300)
        reference = _outputs(task.reference, inputs)
        for code in mutants(task):
            if _outputs(code, inputs) != reference:
                distinguishable += 1
                killed += not all(run_trusted(task, code))
    assert distinguishable > 500
    assert killed / distinguishable >= 0.98, f"{killed}/{distinguishable} distinguishable mutants killed"


def test_every_task_with_mutants_has_at_least_one_killed_by_its_private_tests(train_tasks):
    for task in [t for t in train_tasks if mutants(t)]:  # `return len(xs)` has no mutation site
        assert any(not all(run_trusted(task, code)) for code in mutants(task)), task.id


def test_a_hand_checked_composition_gives_the_expected_code_plan_and_answer():
    comp = parse_composition("list", ["keep_even", "mul_3", "sum"])
    task = build_task(comp)
    assert task.prompt.startswith(
        "Given a list of integers xs, keep the even numbers, then multiply each by 3, then return the sum.\n"
        "def f(xs: list[int]) -> int:")
    assert task.reference == ("def f(xs: list[int]) -> int:\n    xs = [x for x in xs if x % 2 == 0]\n"
                              "    xs = [x * 3 for x in xs]\n    return sum(xs)\n")
    assert task.metadata["gold_plan"] == "1. Keep the even numbers.\n2. Multiply each by 3.\n3. Return the sum."
    assert task.metadata["difficulty"] == 3
    ns: dict = {}
    exec(task.reference, ns)
    assert ns["f"]([1, 2, 3, 4]) == 18


def test_string_tasks_have_a_string_signature_and_trivial_return_does_not_count_as_depth():
    task = build_task(parse_composition("str", ["upper", "reverse_s", "ret_str"]))
    assert "def f(s: str) -> str:" in task.prompt
    assert task.metadata["difficulty"] == 2
    ns: dict = {}
    exec(task.reference, ns)
    assert ns["f"]("abc d") == "D CBA"


def test_gold_plan_has_one_numbered_step_per_line_of_gold_code(train_tasks):
    for task in train_tasks:
        steps = task.metadata["gold_plan"].splitlines()
        body = task.reference.splitlines()[1:]
        assert len(steps) == len(body) == len(task.metadata["composition"])
        assert all(re.match(rf"{i}\. [A-Z].*\.$", s) for i, s in enumerate(steps, start=1))


def test_difficulty_is_within_the_requested_depth_range():
    tasks = make_tasks(100, "train", min_depth=2, max_depth=4, seed=3)
    assert {t.metadata["difficulty"] for t in tasks} == {2, 3, 4}


def test_tests_include_the_empty_input_and_have_the_requested_counts(train_tasks):
    for task in train_tasks:
        assert len(task.public_tests) == 3 and len(task.private_tests) == 8
        assert task.private_tests[0].code.startswith(("assert (got := candidate([]))", "assert (got := candidate(''))"))


def test_public_and_private_inputs_do_not_overlap(train_tasks):
    for task in train_tasks:
        public = {t.code for t in task.public_tests}
        assert not public & {t.code for t in task.private_tests}


def test_train_and_test_splits_never_share_a_skeleton(train_tasks, test_tasks):
    train = {skeleton(_composition(t)) for t in train_tasks}
    test = {skeleton(_composition(t)) for t in test_tasks}
    assert train and test and not train & test
    assert all(t.metadata["split"] == "test" for t in test_tasks)


def _ids(n: int, split: str, seed: int, **depths) -> set[str]:
    return {t.id for t in make_tasks(n, split, seed=seed, **depths)}  # a task id is a hash of its composition


@pytest.mark.parametrize("depths", [{}, pytest.param({"max_depth": 2}, marks=pytest.mark.slow)],
                         ids=["depth1-3", "depth1-2-slow"])  # depth <= 2 (CoRe-Code's): a small pool, ~10 s a set
def test_the_test_sets_of_seeds_0_1_2_are_disjoint_from_each_other_and_from_every_train_and_validation_set(depths):
    tests = {seed: _ids(200, "test", seed, **depths) for seed in (0, 1, 2)}
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert not tests[a] & tests[b], f"seeds {a} and {b} share {len(tests[a] & tests[b])} test tasks"
    seen = set().union(*(_ids(100, split, seed, **depths) for split in ("train", "validation") for seed in (0, 1, 2)))
    assert len(seen) > 200 and not seen & set().union(*tests.values())


def test_the_validation_split_shares_no_skeleton_with_train_or_test(train_tasks, test_tasks):
    validation = make_tasks(200, "validation", seed=0)
    assert {t.metadata["split"] for t in validation} == {"validation"}
    skeletons = {skeleton(_composition(t)) for t in validation}
    assert not skeletons & {skeleton(_composition(t)) for t in train_tasks + test_tasks}


def test_train_skeletons_are_those_outside_the_held_out_quarter_of_the_hash_range():
    # the train split predates the validation split: carving validation out of the held-out quarter
    # left every train task of every seed unchanged
    assert all(skeleton_unit(_composition(t)) >= 0.25 for t in make_tasks(200, "train", seed=0))
    cfg = ProceduralConfig()
    assert cfg.test_fraction + cfg.validation_fraction == pytest.approx(0.25)


def test_a_seed_draws_its_test_tasks_from_its_own_slot_and_a_seed_8_apart_from_the_same_one():
    assert {seed_slot_of(_composition(t)) for t in make_tasks(50, "test", seed=3)} == {3}
    assert _ids(50, "test", 11) & _ids(200, "test", 3)


def test_split_membership_depends_only_on_the_skeleton():
    a = parse_composition("list", ["keep_gt_1", "mul_2", "sum"])
    b = parse_composition("list", ["keep_gt_7", "mul_9", "sum"])
    assert split_of(a) == split_of(b)


def test_every_step_kind_appears_in_the_train_split():
    tasks = make_tasks(2000, "train", seed=0)
    seen = {(t.metadata["family"], PRIMITIVES[(t.metadata["family"], n)].kind)
            for t in tasks for n in t.metadata["composition"]}
    wanted = {(fam, p.kind) for fam, prims in STEPS.items() for p in prims}
    assert wanted <= seen


def test_generation_is_reproducible_and_a_longer_run_extends_a_shorter_one():
    short = make_tasks(50, "train", seed=7)
    long = make_tasks(80, "train", seed=7)
    assert short == long[:50]
    assert [t.id for t in make_tasks(50, "train", seed=8)] != [t.id for t in short]


def test_thousands_of_distinct_tasks_can_be_generated():
    tasks = make_tasks(3000, "train", seed=1)
    assert len({t.id for t in tasks}) == 3000
    assert len({t.reference for t in tasks}) == 3000


def test_asking_for_more_tasks_than_exist_raises_a_clear_error():
    with pytest.raises(ValueError, match="found only"):
        make_tasks(500, "test", min_depth=1, max_depth=1)


def test_unknown_split_and_bad_config_are_rejected_naming_the_value():
    with pytest.raises(ValueError, match="'valid'"):
        make_tasks(3, "valid")
    with pytest.raises(ValueError, match="test_fraction"):
        ProceduralConfig(test_fraction=1.5)
    with pytest.raises(ValueError, match="validation_fraction must be < 1"):
        ProceduralConfig(test_fraction=0.5, validation_fraction=0.5)
    with pytest.raises(ValueError, match="test_seed_slots"):
        ProceduralConfig(test_seed_slots=0)
    with pytest.raises(ValueError, match="'nope'"):
        parse_composition("list", ["nope"])
