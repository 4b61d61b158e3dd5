"""Rewards of written code: the `RewardFn` plug point, CoRe-Code's default coder reward (correctness plus
an efficiency bonus gated on passing) and the chain's credit assignment: a coder turn earns the reward of
the code it wrote (before any debugging); a plan earns the mean (or max) of its codes' rewards, grouped by
plan_id; a retrieval the same over every code written below it, grouped by retrieval_id; a debugger
rewrite earns its own code's reward ("pass") or that minus the reward of the code it was given
("improvement"), each in its own round.

A user changes what a recipe rewards by passing their own `RewardFn` to it (e.g.
`train_corecode(cfg, reward_fn=my_reward)`), without editing the recipe. This module does NOT run code
(the sandbox does) and does NOT compute advantages (train/advantages.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from coral.trajectory import ExecutionResult, Task, Trajectory, Turn

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


def all_tests(verdicts: tuple[ExecutionResult, ExecutionResult]) -> ExecutionResult:
    """One result over the public and the private tests of a (public, private) pair (training rewards
    score a training task's code on all its tests)."""
    public, private = verdicts
    return ExecutionResult(public.tests + private.tests, public.error)


def written_result(turn: Turn) -> ExecutionResult:
    """All-tests result of the code `turn` wrote (the chain keeps it in metadata["verdicts"])."""
    if "verdicts" not in turn.metadata:
        raise ValueError(f"{turn.role} turn of agent {turn.agent!r} has no metadata['verdicts']: the chain did not "
                         "judge its code, so it cannot be rewarded")
    return all_tests(turn.metadata["verdicts"])


def score_chain(trajs: Sequence[Trajectory], results: Sequence[ExecutionResult],
                references: Mapping[str, ExecutionResult], tasks: Mapping[str, Task], reward_fn: RewardFn,
                planner_reward: Literal["mean", "max"] = "mean") -> None:
    """Set the reward of each trajectory's coder turn (`reward_fn` on `results`, the coder's own code's
    verdicts), of its planner turn: the mean (or max) of the coder rewards of every code written from
    that plan, and of its retriever turn: the same over every code written below that retrieval. A plan
    is known by (task_id, plan_id) and a retrieval by (task_id, retrieval_id), not by object identity:
    copies of one turn (trajectories that crossed a process, or were rebuilt from records) share its
    credit."""
    pooled: dict[tuple[str, str, int], list[float]] = {}
    for traj, res in zip(trajs, results, strict=True):
        coder = traj.turns_of("coder")[-1]
        r = float(reward_fn(tasks[traj.task_id], coder.parsed, res, references.get(traj.task_id)))
        coder.reward = r
        for turn in traj.turns_of("planner")[:1] + traj.turns_of("retriever")[:1]:
            pooled.setdefault(_credit_key(turn), []).append(r)
    for traj in trajs:
        for turn in traj.turns_of("planner") + traj.turns_of("retriever"):
            rs = pooled[_credit_key(turn)]
            turn.reward = sum(rs) / len(rs) if planner_reward == "mean" else max(rs)


def score_debugger(trajs: Sequence[Trajectory], references: Mapping[str, ExecutionResult],
                   tasks: Mapping[str, Task], reward_fn: RewardFn,
                   mode: Literal["pass", "improvement"] = "improvement") -> None:
    """Set the reward of every debugger turn from the tests of its own rewrite, in its own round: "pass":
    `reward_fn` of the rewrite; "improvement": that minus `reward_fn` of the code it was given (a rewrite
    that keeps an already passing code earns 0, one that breaks it a negative reward)."""
    if mode not in ("pass", "improvement"):
        raise ValueError(f"score_debugger: mode must be 'pass' or 'improvement', got {mode!r}")
    for traj in trajs:
        task, ref = tasks[traj.task_id], references.get(traj.task_id)
        for turn in traj.turns_of("debugger"):
            r = float(reward_fn(task, turn.parsed, written_result(turn), ref))
            if mode == "improvement":
                r -= float(reward_fn(task, turn.metadata["given_code"], all_tests(turn.metadata["given"]), ref))
            turn.reward = r


def _credit_key(turn: Turn) -> tuple[str, str, int]:
    field = "plan_id" if turn.role == "planner" else "retrieval_id"
    if field not in turn.metadata or "task_id" not in turn.metadata:
        raise ValueError(f"{turn.role} turn of agent {turn.agent!r} has no task_id/{field} metadata: "
                         f"cannot credit its {'plan' if turn.role == 'planner' else 'retrieval'}")
    return turn.role, turn.metadata["task_id"], int(turn.metadata[field])
