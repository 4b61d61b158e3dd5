"""The chain workflow: [retriever ->] [planner ->] coder [-> debugger], batched over tasks.

For each task the retriever (when there is one) samples `retrievals_per_task` lists of related solved
examples (MapCoder's self-retrieval: problems and their code, written by the model); for each retrieval
the planner samples `plans_per_task` plans; for each plan the coder samples `codes_per_plan` codes. An
optional debugger sees a code and its public-test feedback and writes `rewrites_per_code` rewrites of it
per round (`debug_rounds` rounds; by default only while the public tests fail); the trajectory goes on
with the rewrite that passes most public tests (the first on ties), so only public tests steer it.

Every final code is one Trajectory; the trajectories of one plan share the planner's Turn object (and
those of one retrieval the retriever's), so a trainer can credit one plan or retrieval with the results
of all its codes (`turn.credit`: task, retrieval, plan, code). Every turn that writes code keeps the
verdicts of its own code (`turn.verdicts`); a debugger turn's credit also names its round and rewrite
index, and `turn.rewrite` holds the code it was given, that code's verdicts and whether the trajectory went
on with its rewrite. All rewrites stay in the trajectory's turns.

Random streams: `step` and each request's key (task, retrieval, plan, code, debug round, rewrite) go to
the agents, which derive one seed per request from them (coral/seeding.py).

`single` is the chain without planner. This module does NOT compute rewards or train anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from coral.agents import Agent
from coral.sandbox.protocol import SandboxProtocol
from coral.trajectory import Credit, Rewrite, Task, Trajectory, Turn
from coral.workflows.common import judge, problem_text, task_keys

EXAMPLES_HEADER = "Similar solved problems:"


@dataclass(frozen=True)
class ChainConfig:
    plans_per_task: int = 1  # plans per task (per retrieval when there is a retriever)
    codes_per_plan: int = 1
    debug_rounds: int = 0
    retrievals_per_task: int = 1  # retriever samples per task; ignored without a retriever
    rewrites_per_code: int = 1  # debugger rewrites of one code in one round
    # "public_fails": the debugger sees only codes whose public tests fail; "always": every code, every round
    debug_when: Literal["public_fails", "always"] = "public_fails"
    count_steps: bool = False  # the sandbox counts each code's steps and allocations (TestCost), for a counted reward

    def __post_init__(self) -> None:
        for name in ("plans_per_task", "codes_per_plan", "retrievals_per_task", "rewrites_per_code"):
            if getattr(self, name) < 1:
                raise ValueError(f"ChainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.debug_rounds < 0:
            raise ValueError(f"ChainConfig.debug_rounds must be >= 0, got {self.debug_rounds}")
        if self.debug_when not in ("public_fails", "always"):
            raise ValueError(f"ChainConfig.debug_when must be 'public_fails' or 'always', got {self.debug_when!r}")


def with_examples(problem: str, examples: str | None) -> str:
    """The problem as planner and coder see it after retrieval (cold-start data uses the same text)."""
    return f"{problem}\n{EXAMPLES_HEADER}\n{examples or ''}"


def _expand(items: Sequence[Any], times: int) -> list[Any]:
    return [x for x in items for _ in range(times)]


def run_chain(tasks: Sequence[Task], coder: Agent, sandbox: SandboxProtocol, cfg: ChainConfig = ChainConfig(), *,
              planner: Agent | None = None, retriever: Agent | None = None,
              debugger: Agent | None = None, step: int = 0) -> list[Trajectory]:
    """Trajectories ordered task-major, then retrieval, then plan, then code: task i, retrieval r, plan p,
    code c is at index ((i * R + r) * P + p) * C + c (R = 1 without a retriever, P = 1 without a
    planner). `step` (the training step) keys the random streams; request keys name the task and the
    sample, so they repeat across calls only for the same task at the same step."""
    problems = [problem_text(t) for t in tasks]
    ret_tasks, ret_keys, notes, seen = _retrieve(tasks, problems, retriever, cfg, step)
    plan_rets, plan_keys, plans = _plan(tasks, ret_tasks, ret_keys, seen, planner, cfg, step,
                                        with_retrieval=retriever is not None)

    code_plans = _expand(range(len(plan_rets)), cfg.codes_per_plan)
    contexts = []
    for j in code_plans:
        plan = plans[j]
        contexts.append({"problem": seen[plan_rets[j]], "plan": (plan.parsed or "") if plan else ""})
    code_tasks = [tasks[ret_tasks[plan_rets[j]]] for j in code_plans]
    code_keys = [f"{plan_keys[j]}/code{k % cfg.codes_per_plan}" for k, j in enumerate(code_plans)]
    codes = coder.act(contexts, call_index=0, entry_points=[t.entry_point for t in code_tasks], step=step,
                      keys=code_keys)
    results = judge(sandbox, code_tasks, [t.parsed for t in codes], count_steps=cfg.count_steps)
    trajectories = []
    for k, (turn, verdicts) in enumerate(zip(codes, results, strict=True)):
        j = code_plans[k]
        turn.credit = Credit(code_tasks[k].id, retrieval_id=plan_rets[j] if retriever is not None else None,
                             plan_id=j, sample_id=k)
        turn.verdicts = verdicts
        turns = [t for t in (notes[plan_rets[j]], plans[j], turn) if t is not None]
        trajectories.append(Trajectory(task_id=code_tasks[k].id, turns=turns, code=turn.parsed, verdicts=verdicts))
    if debugger is not None:
        writers = list(codes)  # the turn whose code each trajectory holds now
        debug_problems = [problems[ret_tasks[plan_rets[j]]] for j in code_plans]
        for round_index in range(1, cfg.debug_rounds + 1):
            _debug_round(trajectories, writers, code_tasks, debug_problems, debugger, sandbox, cfg,
                         round_index, step, code_keys)
    for traj in trajectories:
        traj.metrics.update(_token_metrics(traj))
        if debugger is not None:  # what the debugger's fix rate is counted from
            traj.metrics["debug_turns"] = float(len(traj.turns_of("debugger")))
            coded = traj.turns_of("coder")[-1].verdicts
            traj.metrics["coder_passed"] = float(coded is not None and coded.passed)
    return trajectories


def _retrieve(tasks: Sequence[Task], problems: list[str], retriever: Agent | None, cfg: ChainConfig,
              step: int) -> tuple[list[int], list[str], list[Turn | None], list[str]]:
    """Per retrieval: its task index, request key, retriever turn (None without a retriever) and the
    problem text planner and coder see (with the retrieved examples)."""
    tkeys = task_keys(tasks)
    n_ret = cfg.retrievals_per_task if retriever is not None else 1
    ret_tasks = _expand(range(len(tasks)), n_ret)
    # one retrieval per task keeps the plan keys (and streams) of a chain without retriever
    ret_keys = [tkeys[i] if n_ret == 1 else f"{tkeys[i]}/retrieval{r % n_ret}" for r, i in enumerate(ret_tasks)]
    notes: list[Turn | None] = [None] * len(ret_tasks)
    seen = [problems[i] for i in ret_tasks]
    if retriever is not None:
        retrievals = retriever.act([{"problem": problems[i]} for i in ret_tasks], call_index=0, step=step,
                                   keys=[f"{k}/examples" for k in ret_keys])
        for r, turn in enumerate(retrievals):
            turn.credit = Credit(tasks[ret_tasks[r]].id, retrieval_id=r)
        seen = [with_examples(problems[i], n.parsed) for i, n in zip(ret_tasks, retrievals, strict=True)]
        notes = list(retrievals)
    return ret_tasks, ret_keys, notes, seen


def _plan(tasks: Sequence[Task], ret_tasks: list[int], ret_keys: list[str], seen: list[str], planner: Agent | None,
          cfg: ChainConfig, step: int, with_retrieval: bool) -> tuple[list[int], list[str], list[Turn | None]]:
    """Per plan: the retrieval it follows, its request key and the planner's turn (None without a planner)."""
    n_plans = cfg.plans_per_task if planner is not None else 1
    plan_rets = _expand(range(len(ret_tasks)), n_plans)
    plan_keys = [f"{ret_keys[r]}/plan{j % n_plans}" for j, r in enumerate(plan_rets)]
    plans: list[Turn | None] = [None] * len(plan_rets)
    if planner is not None:
        planned = planner.act([{"problem": seen[r]} for r in plan_rets], call_index=0, step=step, keys=plan_keys)
        for j, turn in enumerate(planned):
            turn.credit = Credit(tasks[ret_tasks[plan_rets[j]]].id, retrieval_id=plan_rets[j] if with_retrieval else None,
                                 plan_id=j)
        plans = list(planned)
    return plan_rets, plan_keys, plans


