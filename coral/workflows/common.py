"""Pieces every workflow shares: judging code against a task's public and private tests, and the
task part of the request keys that name random streams (coral/seeding.py).

Does NOT decide rewards: a workflow records verdicts, the trainer turns them into rewards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from coral.benchmarks.outputs import OUTPUT_MATCHES
from coral.sandbox import Job
from coral.sandbox.protocol import SandboxProtocol
from coral.trajectory import ExecutionResult, Task, TestResult, Verdicts


def unrunnable(n_tests: int, why: str) -> ExecutionResult:
    """The result for an answer that could not be run at all (nothing parsed, no code)."""
    return ExecutionResult(tests=tuple(TestResult("error", why) for _ in range(n_tests)), error=why)


def judge(sandbox: SandboxProtocol, tasks: Sequence[Task], codes: Sequence[str | None],
          count_steps: bool = False) -> list[Verdicts]:
    """The verdicts (public and private) of each (task, code) pair, in one parallel sandbox batch.

    The program run is `task.program(code)`: the answer with what the benchmark's harness puts before it
    (HumanEval: the prompt). Stdio outputs the sandbox fails are compared again by the benchmark's own rule
    (`task.output_match`, coral.benchmarks.outputs). Public and private tests run in one job per code;
    results are split back by position.
    """
    if len(tasks) != len(codes):
        raise ValueError(f"judge: {len(tasks)} tasks but {len(codes)} codes")
    jobs, where = [], []
    for i, (task, code) in enumerate(zip(tasks, codes, strict=True)):
        if code is not None and code.strip():
            tests = task.public_tests + task.private_tests
            jobs.append(Job(code=task.program(code), tests=tests, entry_point=task.entry_point,
                            test_setup=task.test_setup, keep_output=_rejudges(task), count_steps=count_steps))
            where.append(i)
    results = [_rejudged(tasks[i], res) if _rejudges(tasks[i]) else res
               for i, res in zip(where, sandbox.run_many(jobs) if jobs else [], strict=True)]
    out = [Verdicts(unrunnable(len(t.public_tests), "no code"), unrunnable(len(t.private_tests), "no code"))
           for t in tasks]
    for i, res in zip(where, results, strict=True):
        n_pub = len(tasks[i].public_tests)
        out[i] = Verdicts(ExecutionResult(res.tests[:n_pub], res.error), ExecutionResult(res.tests[n_pub:], res.error))
    return out


def _rejudges(task: Task) -> bool:
    return task.output_match != "lines" and any(t.kind == "stdio" for t in task.all_tests)


def _rejudged(task: Task, result: ExecutionResult) -> ExecutionResult:
    """`result` with each failed stdio test judged again by the task's output rule; outputs dropped (they
    were kept for this comparison only)."""
    match = OUTPUT_MATCHES[task.output_match]
    tests = []
    for case, test in zip(task.public_tests + task.private_tests, result.tests, strict=True):
        if case.kind == "stdio" and test.verdict == "fail" and match(test.stdout, case.expected_stdout):
            test = replace(test, verdict="pass", message="")
        tests.append(replace(test, output="", stdout=""))
    return ExecutionResult(tuple(tests), result.error)


def task_keys(tasks: Sequence[Task]) -> list[str]:
    """The task part of each request key: the task id, with "#k" on its k-th repeat in `tasks` (a
    training batch that wraps around an epoch can hold one task twice; each copy samples its own)."""
    seen: dict[str, int] = {}
    keys = []
    for task in tasks:
        k = seen.get(task.id, 0)
        seen[task.id] = k + 1
        keys.append(task.id if k == 0 else f"{task.id}#{k}")
    return keys


def problem_text(task: Task) -> str:
    return task.prompt.strip()
