"""Held-out pass@1 of several saved CoRe-Code planner/coder pairs on the demo's two held-out sets, each
compared task by task with the first pair (e.g. a cold start against the final models of several runs).

Sets, rebuilt from --seed exactly as `coral demo` builds them: the test split (new skeletons,
--n-test-tasks) and the tasks of the training skeletons that neither SFT nor RL sees (--n-fresh-tasks).
Each pair is evaluated greedily and from --samples samples per task at temperature 1.

    python -m experiments.corecode_compare runs/probe_sft_e6.0_b32_lr0.003_s0 runs/demo/final

Each DIR holds `planner/` and `coder/` as saved by `HFPolicy.save`. Evaluation records go under --out.
Error bars: each pass@1 with its standard error over tasks, each change with its paired per-task one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from coral.benchmarks.splits import build_tasks, fresh_tasks, rl_tasks
from coral.corecode.evaluate import evaluate_pass1, paired_change_between
from coral.corecode.recipe import CoReCodeConfig
from coral.policy.hf import HFPolicy
from coral.report.error_bars import rate_se
from coral.sandbox import Sandbox


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", type=Path, nargs="+", help="directories with planner/ and coder/; the first is the baseline")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-test-tasks", type=int, default=CoReCodeConfig.n_test_tasks)
    ap.add_argument("--n-fresh-tasks", type=int, default=CoReCodeConfig.n_fresh_tasks)
    ap.add_argument("--samples-per-task", type=int, default=CoReCodeConfig.eval_samples_per_task)
    ap.add_argument("--out", type=Path, default=Path("runs/corecode_compare"))
    args = ap.parse_args()
    for d in args.dirs:
        missing = [r for r in ("planner", "coder") if not (d / r).is_dir()]
        if missing:
            raise SystemExit(f"{d}: no {missing[0]}/ directory (expected planner/ and coder/ from HFPolicy.save)")
    cfg = CoReCodeConfig(seed=args.seed, n_test_tasks=args.n_test_tasks, n_fresh_tasks=args.n_fresh_tasks,
                         eval_samples_per_task=args.samples_per_task, out_dir=str(args.out))
    train, test = build_tasks(cfg.splits)
    sets = {"test split (new skeletons)": ("test", test),
            "training skeletons, unseen tasks": ("fresh", fresh_tasks(cfg.splits, train, rl_tasks(cfg.splits, train)))}
    k = args.samples_per_task
    kinds = [("greedy", 0)] + ([(f"{k} samples/task", k)] if k else [])
    with Sandbox() as sandbox:
        for i, d in enumerate(args.dirs):
            policies = {r: HFPolicy.load(d / r) for r in ("planner", "coder")}
            print(f"{d}:", flush=True)
            for label, (key, tasks) in sets.items():
                if not tasks:
                    continue
                for kind, samples in kinds:
                    name = f"m{i}_{key}_{samples}"
                    bench = "procedural-train-unseen" if key == "fresh" else "procedural-test"
                    rate = evaluate_pass1(cfg, policies, tasks, sandbox, name, samples=samples, bench=bench)["pass@1"]
                    line = f"  {label}, {len(tasks)} tasks, {kind}: pass@1 {rate:.3f} (SE {rate_se(rate, len(tasks)):.3f})"
                    if i > 0:
                        c = paired_change_between(args.out, f"m0_{key}_{samples}", name)
                        line += (f"  change vs {args.dirs[0]} {c['mean']:+.3f} (paired SE {c['se']:.3f}; "
                                 f"{c['up']} tasks up, {c['down']} down)")
                    print(line, flush=True)


if __name__ == "__main__":
    main()
