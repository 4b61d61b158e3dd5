"""Probe one CoRe-Code RL setting from a cached SFT checkpoint: greedy pass@1 on held-out tasks and on
training tasks, before and after RL. Used for the learning-rate / group sweep in the README.

    .venv/bin/python bench/corecode_rl_probe.py '{"steps": 40, "rl_lr": 5e-5, "plans_per_task": 4, "codes_per_plan": 2}'
    .venv/bin/python bench/corecode_rl_probe.py '{"steps": 20, "fixed": 48, "rl_lr": 1e-4, "train_roles": ["coder"]}'

The JSON holds CoReCodeConfig fields plus `steps` (RL steps), `fixed` (RL on the first N training
tasks only, and the "train" evaluation on those same N tasks; 0 = the usual stream and the first 200)
`sampled` (also report held-out pass@1 estimated from that many samples per task at the RL
temperature; 0 = greedy only) and `eval_every` (also print held-out greedy pass@1 every N steps).
"fresh" is pass@1 on the config's `n_fresh_tasks` held-out tasks of the training skeletons (greedy, and
sampled when `sampled` > 0), printed with each evaluation.
The SFT weights are cached in runs/probe_sft_e<epochs>_b<batch>_lr<lr>_s<seed>[_rl<fraction>][_d<d_model>_l<layers>] so that settings share one
cold start.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from coral.policy.hf import HFPolicy
from coral.sandbox import Sandbox
from coral.train.corecode import (
    CoReCodeConfig,
    build_policies,
    build_tasks,
    evaluate_pass1,
    fresh_tasks,
    frozen_copy,
    make_learners,
    next_batch,
    rl_step,
    rl_tasks,
    sft_checkpoint_dir,
    sft_corecode,
)


def main() -> None:
    kw = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    steps, fixed, sampled = kw.pop("steps", 20), kw.pop("fixed", 0), kw.pop("sampled", 0)
    eval_every = kw.pop("eval_every", 0)
    cfg = CoReCodeConfig(**kw)
    train, test = build_tasks(cfg)
    pool = train[:fixed] if fixed else rl_tasks(cfg, train)
    train_eval = train[:fixed] if fixed else train[:200]
    fresh = fresh_tasks(cfg, train, pool)  # cfg.n_fresh_tasks held-out tasks of the training skeletons
    held = f"_rl{cfg.rl_skeleton_fraction}" if cfg.rl_skeleton_fraction else ""  # SFT without the RL skeletons
    shape = "" if (cfg.d_model, cfg.n_layers) == (128, 4) else f"_d{cfg.d_model}_l{cfg.n_layers}"  # non-default model
    cache = Path(f"runs/probe_sft_e{cfg.sft_epochs}_b{cfg.sft_batch_size}_lr{cfg.sft_lr}_s{cfg.seed}{held}{shape}")
    if "out_dir" not in kw:  # evaluations and the SFT checkpoints (resumable, removed once cached) per cold start
        cfg = replace(cfg, out_dir=f"{cache}_probe")
    t0 = time.time()
    with Sandbox() as sb:
        if cache.exists():
            pols = {r: HFPolicy.load(cache / r) for r in ("planner", "coder")}
        else:
            pols = build_policies(cfg, train)
            sft_corecode(cfg, pols, train, progress=False)
            for role, policy in pols.items():
                policy.save(cache / role)
            shutil.rmtree(sft_checkpoint_dir(cfg))
        for p in pols.values():
            p.batch_size = 128  # as build_policies sets it for the demo
        def evaluate(when: str) -> str:
            out = (f"held-out {evaluate_pass1(cfg, pols, test, sb, when)['pass@1']:.3f}  "
                   f"train {evaluate_pass1(cfg, pols, train_eval, sb, when + '_train')['pass@1']:.3f}")
            if sampled:
                rate = evaluate_pass1(cfg, pols, test, sb, when + "_sampled", samples=sampled)["pass@1"]
                out += f"  held-out sampled (n={sampled}, T={cfg.temperature}) {rate:.3f}"
            return out + evaluate_fresh(when) + f"  ({time.time() - t0:.0f}s)"

        def evaluate_fresh(when: str) -> str:
            if not fresh:
                return ""
            out = f"  fresh {evaluate_pass1(cfg, pols, fresh, sb, when + '_fresh')['pass@1']:.3f}"
            if sampled:
                out += f"  fresh sampled {evaluate_pass1(cfg, pols, fresh, sb, when + '_fresh_sampled', samples=sampled)['pass@1']:.3f}"
            return out

        print(f"before: {evaluate('before')}", flush=True)
        if steps == 0:
            return
        refs = {r: frozen_copy(pols[r]) for r in cfg.train_roles} if cfg.beta_kl > 0 else {}
        learners = make_learners(cfg, pols, refs)
        for step in range(1, steps + 1):
            batch = next_batch(pool, (step - 1) * cfg.tasks_per_step, cfg.tasks_per_step, cfg.seed)
            m = rl_step(cfg, step, batch, pols, learners, sb)
            print(f"step {step}: sampled pass {m['pass_rate']:.3f}  {m['step_s']:.1f}s", flush=True)
            if eval_every and step % eval_every == 0 and step < steps:
                rate = evaluate_pass1(cfg, pols, test, sb, f"step{step}")["pass@1"]
                print(f"step {step}: held-out {rate:.3f}{evaluate_fresh(f'step{step}')}", flush=True)
        print(f"after:  {evaluate('after')}", flush=True)


if __name__ == "__main__":
    main()
