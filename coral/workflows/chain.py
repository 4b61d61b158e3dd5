"""The chain workflow: [retriever ->] [planner ->] coder [-> debugger], batched over tasks.

For each task the planner samples `plans_per_task` plans; for each plan the coder samples
`codes_per_plan` codes; an optional debugger sees the public-test feedback of each code and rewrites
it (`debug_rounds` times, only while public tests fail). Every final code is one Trajectory; the
trajectories of one plan share the planner's Turn object (and the retriever's), so a trainer can
credit one plan with the results of all its codes (`turn.metadata["plan_id"]`).

Random streams: `step` and each request's key (task, plan index, code index, debug round) go to the
agents, which derive one seed per request from them (coral/seeding.py).

`single` is the chain without planner. This module does NOT compute rewards or train anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coral.agents import Agent
from coral.trajectory import Task, Trajectory, Turn
from coral.workflows.common import judge, problem_text, task_keys


@dataclass(frozen=True)
class ChainConfig:
    plans_per_task: int = 1
    codes_per_plan: int = 1
    debug_rounds: int = 0

    def __post_init__(self) -> None:
        for name in ("plans_per_task", "codes_per_plan"):
            if getattr(self, name) < 1:
                raise ValueError(f"ChainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.debug_rounds < 0:
            raise ValueError(f"ChainConfig.debug_rounds must be >= 0, got {self.debug_rounds}")


def _expand(items: Sequence[Any], times: int) -> list[Any]:
    return [x for x in items for _ in range(times)]


def run_chain(tasks: Sequence[Task], coder: Agent, sandbox: Any, cfg: ChainConfig = ChainConfig(), *,
              planner: Agent | None = None, retriever: Agent | None = None,
              debugger: Agent | None = None, step: int = 0) -> list[Trajectory]:
    """Trajectories ordered task-major, then plan, then code: task i, plan p, code c is at
    index (i * plans_per_task + p) * codes_per_plan + c. `step` (the training step) keys the
    random streams; request keys name the task and the sample, so they repeat across calls
    only for the same task at the same step."""
    problems = [problem_text(t) for t in tasks]
    tkeys = task_keys(tasks)
    notes: list[Turn | None] = [None] * len(tasks)
    if retriever is not None:
        notes = list(retriever.act([{"problem": p} for p in problems], call_index=0, step=step,
                                   keys=[f"{k}/notes" for k in tkeys]))
        problems = [f"{p}\nNotes:\n{n.parsed or ''}" for p, n in zip(problems, notes, strict=True)]

    n_plans = cfg.plans_per_task if planner is not None else 1
    plan_tasks = _expand(range(len(tasks)), n_plans)
    plan_keys = [f"{tkeys[i]}/plan{j % n_plans}" for j, i in enumerate(plan_tasks)]
    plans: list[Turn | None] = [None] * len(plan_tasks)
    if planner is not None:
        plans = list(planner.act([{"problem": problems[i]} for i in plan_tasks], call_index=0, step=step,
                                 keys=plan_keys))
        for j, turn in enumerate(plans):
            turn.metadata.update(task_id=tasks[plan_tasks[j]].id, plan_id=j)

    code_plans = _expand(range(len(plan_tasks)), cfg.codes_per_plan)
    contexts = []
    for j in code_plans:
        plan = plans[j]
        contexts.append({"problem": problems[plan_tasks[j]], "plan": (plan.parsed or "") if plan else ""})
    code_tasks = [tasks[plan_tasks[j]] for j in code_plans]
    code_keys = [f"{plan_keys[j]}/code{k % cfg.codes_per_plan}" for k, j in enumerate(code_plans)]
    codes = coder.act(contexts, call_index=0, entry_points=[t.entry_point for t in code_tasks], step=step,
                      keys=code_keys)
    for k, turn in enumerate(codes):
        turn.metadata.update(task_id=code_tasks[k].id, plan_id=code_plans[k], sample_id=k)

    results = judge(sandbox, code_tasks, [t.parsed for t in codes])
    trajectories = []
    for k, (turn, (public, private)) in enumerate(zip(codes, results, strict=True)):
        j = code_plans[k]
        turns = [t for t in (notes[plan_tasks[j]], plans[j], turn) if t is not None]
        trajectories.append(Trajectory(task_id=code_tasks[k].id, turns=turns, code=turn.parsed,
                                       public=public, private=private))
    if debugger is not None:
        for round_index in range(cfg.debug_rounds):
            _debug_round(trajectories, code_tasks, problems, plan_tasks, code_plans, debugger, sandbox,
                         round_index + 1, step, code_keys)
    for traj in trajectories:
        traj.metrics.update(_token_metrics(traj))
    return trajectories


def _debug_round(trajectories: list[Trajectory], code_tasks: list[Task], problems: list[str],
                 plan_tasks: list[int], code_plans: list[int], debugger: Agent, sandbox: Any,
                 call_index: int, step: int, code_keys: list[str]) -> None:
    """Debugger rewrites every code whose public tests fail; its turn joins the trajectory and its
    code replaces the old one (the coder's turn keeps the verdict it earned, in metadata)."""
    todo = [k for k, tr in enumerate(trajectories) if tr.public is not None and not tr.public.passed]
    if not todo:
        return
    contexts = [{"problem": problems[plan_tasks[code_plans[k]]], "code": trajectories[k].code or "",
                 "feedback": trajectories[k].public.feedback(code_tasks[k].public_tests)} for k in todo]
    fixes = debugger.act(contexts, call_index=call_index, entry_points=[code_tasks[k].entry_point for k in todo],
                         step=step, keys=[f"{code_keys[k]}/debug{call_index}" for k in todo])
    results = judge(sandbox, [code_tasks[k] for k in todo], [t.parsed for t in fixes])
    for k, turn, (public, private) in zip(todo, fixes, results, strict=True):
        tr = trajectories[k]
        prev = tr.turns[-1]
        prev.metadata.setdefault("public_pass_fraction", tr.public.pass_fraction)
        turn.metadata.update(task_id=tr.task_id, plan_id=code_plans[k], sample_id=k,
                             before_pass_fraction=tr.public.pass_fraction)
        tr.turns.append(turn)
        tr.code, tr.public, tr.private = turn.parsed, public, private


def _token_metrics(traj: Trajectory) -> dict[str, float]:
    return {
        "prompt_tokens": float(sum(len(t.prompt_ids) for t in traj.turns)),
        "completion_tokens": float(sum(len(t.completion_ids) for t in traj.turns)),
    }


def run_single(tasks: Sequence[Task], coder: Agent, sandbox: Any, samples_per_task: int = 1,
               step: int = 0) -> list[Trajectory]:
    """One agent answers each task `samples_per_task` times."""
    return run_chain(tasks, coder, sandbox, ChainConfig(codes_per_plan=samples_per_task), step=step)
