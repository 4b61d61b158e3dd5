"""Held-out pass@1 after SFT alone vs after SFT + CoRe-Code GRPO, over several seeds (the demo's
settings unless flags say otherwise). Each seed is a full `coral demo` run (about 9 minutes on 2 cores).

    .venv/bin/python bench/corecode_seeds.py --seeds 0 1 2
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
    ap.add_argument("--out", default="runs/bench_corecode")
    args = ap.parse_args()
    rows = {}
    for seed in args.seeds:
        cfg = replace(CoReCodeConfig(), seed=seed, rl_steps=args.rl_steps, out_dir=f"{args.out}/seed{seed}")
        s = train_corecode(cfg, progress=False)
        rows[seed] = (s["pass@1_sft"], s["pass@1_rl"], s["wall_s"])
        print(f"seed {seed}: held-out pass@1 SFT {s['pass@1_sft']:.3f} -> SFT+RL {s['pass@1_rl']:.3f} "
              f"({s['wall_s'] / 60:.1f} min)", flush=True)
    sft = [r[0] for r in rows.values()]
    rl = [r[1] for r in rows.values()]
    print(f"\nseeds {args.seeds}: mean held-out pass@1 SFT {statistics.mean(sft):.3f}, "
          f"SFT+RL {statistics.mean(rl):.3f}, difference {statistics.mean(rl) - statistics.mean(sft):+.3f} "
          f"(RL better on {sum(b > a for a, b in zip(sft, rl, strict=True))}/{len(sft)} seeds)")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "results.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
