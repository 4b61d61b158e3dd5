"""The tools of the deliberation patterns, and judging answers: all run code in coral's sandbox.

`PythonTool` (deliberation, the official flow) runs the code of a `<python>` call the tool caller writes
in its final generation as a program (no input) and returns what it printed, stderr included, cut to
`max_chars`. `SandboxTool` (deliberation_public_tests, coral's variant) takes the tool caller's decoded
attempts, runs each on its task's public tests and returns a short report per attempt (tests passed,
first failure), which the reflector reads as text in the next round. `judge` says whether a decoded
answer is correct: the task's private tests for procedural records, exact match otherwise; tool calls and
their results in an answer are the tool caller's scratch work, not its answer, and are cut out first.
Nothing here runs model code on the host.
This module does NOT decide when a tool is called (system.py, toolcalls.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from coral.agents.parsers import extract_code
from coral.recursivemas.data import Record
from coral.sandbox.protocol import SandboxProtocol
from coral.sandbox.sandbox import Job
from coral.trajectory import TestCase

TOOL_SPAN = re.compile(r"<(python|result)>.*?(</\1>|$)", re.DOTALL | re.IGNORECASE)


def without_tool_calls(text: str) -> str:
    """`text` without its `<python>` calls and `<result>` outputs (an unclosed one runs to the end)."""
    return TOOL_SPAN.sub("", text)


def code_of(text: str, entry_point: str = "f") -> str | None:
    return extract_code(without_tool_calls(text), entry_point).value


class PythonTool:
    """Runs each tool call's code as a program in the sandbox; returns its output per call."""

    def __init__(self, sandbox: SandboxProtocol, max_chars: int = 2000) -> None:
        self.sandbox, self.max_chars = sandbox, max_chars

    def __call__(self, codes: Sequence[str]) -> list[str]:
        jobs = [Job(code, (TestCase(kind="stdio"),), keep_output=True) for code in codes]
        out = []
        for result in self.sandbox.run_many(jobs) if jobs else []:
            test = result.tests[0] if result.tests else None
            if result.error or test is None:
                text = f"[error] {result.error or 'no result'}"
            elif test.verdict in ("timeout", "memory"):
                text = f"[{test.verdict}] {test.message}".strip()
            else:
                text = test.output.strip() or "[no output]"
            out.append(text if len(text) <= self.max_chars else text[: self.max_chars] + " [cut]")
        return out


class SandboxTool:
    """Runs attempts on the public tests of the task whose question they answer."""

    def __init__(self, sandbox: SandboxProtocol, records: Sequence[Record]) -> None:
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


def judge(sandbox: SandboxProtocol, records: Sequence[Record], answers: Sequence[str]) -> list[bool]:
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


def pattern_tool(pattern: Any, sandbox: SandboxProtocol, records: Sequence[Record]) -> Any:
    """The tool `pattern` calls (patterns.py): a PythonTool, a SandboxTool on `records`' public tests, or
    None for a pattern without one."""
    if pattern.tool == "python":
        return PythonTool(sandbox)
    if pattern.tool == "public_tests":
        return SandboxTool(sandbox, records)
    return None
