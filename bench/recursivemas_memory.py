"""Peak memory and time of one RecursiveMAS outer-loop step with and without gradient checkpointing.

Each mode runs in its own child process (this script with --mode): three untrained tiny agents (d 64 /
96 / 64), sequential pattern, 8 procedural training records, R rounds x m latent steps unrolled, one
forward + backward of the outer loss. Printed per mode: peak RSS above the RSS just before the step
(VmHWM, reset first), wall seconds of the step; then the ratios. CPU memory only.

    .venv/bin/python bench/recursivemas_memory.py --rounds 3 --latent-steps 16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def one_step(checkpointing: bool, rounds: int, latent_steps: int) -> dict[str, float]:
    import torch

    from coral.benchmarks.procedural import make_tasks
    from coral.policy.hf import HFPolicy
    from coral.policy.tiny import build_model, build_tokenizer
    from coral.procmem import proc_hwm_kb, proc_rss_kb, reset_peak
    from coral.recursivemas.data import procedural_records
    from coral.recursivemas.patterns import get_pattern
    from coral.recursivemas.system import RecursiveMAS
    from coral.recursivemas.train import outer_loss

    records = procedural_records(make_tasks(8, "train", min_depth=1, max_depth=2, seed=0))
    tok = build_tokenizer()
    agents = {r: HFPolicy(build_model(tok, seed=i, d_model=w, n_layers=2, n_heads=4, max_len=4096), tok)
              for i, (r, w) in enumerate(zip(("planner", "critic", "solver"), (64, 96, 64), strict=True))}
    torch.manual_seed(0)
    mas = RecursiveMAS(get_pattern("sequential"), agents, latent_steps, gradient_checkpointing=checkpointing)
    mas.inner.requires_grad_(False)
    pid = os.getpid()
    reset_peak(pid)
    rss0 = proc_rss_kb(pid)
    t0 = time.perf_counter()
    loss, _ = outer_loss(mas, records, rounds)
    loss.backward()
    wall = time.perf_counter() - t0
    return {"peak_mb": (proc_hwm_kb(pid) - rss0) / 1024, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latent-steps", type=int, default=16)
    ap.add_argument("--mode", choices=["plain", "checkpointed"], help="internal: run one mode here")
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(one_step(args.mode == "checkpointed", args.rounds, args.latent_steps)))
        return
    res = {}
    for mode in ("plain", "checkpointed"):
        out = subprocess.run([sys.executable, __file__, "--mode", mode, "--rounds", str(args.rounds),
                              "--latent-steps", str(args.latent_steps)], capture_output=True, text=True, check=True)
        res[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{mode}: peak {res[mode]['peak_mb']:.1f} MB above the step's start, step {res[mode]['wall_s']:.2f} s")
    print(f"checkpointed / plain: memory {res['checkpointed']['peak_mb'] / res['plain']['peak_mb']:.2f}, "
          f"time {res['checkpointed']['wall_s'] / res['plain']['wall_s']:.2f}")


if __name__ == "__main__":
    main()
