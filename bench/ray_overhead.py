"""Ray's cost and gain on one machine: `coral eval`-style evaluation and one CoRe-Code-style RL step
(planner -> coder rollout, sandbox rewards, GRPO update of both agents), each without Ray and with Ray
rollout workers (1 and 2) and sandbox actors, all measured in one run.

    python bench/ray_overhead.py --tasks 8 --repeats 3 --json runs/ray_overhead.json

Prints, per setting, the median seconds per eval pass and per RL step and their ratios to no Ray.
All settings check that they produced the same rollouts and rewards as no Ray (else the bench exits
with an error): a faster but different step is not a result.

An untrained tiny model writes no parseable code, so rewards would all be 0 and no update would run.
The step therefore maps each coder sample to a program by its tokens (`program_for`: the task's
reference, a wrong program or nothing), so rewards vary, depend on the sampled tokens and come from
the sandbox. Does NOT measure multi-node scaling: docs/scale.md derives that from these per-step
figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coral.agents import make_agent
from coral.benchmarks import load_benchmark
from coral.policy.base import SamplingParams
from coral.policy.tiny import tiny_policy
from coral.sandbox import Sandbox
from coral.train.grpo import AgentLearner, GRPOConfig, assign_advantages, unique_turns
from coral.trajectory import Task
from coral.workflows.chain import ChainConfig, run_chain
from coral.workflows.common import judge

# the programs end in milliseconds; a generous limit keeps a starved machine from turning a pass into a
# timeout in one setting only
TIMEOUT_S = 30.0
# the same tokens sampled by a replica and by the trainer have logprobs this close (padding and thread
# counts differ between one batch and its shards: float rounding only)
LOGPROB_ATOL = 1e-4
WRONG = "def {name}(*args, **kwargs):\n    return None\n"


def program_for(completion_ids: Sequence[int], task: Task) -> str | None:
    """The program a coder sample stands for: reference, wrong or none, by its token-id sum mod 3."""
    kind = sum(completion_ids) % 3
    if kind == 0:
        return task.reference
    return WRONG.format(name=task.entry_point) if kind == 1 else None


def make_policies(seed: int = 0, d_model: int = 64, n_layers: int = 2) -> dict[str, Any]:
    return {role: tiny_policy(seed=seed + i, d_model=d_model, n_layers=n_layers, n_heads=4, max_len=512)
            for i, role in enumerate(("planner", "coder"))}


def make_agents(policies: dict[str, Any], max_new_tokens: int, seed: int = 0) -> dict[str, Any]:
    """Base seed `seed`: each request's stream is hashed from it and the step run_chain is given."""
    return {role: make_agent(role, policies[role], sampling=SamplingParams(
        max_new_tokens=max_new_tokens, temperature=1.0, seed=seed)) for role in ("planner", "coder")}


def rl_step(policies: dict[str, Any], learners: dict[str, Any], sandbox: Any, tasks: Sequence[Task],
            step: int, plans: int = 2, codes: int = 2, max_new_tokens: int = 24) -> dict[str, Any]:
    """rollout -> sandbox rewards -> group advantages -> one update per agent. Returns the rollouts'
    token ids and logprobs, the rewards, the learners' metrics (for equality checks) and the seconds
    of each phase (rollout_s: both agents' generation, reward_s: the sandbox, update_s: both updates)."""
    t0 = time.perf_counter()
    agents = make_agents(policies, max_new_tokens)
    trajs = run_chain(tasks, agents["coder"], sandbox, ChainConfig(plans, codes), planner=agents["planner"], step=step)
    by_id = {t.id: t for t in tasks}
    coder_turns = [tr.turns[-1] for tr in trajs]
    programs = [program_for(t.completion_ids, by_id[tr.task_id]) for t, tr in zip(coder_turns, trajs, strict=True)]
    t1 = time.perf_counter()
    results = judge(sandbox, [by_id[tr.task_id] for tr in trajs], programs)
    t2 = time.perf_counter()
    for turn, verdicts in zip(coder_turns, results, strict=True):
        turn.reward = verdicts.all.pass_fraction
    plan_rewards: dict[int, list[float]] = {}
    for tr, turn in zip(trajs, coder_turns, strict=True):
        plan_rewards.setdefault(id(tr.turns[0]), []).append(turn.reward)
    turns = unique_turns([tr.turns for tr in trajs])
    for t in turns:
        if t.role == "planner":
            t.reward = sum(plan_rewards[id(t)]) / len(plan_rewards[id(t)])
    # CoRe-Code's groups: a planner's plans of one task; a coder's codes of one plan
    assign_advantages(turns, lambda t: (t.role, t.credit.task_id, t.credit.plan_id if t.role == "coder" else 0))
    t3 = time.perf_counter()
    metrics = {role: learners[role].update([t for t in turns if t.role == role]) for role in learners}
    seconds = {"rollout_s": t1 - t0, "reward_s": t2 - t1, "update_s": time.perf_counter() - t3}
    return {"completion_ids": [t.completion_ids for t in turns], "logprobs": [t.logprobs for t in turns],
            "rewards": [t.reward for t in turns], "metrics": metrics, "seconds": seconds}


