"""`coral eval --model smollm2` on HumanEval before and after bfloat16: wall time, peak memory, pass@1, and
the paired comparison of bfloat16 against float32.

    .venv/bin/python bench/humaneval_dtype.py [--limit N] [--baseline 7ae0e0e] [--runs baseline,float32,bfloat16]
                                              [--out-dir runs/he_dtype] [--model smollm2]

Each run is one `coral eval --bench humaneval --workflow single` (greedy, 256 new tokens, the command's
defaults) in a fresh process, one after the other: `baseline` is the code of commit --baseline (a
temporary git worktree; float32, the only precision it had), `float32` and `bfloat16` this checkout with
`--dtype`. Printed per run: wall time of the whole command (model load and sandbox included) and the
evaluation's own (its summary's wall_s), the peak resident memory of the eval process (getrusage of that
child; its sandbox workers not included), pass@1 and completion tokens. Then, over the tasks both runs
answered, the pass/fail table of bfloat16 against float32 and of float32 against the baseline, with the
paired difference of pass@1, its standard error and the exact McNemar p-value of the discordant tasks.

This script does NOT sample (greedy only) and does NOT run anything in parallel: run it on a quiet
machine; all 164 problems take about 5.5 min in float32 and 3.5 in bfloat16 on two quiet cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = ("baseline", "float32", "bfloat16")


def eval_command(out_dir: Path, limit: int | None, model: str, dtype: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "coral.cli", "eval", "--bench", "humaneval", "--workflow", "single",
           "--model", model, "--out-dir", str(out_dir), "--no-progress"]
    return cmd + (["--limit", str(limit)] if limit else []) + (["--dtype", dtype] if dtype else [])


def run_one(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall s, peak RSS MB of the child process) of `cmd` run in `cwd` with its own checkout on the path."""
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    start = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=cwd, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall_s = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit status {os.waitstatus_to_exitcode(status)}")
    return wall_s, usage.ru_maxrss / 1024  # Linux: kB


def passed_by_task(out_dir: Path) -> dict[str, bool]:
    with open(out_dir / "samples.jsonl") as fh:
        return {r["task_id"]: bool(r["passed"]) for r in map(json.loads, fh)}


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: binomial(n = discordant, 1/2) tail at the smaller count."""
    n, k = only_a + only_b, min(only_a, only_b)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired(a: dict[str, bool], b: dict[str, bool]) -> dict[str, float]:
    """Pass/fail table of run b against run a over their common tasks, the paired difference b - a of
    pass@1, its standard error and McNemar's p."""
    tasks = sorted(set(a) & set(b))
    n = len(tasks)
    both = sum(a[t] and b[t] for t in tasks)
    only_a = sum(a[t] and not b[t] for t in tasks)
    only_b = sum(b[t] and not a[t] for t in tasks)
    diffs = [b[t] - a[t] for t in tasks]
    mean = sum(diffs) / n if n else 0.0
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    return {"tasks": n, "both": both, "only_a": only_a, "only_b": only_b, "neither": n - both - only_a - only_b,
            "diff": mean, "se": math.sqrt(var / n) if n else 0.0, "p": mcnemar_p(only_a, only_b)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="first N HumanEval problems (default: all 164)")
    parser.add_argument("--baseline", default="7ae0e0e", help="the commit of the baseline run")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma separated, of {RUNS}")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--out-dir", default="runs/he_dtype")
    args = parser.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    if not runs or set(runs) - set(RUNS):
        raise SystemExit(f"--runs: {sorted(set(runs) - set(RUNS)) or 'none given'} not among {RUNS}")
    out = Path(args.out_dir).resolve()
    results: dict[str, dict[str, float]] = {}
    for name in runs:
        print(f"load average before {name}: " + " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
        target = out / name
        if name == "baseline":
            tree = Path(tempfile.mkdtemp(prefix="coral-baseline-"))
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), args.baseline],
                           check=True, capture_output=True)
            try:
                wall_s, peak_mb = run_one(eval_command(target, args.limit, args.model, None), tree)
            finally:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
                shutil.rmtree(tree, ignore_errors=True)
        else:
            wall_s, peak_mb = run_one(eval_command(target, args.limit, args.model, name), REPO)
        summary = json.loads((target / "summary.json").read_text())["summary"]
        results[name] = {"wall_s": wall_s, "eval_s": summary.get("wall_s", float("nan")), "peak_mb": peak_mb,
                         "pass@1": summary["pass@1"], "tokens": summary["completion_tokens"]}
    print("load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"{'run':<9} {'wall s':>8} {'eval s':>8} {'peak MB':>8} {'pass@1':>7} {'tokens':>8}")
    for name, r in results.items():
        print(f"{name:<9} {r['wall_s']:8.1f} {r['eval_s']:8.1f} {r['peak_mb']:8.0f} {r['pass@1']:7.3f} {r['tokens']:8.0f}")
    for a, b in (("float32", "bfloat16"), ("baseline", "float32"), ("baseline", "bfloat16")):
        if a in results and b in results:
            p = paired(passed_by_task(out / a), passed_by_task(out / b))
            print(f"{b} vs {a}: {p['tasks']} tasks, both pass {p['both']}, only {a} {p['only_a']}, only {b} "
                  f"{p['only_b']}, neither {p['neither']}; pass@1 difference {p['diff']:+.3f} (paired SE "
                  f"{p['se']:.3f}), McNemar p {p['p']:.3f}; eval wall time ratio {results[a]['eval_s'] / results[b]['eval_s']:.2f}")


if __name__ == "__main__":
    main()
