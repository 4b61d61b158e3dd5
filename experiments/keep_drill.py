"""A dose probe: does more keep training make a cold-started MARS2 agent copy a passing code?

The testbed's keep target (docs/results/efficacy.md, "The testbed") asks that a refinement of a passing code
stay passing 90% of the time at the RL temperature.

It continues the SFT of a saved MARS2 agent on `keep` drill examples (the refiner prompt holding a passing gold
code of a train task the cold start never saw, with its all-pass feedback -> that same code), beside `--replay`
of the agent's own solve examples per drill (1 by default, so solving is not forgotten) and `--fixes` of its
cold start's mutant fixes (so fixing is not), then measures on validation tasks, at temperature 1:

- copied: the share of sampled answers to the keep prompt (the task's reference code in it) that give the code back;
- p_copy: the mean probability of the whole copy (code block and end of turn) at temperature 1.

The drill code is drawn from every gold code of the task (`--idioms all`: the answer cannot be guessed from the
problem, only copied) or from the idioms the agent learnt to write (`--idioms agent`, its `solutions_per_task`
draw). `--idioms none` is the control: the same continued SFT on the solve examples alone. With `--train-keep 0`
nothing is trained (the agent as it is). `--save` keeps the drilled agent, to be measured by experiments.testbed
(`cold_dir`: a folder with agent0 and agent1).

    PYTHONPATH=. python -m experiments.keep_drill runs/efficacy_cold/<key>/agent0 --train-keep 3000 --epochs 3

This module reads the validation split only and does NOT change the saved agent (`--save` writes a copy) or
choose a setting.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from coral.benchmarks.procedural import make_tasks
from coral.mars2.cold_start import (
    all_pass_refine,
    drill_examples,
    drill_order,
    refine_sft_examples,
    solve_sft_examples,
)
from coral.train.sft import SFTConfig, tokenize_examples, train_sft
from experiments.refine_copy_probe import copied_share


def copy_probability(policy: Any, tasks: Sequence[Any]) -> float:
    """The mean probability at temperature 1 of the whole copy (code block and end of turn) of each task's
    reference code after its keep prompt."""
    examples = [all_pass_refine(t, t.reference.strip(), t.reference.strip()) for t in tasks]
    with torch.no_grad():
        probs = []
        for prompt, completion in tokenize_examples(policy, examples):
            logprobs, mask = policy.forward([prompt], [completion])
            probs.append(math.exp(float(logprobs[0][mask[0]].sum())))
    return sum(probs) / len(probs)


def drill(policy: Any, n_keep: int, idioms: str, sft: SFTConfig, n_train: int, per_task: int, seed: int,
          depths: tuple[int, int], agent_index: int = 0, replay: float = 1.0, fixes: int = 0) -> int:
    """Continue `policy`'s SFT on `n_keep` keep drills of train tasks after the cold start's first `n_train`, each
    beside `replay` of its solve examples (1: one each; 0: the drills alone; `idioms` "none": the solve examples
    alone, the control), and `fixes` of the cold start's mutant fixes (the same draw as its `refine_examples`, so
    the fixing it learnt is trained on too); returns the examples trained on. The train split is the cold start's
    `seed`'s; agent i's idioms and data order are seed + i's, as there."""
    if replay < 0:
        raise ValueError(f"replay must be >= 0 (solve examples per drill), got {replay}")
    tasks = make_tasks(n_train + n_keep, "train", min_depth=depths[0], max_depth=depths[1], seed=seed)
    own = seed + agent_index
    data = [] if idioms == "none" else drill_examples(tasks[n_train:], idioms, per_task, own)
    data += solve_sft_examples(tasks[:n_train], per_task, own)[:round(replay * n_keep)]
    if fixes:
        from coral.sandbox import Sandbox

        with Sandbox(workers=2) as sandbox:
            data += refine_sft_examples(tasks[:n_train], sandbox, fixes, seed)
    train_sft(policy, drill_order(data, own), sft, progress=False)
    return len(data)


def main(argv: list[str] | None = None) -> None:
    from coral.policy.hf import HFPolicy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("agent", help="a saved MARS2 agent folder (HFPolicy.save), e.g. runs/efficacy_cold/<key>/agent0")
    ap.add_argument("--train-keep", type=int, default=3000, help="keep drills trained on (0: measure the agent as saved)")
    ap.add_argument("--idioms", default="all", choices=("all", "agent", "none"),
                    help="the drills' codes (module doc); none: no drills, the solve examples alone (the control)")
    ap.add_argument("--epochs", type=float, default=1.0, help="passes over drills and solve examples")
    ap.add_argument("--replay", type=float, default=1.0, help="solve examples per drill trained beside the drills "
                    "(1: one each, so solving is not forgotten; 0: the drills alone)")
    ap.add_argument("--fixes", type=int, default=0, help="the cold start's mutant fixes trained beside the drills "
                    "(its refine_examples: 2000 for S3; 0: none, so the fixing it learnt may be forgotten)")
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW peak learning rate of the continued SFT")
    ap.add_argument("--n-train", type=int, default=3000, help="the cold start's train tasks (n_train_tasks): the "
                    "drills use the next ones, the solve examples these")
    ap.add_argument("--per-task", type=int, default=2, help="the cold start's solutions_per_task")
    ap.add_argument("--seed", type=int, default=0, help="the cold start's seed (train split, idiom draw)")
    ap.add_argument("--agent-index", type=int, default=0, help="the agent's index in its cold start (agent i "
                    "learnt the idioms of seed + i)")
    ap.add_argument("--val-tasks", type=int, default=200, help="validation tasks measured (depth 1-2, seed 0)")
    ap.add_argument("--save", help="folder to save the drilled agent in (to measure it with experiments.testbed)")
    args = ap.parse_args(argv)
    policy = HFPolicy.load(args.agent, batch_size=16)
    t0 = time.perf_counter()
    n = 0
    if args.train_keep:
        sft = SFTConfig(epochs=args.epochs, lr=args.lr, batch_size=32, seed=args.seed + args.agent_index)
        n = drill(policy, args.train_keep, args.idioms, sft, args.n_train, args.per_task, args.seed, (1, 2),
                  args.agent_index, args.replay, args.fixes)
    policy.eval()
    val = make_tasks(args.val_tasks, "validation", min_depth=1, max_depth=2, seed=0)
    figures = {"copied": copied_share(policy, val, max_new_tokens=160, temperature=1.0, samples=4),
               "p_copy": copy_probability(policy, val)}
    if args.save:
        policy.save(args.save)
    print(json.dumps({"agent": args.agent, "train_keep": args.train_keep, "idioms": args.idioms, "replay": args.replay,
                      "fixes": args.fixes, "epochs": args.epochs,
                      "lr": args.lr, "examples": n, "minutes": round((time.perf_counter() - t0) / 60, 1),
                      **{k: round(v, 3) for k, v in figures.items()}}))


if __name__ == "__main__":
    main()
