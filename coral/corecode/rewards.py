"""CoRe-Code's credit assignment along a chain: a coder turn earns the reward of the code it wrote (before
any debugging); a plan earns the mean (or max) of its codes' rewards, grouped by plan_id; a retrieval the
same over every code written below it, grouped by retrieval_id; a debugger rewrite earns its own code's
reward ("pass") or that minus the reward of the code it was given ("improvement"), each in its own round.

This module does NOT define what a code earns (a `RewardFn`, coral/train/rewards.py) and does NOT compute
advantages (train/advantages.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from coral.train.rewards import RewardFn
from coral.trajectory import ExecutionResult, Task, Trajectory, Turn


def written_result(turn: Turn) -> ExecutionResult:
    """All-tests result of the code `turn` wrote (the chain keeps its verdicts on the turn)."""
    if turn.verdicts is None:
        raise ValueError(f"{turn.role} turn of agent {turn.agent!r} has no verdicts: the chain did not "
                         "judge its code, so it cannot be rewarded")
    return turn.verdicts.all


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
                if turn.rewrite is None:
                    raise ValueError(f"debugger turn of agent {turn.agent!r} does not say what it was given: "
                                     "its improvement cannot be rewarded")
                r -= float(reward_fn(task, turn.rewrite.given_code, turn.rewrite.given.all, ref))
            turn.reward = r


def _credit_key(turn: Turn) -> tuple[str, str, int]:
    field = "plan_id" if turn.role == "planner" else "retrieval_id"
    credit = turn.credit
    index = getattr(credit, field) if credit is not None else None
    if credit is None or index is None:
        raise ValueError(f"{turn.role} turn of agent {turn.agent!r} has no task_id/{field} credit: "
                         f"cannot credit its {'plan' if turn.role == 'planner' else 'retrieval'}")
    return turn.role, credit.task_id, int(index)
