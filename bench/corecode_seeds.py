"""Held-out pass@1 after SFT alone vs after SFT + CoRe-Code GRPO, over several seeds (the demo's
settings unless flags say otherwise): greedy, and estimated from --eval-samples samples per task at the
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

from coral.train.corecode import CoReCodeConfig, train_corecode


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
        rows[seed] = {k: s.get(k) for k in ("pass@1_sft", "pass@1_rl", "pass@1_sampled_sft", "pass@1_sampled_rl",
                                            "wall_s", "change")}
        se = s["change"]["greedy"]["se"]
        line = (f"seed {seed}: held-out pass@1 greedy SFT {s['pass@1_sft']:.3f} -> SFT+RL {s['pass@1_rl']:.3f} "
                f"(paired SE {se:.3f})")
        if args.eval_samples:
            se = s["change"]["sampled"]["se"]
            line += (f"; sampled SFT {s['pass@1_sampled_sft']:.3f} -> SFT+RL {s['pass@1_sampled_rl']:.3f} "
                     f"(paired SE {se:.3f})")
        print(f"{line} ({s['wall_s'] / 60:.1f} min)", flush=True)
    for kind in ("", "sampled_") if args.eval_samples else ("",):
        sft = [r[f"pass@1_{kind}sft"] for r in rows.values()]
        rl = [r[f"pass@1_{kind}rl"] for r in rows.values()]
        print(f"seeds {args.seeds}: mean held-out pass@1 {kind.rstrip('_') or 'greedy'}: SFT {statistics.mean(sft):.3f}, "
              f"SFT+RL {statistics.mean(rl):.3f}, difference {statistics.mean(rl) - statistics.mean(sft):+.3f} "
              f"(RL better on {sum(b > a for a, b in zip(sft, rl, strict=True))}/{len(sft)} seeds)")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "results.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
