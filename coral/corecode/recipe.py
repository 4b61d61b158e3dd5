"""CoRe-Code: [retriever ->] planner -> coder [-> debugger], cold start by SFT, then collaboration-aware
multi-agent GRPO.

Per task the retriever (when on) samples R retrievals, the planner P plans per retrieval and the coder C
codes per plan; the debugger (when on) rewrites codes in rounds. Coder reward: a `RewardFn` (default:
correctness plus an efficiency bonus gated on passing every test, train/rewards.py) of the code it wrote;
planner reward = mean (or max) of the coder rewards of its plan's codes, retriever reward the same over its
retrieval's codes; a debugger rewrite earns its own code's reward or its improvement over the given code.
Groups: coder, the codes of one plan (or task); planner, the plans of one retrieval (of one task without a
retriever); retriever, the retrievals of one task; debugger, the rewrites of one code (or task) in one
round. Each role in `train_roles` has its own optimiser and updates only on its own turns.

`train_corecode` reads: setup -> cold start or resume -> the shared run loop (train/loop.py) over
`rl_step` -> held-out evaluation -> summary. This module does NOT implement the math
(train/advantages.py, train/losses.py), the task splits (benchmarks/splits.py) or the evaluations
(train/corecode_eval.py).
"""

from __future__ import annotations

import functools
import json
import logging
import random
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from coral.benchmarks.metrics import fix_rate
from coral.benchmarks.splits import build_tasks, fresh_tasks, rl_tasks, sft_tasks
from coral.config import UserInputError
from coral.corecode.config import RESUMABLE_CHANGES, CoReCodeConfig
from coral.corecode.evaluate import EvalSet, eval_sets, evaluate_sets, paired_change_between
from coral.corecode.fork import fork_cold_start, save_cold_start
from coral.corecode.rewards import score_chain, score_debugger, written_result
from coral.corecode.setup import (
    build_policies,
    make_agents,
    make_learners,
    sft_checkpoint_dir,
    sft_corecode,
    sft_references,
    stated_tasks,
)
from coral.report.recipes import corecode_report, finish
from coral.sandbox import Sandbox
from coral.sandbox.protocol import SandboxProtocol
from coral.scale import ScaleOut
from coral.terminal import time_left
from coral.train.checkpoints import TrainedAgent
from coral.train.grpo import assign_advantages, grouped_rewards, required, reward_spread, unique_turns
from coral.train.loop import Run, drive, log_evaluation, log_sft_curves, new_state
from coral.train.rewards import CodeReward, RewardFn
from coral.trajectory import ExecutionResult, Task, Turn
from coral.workflows.chain import run_chain
from coral.workflows.common import judge

if TYPE_CHECKING:
    from coral.policy.hf import HFPolicy

__all__ = ["CoReCodeConfig", "train_corecode", "rl_step", "run_demo", "group_key"]

logger = logging.getLogger(__name__)
UNPARSED_WARN_RATE = 0.5  # warn when more sampled completions than this fail to parse


