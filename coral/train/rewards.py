"""Rewards of written code: the `RewardFn` plug point and the default code reward (correctness plus an
efficiency bonus gated on passing), shared by the recipes.

A user changes what a recipe rewards by passing their own `RewardFn` to it (e.g.
`train_corecode(cfg, reward_fn=my_reward)`), without editing the recipe. This module does NOT run code
(the sandbox does), does NOT assign credit along a chain (coral/corecode/rewards.py) and does NOT compute
advantages (train/advantages.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from coral.trajectory import ExecutionResult, Task

TIME_FLOOR_S = 0.01  # total test time below which run times are measurement noise, not efficiency
MEMORY_FLOOR_MB = 1.0  # peak-memory differences below this are allocator noise
STEPS_FLOOR = 100  # counted steps over all tests below which two programs are equally fast (a few lines a test)
ALLOC_FLOOR_KB = 64.0  # allocation peaks below this are the calls' own bookkeeping, not the program's data
EFFICIENCY_TOLERANCE = 0.25  # within 25% of the reference counts as "as good as the reference"
# "steps": counted steps and allocation peak (TestCost), the same on every run of a seed whatever the load
# (the sandbox must count them: Job.count_steps); "time": measured wall time and peak RSS, which move with load
EfficiencyMeasure = Literal["steps", "time"]
EFFICIENCY_MEASURES: tuple[str, ...] = ("steps", "time")


class RewardFn(Protocol):
    """The reward of one written program. `result` holds its verdicts on the tests the recipe scores
    (all tests of a training task); `reference` the reference solution's on the same tests, when the
    recipe ran it (CoRe-Code: when efficiency_weight > 0), else None. `code` is None when the
    completion did not parse."""

    def __call__(self, task: Task, code: str | None, result: ExecutionResult,
                 reference: ExecutionResult | None) -> float: ...


def _costs(result: ExecutionResult, measure: str) -> tuple[tuple[float, float], tuple[float, float]]:
    """((time cost, its floor), (memory cost, its floor)) of `result` under `measure`."""
    if measure == "time":
        return (result.wall_s, TIME_FLOOR_S), (result.peak_memory_mb, MEMORY_FLOOR_MB)
    if measure != "steps":
        raise ValueError(f"efficiency measure must be one of {EFFICIENCY_MEASURES}, got {measure!r}")
    if result.steps is None or result.alloc_peak_kb is None:
        raise ValueError("efficiency measure 'steps' needs counted results: judge the code with count_steps=True")
    return (float(result.steps), STEPS_FLOOR), (result.alloc_peak_kb, ALLOC_FLOOR_KB)


def efficiency_bonus(result: ExecutionResult, reference: ExecutionResult | None, measure: str = "steps") -> float:
    """In [0, 1]: mean over time and memory of min(1, ref/solution), where a solution within
    EFFICIENCY_TOLERANCE of the reference, or both below the floor, scores 1. `measure` "steps": time is the
    counted steps and memory the counted allocation peak; "time": measured wall time and peak RSS.

    The floors and the tolerance matter for GRPO: passing codes of one group would otherwise differ
    only by timing noise, and normalising by the group's tiny std turns that noise into full-size
    advantages (measured: RL then lowered its own training reward). No reference run, or a failing
    one, gives no bonus information: 0."""
    if reference is None or not reference.passed:
        return 0.0
    ratios = []
    for (sol, floor), (ref, _) in zip(_costs(result, measure), _costs(reference, measure), strict=True):
        ratio = max(ref, floor) / max(sol, floor)
        ratios.append(1.0 if ratio >= 1 / (1 + EFFICIENCY_TOLERANCE) else ratio)
    return sum(ratios) / len(ratios)


def coder_reward(result: ExecutionResult, reference: ExecutionResult | None, correctness: str = "fraction",
                 efficiency_weight: float = 0.1, efficiency_measure: str = "steps") -> float:
    """Correctness plus an efficiency bonus that only a fully passing solution earns."""
    base = result.pass_fraction if correctness == "fraction" else float(result.passed)
    if result.passed and efficiency_weight > 0:
        base += efficiency_weight * efficiency_bonus(result, reference, efficiency_measure)
    return base


@dataclass(frozen=True)
class CodeReward:
    """CoRe-Code's default `RewardFn`: `coder_reward` with the recipe's correctness mode and bonus weight."""

    correctness: Literal["fraction", "all"] = "all"
    efficiency_weight: float = 0.1
    efficiency_measure: EfficiencyMeasure = "steps"

    def __call__(self, task: Task, code: str | None, result: ExecutionResult,
                 reference: ExecutionResult | None) -> float:
        return coder_reward(result, reference, self.correctness, self.efficiency_weight, self.efficiency_measure)
