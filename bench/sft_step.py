"""Time of the demo's coder SFT steps at several thread counts, and where a step's time goes.

Builds the demo's coder and its cold-start data (`coral demo`'s defaults, or --n-train-tasks fewer), then
times `--steps` consecutive SFT steps of its batch plan (forward, backward, clipping + AdamW) at each thread
count in turn, alternating the order over `--repeats` rounds; prints the median milliseconds per step, its
parts, each count's ratio to the first, and the float32 rate the step reaches by a FLOP count (6 FLOP per
matmul weight and token for forward and backward, plus causal attention, over the padded tokens). The
weights keep training across rounds, as SFT would; the step's cost does not depend on them. --profile also
prints torch's profile of one round at the first thread count.

    .venv/bin/python bench/sft_step.py --threads 2 1
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from coral.benchmarks.splits import build_tasks, sft_tasks
from coral.corecode.config import CoReCodeConfig
from coral.corecode.setup import build_policies, cold_start_data, role_sft_configs
from coral.policy.hf import HFPolicy
from coral.train.sft import batch_plan, sft_loss, tokenize_examples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 1], help="torch thread counts to compare")
    ap.add_argument("--steps", type=int, default=20, help="SFT steps per round")
    ap.add_argument("--repeats", type=int, default=3, help="rounds, the thread counts alternating in each")
    ap.add_argument("--n-train-tasks", type=int, default=CoReCodeConfig.n_train_tasks)
    ap.add_argument("--profile", action="store_true", help="also print torch's profile of one round")
    args = ap.parse_args()
    if min(args.threads) < 1 or args.steps < 1 or args.repeats < 1:
        raise SystemExit("--threads, --steps and --repeats must be >= 1")
    cfg = CoReCodeConfig(n_train_tasks=args.n_train_tasks, out_dir="runs/sft_step_bench")
    train, _ = build_tasks(cfg.splits)
    coder = build_policies(cfg, train)["coder"]
    data = tokenize_examples(coder, cold_start_data(cfg, sft_tasks(cfg.splits, train), roles=["coder"])["coder"])
    sft = role_sft_configs(cfg, ["coder"])["coder"]
    plan = batch_plan([len(p) + len(c) for p, c in data], sft)
    batches = [[data[i] for i in plan[s % len(plan)]] for s in range(args.steps)]
    params = [p for p in coder.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=sft.lr, weight_decay=sft.weight_decay)
    coder.train()
    step_flops = statistics.mean(flops(coder.model.config, [len(p) + len(c) for p, c in b]) for b in batches)
    print(f"{len(data)} examples, {len(plan)} steps; {step_flops / 1e9:.1f} GFLOP a step on average (padded)")
    parts: dict[int, list[tuple[float, float, float]]] = {t: [] for t in args.threads}
    one_round(coder, opt, params, batches[:2], sft.max_grad_norm)  # warm-up
    for rep in range(args.repeats):
        for t in args.threads if rep % 2 == 0 else args.threads[::-1]:
            torch.set_num_threads(t)
            parts[t].append(one_round(coder, opt, params, batches, sft.max_grad_norm))
    base = None
    for t in args.threads:
        fwd, bwd, opt_s = (statistics.median(x[i] for x in parts[t]) / args.steps for i in range(3))
        total = fwd + bwd + opt_s
        base = base or total
        print(f"threads {t}: {total * 1e3:.0f} ms a step (forward {fwd * 1e3:.0f}, backward {bwd * 1e3:.0f}, "
              f"optimiser {opt_s * 1e3:.0f}), {step_flops / total / 1e9:.0f} GFLOP/s; ratio to threads "
              f"{args.threads[0]}: {total / base:.2f}")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        torch.set_num_threads(args.threads[0])
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            one_round(coder, opt, params, batches, sft.max_grad_norm)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def one_round(model: HFPolicy, opt: torch.optim.Optimizer, params: list[torch.Tensor],
              batches: list[list[tuple[list[int], list[int]]]], max_grad_norm: float) -> tuple[float, float, float]:
    """Seconds of forward, backward and clip + optimiser step over `batches`, one SFT step each (as train_sft)."""
    fwd = bwd = step = 0.0
    for batch in batches:
        t0 = time.perf_counter()
        loss = sft_loss(model, batch)
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        opt.step()
        fwd, bwd, step = fwd + t1 - t0, bwd + t2 - t1, step + time.perf_counter() - t2
    return fwd, bwd, step


def flops(config: Any, lengths: list[int]) -> float:
    """Forward + backward FLOP of one batch of a Llama-shaped model, padded to its longest example: 6 per
    matmul weight and token (the output head included), and causal attention's QK and AV products."""
    d, layers, inter, vocab = config.hidden_size, config.num_hidden_layers, config.intermediate_size, config.vocab_size
    weights = layers * (4 * d * d + 3 * d * inter) + vocab * d
    n, length = len(lengths), max(lengths)
    attention = layers * 2 * 2 * d * length * (length + 1) / 2  # per sequence, forward
    return 6 * weights * n * length + 3 * attention * n


if __name__ == "__main__":
    main()