def train_corecode(cfg: CoReCodeConfig, progress: bool = True, reward_fn: RewardFn | None = None) -> dict[str, Any]:
    """SFT (unless resuming) -> eval -> RL with checkpoints -> eval. Returns the run summary, also
    written to out_dir/summary.json, printed as a table and drawn in out_dir/report.html. A killed run restarts
    from its latest checkpoint. `reward_fn` scores each code (default: `CodeReward(cfg.correctness,
    cfg.efficiency_weight, cfg.efficiency_measure)`)."""
    say = functools.partial(_say, progress)
    reward_fn = reward_fn or CodeReward(cfg.correctness, cfg.efficiency_weight, cfg.efficiency_measure)
    run = Run(cfg.out_dir, cfg, start_over=not cfg.resume, may_change=RESUMABLE_CHANGES)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    train, test = build_tasks(cfg.splits)
    rl_pool = rl_tasks(cfg.splits, train)
    fresh = fresh_tasks(cfg.splits, train, rl_pool, sft_trains=cfg.cold_start != "none")
    train, test, rl_pool, fresh = (stated_tasks(cfg, tasks) for tasks in (train, test, rl_pool, fresh))
    sets = eval_sets(cfg, test, fresh)
    say(f"tasks: {len(train)} train; held out: {len(test)} of new skeletons (the {cfg.held_out_split} split), "
        f"{len(fresh)} of the training skeletons; depth {cfg.min_depth}-{cfg.max_depth}; tasks stated {cfg.task_style}, "
        f"prompts {cfg.style}")
    with Sandbox(workers=cfg.sandbox_workers) as sandbox, ScaleOut(cfg.ray_address) as scale:
        policies = build_policies(cfg, train, sandbox)
        if cfg.resume and run.latest():
            learners, state = _resume(cfg, run, policies, sets, say)
        else:
            learners, state = _cold_start(cfg, run, policies, train, sets, sandbox, progress)
        agents = {role: TrainedAgent(policies[role], learners.get(role)) for role in policies}
        # after SFT and the KL references (copies of the local models): rollouts and tests on Ray from here
        policies, sandbox = scale.distribute(policies, sandbox)
        first_step = state["step"] + 1

        def on_step(metrics: dict[str, float], history: list[dict[str, float]]) -> None:
            say(f"{step_line(metrics, cfg.rl_steps)}  "
                f"{time_left([m['step_s'] for m in history], cfg.rl_steps - int(metrics['step']))}")
            if int(metrics["step"]) == first_step + 4:  # five steps in: say so if rewards are stuck for parsing
                recent = history[-5:]
                _warn_if_unparsed(cfg, sum(m["parse_failures"] for m in recent) / len(recent),
                                  f"in RL steps {first_step}-{first_step + 4}")

        def step_fn(step: int, batch: Sequence[Task]) -> dict[str, float]:
            return rl_step(cfg, step, batch, policies, learners, sandbox, reward_fn)

        state = drive(run, step_fn, rl_pool, agents, state, steps=cfg.rl_steps,
                      tasks_per_step=cfg.tasks_per_step, seed=cfg.seed,
                      checkpoint_every_steps=cfg.checkpoint_every_steps, on_step=on_step)
        after = evaluate_sets(cfg, policies, sets, sandbox, "rl", say, progress)
    for role, policy in policies.items():
        policy.save(run.out / "final" / role)
    summary = _summary(cfg, run.out, sets, state, after, run.elapsed_s())
    (run.out / "summary.json").write_text(json.dumps(summary, indent=2))
    log_evaluation(run.out, {f"eval/pass@1{s.suffix}": after[s.dir_name("rl")]["pass@1"] for s in sets}, cfg.rl_steps)
    finish(corecode_report(run.out, summary))
    return summary


