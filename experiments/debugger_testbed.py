"""The repair target of the testbed (docs/results/efficacy.md, "The testbed") for CoRe-Code's debugger, on the
validation split: does a rewrite of a failing code pass more often than a fresh sample of the same task? One
cold start per seed at the roles benchmark's settings (experiments/corecode_roles.py: planner, coder and
debugger, one debug round, a tokenizer of all three roles); the planner and coder are SFT'd once, the debugger
twice, once per `debugger_init` (scratch: a fresh model; coder: a copy of the coder after its SFT), so both
debuggers see the same failing codes. Per debugger, on `tasks` validation tasks:

- greedy: pass@1 of the chain with the debugger against the coder's own code (paired per task), and the
  fix rate (of the codes failing a public test that the debugger rewrote, the share whose final code passes);
- sampled at the RL temperature (`samples` per task): the fix rate against **fresh**: for each rewritten
  failing sample, the pass rate of the task's other coder samples (a fresh plan and code of the same task).

    PYTHONPATH=. python -m experiments.debugger_testbed --seed 0

Writes `figures.json` under --out/seed<seed> (with the command, commit, date and load average); SFT resumes
from its checkpoints there. This module does NOT touch the test split and does NOT choose a setting.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from coral.benchmarks.records import read_records
from coral.benchmarks.splits import build_tasks, sft_tasks
from coral.config import from_mapping
from coral.corecode.config import CoReCodeConfig
from coral.corecode.evaluate import evaluate_pass1
from coral.corecode.setup import (
    build_policies,
    cold_start_data,
    copy_weights,
    role_sft_configs,
    sft_checkpoint_dir,
)
from coral.sandbox import Sandbox
from coral.train.checkpoints import cloned_weights, load_weights
from coral.train.sft_parallel import train_sft_many
from experiments.corecode_roles import ROLES
from experiments.efficacy_protocol import provenance, set_fields

INITS = ("scratch", "coder")


def config(seed: int, tasks: int, out: Path, overrides: dict[str, Any]) -> CoReCodeConfig:
    """The roles benchmark's debugger arm, held out on `tasks` validation tasks, with `overrides`."""
    fields = {"debug_rounds": 1, "train_roles": ROLES, "tokenizer_roles": ROLES, "held_out_split": "validation",
              "n_test_tasks": tasks, "n_fresh_tasks": 0, "sft_processes": 1, **overrides,
              "seed": seed, "out_dir": str(out)}
    return from_mapping(CoReCodeConfig, fields, "--set")


def cold_starts(cfg: CoReCodeConfig, policies: dict[str, Any], train: list[Any], sandbox: Any) -> dict[str, Any]:
    """Planner and coder SFT'd once; the debugger's SFT weights for each of INITS (resumable)."""
    data = cold_start_data(cfg, sft_tasks(cfg.splits, train), sandbox)
    sft = role_sft_configs(cfg, ROLES)
    ckpt = sft_checkpoint_dir(cfg)
    debuggers = {}
    with tempfile.TemporaryDirectory(prefix="coral-sft-") as work:
        train_sft_many({r: (policies[r], data[r], sft[r]) for r in ("planner", "coder")}, work, processes=1,
                       checkpoints={r: ckpt / f"{r}.pt" for r in ("planner", "coder")})
        fresh = cloned_weights(policies["debugger"])
        for init in INITS:
            load_weights(policies["debugger"], fresh)
            if init == "coder":
                copy_weights(policies["coder"], policies["debugger"])
            train_sft_many({"debugger": (policies["debugger"], data["debugger"], sft["debugger"])}, work, processes=1,
                           checkpoints={"debugger": ckpt / f"debugger_{init}.pt"})
            debuggers[init] = cloned_weights(policies["debugger"])
    return debuggers


def figures(greedy: list[dict[str, Any]], sampled: list[dict[str, Any]]) -> dict[str, float]:
    """Greedy pass@1 with and without the debugger and its fix rate; sampled fix rate against fresh samples."""
    def coder_ok(r: dict[str, Any]) -> bool:
        return bool(r["metrics"].get("coder_passed", 0.0))

    def rewritten(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in rows if not coder_ok(r) and r["metrics"].get("debug_turns", 0) > 0]

    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in sampled:
        by_task.setdefault(r["task_id"], []).append(r)
    fixed, fresh = [], []
    for r in rewritten(sampled):
        others = [coder_ok(o) for o in by_task[r["task_id"]] if o is not r]
        if others:
            fixed.append(bool(r["passed"]))
            fresh.append(sum(others) / len(others))
    g_rewritten = rewritten(greedy)
    n = max(len(greedy), 1)
    return {"tasks": len(greedy), "greedy_coder": sum(map(coder_ok, greedy)) / n,
            "greedy_chain": sum(bool(r["passed"]) for r in greedy) / n,
            "greedy_fix_rate": sum(bool(r["passed"]) for r in g_rewritten) / max(len(g_rewritten), 1),
            "greedy_rewritten": len(g_rewritten),
            "sampled_fix_rate": sum(fixed) / max(len(fixed), 1), "sampled_fresh": sum(fresh) / max(len(fresh), 1),
            "sampled_rewritten": len(fixed)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0, help="cold-start seed (and the validation draw)")
    ap.add_argument("--tasks", type=int, default=200, help="validation tasks")
    ap.add_argument("--samples", type=int, default=4, help="sampled codes per task at the RL temperature")
    ap.add_argument("--out", type=Path, default=Path("runs/debugger_testbed"), help="output folder")
    ap.add_argument("--set", type=set_fields, default={}, help="JSON of CoReCodeConfig fields over the defaults")
    args = ap.parse_args(argv)
    out = args.out / f"seed{args.seed}"
    cfg = config(args.seed, args.tasks, out, {**args.set, "eval_samples_per_task": args.samples})
    train, held_out = build_tasks(cfg.splits)
    torch.manual_seed(cfg.seed)
    results: dict[str, Any] = {"config": {"seed": args.seed, "tasks": args.tasks, "samples": args.samples,
                                          "set": args.set}, **provenance()}
    with Sandbox(workers=cfg.sandbox_workers) as sandbox:
        policies = build_policies(cfg, train, sandbox)
        debuggers = cold_starts(cfg, policies, train, sandbox)
        for init, weights in debuggers.items():
            load_weights(policies["debugger"], weights)
            for name, k in ((f"eval_{init}", 0), (f"eval_{init}_sampled", args.samples)):
                evaluate_pass1(cfg, policies, held_out, sandbox, name, samples=k, bench="procedural-validation",
                               progress=True)
            results[init] = figures(read_records(out / f"eval_{init}" / "samples.jsonl"),
                                    read_records(out / f"eval_{init}_sampled" / "samples.jsonl"))
            print(init, json.dumps(results[init]), flush=True)
    (out / "figures.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
