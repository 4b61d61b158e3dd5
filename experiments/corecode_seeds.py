"""Held-out pass@1 after SFT alone vs after SFT + CoRe-Code GRPO, over several seeds (the demo's
settings unless flags say otherwise), on both held-out sets (new skeletons: the test split; tasks of the
training skeletons: `n_fresh_tasks`): greedy, and estimated from --eval-samples samples per task at the
RL temperature. Each seed is a full `coral demo` run (about 21-23 minutes on 2 cores; 30 with
`--set '{"n_test_tasks": 500}'`).

    .venv/bin/python bench/corecode_seeds.py --seeds 0 1 2
    .venv/bin/python bench/corecode_seeds.py --seeds 1 --set '{"rl_lr": 2e-4}'
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from coral.train.corecode import CHANGE_KEYS, CoReCodeConfig, train_corecode

LABELS = {"greedy": "new skeletons (test split), greedy", "sampled": "new skeletons, sampled",
          "fresh_greedy": "tasks of the training skeletons, greedy", "fresh_sampled": "tasks of the training skeletons, sampled"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rl-steps", type=int, default=CoReCodeConfig.rl_steps)
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--set", default="{}", help="JSON of further CoReCodeConfig fields")
    ap.add_argument("--out", default="runs/bench_corecode")
    args = ap.parse_args()
    rows = {}
    for seed in args.seeds:
        cfg = replace(CoReCodeConfig(), **json.loads(args.set), seed=seed, rl_steps=args.rl_steps,
                      eval_samples=args.eval_samples, out_dir=f"{args.out}/seed{seed}")
        s = train_corecode(cfg, progress=False)
        rows[seed] = {k: v for k, v in s.items() if k.startswith("pass@1") or k in ("wall_s", "change")}
        print(f"seed {seed} ({s['wall_s'] / 60:.1f} min), held-out pass@1 SFT -> SFT+RL:", flush=True)
        for name, key in CHANGE_KEYS.items():
            if key in s["change"]:
                c, fig = s["change"][key], name.removeprefix("eval")
                print(f"  {LABELS[key]}: {s[f'pass@1{fig}_sft']:.3f} -> {s[f'pass@1{fig}_rl']:.3f} "
                      f"(paired SE {c['se']:.3f}; {c['up']} tasks up, {c['down']} down)", flush=True)
    for name, key in CHANGE_KEYS.items():
        fig = name.removeprefix("eval")
        runs = [r for r in rows.values() if f"pass@1{fig}_rl" in r]
        if not runs:
            continue
        sft = [r[f"pass@1{fig}_sft"] for r in runs]
        rl = [r[f"pass@1{fig}_rl"] for r in runs]
        print(f"seeds {args.seeds}: mean held-out pass@1, {LABELS[key]}: SFT {statistics.mean(sft):.3f}, "
              f"SFT+RL {statistics.mean(rl):.3f}, difference {statistics.mean(rl) - statistics.mean(sft):+.3f} "
              f"(RL better on {sum(b > a for a, b in zip(sft, rl, strict=True))}/{len(sft)} seeds)")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "results.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