def _resume(cfg: CoReCodeConfig, run: Run, policies: dict[str, HFPolicy], sets: list[EvalSet],
            say: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Learners and trainer state from the run's latest checkpoint (weights restored in place)."""
    learners = make_learners(cfg, policies, sft_references(cfg, policies, saved=True))
    state = run.restore({role: TrainedAgent(policies[role], learners.get(role)) for role in policies})
    assert state is not None, "called only for a run that has a checkpoint"
    say(f"resumed from {run.latest()} (step {state['step']})")
    missing = [s.dir_name("sft") for s in sets if s.dir_name("sft") not in state]
    if missing:
        raise UserInputError(f"the run in {run.out} was started with other evaluation settings "
                             f"(eval_samples_per_task, n_fresh_tasks): it has no {missing[0]} after SFT to compare "
                             "with; delete it or set resume: false")
    return learners, state


def _cold_start(cfg: CoReCodeConfig, run: Run, policies: dict[str, HFPolicy], train: list[Task],
                sets: list[EvalSet], sandbox: SandboxProtocol, progress: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """SFT of every role (resumable) and the evaluation after it, or both taken from the run in
    `cfg.cold_start_from`; the cold start kept in out_dir/sft/cold_start; the step-0 checkpoint."""
    say = functools.partial(_say, progress)
    if cfg.cold_start_from:
        state = fork_cold_start(cfg, run.out, policies, [s.dir_name("sft") for s in sets])
        say(f"cold start from {cfg.cold_start_from}: " + ", ".join(
            f"pass@1 after SFT {s.what}, {s.how(cfg.rl.temperature)}: {state[s.dir_name('sft')]['pass@1']:.3f}" for s in sets))
    else:
        state = _sft_and_evaluate(cfg, policies, train, sets, sandbox, progress)
    save_cold_start(run.out, policies, state)
    learners = make_learners(cfg, policies, sft_references(cfg, policies, saved=False))
    run.save({role: TrainedAgent(policies[role], learners.get(role)) for role in policies}, state)
    shutil.rmtree(sft_checkpoint_dir(cfg), ignore_errors=True)  # the step-0 checkpoint holds the SFT result
    return learners, state


def _sft_and_evaluate(cfg: CoReCodeConfig, policies: dict[str, HFPolicy], train: list[Task], sets: list[EvalSet],
                      sandbox: SandboxProtocol, progress: bool) -> dict[str, Any]:
    """SFT of every role (resumable from its SFT checkpoints; none with cold_start "none"), then every
    evaluation set; the state after."""
    say = functools.partial(_say, progress)
    state = new_state(sft_loss={})
    if cfg.cold_start == "none":
        say(f"no cold start: RL starts from {cfg.model} as loaded")
        state["sft_s"] = 0.0
        return _evaluate_start(cfg, policies, sets, sandbox, progress, state)
    n_sft = len(sft_tasks(cfg.splits, train))
    epochs = (f"{cfg.sft.epochs} epochs" if cfg.sft_coder_epochs is None
              else f"planner {cfg.sft.epochs} epochs, coder {cfg.sft_coder_epochs}")
    say(f"SFT {', '.join(policies)}: from {n_sft} tasks, {epochs}"
        + (f" ({len(train) - n_sft} tasks of unseen skeletons kept for RL)" if n_sft < len(train) else ""))
    t_sft = time.perf_counter()
    if not cfg.resume:
        shutil.rmtree(sft_checkpoint_dir(cfg), ignore_errors=True)
    elif sft_checkpoint_dir(cfg).is_dir():
        say(f"resuming SFT from {sft_checkpoint_dir(cfg)}")
    curves = sft_corecode(cfg, policies, train, progress=progress, sandbox=sandbox)
    for role, curve in curves.items():
        state["sft_loss"][role] = [curve[0], curve[-1]]
        say(f"SFT {role}: loss {curve[0]:.3f} -> {curve[-1]:.3f}")
    log_sft_curves(cfg.out_dir, curves)
    state["sft_s"] = time.perf_counter() - t_sft
    say(f"SFT took {state['sft_s'] / 60:.1f} min")
    return _evaluate_start(cfg, policies, sets, sandbox, progress, state)


def _evaluate_start(cfg: CoReCodeConfig, policies: dict[str, HFPolicy], sets: list[EvalSet], sandbox: SandboxProtocol,
                    progress: bool, state: dict[str, Any]) -> dict[str, Any]:
    """Every evaluation set before RL (after SFT, or of the model as loaded), logged at step 0, into `state`."""
    say = functools.partial(_say, progress)
    state.update(evaluate_sets(cfg, policies, sets, sandbox, "sft", say, progress))
    log_evaluation(cfg.out_dir, {f"eval/pass@1{s.suffix}": state[s.dir_name("sft")]["pass@1"] for s in sets}, 0)
    if cfg.eval_samples_per_task:
        sampled = state["eval_sft_sampled"]
        _warn_if_unparsed(cfg, sampled["parse_failures"] / max(sampled["samples"], 1), "after SFT (held-out test split)")
    return state


def _summary(cfg: CoReCodeConfig, out: Path, sets: list[EvalSet], state: dict[str, Any], after: dict[str, Any],
             wall_s: float) -> dict[str, Any]:
    """pass@1 after SFT and after RL of every evaluation set, their paired per-task change, losses, times."""
    summary: dict[str, Any] = {"seed": cfg.seed, "cold_start": cfg.cold_start, "sft_loss": state["sft_loss"],
                               "rl_steps": cfg.rl_steps,
                               "sft_s": state.get("sft_s"), "wall_s": wall_s, "change": {},
                               "eval_samples_per_task": cfg.eval_samples_per_task, "evaluations": []}
    for s in sets:
        before_dir, after_dir = s.dir_name("sft"), s.dir_name("rl")
        summary[f"pass@1{s.suffix}_sft"] = state[before_dir]["pass@1"]
        summary[f"pass@1{s.suffix}_rl"] = after[after_dir]["pass@1"]
        summary[before_dir], summary[after_dir] = state[before_dir], after[after_dir]
        summary["change"][s.change_key] = paired_change_between(out, before_dir, after_dir)
        summary["evaluations"].append({"what": s.what, "how": s.how(cfg.rl.temperature), "tasks": len(s.tasks),
                                       "sft": before_dir, "rl": after_dir, "change": s.change_key,
                                       "figure": f"pass@1{s.suffix}"})
    return summary


def group_key(cfg: CoReCodeConfig):
    """GRPO groups: the retriever's retrievals of one task; the planner's plans of one retrieval (of one task
    without a retriever); the coder's codes of one plan (or task); the debugger's rewrites of one code (or
    task) in one round."""
    def key(turn: Turn) -> tuple:
        c = turn.credit
        if c is None:
            raise ValueError(f"{turn.role} turn of agent {turn.agent!r} has no credit: it has no GRPO group")
        if turn.role == "coder" and cfg.coder_group == "plan":
            return ("coder", c.task_id, c.plan_id)
        if turn.role == "planner" and c.retrieval_id is not None:
            return ("planner", c.task_id, c.retrieval_id)
        if turn.role == "debugger":
            per_round = ("debugger", c.task_id, c.debug_round)
            return per_round + (c.sample_id,) if cfg.debugger_group == "code" else per_round
        return (turn.role, c.task_id)
    return key


def rl_step(cfg: CoReCodeConfig, step: int, batch: Sequence[Task], policies: dict[str, HFPolicy],
            learners: dict[str, Any], sandbox: SandboxProtocol, reward_fn: RewardFn | None = None) -> dict[str, float]:
    """rollout -> rewards -> advantages -> one update per trained agent -> metrics. Times: rollout_s (generation,
    judging and scoring), judge_s (of it, the sandbox's), update_s (the learners'), step_s (all)."""

    t0 = time.perf_counter()
    sandbox = timed = TimedSandbox(sandbox)
    reward_fn = reward_fn or CodeReward(cfg.correctness, cfg.efficiency_weight, cfg.efficiency_measure)
    agents = make_agents(cfg, policies)
    trajs = run_chain(batch, agents["coder"], sandbox, cfg.chain_config(), planner=agents["planner"],
                      retriever=agents.get("retriever"), debugger=agents.get("debugger"), step=step)
    # training rewards use all tests of the (training) task; the coder's, those of the code it wrote
    results = [written_result(tr.turns_of("coder")[-1]) for tr in trajs]
    refs = reference_results(batch, sandbox, cfg.counts_steps) if cfg.efficiency_weight > 0 else {}
    tasks = {t.id: t for t in batch}
    score_chain(trajs, results, refs, tasks, reward_fn, cfg.planner_reward)
    if "debugger" in agents:
        score_debugger(trajs, refs, tasks, reward_fn, cfg.debugger_reward)
    t_roll = time.perf_counter() - t0
    turns = unique_turns([tr.turns for tr in trajs])
    assign_advantages(turns, group_key(cfg), cfg.rl.advantage)
    metrics: dict[str, float] = {"step": float(step)}
    for role in cfg.chain_roles:
        mine = [t for t in turns if t.role == role]
        metrics[f"{role}/turns"] = float(len(mine))
        if not mine:  # a debugger with nothing to fix this step
            continue
        metrics[f"{role}/reward"] = sum(required(t.reward, "reward") for t in mine) / len(mine)
        metrics[f"{role}/completion_tokens"] = sum(len(t.completion_ids) for t in mine) / len(mine)
        spread = reward_spread(grouped_rewards(mine, group_key(cfg)))
        metrics.update({f"{role}/{k}": v for k, v in spread.items()})
        if role in learners:
            t_update = time.perf_counter()
            metrics.update({f"{role}/{k}": v for k, v in learners[role].update(mine).items()})
            metrics["update_s"] = metrics.get("update_s", 0.0) + time.perf_counter() - t_update
    final = [written_result(tr.turns[-1]) for tr in trajs]  # the code each trajectory ended with
    metrics["pass_rate"] = sum(r.passed for r in final) / len(final)
    if "debugger" in agents:
        metrics["coder_pass_rate"] = sum(r.passed for r in results) / len(results)
        metrics.update(fix_counts(results, final, trajs))
    metrics["parse_failures"] = sum(tr.turns_of("coder")[-1].parsed is None for tr in trajs) / len(trajs)
    metrics["rollout_s"], metrics["judge_s"] = t_roll, timed.seconds
    metrics["step_s"] = time.perf_counter() - t0
    return metrics


class TimedSandbox:
    """`sandbox`, adding the wall time of its run_many calls to `seconds` (an RL step's judge_s)."""

    def __init__(self, sandbox: SandboxProtocol) -> None:
        self.sandbox, self.seconds = sandbox, 0.0

    def run_many(self, jobs: Sequence[Any], progress: bool = False) -> list[ExecutionResult]:
        start = time.perf_counter()
        try:
            return self.sandbox.run_many(jobs, progress)
        finally:
            self.seconds += time.perf_counter() - start

    def close(self) -> None:
        self.sandbox.close()


def fix_counts(coder: Sequence[Any], final: Sequence[Any], trajs: Sequence[Any]) -> dict[str, float]:
    """The debugger's fix rate: of the codes it rewrote whose coder's code failed, the share whose final
    code passes (`coder`, `final`: each trajectory's results on the same tests); and its break rate: of
    those it rewrote that passed, the share that no longer do (only with debug_when "always")."""
    seen = [(c.passed, f.passed) for c, f, tr in zip(coder, final, trajs, strict=True) if tr.turns_of("debugger")]
    rate, failing = fix_rate(seen)
    passing = [f for c, f in seen if c]
    out = {"debugger/fix_rate": rate, "debugger/fixable": float(failing)}
    if passing:
        out["debugger/break_rate"] = sum(not f for f in passing) / len(passing)
    return out


def reference_results(tasks: Sequence[Task], sandbox: SandboxProtocol, count_steps: bool = False) -> dict[str, ExecutionResult]:
    """Each task's reference solution on all its tests; a failing reference is an error (it would
    silently zero every efficiency bonus)."""
    refs = {}
    for task, verdicts in zip(tasks, judge(sandbox, tasks, [t.reference for t in tasks], count_steps), strict=True):
        refs[task.id] = verdicts.all
        if not refs[task.id].passed:
            raise RuntimeError(f"reference solution of task {task.id!r} fails its own tests in the sandbox: "
                               f"{refs[task.id].feedback(task.all_tests)}")
    return refs


def unparsed_warning(cfg: CoReCodeConfig, rate: float, where: str) -> str | None:
    """The loud warning for a run whose sampled completions mostly fail to parse (RL's rewards are then
    mostly 0, and nothing else would say why), or None when `rate` is at most UNPARSED_WARN_RATE."""
    if rate <= UNPARSED_WARN_RATE:
        return None
    text = (f"{100 * rate:.0f}% of the completions sampled at temperature {cfg.rl.temperature} {where} do not "
            "parse: RL's rewards will be mostly 0.")
    if cfg.lora_rank and cfg.model == "tiny":
        text += (" With lora_rank > 0 the tiny model's base stays random and frozen, and its tied head caps "
                 "the logit margins (about 4 at the default size), so sampling at temperature 1 is close to "
                 "uniform; a temperature near 0.1 or a pretrained base avoids this.")
    return text


def _warn_if_unparsed(cfg: CoReCodeConfig, rate: float, where: str) -> None:
    warning = unparsed_warning(cfg, rate, where)
    if warning:
        logger.warning(warning)


def step_line(m: dict[str, float], total: int) -> str:
    """One RL step's progress line."""
    # no coder/loss: the coder was not updated (frozen, or every group's rewards were equal)
    loss = f"{m['coder/loss']:+.4f}" if "coder/loss" in m else "no update"
    extra = "".join(f"  R({role}) {m[f'{role}/reward']:.3f}" for role in ("retriever", "debugger") if f"{role}/reward" in m)
    if "debugger/fix_rate" in m:
        extra += f"  fix {m['debugger/fix_rate']:.3f}"
    return (f"step {int(m['step']):>3}/{total}  pass {m['pass_rate']:.3f}  "
            f"R(planner) {m['planner/reward']:.3f}  R(coder) {m['coder/reward']:.3f}{extra}  "
            f"loss(coder) {loss}  parse-fail {m['parse_failures']:.2f}  {m['step_s']:.1f}s")


def _say(enabled: bool, text: str) -> None:
    if enabled:
        print(text, flush=True)


def run_demo(cfg: CoReCodeConfig, progress: bool = True) -> dict[str, Any]:
    """The README's main job: SFT then CoRe-Code GRPO on tiny models, before/after pass@1, report."""
    return train_corecode(cfg, progress=progress)
