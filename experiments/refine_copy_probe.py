"""Can a cold-start agent read the refine prompt? Its loss (mean -log p per token) of a task's gold code after
three prompts, on tasks it was trained on:

- solve: the solver prompt (the problem alone);
- keep: the refiner prompt holding that same gold code and its all-pass feedback ("3/3 tests passed."), so
  the answer is in the prompt and a model that reads it copies it;
- other: the refiner prompt holding another task's gold code (same feedback), where copying is wrong.

A refiner that reads its prompt has keep far below solve; keep near other means the code in the prompt is
hardly used. Greedy answers to the keep prompt are also checked for being the code back (`copied`).

    PYTHONPATH=. python -m experiments.refine_copy_probe runs/testbed/cold/<key>/agent0 --tasks 40

This module does NOT train anything and reads no test split.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import torch

from coral.agents.parsers import extract_code
from coral.benchmarks.procedural import make_tasks
from coral.mars2.cold_start import all_pass_refine, solve_sft_examples
from coral.policy.base import GenerationRequest, SamplingParams
from coral.seeding import sampling_seed
from coral.train.sft import SFTExample, sft_loss, tokenize_examples


def _loss(policy: Any, examples: Sequence[SFTExample]) -> float:
    with torch.no_grad():
        return float(sft_loss(policy, tokenize_examples(policy, examples)))


def copy_probe(policy: Any, tasks: Sequence[Any], max_new_tokens: int = 128) -> dict[str, float]:
    """The three losses and the share of greedy keep answers that give the code back (see the module doc)."""
    if len(tasks) < 2:
        raise ValueError("copy_probe needs at least 2 tasks (the 'other' prompt holds another task's code), "
                         f"got {len(tasks)}")
    refs = [t.reference.strip() for t in tasks]
    solve = solve_sft_examples(tasks)
    keep = [all_pass_refine(t, r, r) for t, r in zip(tasks, refs, strict=True)]
    other = [all_pass_refine(t, refs[(i + 1) % len(tasks)], r) for i, (t, r) in enumerate(zip(tasks, refs, strict=True))]
    return {"solve": _loss(policy, solve), "keep": _loss(policy, keep), "other": _loss(policy, other),
            "copied": copied_share(policy, tasks, max_new_tokens), "tasks": len(tasks)}


def copied_share(policy: Any, tasks: Sequence[Any], max_new_tokens: int = 128, temperature: float = 0.0,
                 samples: int = 1, seed: int = 0) -> float:
    """The share of answers to each task's keep prompt that are the gold code it holds: greedy by default, or
    `samples` per task at `temperature`, sample s of task t seeded sampling_seed(seed, 0, "keep-copy", "t/sample<s>")."""
    refs = [t.reference.strip() for t in tasks]
    answers = policy.generate([GenerationRequest(all_pass_refine(t, r, r).messages, SamplingParams(
        max_new_tokens=max_new_tokens, temperature=temperature, seed=sampling_seed(seed, 0, "keep-copy", f"{t.id}/sample{s}")))
        for t, r in zip(tasks, refs, strict=True) for s in range(samples)])
    return sum(str(extract_code(a.text).value).strip() == refs[i // samples] for i, a in enumerate(answers)) / len(answers)


def main(argv: list[str] | None = None) -> None:
    from coral.policy.hf import HFPolicy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("agent", help="a saved agent folder (HFPolicy.save), e.g. runs/testbed/cold/<key>/agent0")
    ap.add_argument("--tasks", type=int, default=40, help="train-split tasks probed (the first N of the seed)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the train split (the cold start's)")
    ap.add_argument("--depths", default="1-2", help="task depths, MIN-MAX")
    args = ap.parse_args(argv)
    low, high = (int(x) for x in args.depths.split("-"))
    policy = HFPolicy.load(args.agent, batch_size=16).eval()
    tasks = make_tasks(args.tasks, "train", min_depth=low, max_depth=high, seed=args.seed)
    print(json.dumps({"agent": args.agent, **{k: round(v, 4) for k, v in copy_probe(policy, tasks).items()}}))


if __name__ == "__main__":
    main()
