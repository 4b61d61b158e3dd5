"""How much `coral eval` figures move with per-request seed streams (coral/seeding.py) instead of the old
batch-index seeds, on a small SFT'd tiny planner -> coder chain, measured in one run.

Old seeding (before the seeding module): every agent of `coral eval` had the run's seed, and request i
of an `act` batch sampled with seed + i, so plan i and the code written for it drew the same random
numbers, and every batch of tasks reused the seeds of the first. New seeding: one hashed stream per
(seed, step, agent, task/sample). Both are run here on the same SFT'd policies and the same tasks, for
each --seeds base seed; the table gives sampled pass@1 (mean over tasks of the per-task pass rate, with
its standard error), the paired difference new - old over tasks (with its SE), and for scale the
spread of the old figure across base seeds.

    python -m experiments.eval_seed_change --seeds 0 1 2 --tasks 100 --samples 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from coral.agents import make_agent
from coral.corecode.recipe import CoReCodeConfig, build_policies, build_tasks, sft_corecode
from coral.evaluation import EvalConfig, run_eval, task_pass_rates
from coral.policy.base import Completion, GenerationRequest, SamplingParams


class BatchIndexSeeds:
    """The old seeding, reproduced around a policy: request i of each generate call gets `base + i`
    (what `Agent.act` did with call_index 0, the only index the chain uses without a debugger)."""

    def __init__(self, policy: Any, base: int) -> None:
        self.policy, self.base, self.name = policy, base, f"{policy.name}+batch-index-seeds"

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        return self.policy.generate([replace(r, sampling=replace(r.sampling, seed=self.base + i))
                                     for i, r in enumerate(requests)])


def _se(xs: Sequence[float]) -> float:
    return statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else 0.0


def evaluate(policies: dict[str, Any], tasks: list, seed: int, scheme: str, args: argparse.Namespace,
             sandbox: Any) -> dict[str, float]:
    """Per-task pass rates of one sampled evaluation under `scheme` ("old" or "new")."""
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=seed)
    wrap = (lambda p: BatchIndexSeeds(p, seed)) if scheme == "old" else (lambda p: p)
    agents = {role: make_agent(role, wrap(policies[role]), sampling=sampling) for role in ("planner", "coder")}
    out = Path(args.out) / f"seed{seed}_{scheme}"
    ecfg = EvalConfig(workflow="chain", samples_per_task=args.samples, ks=(1,), temperature=args.temperature,
                      max_new_tokens=args.max_new_tokens, seed=seed, tasks_per_batch=args.tasks_per_batch,
                      out_dir=str(out))
    run_eval(ecfg, tasks=tasks, agents=agents, sandbox=sandbox, progress=False)
    return task_pass_rates(out / "samples.jsonl")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--tasks", type=int, default=100, help="test-split tasks evaluated")
    ap.add_argument("--samples", type=int, default=4, help="(plan, code) samples per task")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--tasks-per-batch", type=int, default=16, help="coral eval's default")
    ap.add_argument("--train-tasks", type=int, default=1000)
    ap.add_argument("--sft-epochs", type=float, default=4.0)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--out", default="runs/eval_seed_change")
    args = ap.parse_args()

    from coral.sandbox import Sandbox

    cfg = CoReCodeConfig(n_train_tasks=args.train_tasks, n_test_tasks=args.tasks, sft_epochs=args.sft_epochs,
                         d_model=args.d_model, n_layers=args.layers, out_dir=args.out)
    start = time.perf_counter()
    train, test = build_tasks(cfg)
    policies = build_policies(cfg, train)
    sft_corecode(cfg, policies, train, progress=False)
    print(f"SFT'd planner and coder (d_model {args.d_model}, {args.layers} layers) on {len(train)} tasks "
          f"in {time.perf_counter() - start:.0f} s; "
          f"evaluating {len(test)} test tasks x {args.samples} samples at temperature {args.temperature}", flush=True)
    rows = {}
    with Sandbox(workers=cfg.sandbox_workers) as sandbox:
        for seed in args.seeds:
            rates = {scheme: evaluate(policies, test, seed, scheme, args, sandbox) for scheme in ("old", "new")}
            diff = [rates["new"][t] - rates["old"][t] for t in rates["old"]]
            rows[seed] = {s: {"pass@1": statistics.mean(r.values()), "se": _se(list(r.values()))}
                          for s, r in rates.items()}
            rows[seed]["diff"] = {"mean": statistics.mean(diff), "se": _se(diff)}
            r = rows[seed]
            print(f"seed {seed}: pass@1 old {r['old']['pass@1']:.3f} ± {r['old']['se']:.3f}, new "
                  f"{r['new']['pass@1']:.3f} ± {r['new']['se']:.3f}, new - old {r['diff']['mean']:+.3f} "
                  f"± {r['diff']['se']:.3f} (paired over tasks); {time.perf_counter() - start:.0f} s", flush=True)
    for scheme in ("old", "new"):
        vals = [r[scheme]["pass@1"] for r in rows.values()]
        spread = statistics.stdev(vals) if len(vals) > 1 else 0.0
        print(f"{scheme}: mean pass@1 over seeds {statistics.mean(vals):.3f}, sd across seeds {spread:.3f}")
    diffs = [r["diff"]["mean"] for r in rows.values()]
    print(f"new - old, mean over seeds: {statistics.mean(diffs):+.3f}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "results.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
