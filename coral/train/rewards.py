"""Rewards of written code: the `RewardFn` plug point, CoRe-Code's default coder reward (correctness plus
an efficiency bonus gated on passing) and the chain's credit assignment (planner reward from the rewards
of its plan's codes, grouped by plan_id).

A user changes what a recipe rewards by passing their own `RewardFn` to it (e.g.
`train_corecode(cfg, reward_fn=my_reward)`), without editing the recipe. This module does NOT run code
(the sandbox does) and does NOT compute advantages (train/advantages.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from coral.trajectory import ExecutionResult, Task, Trajectory

TIME_FLOOR_S = 0.01  # total test time below which run times are measurement noise, not efficiency
MEMORY_FLOOR_MB = 1.0  # peak-memory differences below this are allocator noise
EFFICIENCY_TOLERANCE = 0.25  # within 25% of the reference counts as "as good as the reference"


class RewardFn(Protocol):
    """The reward of one written program. `result` holds its verdicts on the tests the recipe scores
    (all tests of a training task); `reference` the reference solution's on the same tests, when the
    recipe ran it (CoRe-Code: when efficiency_weight > 0), else None. `code` is None when the
    completion did not parse."""

    def __call__(self, task: Task, code: str | None, result: ExecutionResult,
                 reference: ExecutionResult | None) -> float: ...


def efficiency_bonus(result: ExecutionResult, reference: ExecutionResult | None) -> float:
    """In [0, 1]: mean over time and peak memory of min(1, ref/solution), where a solution within
    EFFICIENCY_TOLERANCE of the reference, or both below the measurement floor, scores 1.

    The floors and the tolerance matter for GRPO: passing codes of one group would otherwise differ
    only by timing noise, and normalising by the group's tiny std turns that noise into full-size
    advantages (measured: RL then lowered its own training reward). No reference run, or a failing
    one, gives no bonus information: 0."""
    if reference is None or not reference.passed:
        return 0.0
    ratios = []
    for sol, ref, floor in ((result.wall_s, reference.wall_s, TIME_FLOOR_S),
                            (result.peak_memory_mb, reference.peak_memory_mb, MEMORY_FLOOR_MB)):
        ratio = max(ref, floor) / max(sol, floor)
        ratios.append(1.0 if ratio >= 1 / (1 + EFFICIENCY_TOLERANCE) else ratio)
    return sum(ratios) / len(ratios)


def coder_reward(result: ExecutionResult, reference: ExecutionResult | None, correctness: str = "fraction",
                 efficiency_weight: float = 0.1) -> float:
    """Correctness plus an efficiency bonus that only a fully passing solution earns."""
    base = result.pass_fraction if correctness == "fraction" else float(result.passed)
    if result.passed and efficiency_weight > 0:
        base += efficiency_weight * efficiency_bonus(result, reference)
    return base


@dataclass(frozen=True)
class CodeReward:
    """CoRe-Code's default `RewardFn`: `coder_reward` with the recipe's correctness mode and bonus weight."""

    correctness: Literal["fraction", "all"] = "all"
    efficiency_weight: float = 0.1

    def __call__(self, task: Task, code: str | None, result: ExecutionResult,
                 reference: ExecutionResult | None) -> float:
        return coder_reward(result, reference, self.correctness, self.efficiency_weight)


def score_chain(trajs: Sequence[Trajectory], results: Sequence[ExecutionResult],
                references: Mapping[str, ExecutionResult], tasks: Mapping[str, Task], reward_fn: RewardFn,
                planner_reward: Literal["mean", "max"] = "mean") -> None:
    """Set the reward of each trajectory's last coder turn (`reward_fn`) and of its planner turn: the mean
    (or max) of the coder rewards of every code written from that plan. A plan is known by
    (task_id, plan_id), not by object identity: copies of one plan's turn (trajectories that crossed a
    process, or were rebuilt from records) share its credit."""
    per_plan: dict[tuple[str, int], list[float]] = {}
    for traj, res in zip(trajs, results, strict=True):
        r = float(reward_fn(tasks[traj.task_id], traj.code, res, references.get(traj.task_id)))
        traj.turns_of("coder")[-1].reward = r
        for plan in traj.turns_of("planner")[:1]:
            per_plan.setdefault(_plan_key(plan), []).append(r)
    for traj in trajs:
        for plan in traj.turns_of("planner"):
            rs = per_plan[_plan_key(plan)]
            plan.reward = sum(rs) / len(rs) if planner_reward == "mean" else max(rs)


def _plan_key(turn) -> tuple[str, int]:
    if "plan_id" not in turn.metadata or "task_id" not in turn.metadata:
        raise ValueError(f"planner turn of agent {turn.agent!r} has no task_id/plan_id metadata: "
                         "cannot credit its plan")
    return turn.metadata["task_id"], int(turn.metadata["plan_id"])
