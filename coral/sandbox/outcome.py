"""Host side of a test's raw outcome: the verdict, time and peak memory the fork server's report amounts to.

The server reports what it observed (deadline, wait status, CPU time, peak memory, run-dir files) and the judge
writes its verdict to a memfd; this module turns those into a `TestResult`, or into one result for the whole job
when the program did not compile or load. Messages that came from the program are made encodable here.

This module does NOT run anything and does NOT trust the candidate: a pass needs the judge's verdict (assert
tests) or the expected output (stdio tests, compared here).
"""

from __future__ import annotations

import json
import os
import signal
from typing import TYPE_CHECKING, Any

from coral.trajectory import ExecutionResult, TestCase, TestCost, TestResult, Verdict

if TYPE_CHECKING:
    from coral.sandbox.sandbox import Job

OUTPUT_LIMIT_MB = 16
LOAD_TIMEOUT = "the program timed out while loading"  # an "error" on every test, cached as a timeout is
LOADED_MARK = b"L\n"  # must equal _roles.LOADED_MARK (the server side cannot import coral)


def _all_error(job: Job, message: str) -> ExecutionResult:
    message = _text(message)
    return ExecutionResult(tests=tuple(TestResult("error", message[:500]) for _ in job.tests), error=message)


def _text(message: str) -> str:
    """A message that came from the program, made encodable: a lone surrogate in an exception message
    would otherwise crash whatever later encodes it (a feedback prompt, a report, a log line)."""
    return message.encode("utf-8", "replace").decode("utf-8")


def _signal_of(status: int | None) -> int | None:
    return os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None


def _how_it_ended(status: int) -> str:
    """"killed by SIGSEGV", "killed by signal 40" or "exited (3)". A program may raise any signal, and
    `signal.Signals` names only some of them (not SIGRTMIN+6): an unnamed one must not crash the host."""
    sig = _signal_of(status)
    if sig is None:
        return f"exited ({os.waitstatus_to_exitcode(status)})"
    try:
        return f"killed by {signal.Signals(sig).name}"
    except ValueError:
        return f"killed by signal {sig}"


def _measures(outcome: dict, verdict: dict | None = None) -> dict:
    """TestResult's cost: peak memory is the program's own (peak RSS over its start) plus the memory its
    run-dir files held at the end of the test (a tmpfs with bwrap; 0 in the fallback, whose run dir is on
    disk); steps and the allocation peak are what the judge relayed from a counting candidate."""
    counted = verdict or {}
    steps, alloc_kb = counted.get("steps"), counted.get("alloc_kb")
    alloc: Any = alloc_kb  # JSON from the judge: its type is checked below
    return {"cost": TestCost(wall_s=outcome["wall_s"], cpu_s=outcome["cpu_s"],
                             peak_memory_mb=outcome["peak_mb"] + outcome.get("files_mb", 0.0),
                             steps=steps if type(steps) is int else None,
                             alloc_peak_kb=float(alloc) if type(alloc) in (int, float) else None)}


def _limit_verdict(outcome: dict, memory_mb: int) -> tuple[Verdict, str] | None:
    """Verdicts decided by the server's own observations (deadline, kernel limit signals)."""
    sig = _signal_of(outcome["c_status"])
    if outcome["timed_out"] or sig == signal.SIGXCPU:
        return "timeout", "time limit exceeded"
    if sig == signal.SIGXFSZ:
        return "output_limit", f"output or file size limit ({OUTPUT_LIMIT_MB} MB) exceeded"
    if sig is not None and outcome["peak_mb"] >= 0.9 * memory_mb:
        return "memory", f"memory limit ({memory_mb} MB) exceeded"
    return None


def _load_error(outcome: dict, verdict: bytes, stderr: bytes) -> str:
    """Why the program could not load, or "" when it loaded (or a limit verdict applies)."""
    if verdict.startswith(LOADED_MARK):
        return ""
    if outcome["timed_out"]:
        return LOAD_TIMEOUT
    try:
        parsed = json.loads(verdict) if verdict else {}
    except ValueError:
        parsed = {}
    if parsed.get("status") == "load_error":
        return _text(str(parsed.get("message", "the program failed to load")))
    how = _how_it_ended(outcome["c_status"])
    return f"the program {'was ' if how.startswith('killed') else ''}{how} while loading"


def _whole_job_result(outcome: dict, case: TestCase, job: Job, verdict: bytes, stderr: bytes) -> ExecutionResult | None:
    """The result of the whole job when this test ends it (the program did not compile, or did not load), else
    None. A timeout while loading is measured: its CPU time decides whether the cache keeps it."""
    if "compile_error" in outcome:
        return _all_error(job, outcome["compile_error"])
    load_error = _load_error(outcome, verdict, stderr) if case.kind == "assert" else ""
    if load_error == LOAD_TIMEOUT:
        errors = (TestResult("error", load_error, cost=TestCost(wall_s=outcome["wall_s"], cpu_s=outcome["cpu_s"])),)
        return ExecutionResult(tests=errors * len(job.tests), error=load_error)
    return _all_error(job, load_error) if load_error else None


def _judge_assert(outcome: dict, verdict_raw: bytes, memory_mb: int) -> TestResult:
    try:
        verdict = json.loads(verdict_raw[len(LOADED_MARK):] or b"{}")
    except ValueError:
        verdict = {}
    if type(verdict) is not dict:
        verdict = {}
    measures = _measures(outcome, verdict)
    if verdict.get("status") == "pass" and not outcome["timed_out"]:
        return TestResult("pass", **measures)
    limited = _limit_verdict(outcome, memory_mb)
    if limited:
        return TestResult(limited[0], limited[1], **measures)
    status, message = verdict.get("status"), _text(str(verdict.get("message", "")))
    if status == "error" and verdict.get("exc") == "MemoryError":
        return TestResult("memory", message, **measures)
    if status == "fail":
        return TestResult("fail", message, **measures)
    if status == "crash":
        return TestResult("error", f"the program {_how_it_ended(outcome['c_status'])} during the test", **measures)
    if status in ("error", "setup_error"):
        return TestResult("error", ("test setup failed: " if status == "setup_error" else "") + message, **measures)
    return TestResult("error", "the judge produced no verdict", **measures)


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").rstrip().split("\n"))


def _judge_stdio(outcome: dict, case: TestCase, stdout: bytes, stderr: bytes, memory_mb: int) -> TestResult:
    measures = _measures(outcome)
    limited = _limit_verdict(outcome, memory_mb)
    if limited:
        return TestResult(limited[0], limited[1], **measures)
    status = outcome["c_status"]
    if os.waitstatus_to_exitcode(status) != 0:
        tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        if tail[0].startswith("MemoryError"):
            return TestResult("memory", f"memory limit ({memory_mb} MB) exceeded", **measures)
        how = _how_it_ended(status) if _signal_of(status) else f"exit code {os.WEXITSTATUS(status)}"
        return TestResult("error", f"{how}: {tail[0][:300]}".rstrip(": "), **measures)
    got, expected = _normalise(stdout.decode(errors="replace")), _normalise(case.expected_stdout)
    if got == expected:
        return TestResult("pass", **measures)
    return TestResult("fail", f"expected {expected[:200]!r}, got {got[:200]!r}", **measures)
