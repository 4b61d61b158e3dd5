"""The python tool of the deliberation pattern, and judging answers: both run code in coral's sandbox.

`SandboxTool` takes the tool caller's decoded attempts, runs each on its task's public tests in the
sandbox and returns a short report per attempt (tests passed, first failure), which the reflector reads
as text in the next round. `judge` says whether a decoded answer is correct: the task's private tests
for procedural records, exact match otherwise. Nothing here runs model code on the host.
This module does NOT decide when the tool is called (system.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coral.agents.parsers import extract_code
from coral.recursivemas.data import Record
from coral.sandbox.sandbox import Job


def code_of(text: str, entry_point: str = "f") -> str | None:
    return extract_code(text, entry_point).value


class SandboxTool:
    """Runs attempts on the public tests of the task whose question they answer."""

    def __init__(self, sandbox: Any, records: Sequence[Record]) -> None:
        self.sandbox = sandbox
        self.by_question: Mapping[str, Record] = {r.question: r for r in records if r.task is not None}

    def __call__(self, attempts: Sequence[str], questions: Sequence[str]) -> list[str]:
        jobs, where = [], []
        notes = ["no code found in the attempt"] * len(attempts)
        for i, (text, q) in enumerate(zip(attempts, questions, strict=True)):
            rec = self.by_question.get(q)
            if rec is None or rec.task is None:
                raise ValueError(f"SandboxTool: no task with tests for question {q[:60]!r}")
            code = code_of(text, rec.task.entry_point)
            if code is not None:
                jobs.append(Job(code, tuple(rec.task.public_tests), rec.task.entry_point, rec.task.test_setup))
                where.append(i)
        for i, result in zip(where, self.sandbox.run_many(jobs), strict=True):
            failed = [t for t in result.tests if not t.passed]
            notes[i] = f"public tests passed: {result.num_passed}/{len(result.tests)}"
            if result.error:
                notes[i] += f"; error: {result.error[:200]}"
            elif failed:
                notes[i] += f"; first failure: {failed[0].verdict} {failed[0].message[:200]}"
        return notes


def judge(sandbox: Any, records: Sequence[Record], answers: Sequence[str]) -> list[bool]:
    """Correct or not, per answer: all private tests pass (records with a task), else exact match."""
    out = [rec.task is None and text.strip() == rec.answer.strip() for rec, text in zip(records, answers, strict=True)]
    jobs, where = [], []
    for i, (rec, text) in enumerate(zip(records, answers, strict=True)):
        code = code_of(text, rec.task.entry_point) if rec.task is not None else None
        if rec.task is not None and code is not None:
            jobs.append(Job(code, tuple(rec.task.private_tests), rec.task.entry_point, rec.task.test_setup))
            where.append(i)
    for i, result in zip(where, sandbox.run_many(jobs) if jobs else [], strict=True):
        out[i] = result.passed
    return out
