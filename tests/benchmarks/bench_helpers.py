"""Trusted in-process execution for the benchmark tests.

Only for code we trust (our procedural references, canonical solutions of public benchmarks, fixture
solutions): `exec` in this process, or a plain `python` subprocess for stdio programs. Untrusted code
belongs in coral.sandbox.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from coral.trajectory import Task, TestCase

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "benchmarks"


def _assert_passes(namespace: dict, case: TestCase) -> bool:
    try:
        exec(case.code, dict(namespace))
    except Exception:
        return False
    return True


def _stdio_passes(code: str, case: TestCase) -> bool:
    proc = subprocess.run([sys.executable, "-c", code], input=case.stdin, capture_output=True, text=True,
                          timeout=20)
    got = [line.rstrip() for line in proc.stdout.rstrip().splitlines()]
    want = [line.rstrip() for line in case.expected_stdout.rstrip().splitlines()]
    return proc.returncode == 0 and got == want


def run_trusted(task: Task, code: str, tests: tuple[TestCase, ...] | None = None) -> list[bool]:
    """Per-test pass/fail of trusted `code` (run as the task's program) on `tests` (default: the private tests)."""
    tests = task.private_tests if tests is None else tests
    if task.io_style == "stdio":
        return [_stdio_passes(task.program(code), t) for t in tests]
    namespace: dict = {"__name__": "__candidate__"}
    try:
        exec(task.program(code), namespace)
        exec(task.test_setup, namespace)
        namespace["candidate"] = namespace[task.entry_point]
    except Exception:
        return [False] * len(tests)
    return [_assert_passes(namespace, t) for t in tests]
