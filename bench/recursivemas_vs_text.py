"""RecursiveMAS (latent) vs the same frozen agents exchanging text, on held-out procedural tasks or HumanEval.

One run: build the agents (tiny ones cold-started by SFT on their roles' gold text; all frozen), train the
links (inner then outer loop, the recipe's step functions without its evaluations), then for each R of
--rounds evaluate on the test split, in this order per R: RecursiveMAS (the final agent decodes its answer;
deliberation_public_tests also decodes an attempt every earlier round), text MAS (same pattern, same rounds,
every agent decodes), the final agent alone, and training-free LatentMAS on the final agent's model.
Printed per R: accuracy, decoded tokens per sample (every token any agent generated), wall seconds per
sample, and the ratios text/latent (speed-up) and 1 - latent/text tokens (token saving), measured in the
same process. Greedy decoding everywhere, batch size --batch-size for every workflow.

    .venv/bin/python bench/recursivemas_vs_text.py --out-dir runs/bench_recursivemas   # ~20 min on 2 cores
    .venv/bin/python bench/recursivemas_vs_text.py --quick                              # plumbing check

Real models: `--agent-models smollm2,smollm2,smollm2` (or `tiny,tiny,smollm2`: one spec per role, cycling;
see RecursiveMASConfig.agent_models), loaded and frozen as they are (no cold start), and `--bench humaneval
--limit N` to evaluate on the first N HumanEval problems, judged by their tests; the links are still trained
on procedural records (HumanEval has no gold plans). `--train-rounds` is the R the outer loop unrolls,
`--workflows` picks the workflows evaluated. The paper's setup is pretrained agents, `--link-init random` and
`--latent-steps 16` (or more); coral's defaults are `--link-init aligned` and `--latent-steps 8`:

    .venv/bin/python bench/recursivemas_vs_text.py --agent-models smollm2,smollm2,smollm2 --link-init random \
        --latent-steps 16 --n-train 64 --n-test 16 --rounds 1 3 --train-rounds 2 --inner-steps 10 \
        --outer-steps 10 --batch-size 4 --gradient-checkpointing --max-new-tokens 96 --out-dir runs/rm_paper

Targets (not asserted): at R=3 >= 2x faster and >= 60% fewer decoded tokens than text MAS at equal or
better accuracy.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from coral.recursivemas.agents import build_records
from coral.recursivemas.config import ColdStartConfig, InnerLoopConfig, OuterLoopConfig, RecursiveMASConfig
from coral.recursivemas.data import Record, benchmark_records
from coral.recursivemas.evaluate import WORKFLOWS, evaluate
from coral.recursivemas.latentmas import LatentMAS
from coral.recursivemas.patterns import get_pattern
from coral.recursivemas.recipe import build_system, load_or_build_agents
from coral.recursivemas.tools import pattern_tool
from coral.recursivemas.train import new_state, restore, train_links
from coral.sandbox import Sandbox
from coral.train.loop import Run
from coral.train.loop import new_state as new_trainer_state


def bench_config(args: argparse.Namespace) -> RecursiveMASConfig:
    cfg = RecursiveMASConfig(pattern=args.pattern, rounds=args.train_rounds, latent_steps=args.latent_steps,
                             n_train_tasks=args.n_train, n_test_tasks=args.n_test, max_depth=2,
                             agent_models=tuple(args.agent_models.split(",")), agent_widths=None,
                             n_layers=2, sft=ColdStartConfig(epochs=args.sft_epochs),
                             inner=InnerLoopConfig(steps=args.inner_steps),
                             outer=OuterLoopConfig(steps=args.outer_steps, lr=3e-3,
                                                   gradient_checkpointing=args.gradient_checkpointing),
                             batch_size=args.batch_size,
                             max_new_tokens=args.max_new_tokens, out_dir=args.out_dir,
                             checkpoint_every_steps=25, seed=args.seed, link_init=args.link_init)
    if args.quick:
        cfg = replace(cfg, n_train_tasks=8, n_test_tasks=4, sft=ColdStartConfig(epochs=0.5),
                      inner=InnerLoopConfig(steps=2), outer=OuterLoopConfig(steps=2, lr=3e-3),
                      latent_steps=2, max_new_tokens=16)
    return cfg


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pattern", default="sequential")
    ap.add_argument("--agent-models", default="tiny", help="comma-separated model specs, one per role (cycling)")
    ap.add_argument("--link-init", default="aligned")
    ap.add_argument("--bench", choices=("procedural", "humaneval"), default="procedural",
                    help="test records: held-out procedural tasks, or the first --limit HumanEval problems")
    ap.add_argument("--limit", type=int, default=10, help="--bench humaneval: how many problems")
    ap.add_argument("--n-train", type=int, default=64)
    ap.add_argument("--n-test", type=int, default=32)
    ap.add_argument("--sft-epochs", type=float, default=4.0, help="cold start of the tiny agents only")
    ap.add_argument("--inner-steps", type=int, default=60)
    ap.add_argument("--outer-steps", type=int, default=60)
    ap.add_argument("--latent-steps", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=8, help="records per link-training step and per decode batch")
    ap.add_argument("--gradient-checkpointing", action="store_true", help="outer loop: recompute rollouts in backward")
    ap.add_argument("--rounds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--train-rounds", type=int, default=3, help="rounds the outer loop unrolls")
    ap.add_argument("--workflows", default=",".join(WORKFLOWS), help=f"comma-separated, of {WORKFLOWS}")
    ap.add_argument("--out-dir", default="runs/bench_recursivemas")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: checks the plumbing, not the figures")
    args = ap.parse_args()
    bad = [w for w in args.workflows.split(",") if w not in WORKFLOWS]
    if bad or not {"text-mas", "recursive"} <= set(args.workflows.split(",")):
        ap.error(f"--workflows: needs text-mas and recursive, of {WORKFLOWS}; got {args.workflows!r}")
    return args


def eval_records(args: argparse.Namespace, test: list[Record]) -> list[Record]:
    if args.bench == "procedural":
        return test
    from coral.benchmarks import load_benchmark

    return benchmark_records(load_benchmark(args.bench, limit=args.limit, seed=args.seed))


def main() -> None:
    args = parse_args()
    cfg = bench_config(args)
    workflows = args.workflows.split(",")
    t0 = time.perf_counter()
    load_start = Path("/proc/loadavg").read_text().split()[:3]
    train, test = build_records(cfg)
    test = eval_records(args, test)
    with Sandbox(workers=2) as sandbox:
        tool = pattern_tool(get_pattern(cfg.pattern), sandbox, [*train, *test])
        system = build_system(cfg, load_or_build_agents(cfg, train, False), tool)
        state, run = new_state(cfg, system), Run(cfg.out_dir)
        # a rerun with the same out_dir reuses agents and trained links (the run loop's checkpoints)
        trainer = train_links(state, train, run, restore(state, run) or new_trainer_state())
        losses = [m.get("inner/loss", m.get("outer/loss")) for m in trainer["metrics"]]
        print(f"agents + link training: {time.perf_counter() - t0:.0f} s; first/last inner loss "
              f"{losses[0]:.3f}/{losses[cfg.inner.steps - 1]:.3f}, outer {losses[cfg.inner.steps]:.3f}/{losses[-1]:.3f}")
        rows = compare(args, cfg, system, test, sandbox, workflows)
    out = Path(cfg.out_dir) / "bench.json"
    out.write_text(json.dumps({"config": vars(args), "n_test": len(test), "losses": losses, "rows": rows,
                               "wall_s": time.perf_counter() - t0, "loadavg_start": load_start,
                               "loadavg_end": Path("/proc/loadavg").read_text().split()[:3]}, indent=1))
    print(f"wrote {out}")


def compare(args: argparse.Namespace, cfg: RecursiveMASConfig, system: Any, test: list[Record], sandbox: Any,
            workflows: list[str]) -> list[dict[str, Any]]:
    """Every workflow at every R of args.rounds on `test`, in order; one row of figures per R."""
    rows = []
    final = system.agents[system.pattern.final]
    latentmas = LatentMAS(system.pattern, final, cfg.latent_steps) if "latentmas" in workflows else None
    for rounds in args.rounds:
        res = {w: evaluate(w, system, test, rounds, sandbox, cfg.max_new_tokens, cfg.batch_size,
                           latentmas=latentmas) for w in workflows}
        row = {"rounds": rounds, **{f"{w}/{k}": v for w, r in res.items() for k, v in r.summary().items()}}
        row["speedup_text_over_latent"] = res["text-mas"].wall_s / res["recursive"].wall_s
        row["token_saving"] = 1 - res["recursive"].decoded_tokens / max(1, res["text-mas"].decoded_tokens)
        rows.append(row)
        print(f"R={rounds}: " + "  ".join(
            f"{w}: acc {r.accuracy:.3f} tok/s {r.decoded_tokens / len(test):.1f} wall/s {r.wall_s / len(test):.3f}"
            for w, r in res.items())
              + f"  | speed-up {row['speedup_text_over_latent']:.2f}x, token saving {row['token_saving']:.1%}")
    return rows


if __name__ == "__main__":
    main()