def make_learners(policies: dict[str, Any], lr: float = 1e-2) -> dict[str, Any]:
    return {role: AgentLearner(role, p, GRPOConfig(lr=lr, optimizer="sgd")) for role, p in policies.items()}


def eval_pass(policies: dict[str, Any], sandbox: Any, tasks: Sequence[Task], out_dir: str,
              max_new_tokens: int) -> list[str]:
    """One greedy `coral eval` (planner -> coder chain) over `tasks`; returns the coder texts."""
    from coral.evaluation import EvalConfig, run_eval

    cfg = EvalConfig(workflow="chain", limit=len(tasks), max_new_tokens=max_new_tokens, out_dir=out_dir)
    agents = {role: make_agent(role, p, sampling=SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0))
              for role, p in policies.items()}
    run_eval(cfg, tasks=tasks, agents=agents, sandbox=sandbox, progress=False)
    lines = (Path(out_dir) / "samples.jsonl").read_text().splitlines()
    return [json.loads(line)["turns"][-1]["text"] for line in lines]


class Setting:
    """The policies, learners and sandbox of one setting; `workers` 0 means no Ray."""

    def __init__(self, workers: int) -> None:
        self.workers, self.pool = workers, None
        self.policies = make_policies()
        self.learners = make_learners(self.policies)
        self.sandbox: Any = Sandbox(workers=2, timeout_s=TIMEOUT_S)
        if workers:
            from coral.scale import RaySandbox, RolloutPool

            self.sandbox.close()
            self.sandbox = RaySandbox(1, workers=2, timeout_s=TIMEOUT_S, cpus_per_actor=0.25)
            self.pool = RolloutPool(self.policies, workers, cpus_per_worker=0.25)  # one torch thread each
            self.policies = {role: self.pool.policy(role) for role in self.policies}
        self.out: dict[str, Any] = {"eval_s": [], "step_s": [], "steps": []}

    def eval(self, tasks: Sequence[Task], args: argparse.Namespace) -> float:
        t0 = time.perf_counter()
        self.out["texts"] = eval_pass(self.policies, self.sandbox, tasks, f"{args.out_dir}/w{self.workers}",
                                      args.max_new_tokens)
        return time.perf_counter() - t0

    def step(self, tasks: Sequence[Task], step: int, args: argparse.Namespace) -> None:
        t0 = time.perf_counter()
        result = rl_step(self.policies, self.learners, self.sandbox, tasks, step, max_new_tokens=args.max_new_tokens)
        self.out["step_s"].append(time.perf_counter() - t0)
        self.out["steps"].append(result)

    def close(self) -> None:
        self.sandbox.close()
        if self.pool is not None:
            self.pool.close()


def call_overheads(settings: Sequence[Setting], calls: int = 20) -> dict[str, float]:
    """Ray's fixed costs, medians in ms: one generate call of one 1-token request through one rollout
    actor minus the same call locally, one sandbox call of one job minus the same locally, and a push
    of the coder's full state (`sync_weights(full=True)`) to the 1-worker pool."""
    from coral.policy.base import GenerationRequest, user
    from coral.sandbox import Job

    local, remote = settings[0], settings[1]
    request = [GenerationRequest(user("x"), SamplingParams(max_new_tokens=1, seed=0))]
    job = [Job("def f():\n    return 1\n", (), "f")]
    timings: dict[str, list[float]] = {k: [] for k in ("gen_local", "gen_ray", "sb_local", "sb_ray", "push")}
    for _ in range(calls):
        for key, call in (("gen_local", lambda: local.policies["coder"].generate(request)),
                          ("gen_ray", lambda: remote.policies["coder"].generate(request)),
                          ("sb_local", lambda: local.sandbox.run_many(job)),
                          ("sb_ray", lambda: remote.sandbox.run_many(job)),
                          ("push", lambda: remote.pool.sync_weights("coder", full=True))):
            t0 = time.perf_counter()
            call()
            timings[key].append(1000 * (time.perf_counter() - t0))
    med = {k: statistics.median(v) for k, v in timings.items()}
    state = local.policies["coder"].model.state_dict()
    return {"generate_call_ms": med["gen_ray"] - med["gen_local"], "sandbox_call_ms": med["sb_ray"] - med["sb_local"],
            "full_push_ms": med["push"], "full_push_mb": sum(t.numel() * t.element_size() for t in state.values()) / 2**20}