def _debug_round(trajectories: list[Trajectory], writers: list[Turn], code_tasks: list[Task], problems: list[str],
                 debugger: Agent, sandbox: SandboxProtocol, cfg: ChainConfig, round_index: int, step: int,
                 code_keys: list[str]) -> None:
    """The debugger rewrites every code it is due to see (`cfg.debug_when`) `cfg.rewrites_per_code` times;
    all rewrites join the trajectory, and the one with the best public pass fraction replaces its code."""
    todo = [k for k, tr in enumerate(trajectories)
            if tr.public is not None and (cfg.debug_when == "always" or not tr.public.passed)]
    if not todo:
        return
    n = cfg.rewrites_per_code
    rows = _expand(todo, n)
    contexts = [{"problem": problems[k], "code": trajectories[k].code or "",
                 "feedback": trajectories[k].public.feedback(code_tasks[k].public_tests)} for k in rows]
    # one rewrite per code keeps the keys (and streams) of the chain before rewrites existed
    keys = [f"{code_keys[k]}/debug{round_index}" + (f"/rewrite{i % n}" if n > 1 else "") for i, k in enumerate(rows)]
    fixes = debugger.act(contexts, call_index=round_index, entry_points=[code_tasks[k].entry_point for k in rows],
                         step=step, keys=keys)
    results = judge(sandbox, [code_tasks[k] for k in rows], [t.parsed for t in fixes], count_steps=cfg.count_steps)
    for lo in range(0, len(rows), n):
        k = rows[lo]
        tr = trajectories[k]
        group = list(zip(fixes[lo:lo + n], results[lo:lo + n], strict=True))
        best = max(range(n), key=lambda i: (group[i][1].public.pass_fraction, -i))
        plan_id = writers[k].credit.plan_id if writers[k].credit is not None else None
        for i, (turn, verdicts) in enumerate(group):
            turn.credit = Credit(tr.task_id, plan_id=plan_id, sample_id=k, debug_round=round_index, rewrite=i)
            turn.verdicts, turn.rewrite = verdicts, Rewrite(tr.code, tr.verdicts, chosen=i == best)
            tr.turns.append(turn)
        writers[k] = group[best][0]
        tr.code, tr.verdicts = writers[k].parsed, group[best][1]


def _token_metrics(traj: Trajectory) -> dict[str, float]:
    return {
        "prompt_tokens": float(sum(len(t.prompt_ids) for t in traj.turns)),
        "completion_tokens": float(sum(len(t.completion_ids) for t in traj.turns)),
    }


def run_single(tasks: Sequence[Task], coder: Agent, sandbox: SandboxProtocol, samples_per_task: int = 1,
               step: int = 0) -> list[Trajectory]:
    """One agent answers each task `samples_per_task` times."""
    return run_chain(tasks, coder, sandbox, ChainConfig(codes_per_plan=samples_per_task), step=step)
