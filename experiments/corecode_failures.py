"""Where CoRe-Code's held-out failures come from: the planner's plan or the coder's code.

For each held-out task the trained planner and coder answer greedily (as the demo's pass@1 does);
then the same coder answers again from the task's gold plan. Each task falls in one cell of
(plan equals the gold plan?, chain passes?, coder passes from the gold plan?), printed as a table,
with pass@1 per composition length and a few wrong plans next to the gold ones.

    python -m experiments.corecode_failures runs/demo/final
    python -m experiments.corecode_failures runs/probe_sft_e6.0_b32_lr0.003_s0 --train

DIR holds `planner/` and `coder/` as saved by `HFPolicy.save` (a demo's `final/`, a probe's SFT
cache). Tasks are rebuilt from --seed / --n-test-tasks exactly as `coral demo` builds them. Error bars:
pass@1 with its standard error over tasks.
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from coral.benchmarks.splits import build_tasks
from coral.corecode.recipe import CoReCodeConfig
from coral.corecode.setup import make_agents
from coral.policy.hf import HFPolicy
from coral.report.error_bars import rate_se
from coral.sandbox import Sandbox
from coral.workflows.chain import ChainConfig, run_chain
from coral.workflows.common import judge, problem_text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, help="directory with planner/ and coder/")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-test-tasks", type=int, default=CoReCodeConfig.n_test_tasks)
    ap.add_argument("--train", action="store_true", help="also the first 200 training tasks")
    ap.add_argument("--examples", type=int, default=5, help="wrong plans to print")
    args = ap.parse_args()
    missing = [r for r in ("planner", "coder") if not (args.dir / r).is_dir()]
    if missing:
        raise SystemExit(f"{args.dir}: no {missing[0]}/ directory (expected planner/ and coder/ from HFPolicy.save)")
    cfg = CoReCodeConfig(seed=args.seed, n_test_tasks=args.n_test_tasks, out_dir="runs/failures")
    train, test = build_tasks(cfg.splits)
    policies = {r: HFPolicy.load(args.dir / r) for r in ("planner", "coder")}
    for p in policies.values():
        p.batch_size = 64
    splits = [("held-out", test)] + ([("train", train[:200])] if args.train else [])
    with Sandbox() as sandbox:
        agents = make_agents(cfg, policies, greedy=True)
        for name, tasks in splits:
            trajs = run_chain(tasks, agents["coder"], sandbox, ChainConfig(1, 1), planner=agents["planner"])
            contexts = [{"problem": problem_text(t), "plan": t.metadata["gold_plan"]} for t in tasks]
            codes = agents["coder"].act(contexts, call_index=0, entry_points=[t.entry_point for t in tasks],
                                        keys=[t.id for t in tasks])
            gold_results = judge(sandbox, tasks, [c.parsed for c in codes])
            cells: collections.Counter = collections.Counter()
            by_len: dict[int, list[int]] = collections.defaultdict(lambda: [0, 0])
            wrong = []
            for task, traj, gold in zip(tasks, trajs, gold_results, strict=True):
                plan = (traj.turns_of("planner")[0].parsed or "").strip()
                exact = plan == task.metadata["gold_plan"].strip()
                passed = traj.public.passed and traj.private.passed
                cells[(exact, passed, gold.public.passed and gold.private.passed)] += 1
                by_len[len(task.metadata["composition"])][0] += passed
                by_len[len(task.metadata["composition"])][1] += 1
                if not exact and len(wrong) < args.examples:
                    wrong.append((task, plan))
            n = len(tasks)
            rate = sum(v for k, v in cells.items() if k[1]) / n
            print(f"\n{name}: {n} tasks, greedy pass@1 {rate:.3f} (SE {rate_se(rate, n):.3f}); "
                  f"coder from the gold plan {sum(v for k, v in cells.items() if k[2]) / n:.3f}; "
                  f"plans equal to the gold plan {sum(v for k, v in cells.items() if k[0]) / n:.3f}")
            print(f"{'plan = gold':<13}{'chain passes':<14}{'passes from gold plan':<23}{'tasks':>6}")
            for (exact, passed, gold_pass), count in sorted(cells.items(), key=lambda kv: -kv[1]):
                print(f"{'yes' if exact else 'no':<13}{'yes' if passed else 'no':<14}{'yes' if gold_pass else 'no':<23}{count:>6}")
            failed = sum(v for k, v in cells.items() if not k[1])
            plan_fail = sum(v for k, v in cells.items() if not k[1] and not k[0])
            print(f"failures with a plan other than the gold one: {plan_fail} of {failed}")
            print("pass@1 by composition length (steps + terminal): "
                  + ", ".join(f"{k}: {a}/{b}" for k, (a, b) in sorted(by_len.items())))
            for task, plan in wrong:
                print(f"--- {problem_text(task).splitlines()[0]}\n  gold:  {task.metadata['gold_plan'].replace(chr(10), ' | ')}"
                      f"\n  model: {plan.replace(chr(10), ' | ')}")


if __name__ == "__main__":
    main()
