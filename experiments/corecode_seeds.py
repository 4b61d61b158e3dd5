"""Held-out pass@1 after SFT alone vs after SFT + CoRe-Code GRPO, over several seeds (the demo's
settings unless flags say otherwise), on both held-out sets (new skeletons: the test split; tasks of the
training skeletons: `n_fresh_tasks`): greedy, and estimated from --eval-samples samples per task at the
RL temperature. Each seed is a full `coral demo` run (about 21-23 minutes on 2 cores; 30 with
`--set '{"n_test_tasks": 500}'`). Error bars: each seed's paired per-task standard error, and the
standard error over seeds of the mean change.

    python -m experiments.corecode_seeds --seeds 0 1 2
    python -m experiments.corecode_seeds --seeds 1 --set '{"rl": {"lr": 2e-4}}'
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from coral.config import from_mapping
from coral.corecode.recipe import CoReCodeConfig, train_corecode
from coral.report.error_bars import mean_se

# summary["change"] key -> the figure's suffix in summary ("pass@1<suffix>_sft")
CHANGE_KEYS = {"greedy": "", "sampled": "_sampled", "fresh_greedy": "_fresh", "fresh_sampled": "_fresh_sampled"}

LABELS = {"greedy": "new skeletons (test split), greedy", "sampled": "new skeletons, sampled",
          "fresh_greedy": "tasks of the training skeletons, greedy", "fresh_sampled": "tasks of the training skeletons, sampled"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rl-steps", type=int, default=CoReCodeConfig.rl_steps)
    ap.add_argument("--eval-samples-per-task", type=int, default=4)
    ap.add_argument("--set", default="{}", help="JSON of further CoReCodeConfig fields (nested: {\"rl\": {\"lr\": 2e-5}})")
    ap.add_argument("--out", default="runs/experiment_corecode")
    args = ap.parse_args()
    rows = {}
    for seed in args.seeds:
        fields = {**json.loads(args.set), "seed": seed, "rl_steps": args.rl_steps,
                  "eval_samples_per_task": args.eval_samples_per_task, "out_dir": f"{args.out}/seed{seed}"}
        cfg = from_mapping(CoReCodeConfig, fields, "--set")
        s = train_corecode(cfg, progress=False)
        rows[seed] = {k: v for k, v in s.items() if k.startswith("pass@1") or k in ("wall_s", "change")}
        print(f"seed {seed} ({s['wall_s'] / 60:.1f} min), held-out pass@1 SFT -> SFT+RL:", flush=True)
        for key, fig in CHANGE_KEYS.items():
            if key in s["change"]:
                c = s["change"][key]
                print(f"  {LABELS[key]}: {s[f'pass@1{fig}_sft']:.3f} -> {s[f'pass@1{fig}_rl']:.3f} "
                      f"(paired SE {c['se']:.3f}; {c['up']} tasks up, {c['down']} down)", flush=True)
    for key, fig in CHANGE_KEYS.items():
        runs = [r for r in rows.values() if f"pass@1{fig}_rl" in r]
        if not runs:
            continue
        sft = [r[f"pass@1{fig}_sft"] for r in runs]
        rl = [r[f"pass@1{fig}_rl"] for r in runs]
        diff, se = mean_se([b - a for a, b in zip(sft, rl, strict=True)])
        print(f"seeds {args.seeds}: mean held-out pass@1, {LABELS[key]}: SFT {statistics.mean(sft):.3f}, "
              f"SFT+RL {statistics.mean(rl):.3f}, difference {diff:+.3f} ± {se:.3f} (SE over seeds; "
              f"RL better on {sum(b > a for a, b in zip(sft, rl, strict=True))}/{len(sft)} seeds)")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "results.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
