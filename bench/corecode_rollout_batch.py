"""Time of CoRe-Code RL rollouts against the generation batch size of the planner and coder.

Loads a trained pair (a demo's `final/`), then runs the same `--steps` RL steps (no updates: rollout,
sandbox verdicts and rewards only) at each batch size in turn, alternating the order over `--repeats`
rounds, and prints the median seconds per round and each size's ratio to the first. Sampling is
seeded per request, so every batch size draws the same plans and codes.

    .venv/bin/python bench/corecode_rollout_batch.py runs/demo/final --batches 64 128

DIR holds `planner/` and `coder/` as saved by `HFPolicy.save`. Tasks are the demo's RL stream for --seed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from coral.benchmarks.splits import build_tasks, rl_tasks
from coral.corecode.recipe import CoReCodeConfig, rl_step
from coral.policy.hf import HFPolicy
from coral.sandbox import Sandbox
from coral.train.loop import next_batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, help="directory with planner/ and coder/")
    ap.add_argument("--batches", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--steps", type=int, default=4, help="RL steps per round")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-train-tasks", type=int, default=CoReCodeConfig.n_train_tasks)
    args = ap.parse_args()
    missing = [r for r in ("planner", "coder") if not (args.dir / r).is_dir()]
    if missing:
        raise SystemExit(f"{args.dir}: no {missing[0]}/ directory (expected planner/ and coder/ from HFPolicy.save)")
    if min(args.batches) < 1 or args.steps < 1 or args.repeats < 1:
        raise SystemExit("--batches, --steps and --repeats must be >= 1")
    cfg = CoReCodeConfig(seed=args.seed, n_train_tasks=args.n_train_tasks, out_dir="runs/rollout_batch")
    train, _ = build_tasks(cfg.splits)
    policies = {r: HFPolicy.load(args.dir / r) for r in ("planner", "coder")}
    pool = rl_tasks(cfg.splits, train)
    batches = [next_batch(pool, i * cfg.tasks_per_step, cfg.tasks_per_step, cfg.seed) for i in range(args.steps)]
    seconds: dict[int, list[float]] = {b: [] for b in args.batches}
    with Sandbox(workers=cfg.sandbox_workers) as sandbox:
        for step, batch in enumerate(batches, 1):  # warm-up: the reference solutions' verdicts are cached
            rl_step(cfg, step, batch, policies, {}, sandbox)
        for rep in range(args.repeats):
            for size in args.batches if rep % 2 == 0 else args.batches[::-1]:
                for p in policies.values():
                    p.batch_size = size
                start = time.perf_counter()
                for step, batch in enumerate(batches, 1):
                    rl_step(cfg, step, batch, policies, {}, sandbox)
                seconds[size].append(time.perf_counter() - start)
    base = statistics.median(seconds[args.batches[0]])
    print(f"{args.steps} RL steps ({cfg.tasks_per_step} tasks x {cfg.plans_per_task} plans x {cfg.codes_per_plan} codes) "
          f"per round, {args.repeats} rounds")
    for size in args.batches:
        med = statistics.median(seconds[size])
        print(f"batch {size:4d}: median {med:6.2f} s per round  ratio to batch {args.batches[0]}: {med / base:.2f}  "
              f"(rounds: {' '.join(f'{s:.2f}' for s in seconds[size])})")


if __name__ == "__main__":
    main()
