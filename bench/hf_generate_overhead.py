"""Overhead of HFPolicy.generate over a direct `model.generate` call, on the same model (tiny or SmolLM2).

Both decode the same batch of prompts (left padded) greedily for the same number of new tokens with
eos disabled, so they do identical model work; the script checks that they produce identical tokens
and prints the median wall time of each over several repeats, the peak memory each call adds to the
process (VmHWM reset before the call, minus the RSS at its start; the largest over the repeats) and the
ratios. HFPolicy.generate also returns per-token logprobs and handles per-request sampling params, which
`model.generate` (without output_scores) does not.

    .venv/bin/python bench/hf_generate_overhead.py [--model tiny|smollm2|SPEC] [--batch 16]
                                                   [--new-tokens 64] [--repeats 5]
`--model` is any load_policy spec (default: tiny_policy(seed=0)).
This script does NOT measure sampling quality or GPU throughput; it runs on whatever device torch
picks (CPU here).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

from coral.policy import GenerationRequest, SamplingParams, load_policy, tiny_policy, user
from coral.procmem import proc_hwm_kb, proc_rss_kb, reset_peak


def timed_peak(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall s, peak MB the call added above the process's RSS at its start) of one call of `fn`."""
    pid = os.getpid()
    reset_peak(pid)
    rss_kb = proc_rss_kb(pid) or 0
    start = time.perf_counter()
    fn()
    wall_s = time.perf_counter() - start
    return wall_s, max(0, (proc_hwm_kb(pid) or 0) - rss_kb) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="a load_policy spec (default: tiny_policy(seed=0))")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))

    # tiny: d_model 128, 4 layers, byte-level tokenizer
    policy = tiny_policy(seed=0) if args.model == "tiny" else load_policy(args.model)
    never = len(policy.tokenizer) + 1  # an eos id no token can take: both sides decode the full length
    policy.eos_ids = {never}
    policy.batch_size = args.batch  # one batch on both sides (tiny_policy's default batch size is 16)
    prompts = [
        user(f"Write a function number {i} that " + "adds two numbers " * (1 + i % 4))
        for i in range(args.batch)
    ]
    sampling = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0)
    requests = [GenerationRequest(p, sampling) for p in prompts]

    prompt_ids = [policy.encode(policy.render(p)) for p in prompts]
    width = max(len(ids) for ids in prompt_ids)
    pad = policy.pad_id
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompt_ids])
    attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompt_ids])

    def direct() -> list[list[int]]:
        with torch.no_grad():
            out = policy.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=args.new_tokens,
                do_sample=False,
                eos_token_id=never,
                pad_token_id=pad,
            )
        return out[:, width:].tolist()

    def ours() -> list[list[int]]:
        return [c.completion_ids for c in policy.generate(requests)]

    if direct() != ours():
        raise SystemExit("HFPolicy.generate and model.generate disagree on greedy tokens")
    times: dict[str, list[float]] = {"model.generate": [], "HFPolicy.generate": []}
    peaks: dict[str, list[float]] = {"model.generate": [], "HFPolicy.generate": []}
    for _ in range(args.repeats):
        for label, fn in (("model.generate", direct), ("HFPolicy.generate", ours)):
            wall_s, peak_mb = timed_peak(fn)
            times[label].append(wall_s)
            peaks[label].append(peak_mb)
    tokens = args.batch * args.new_tokens
    print(f"model={args.model} batch={args.batch} new_tokens={args.new_tokens} repeats={args.repeats} "
          f"prompt_tokens<= {width} threads={torch.get_num_threads()}")
    for label, values in times.items():
        median = statistics.median(values)
        print(f"{label:>18}: median {median * 1e3:8.1f} ms  ({tokens / median:8.0f} tokens/s)  "
              f"peak +{max(peaks[label]):7.1f} MB")
    ratio = statistics.median(times["HFPolicy.generate"]) / statistics.median(times["model.generate"])
    base_mb = max(peaks["model.generate"])  # under 1 MB is allocator noise: no ratio
    memory = f"{max(peaks['HFPolicy.generate']) / base_mb:.2f}" if base_mb >= 1.0 else "n/a"
    print(f"ratio HFPolicy.generate / model.generate = {ratio:.2f} (time), {memory} (peak memory)")


if __name__ == "__main__":
    main()
