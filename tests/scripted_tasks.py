"""Scripted tasks and an in-process sandbox for workflow tests: tasks `f(x) = x + k` with public and private
tests, scripted replies (correct, half right, wrong, refining), a sandbox that runs trusted test code in the
test process. Not a sandbox for model code: the tests' own replies only."""

from __future__ import annotations

import re
from collections.abc import Sequence

from coral.trajectory import ExecutionResult, Task
from coral.trajectory import TestCase as Case
from coral.trajectory import TestResult as Result

PRIVATE_MARK = "# private"


class InProcessSandbox:
    """Runs trusted test code in-process. `flip_private` inverts the verdict of private tests, so a
    search that peeks at private results would behave differently."""

    def __init__(self, flip_private: bool = False) -> None:
        self.flip_private = flip_private
        self.batches: list[int] = []

    def _run(self, job) -> ExecutionResult:
        namespace: dict = {}
        try:
            exec(job.code, namespace)
        except Exception as e:  # a broken answer is a result, not a test failure
            return ExecutionResult(tests=tuple(Result("error", str(e)) for _ in job.tests), error=str(e))
        results = []
        for case in job.tests:
            env = dict(namespace, candidate=namespace.get(job.entry_point))
            try:
                exec(case.code, env)
                ok = True
            except Exception:
                ok = False
            if self.flip_private and PRIVATE_MARK in case.code:
                ok = not ok
            results.append(Result("pass" if ok else "fail"))
        return ExecutionResult(tests=tuple(results))

    def run_many(self, jobs: Sequence, progress: bool = False) -> list[ExecutionResult]:
        self.batches.append(len(jobs))
        return [self._run(job) for job in jobs]


def add_task(k: int) -> Task:
    return Task(
        id=f"add{k}", prompt=f"Write f(x) that returns x + {k}.", entry_point="f",
        public_tests=(Case("assert", f"assert candidate(1) == {1 + k}"),
                      Case("assert", f"assert candidate(2) == {2 + k}")),
        private_tests=(Case("assert", f"assert candidate(10) == {10 + k}  {PRIVATE_MARK}"),),
    )


def _k(messages) -> int:
    return int(re.search(r"x \+ (\d+)", messages[-1]["content"]).group(1))


def correct(messages) -> str:
    return f"```python\ndef f(x):\n    return x + {_k(messages)}\n```"


def half_right(messages) -> str:  # passes candidate(1) only
    return f"```python\ndef f(x):\n    return {1 + _k(messages)}\n```"


def wrong(messages) -> str:
    return "```python\ndef f(x):\n    return -1\n```"


def refines(messages) -> str:
    """Half right when solving; correct when refining (its prompt carries feedback)."""
    return correct(messages) if "Feedback:" in messages[-1]["content"] else half_right(messages)
