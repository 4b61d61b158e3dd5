"""Rollout throughput at a GRPO shape (prompts x samples x new tokens) for each precision and prefill
variant, in one process, alternating, with the peak memory each call adds.

    .venv/bin/python bench/rollout_speed.py [--model smollm2] [--prompts 8] [--samples 8]
        [--new-tokens 128] [--repeats 3] [--baseline 7ae0e0e] [--variants baseline,float32,...]

Variants (one HFPolicy batch of prompts x samples requests each; all on one float32 model):
  baseline      HFPolicy as of commit --baseline (read from git into a private package): float32
  float32       this HFPolicy in float32, every request prefilled on its own
  float32+shared  float32, one prefill per prompt, its cache shared in place by the prompt's samples
  bf16          bfloat16 rollouts, every request prefilled on its own
  bf16+shared   bfloat16, one prefill per prompt shared in place, linears on prepacked weights (the
                default of a bfloat16 policy)
  bf16+shared+unpacked  the same on F.linear (pack_linears off: coral before the packed linears)
  generate-bf16 transformers' `model.generate` on a bfloat16 copy of the model (prompts repeated)
Every variant samples at temperature 1 (top_p 1, no top-k) with eos disabled, so each row generates
exactly `new_tokens` tokens: equal work. Prompts are the first `prompts` HumanEval prompts as user
messages in the model's chat template; coral's requests are seeded as a GRPO step seeds them
(coral.seeding). Printed per variant: median wall time, tokens/s (rows x new tokens / wall),
model FLOP/s (2 x parameters x tokens/s, attention not counted), peak memory a call adds (VmHWM reset
before each call, minus the RSS at its start; the largest over the repeats), the same for the warm-up
call (which makes the bfloat16 copies and packs), the ratios to the baseline and to float32, and the
share of tokens equal to the baseline's (float32 must give the baseline's tokens up to float rounding;
packed and unpacked bf16 must agree exactly, printed when both ran).

This script does NOT measure GPU throughput, training, or sampling quality; run it on a quiet machine
(`uptime` before and after, printed) and read the ratios, not the absolute figures.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from coral.benchmarks import load_benchmark
from coral.policy import GenerationRequest, SamplingParams, load_policy, tiny_policy, user
from coral.policy.hf import HFPolicy
from coral.procmem import proc_hwm_kb, proc_rss_kb, reset_peak
from coral.seeding import sampling_seed

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("baseline", "float32", "float32+shared", "bf16", "bf16+shared", "bf16+shared+unpacked", "generate-bf16")


def baseline_class(commit: str) -> type:
    """HFPolicy as of `commit`: the modules of coral/policy at that commit copied from git into a package
    of their own (its `__init__` left empty; imports of other coral packages stay this checkout's)."""
    folder = Path(tempfile.mkdtemp(prefix="coral-baseline-"))
    package = f"coral_policy_{commit[:12]}"
    (folder / package).mkdir()
    (folder / package / "__init__.py").write_text("")
    listing = subprocess.run(["git", "-C", str(REPO), "ls-tree", "--name-only", commit, "coral/policy/"],
                             check=True, capture_output=True, text=True).stdout.split()
    for path in (p for p in listing if p.endswith(".py") and not p.endswith("__init__.py")):
        source = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:{path}"],
                                check=True, capture_output=True, text=True).stdout
        source = source.replace("coral.policy.", f"{package}.").replace("from coral.policy import", f"from {package} import")
        (folder / package / Path(path).name).write_text(source)
    sys.path.insert(0, str(folder))
    return importlib.import_module(f"{package}.hf").HFPolicy


def timed_peak(fn: Callable[[], object]) -> tuple[float, float, object]:
    """(wall s, MB the call added above the RSS at its start, the call's result)."""
    pid = os.getpid()
    reset_peak(pid)
    rss_kb = proc_rss_kb(pid) or 0
    start = time.perf_counter()
    result = fn()
    wall_s = time.perf_counter() - start
    return wall_s, max(0, (proc_hwm_kb(pid) or 0) - rss_kb) / 1024, result


def build_variants(base: HFPolicy, names: list[str], requests: list[GenerationRequest], samples: int,
                   new_tokens: int, baseline: str) -> dict[str, Callable[[], list[list[int]]]]:
    """name -> a call that generates the whole batch and returns its token ids."""
    model, tokenizer, never = base.model, base.tokenizer, len(base.tokenizer) + 1
    out: dict[str, Callable[[], list[list[int]]]] = {}
    for name in names:
        if name == "generate-bf16":
            out[name] = generate_call(base, requests, samples, new_tokens, never)
            continue
        if name == "baseline":
            policy = baseline_class(baseline)(model, tokenizer, name=name, batch_size=len(requests))
        else:
            dtype, *options = name.split("+")
            policy = HFPolicy(model, tokenizer, name=name, batch_size=len(requests),
                              dtype="bfloat16" if dtype == "bf16" else "float32")
            policy.share_prompt_cache = "shared" in options
            policy.pack_linears = "unpacked" not in options
        policy.eos_ids = {never}  # every row decodes the full budget on every side
        out[name] = (lambda p: lambda: [c.completion_ids for c in p.generate(requests)])(policy)
    return out


