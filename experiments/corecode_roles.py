"""Planner+coder vs planner+coder+debugger (CoRe-Code with a trained debugger), after SFT alone and after
SFT + RL, over several seeds: held-out pass@1 on the test split (new skeletons; greedy, and sampled at the
RL temperature) and the debugger's fix rate (of the held-out codes whose coder's code failed, the share its
rewrites turn into passing ones). Settings were not tuned on the test split; `--set` changes them (choose
them on a validation run, not on these figures). Each arm trains its own models from the same seed (the
debugger arm's tokenizer also sees the debugger's cold-start text, so its planner and coder differ too).

    .venv/bin/python experiments/corecode_roles.py --seeds 0 1 2
    .venv/bin/python experiments/corecode_roles.py --seeds 0 1 --set '{"n_train_tasks": 500, "rl_steps": 20}'

This script does NOT add anything to train_corecode: every figure is one of its summaries.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from coral.config import from_mapping
from coral.report.error_bars import mean_se
from coral.train.corecode import CoReCodeConfig, train_corecode

ARMS: dict[str, dict[str, Any]] = {
    "planner+coder": {"debug_rounds": 0, "train_roles": ["planner", "coder"]},
    "planner+coder+debugger": {"debug_rounds": 1, "train_roles": ["planner", "coder", "debugger"]},
}
FIGURES = ("pass@1", "pass@1_sampled", "fix_rate")


def figures(out_dir: Path, when: str) -> dict[str, float]:
    """Held-out test-split figures of one run after SFT ("sft") or after RL ("rl"), from its evaluations."""
    out = {}
    for suffix in ("", "_sampled"):
        path = out_dir / f"eval_{when}{suffix}" / "summary.json"
        if not path.is_file():
            continue
        summary = json.loads(path.read_text())["summary"]
        out[f"pass@1{suffix}"] = summary["pass@1"]
        if suffix == "" and "fix_rate" in summary:
            out["fix_rate"], out["debugged"] = summary["fix_rate"], summary["debugged"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--set", default="{}", help="JSON of further CoReCodeConfig fields for every arm")
    ap.add_argument("--out", default="runs/experiment_roles")
    args = ap.parse_args()
    rows: dict[str, dict[int, dict[str, dict[str, float]]]] = {arm: {} for arm in args.arms}
    for seed in args.seeds:
        for arm in args.arms:
            out_dir = Path(args.out) / arm / f"seed{seed}"
            fields = {**json.loads(args.set), **ARMS[arm], "seed": seed, "out_dir": str(out_dir), "n_fresh_tasks": 0}
            summary = train_corecode(from_mapping(CoReCodeConfig, fields, "--set"), progress=False)
            rows[arm][seed] = {"sft": figures(out_dir, "sft"), "rl": figures(out_dir, "rl"), "wall_s": summary["wall_s"]}
            print(f"{arm}, seed {seed} ({summary['wall_s'] / 60:.1f} min): {rows[arm][seed]}", flush=True)
    print("\n| arm | figure | after SFT | after SFT + RL | RL - SFT (SE over seeds) |")
    print("|---|---|---|---|---|")
    for arm, by_seed in rows.items():
        for fig in FIGURES:
            pairs = [(r["sft"][fig], r["rl"][fig]) for r in by_seed.values() if fig in r["sft"] and fig in r["rl"]]
            if not pairs:
                continue
            diff, se = mean_se([b - a for a, b in pairs])  # se is nan with one seed
            print(f"| {arm} | {fig} | {statistics.mean(a for a, _ in pairs):.3f} | "
                  f"{statistics.mean(b for _, b in pairs):.3f} | {diff:+.3f} ({se:.3f}) |")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "results.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
