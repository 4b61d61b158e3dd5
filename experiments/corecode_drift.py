"""How far a finished CoRe-Code run's RL moved each role from its cold start: KL(final || cold start) per role,
the k3 estimate's token mean on the final policies' own samples (grpo.sampler_kl_sum, which `rl.log_kl` logs
during a run), from the
chain sampled on the training stream's next `--steps` batches (the tasks the run would have seen next).

    python -m experiments.corecode_drift runs/demo
    python -m experiments.corecode_drift runs/demo --save-cold-start runs/demo_cold   # then corecode_failures on it

RUN is a `coral demo` / train run's out_dir: its config.json, final/ (planner, coder) and the cold start it
kept in sft/cold_start. --save-cold-start DIR also writes that cold start as DIR/planner and DIR/coder (the
layout experiments/corecode_failures.py reads).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from coral.benchmarks.splits import build_tasks, rl_tasks
from coral.config import from_mapping
from coral.corecode.fork import load_kept_cold_start
from coral.corecode.recipe import CoReCodeConfig
from coral.corecode.setup import build_policies, make_agents
from coral.policy.hf import HFPolicy
from coral.sandbox import Sandbox
from coral.train.grpo import sampler_kl_sum, unique_turns
from coral.train.loop import next_batch
from coral.workflows.chain import run_chain

ROLES = ("planner", "coder")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a coral demo / train run's out_dir")
    ap.add_argument("--steps", type=int, default=5, help="stream batches after the run's last step to sample")
    ap.add_argument("--save-cold-start", type=Path, default=None, help="also write the cold start here")
    args = ap.parse_args(argv)
    if args.steps < 1:
        raise SystemExit(f"--steps must be >= 1, got {args.steps}")
    kl, tokens = drift(args.run, args.steps, args.save_cold_start)
    print(" ".join(f"KL {role} {kl[role]:.4f} ({tokens[role]} tokens)" for role in ROLES) +
          f"; mean of the roles {sum(kl.values()) / len(kl):.4f}")


def drift(run: Path, steps: int, save_cold_start: Path | None = None) -> tuple[dict[str, float], dict[str, int]]:
    """Per role: KL(final || cold start) token mean, and the tokens it is over."""
    for need in ("config.json", "final"):
        if not (run / need).exists():
            raise SystemExit(f"{run / need} does not exist (give the out_dir of a finished coral demo / train run)")
    kw = json.loads((run / "config.json").read_text())
    cfg = from_mapping(CoReCodeConfig, kw, f"{run / 'config.json'}")
    if set(cfg.chain_roles) != set(ROLES):
        raise SystemExit(f"{run}: a chain of {list(cfg.chain_roles)}; this measures planner -> coder runs")
    train, _ = build_tasks(cfg.splits)
    cold = build_policies(cfg, train)
    load_kept_cold_start(run, cold)
    if save_cold_start is not None:
        for role in ROLES:
            cold[role].save(save_cold_start / role)
    final = {role: HFPolicy.load(run / "final" / role, batch_size=128) for role in ROLES}
    pool, agents = rl_tasks(cfg.splits, train), make_agents(cfg, final)
    sums = {role: 0.0 for role in ROLES}
    tokens = {role: 0 for role in ROLES}
    with Sandbox() as sandbox:
        for step in range(cfg.rl_steps + 1, cfg.rl_steps + steps + 1):
            batch = next_batch(pool, (step - 1) * cfg.tasks_per_step, cfg.tasks_per_step, cfg.seed)
            trajs = run_chain(batch, agents["coder"], sandbox, cfg.chain_config(), planner=agents["planner"], step=step)
            turns = unique_turns([tr.turns for tr in trajs])
            for role in ROLES:
                mine = [t for t in turns if t.role == role]
                total, n = sampler_kl_sum(mine, cold[role], cfg.rl.temperature, cfg.rl.micro_batch_size)
                sums[role] += total
                tokens[role] += n
    return {role: sums[role] / max(tokens[role], 1) for role in ROLES}, tokens


if __name__ == "__main__":
    main()