def generate_call(base: HFPolicy, requests: list[GenerationRequest], samples: int, new_tokens: int,
                  never: int) -> Callable[[], list[list[int]]]:
    """`model.generate` on a bfloat16 copy of the model, the prompts left padded, one row per request."""
    model = copy.deepcopy(base.model).to(torch.bfloat16)
    ids = [base.encode(base.render(r.messages)) for r in requests]
    width = max(len(i) for i in ids)
    input_ids = torch.tensor([[base.pad_id] * (width - len(i)) + i for i in ids])
    mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids])

    def call() -> list[list[int]]:
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=new_tokens,
                                 do_sample=True, temperature=1.0, top_k=0, top_p=1.0, eos_token_id=never,
                                 pad_token_id=base.pad_id)
        return out[:, width:].tolist()

    return call


def grpo_requests(prompts: list[str], samples: int, new_tokens: int) -> list[GenerationRequest]:
    """`samples` seeded requests per prompt, seeded as a GRPO step's coder requests are."""
    return [GenerationRequest(user(text), SamplingParams(max_new_tokens=new_tokens, temperature=1.0,
                                                         seed=sampling_seed(0, 0, "coder", f"p{i}/code{j}")))
            for i, text in enumerate(prompts) for j in range(samples)]


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    pairs = [(x, y) for row_a, row_b in zip(a, b, strict=True) for x, y in zip(row_a, row_b, strict=True)]
    return sum(x == y for x, y in pairs) / len(pairs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="a load_policy spec, or tiny (default: smollm2)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt (the GRPO group size)")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds after one warm-up round")
    parser.add_argument("--baseline", default="7ae0e0e", help="the commit whose HFPolicy is the baseline")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma separated, of {VARIANTS}")
    args = parser.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown or not names:
        raise SystemExit(f"--variants: {unknown or 'none given'} not among {VARIANTS}")
    print(f"uptime before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    base = tiny_policy(seed=0) if args.model == "tiny" else load_policy(args.model)
    prompts = [task.prompt for task in load_benchmark("humaneval", limit=args.prompts)]
    requests = grpo_requests(prompts, args.samples, args.new_tokens)
    calls = build_variants(base, names, requests, args.samples, args.new_tokens, args.baseline)
    params = sum(p.numel() for p in base.model.parameters())
    prompt_tokens = [len(base.encode(base.render(r.messages))) for r in requests]
    print(f"model {args.model} ({params / 1e6:.1f}M parameters), {args.prompts} prompts x {args.samples} samples x "
          f"{args.new_tokens} new tokens, prompt tokens {min(prompt_tokens)}-{max(prompt_tokens)}, "
          f"{torch.get_num_threads()} torch threads, {args.repeats} timed rounds after a warm-up")
    times: dict[str, list[float]] = {n: [] for n in names}
    peaks: dict[str, list[float]] = {n: [] for n in names}
    tokens: dict[str, list[list[int]]] = {}
    first_peaks: dict[str, float] = {}
    for round_index in range(args.repeats + 1):
        order = names if round_index % 2 == 0 else names[::-1]  # alternate, so drifts hit every variant
        for name in order:
            wall_s, peak_mb, ids = timed_peak(calls[name])
            tokens.setdefault(name, ids)
            if not round_index:  # the first round warms kernels and makes the bfloat16 copies and packs
                first_peaks[name] = peak_mb
            else:
                times[name].append(wall_s)
                peaks[name].append(peak_mb)
    count = len(requests) * args.new_tokens
    ref = {n: statistics.median(times[n]) for n in ("baseline", "float32") if n in times}
    print(f"{'variant':<15} {'median s':>9} {'tok/s':>8} {'GFLOP/s':>8} {'peak MB':>8} {'warm-up MB':>10} {'x baseline':>10} "
          f"{'x float32':>9} {'same tokens as baseline':>24}")
    for name in names:
        median = statistics.median(times[name])
        ratios = [f"{ref[r] / median:.2f}" if r in ref else "-" for r in ("baseline", "float32")]
        same = f"{agreement(tokens[name], tokens['baseline']):.3f}" if "baseline" in tokens else "-"
        print(f"{name:<15} {median:9.2f} {count / median:8.1f} {2 * params * count / median / 1e9:8.1f} "
              f"{max(peaks[name]):8.1f} {first_peaks[name]:10.1f} {ratios[0]:>10} {ratios[1]:>9} {same:>24}   "
              f"(rounds {', '.join(f'{t:.2f}' for t in times[name])})")
    if {"bf16+shared", "bf16+shared+unpacked"} <= set(tokens):
        print(f"bf16+shared vs bf16+shared+unpacked: same tokens "
              f"{agreement(tokens['bf16+shared'], tokens['bf16+shared+unpacked']):.3f}")
    print(f"uptime after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
