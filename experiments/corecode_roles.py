"""Planner+coder vs planner+coder+debugger (CoRe-Code with a trained debugger), after SFT alone and after
SFT + RL, over several seeds: held-out pass@1 on the test split (new skeletons; greedy, and sampled at the
RL temperature) and the debugger's fix rate (of the held-out codes whose coder's code failed, the share its
rewrites turn into passing ones).

Protocol (experiments/efficacy_protocol.py): no setting is chosen here, every arm runs at the recipe's
defaults (the cold start chosen on validation, docs/results/efficacy.md) plus `--set`; each seed has its own test
tasks, evaluated once per arm after SFT and once after RL; figures are means over seeds with their SE,
and every change is paired per task (the tasks of all seeds pooled). Each arm trains its own models from
the same seed, and both arms' tiny tokenizers are trained on the text of all three roles
(`tokenizer_roles`), so that the two arms' planners and coders are the same models after SFT (and, their
samples seeded per request, after RL) and the arms differ only by the debugger. A finished run (its
summary.json exists) is read back, not retrained, so a stopped study continues where it stopped; a
half-finished one resumes from its latest checkpoint.
A run directory whose config.json holds other settings is refused, not read back.

    python -m experiments.corecode_roles --seeds 0 1 2 --set '{"rl_steps": 150, "n_test_tasks": 200}'

Writes runs' JSON next to them (--out), the tables into docs/results/roles.md (section "benchmark"): pass@1,
the debugger's fix rate, and each role's training reward over the first and last `TRAIN_WINDOW` steps; and the
training curves (means over seeds) to efficacy_roles_curves.svg beside it.
This script does NOT add anything to train_corecode: every figure comes from its evaluations.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from coral.config import from_mapping
from coral.corecode.recipe import CoReCodeConfig, train_corecode
from coral.evaluation import task_pass_rates
from experiments.efficacy_protocol import (
    fmt_change,
    fmt_mean_se,
    markdown_table,
    mean_rate,
    over_seeds,
    pooled_paired_change,
    save_run,
    write_section,
)
from experiments.efficacy_training import write_curves

ROLES = ["planner", "coder", "debugger"]
ARMS: dict[str, dict[str, Any]] = {
    "planner+coder": {"debug_rounds": 0, "train_roles": ["planner", "coder"], "tokenizer_roles": ROLES},
    "planner+coder+debugger": {"debug_rounds": 1, "train_roles": ROLES, "tokenizer_roles": ROLES},
    # the debugger's SFT starts from the coder's SFT weights (debugger_init coder; experiments/debugger_testbed.py)
    "planner+coder+debugger-from-coder": {"debug_rounds": 1, "train_roles": ROLES, "tokenizer_roles": ROLES,
                                          "debugger_init": "coder"},
}
DEFAULT_ARMS = ["planner+coder", "planner+coder+debugger"]
EVALS = {"greedy": "", "sampled": "_sampled"}  # figure -> suffix of the eval_{sft,rl} directory
TRAIN_WINDOW = 30  # RL steps averaged at the start and at the end of training


def run_arm(arm: str, seed: int, overrides: dict[str, Any], out: Path) -> dict[str, Any]:
    """One arm and seed: trained (or read back when finished); per-task pass rates and fix rates."""
    out_dir = out / arm / f"seed{seed}"
    fields = {**overrides, **ARMS[arm], "seed": seed, "out_dir": str(out_dir), "n_fresh_tasks": 0}
    cfg = from_mapping(CoReCodeConfig, fields, "--set")
    check_same_config(out_dir / "config.json", cfg)
    done = out_dir / "summary.json"
    summary = json.loads(done.read_text()) if done.is_file() else train_corecode(cfg, progress=False)
    rates, fix = {}, {}
    for when in ("sft", "rl"):
        for figure, suffix in EVALS.items():
            samples = out_dir / f"eval_{when}{suffix}" / "samples.jsonl"
            if samples.is_file():
                rates[f"{figure}/{when}"] = task_pass_rates(samples)
        ev = json.loads((out_dir / f"eval_{when}" / "summary.json").read_text())["summary"]
        if "fix_rate" in ev:
            fix[when] = {"fix_rate": ev["fix_rate"], "debugged": ev["debugged"]}
    return {"rates": rates, "fix": fix, "wall_s": summary["wall_s"], "config": fields,
            "training": training(out_dir / "metrics.jsonl"), "dir": str(out_dir)}


def training(metrics_jsonl: Path, window: int = TRAIN_WINDOW) -> dict[str, float]:
    """Each role's mean reward and the chains' pass rate over the first and the last `window` RL steps
    ("coder/first", "coder/last", ..., "pass_rate/first", ...); empty when the run logged no step."""
    if not metrics_jsonl.is_file():
        return {}
    steps = [json.loads(line) for line in metrics_jsonl.read_text().splitlines() if line.strip()]
    out = {}
    for name, key in [*((r, f"{r}/reward") for r in ROLES), ("pass_rate", "pass_rate")]:
        values = [m[key] for m in steps if key in m]
        if values:
            out[f"{name}/first"] = sum(values[:window]) / len(values[:window])
            out[f"{name}/last"] = sum(values[-window:]) / len(values[-window:])
    return out


def training_table(runs: dict[str, dict[int, dict[str, Any]]]) -> str:
    """Per arm and figure (each role's reward, the training pass rate): first -> last window, mean ± SE over
    seeds, and the per-seed change."""
    rows = []
    for arm, by_seed in runs.items():
        for name in [*ROLES, "pass_rate"]:
            seeds = [s for s, r in by_seed.items() if f"{name}/first" in r.get("training", {})]
            if not seeds:
                continue
            first = over_seeds({s: by_seed[s]["training"][f"{name}/first"] for s in seeds})
            last = over_seeds({s: by_seed[s]["training"][f"{name}/last"] for s in seeds})
            each = ", ".join(f"{by_seed[s]['training'][f'{name}/last'] - by_seed[s]['training'][f'{name}/first']:+.3f}"
                             for s in seeds)
            figure = "training pass rate" if name == "pass_rate" else f"{name} reward"
            rows.append([arm, figure, fmt_mean_se(first), fmt_mean_se(last), each, len(seeds)])
    if not rows:
        return ""
    return markdown_table(["arm", "figure (RL samples)", f"steps 1-{TRAIN_WINDOW}", f"last {TRAIN_WINDOW} steps",
                           "change per seed", "seeds"], rows)


def check_same_config(path: Path, cfg: CoReCodeConfig) -> None:
    """Refuse to read back or resume a run directory made with other settings (tokenizer_roles None and the
    chain's own roles are the same setting)."""
    if not path.is_file():
        return
    saved = from_mapping(CoReCodeConfig, json.loads(path.read_text()), str(path))
    a, b = (dataclasses.replace(c, tokenizer_roles=c.tokenizer_roles or c.chain_roles) for c in (saved, cfg))
    differ = [f.name for f in dataclasses.fields(CoReCodeConfig) if getattr(a, f.name) != getattr(b, f.name)]
    if differ:
        raise ValueError(f"{path} was made with other settings ({', '.join(differ)}: "
                         f"{getattr(a, differ[0])!r} there, {getattr(b, differ[0])!r} now); move that run directory away")


def table(runs: dict[str, dict[int, dict[str, Any]]]) -> str:
    """Per arm and figure: after SFT, after RL (mean ± SE over seeds), RL - SFT paired per task; then the
    debugger arm against planner+coder at the same stage, paired per task; then fix rates."""
    rows = []
    for arm, by_seed in runs.items():
        for figure in EVALS:
            key_sft, key_rl = f"{figure}/sft", f"{figure}/rl"
            seeds = [s for s, r in by_seed.items() if key_sft in r["rates"] and key_rl in r["rates"]]
            if not seeds:
                continue
            before = {s: by_seed[s]["rates"][key_sft] for s in seeds}
            after = {s: by_seed[s]["rates"][key_rl] for s in seeds}
            rows.append([arm, f"pass@1 {figure}", fmt_mean_se(over_seeds({s: mean_rate(before[s]) for s in seeds})),
                         fmt_mean_se(over_seeds({s: mean_rate(after[s]) for s in seeds})),
                         fmt_change(pooled_paired_change(before, after)), len(seeds)])
    text = markdown_table(["arm", "figure (test split)", "after SFT", "after SFT + RL", "RL - SFT (paired per task)",
                           "seeds"], rows)
    base = runs.get("planner+coder", {})
    debug_arms = {arm: by_seed for arm, by_seed in runs.items() if "debugger" in arm}
    vs, fixes = [], []
    for arm, dbg in debug_arms.items():
        for figure in EVALS:
            for when in ("sft", "rl"):
                key = f"{figure}/{when}"
                seeds = [s for s in base if s in dbg and key in base[s]["rates"] and key in dbg[s]["rates"]]
                if seeds:
                    change = pooled_paired_change({s: base[s]["rates"][key] for s in seeds},
                                                  {s: dbg[s]["rates"][key] for s in seeds})
                    vs.append([arm, f"pass@1 {figure}", "after SFT" if when == "sft" else "after SFT + RL",
                               fmt_change(change), len(seeds)])
        fixes += [[arm, when, fmt_mean_se(over_seeds({s: r["fix"][when]["fix_rate"] for s, r in dbg.items()
                                                      if when in r["fix"]})),
                   " / ".join(f"{int(r['fix'][when]['debugged'])}" for r in dbg.values() if when in r["fix"])]
                  for when in ("sft", "rl") if any(when in r["fix"] for r in dbg.values())]
    if vs:
        text += "\n" + markdown_table(["debugger arm", "figure (test split)", "stage",
                                       "arm - planner+coder (paired per task)", "seeds"], vs)
    if fixes:
        text += "\n" + markdown_table(["debugger arm", "fix rate after (greedy, test split)", "mean ± SE over seeds",
                                       "failing codes it saw, per seed"], fixes)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds; each has its own test tasks")
    ap.add_argument("--arms", nargs="+", default=DEFAULT_ARMS, choices=list(ARMS),
                    help="arms to run (default: planner+coder and planner+coder+debugger)")
    ap.add_argument("--set", default="{}", help="JSON of further CoReCodeConfig fields for every arm")
    ap.add_argument("--out", default="runs/experiment_roles", help="directory of the runs and results.json")
    ap.add_argument("--results-md", default="docs/results/roles.md", help="markdown file the table goes into")
    ap.add_argument("--section", default="benchmark",
                    help="section of --results-md the tables replace (another keeps the benchmark's, e.g. for one arm "
                         "at more seeds); its curves go to efficacy_roles[_SECTION]_curves.svg")
    args = ap.parse_args()
    overrides = json.loads(args.set)
    runs: dict[str, dict[int, dict[str, Any]]] = {arm: {} for arm in args.arms}
    for seed in args.seeds:
        for arm in args.arms:
            runs[arm][seed] = run_arm(arm, seed, overrides, Path(args.out))
            print(f"{arm}, seed {seed}: {runs[arm][seed]['wall_s'] / 60:.1f} min", flush=True)
    text = table(runs)
    if train := training_table(runs):
        text += "\n" + train
    folders = {arm: [Path(r["dir"]) for r in by_seed.values()] for arm, by_seed in runs.items()}
    study = "roles" if args.section == "benchmark" else f"roles_{args.section}"
    text += "\n" + write_curves(Path(args.results_md), study, folders, f"roles benchmark, seeds {args.seeds}")
    print(text)
    save_run(Path(args.out) / "results.json", {"set": overrides, "seeds": args.seeds, "arms": args.arms}, runs)
    write_section(Path(args.results_md), args.section, text)


if __name__ == "__main__":
    main()