def run_settings(tasks: Sequence[Task], args: argparse.Namespace) -> tuple[dict[int, dict[str, Any]], dict[str, float]]:
    """Each repeat runs an eval pass and an RL step in every setting in turn, so that the machine's
    load, which drifts over minutes, weighs on all settings alike."""
    settings = [Setting(w) for w in (0, 1, 2)]
    try:
        for s in settings:
            s.eval(tasks, args)  # warm-up: actors start, imports, first-call caches
        for step in range(args.repeats):
            for s in settings:
                s.out["eval_s"].append(s.eval(tasks, args))
                s.step(tasks, step, args)
        overheads = call_overheads(settings)
    finally:
        for s in settings:
            s.close()
    return {s.workers: s.out for s in settings}, overheads


def same_results(a: dict[str, Any], b: dict[str, Any], atol: float = LOGPROB_ATOL) -> str | None:
    """None when two settings produced the same texts, tokens and rewards (logprobs within atol)."""
    if a["texts"] != b["texts"]:
        return "evaluation texts differ"
    return same_steps(a["steps"], b["steps"], atol)


def _agree(ids_x: Sequence[int], ids_y: Sequence[int]) -> int:
    """How many leading token ids two completions share."""
    return next((k for k, (p, q) in enumerate(zip(ids_x, ids_y, strict=False)) if p != q), min(len(ids_x), len(ids_y)))


def logprob_gap(x: dict[str, Any], y: dict[str, Any]) -> float:
    """The largest logprob difference between two rl_step results, over each turn's tokens before its
    token ids first differ (after that the logprobs are of different tokens)."""
    turns = zip(x["completion_ids"], y["completion_ids"], x["logprobs"], y["logprobs"], strict=True)
    return max((abs(lx[k] - ly[k]) for ids_x, ids_y, lx, ly in turns for k in range(_agree(ids_x, ids_y))),
               default=0.0)


def same_steps(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], atol: float = LOGPROB_ATOL) -> str | None:
    """None when two runs of rl_step produced the same tokens and rewards, and logprobs within atol."""
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        for j, (ids_x, ids_y) in enumerate(zip(x["completion_ids"], y["completion_ids"], strict=True)):
            if ids_x != ids_y:
                at = _agree(ids_x, ids_y)
                return (f"step {i}: turn {j}'s tokens differ from token {at} on "
                        f"(logprobs there {x['logprobs'][j][at:at + 1]} vs {y['logprobs'][j][at:at + 1]})")
        if x["rewards"] != y["rewards"]:
            j = next(j for j, (p, q) in enumerate(zip(x["rewards"], y["rewards"], strict=True)) if p != q)
            return f"step {i}: turn {j}'s reward differs ({x['rewards'][j]} vs {y['rewards'][j]})"
        worst = logprob_gap(x, y)
        if worst > atol:
            return f"step {i}: logprobs differ by {worst:.2e}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local Ray instance")
    parser.add_argument("--out-dir", default="runs/ray_overhead")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args(argv)
    import ray
    import torch

    from coral.scale.cluster import start_local

    # one torch thread in the driver, as in each rollout actor: the comparison is of Ray, not of thread
    # counts (two spinning OpenMP threads on a loaded 2-core machine are slower than one)
    torch.set_num_threads(1)
    tasks = load_benchmark("procedural-train", limit=args.tasks, seed=0)
    start_local(num_cpus=args.num_cpus, log_to_driver=False)  # a fresh instance, whatever runs here
    try:
        runs, overheads = run_settings(tasks, args)
    finally:
        ray.shutdown()
    rows = []
    for w, run in runs.items():
        problem = same_results(runs[0], run)
        if problem:
            sys.exit(f"ray_overhead: {w} workers: {problem}")
        eval_s, step_s = statistics.median(run["eval_s"]), statistics.median(run["step_s"])
        phases = {k: statistics.median(s["seconds"][k] for s in run["steps"]) for k in run["steps"][0]["seconds"]}
        rows.append({"rollout_workers": w, "eval_s": eval_s, "step_s": step_s, **phases,
                     "eval_tasks_per_s": len(tasks) / eval_s,
                     "eval_time_vs_no_ray": eval_s / statistics.median(runs[0]["eval_s"]),
                     "step_time_vs_no_ray": step_s / statistics.median(runs[0]["step_s"])})
    print(f"{'setting':<20}{'eval s':>8}{'tasks/s':>8}{'x no-ray':>9}{'step s':>8}{'x no-ray':>9}"
          f"{'rollout':>9}{'reward':>8}{'update':>8}")
    for r in rows:
        name = "no ray" if r["rollout_workers"] == 0 else f"ray, {r['rollout_workers']} worker(s)"
        print(f"{name:<20}{r['eval_s']:>8.2f}{r['eval_tasks_per_s']:>8.2f}{r['eval_time_vs_no_ray']:>9.2f}"
              f"{r['step_s']:>8.2f}{r['step_time_vs_no_ray']:>9.2f}{r['rollout_s']:>9.2f}{r['reward_s']:>8.2f}"
              f"{r['update_s']:>8.2f}")
    print("Ray's fixed costs (median ms): " + ", ".join(f"{k} {v:.2f}" for k, v in overheads.items()))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows, "overheads": overheads}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
