"""Benchmark metrics: unbiased pass@k, per-test pass rate, efficiency relative to the reference, and
a per-difficulty summary.

`paired_change` compares two evaluations of the same tasks (before / after training): the mean per-task
change of the pass rate and its standard error, the right noise yardstick when both ran on one task set.

Efficiency follows EffiBench: NET = execution time of a passing solution / time of the reference, NMU =
peak memory of the solution / peak memory of the reference, on the same tests (lower is better, 1.0 is
parity). Both figures come from `ExecutionResult`s that the sandbox measured; times and memories below
the measurement resolution (`min_time_s`, `min_memory_mb`) are raised to it so that a ratio of two
near-zero numbers cannot explode.

This module does NOT run code or time anything itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from coral.trajectory import ExecutionResult


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n samples, c of them
    correct, is correct: 1 - C(n-c, k) / C(n, k), computed as a stable product (HumanEval paper)."""
    if not (n >= 1 and 0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n, 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def fix_rate(outcomes: Iterable[tuple[bool, bool]]) -> tuple[float, int]:
    """A debugger's fix rate from (given code passed, final code passed) pairs of the codes it rewrote:
    (the share of the failing given codes whose final code passes, how many failed; 0.0 when none did)."""
    failing = [after for before, after in outcomes if not before]
    return (sum(failing) / len(failing) if failing else 0.0), len(failing)


def per_test_pass_rate(result: ExecutionResult, num_tests: int | None = None) -> float:
    """Passed tests / tests. `num_tests` is the size of the test list when the result may be short
    (a program that could not run at all reports no tests: that is 0 passed, not 0 of 0)."""
    total = len(result.tests) if num_tests is None else num_tests
    if total < len(result.tests):
        raise ValueError(f"per_test_pass_rate: num_tests={total} < {len(result.tests)} results")
    return result.num_passed / total if total else 0.0


@dataclass(frozen=True)
class Efficiency:
    net: float  # normalised execution time: solution / reference
    nmu: float  # normalised peak memory: solution / reference


def efficiency_ratios(
    solution: ExecutionResult,
    reference: ExecutionResult,
    *,
    clock: Literal["cpu", "wall"] = "cpu",
    min_time_s: float = 1e-4,
    min_memory_mb: float = 0.1,
) -> Efficiency | None:
    """NET and NMU of a solution against the reference on the same tests; None unless both passed
    every test (efficiency of a wrong answer is meaningless)."""
    if not (solution.passed and reference.passed):
        return None
    if len(solution.tests) != len(reference.tests):
        raise ValueError(f"efficiency_ratios: solution ran {len(solution.tests)} tests, "
                         f"reference ran {len(reference.tests)}")
    if clock not in ("cpu", "wall"):
        raise ValueError(f"efficiency_ratios: clock must be 'cpu' or 'wall', got {clock!r}")
    t_sol = solution.cpu_s if clock == "cpu" else solution.wall_s
    t_ref = reference.cpu_s if clock == "cpu" else reference.wall_s
    net = max(t_sol, min_time_s) / max(t_ref, min_time_s)
    nmu = max(solution.peak_memory_mb, min_memory_mb) / max(reference.peak_memory_mb, min_memory_mb)
    return Efficiency(net=net, nmu=nmu)


@dataclass(frozen=True)
class TaskScore:
    """Everything `summarize` needs about one task: n samples, c of them fully correct."""

    task_id: str
    difficulty: str
    num_samples: int
    num_correct: int
    test_pass_rate: float  # mean per-test pass rate over the samples
    net: float | None = None  # mean over passing samples; None when none passed or no reference
    nmu: float | None = None


def score_task(task_id: str, difficulty: object, results: Sequence[ExecutionResult], num_tests: int,
               reference: ExecutionResult | None = None) -> TaskScore:
    """Aggregate the private-test results of n samples of one task."""
    if not results:
        raise ValueError(f"score_task: no results for task {task_id!r}")
    effs = [e for r in results if reference is not None and (e := efficiency_ratios(r, reference))]
    return TaskScore(
        task_id=task_id,
        difficulty=str(difficulty),
        num_samples=len(results),
        num_correct=sum(r.passed for r in results),
        test_pass_rate=sum(per_test_pass_rate(r, num_tests) for r in results) / len(results),
        net=sum(e.net for e in effs) / len(effs) if effs else None,
        nmu=sum(e.nmu for e in effs) / len(effs) if effs else None,
    )


def _geo_mean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def summarize(scores: Iterable[TaskScore], ks: Sequence[int] = (1,)) -> dict[str, dict[str, float]]:
    """Per difficulty (and "all"): tasks, pass@k for each k (tasks with fewer than k samples are
    skipped for that k), mean test pass rate, and the geometric means of NET and NMU over tasks that
    have them (ratios average geometrically: 2x slower and 2x faster cancel)."""
    groups: dict[str, list[TaskScore]] = {}
    for s in scores:
        groups.setdefault(s.difficulty, []).append(s)
        groups.setdefault("all", []).append(s)
    out: dict[str, dict[str, float]] = {}
    for name, group in sorted(groups.items(), key=lambda kv: (kv[0] == "all", kv[0])):
        row: dict[str, float] = {"tasks": float(len(group))}
        for k in ks:
            eligible = [s for s in group if s.num_samples >= k]
            if eligible:
                row[f"pass@{k}"] = sum(pass_at_k(s.num_samples, s.num_correct, k) for s in eligible) / len(eligible)
        row["test_pass_rate"] = sum(s.test_pass_rate for s in group) / len(group)
        for key in ("net", "nmu"):
            vals = [getattr(s, key) for s in group if getattr(s, key) is not None]
            if vals:
                row[key] = _geo_mean(vals)
        out[name] = row
    return out


@dataclass(frozen=True)
class PairedChange:
    mean: float  # mean over tasks of (after - before) pass rate
    se: float  # its standard error: sample std of the per-task changes / sqrt(tasks); 0 for one task
    up: int  # tasks whose pass rate rose
    down: int  # tasks whose pass rate fell
    tasks: int


def paired_change(before: Mapping[str, float], after: Mapping[str, float]) -> PairedChange:
    """Per-task change of the pass rate between two evaluations of the same tasks (task id -> rate)."""
    if set(before) != set(after):
        missing = sorted(set(before) ^ set(after))
        raise ValueError(f"paired_change: the two evaluations cover different tasks, e.g. {missing[0]!r} "
                         f"({len(missing)} task ids in only one of them)")
    if not before:
        raise ValueError("paired_change: no tasks")
    diffs = [after[t] - before[t] for t in before]
    n = len(diffs)
    mean = sum(diffs) / n
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) if n > 1 else 0.0
    return PairedChange(mean, se, sum(d > 0 for d in diffs), sum(d < 0 for d in diffs), n)
