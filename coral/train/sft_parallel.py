"""Several independent SFT runs at once (e.g. planner and coder), each in its own spawned process, with
a torch thread schedule fixed before training so that a run's weights do not depend on timing.

This module does NOT define the SFT step or its data (train/sft.py).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import math
import multiprocessing
import os
import queue as queue_module
import signal
import sys
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

from coral.policy.hf import HFPolicy
from coral.terminal import Bar
from coral.train.sft import (
    SFTConfig,
    SFTExample,
    batch_plan,
    tokenize_examples,
    total_steps,
    train_sft,
)


def train_sft_many(jobs: dict[str, tuple[Any, Sequence[SFTExample], SFTConfig]], workdir: str | Path,
                   progress: bool = True, processes: int | None = None,
                   checkpoints: dict[str, Path] | None = None) -> dict[str, list[float]]:
    """Train several independent policies (e.g. planner and coder) in place; returns each one's losses.

    With `processes` > 1 (default: one per policy, at most the CPU count) each policy trains in its
    own spawned process with cpu_count // processes torch threads, and a trainer still running takes
    over the threads of those that finished, at a step fixed before training (`thread_schedule`), so that
    a run's weights do not depend on timing. The policies travel through
    `workdir` (written with `save`, read back into the same policy objects). A failing trainer raises
    with its name; nothing is half-loaded. `checkpoints` maps a policy's name to its `train_sft`
    checkpoint file (resumed when present). Ctrl-C stops every trainer within a step (queued ones never
    start; one still busy after STOP_WAIT_S is terminated) and raises KeyboardInterrupt: each policy's
    checkpoint holds its last saved step, from which the next call resumes.
    """
    names = list(jobs)
    checkpoints = checkpoints or {}
    cpus = os.cpu_count() or 1
    processes = min(len(names), cpus) if processes is None else processes
    if processes <= 1 or len(names) == 1:
        out = {}
        for name, (policy, examples, cfg) in jobs.items():
            out[name] = train_sft(policy, examples, cfg, progress=progress, checkpoint=checkpoints.get(name))
        return out

    workdir = Path(workdir)
    for name, (policy, _, _) in jobs.items():
        policy.save(workdir / "init" / name)
    ctx = multiprocessing.get_context("spawn")
    threads = max(1, cpus // processes)
    # the demo's planner ends well before its coder, which then trains on both CPUs
    schedule = thread_schedule({name: step_costs(policy, examples, cfg) for name, (policy, examples, cfg) in jobs.items()},
                               processes, threads)
    if progress:
        for name, plan in schedule.items():
            for step, count in plan.items():
                print(f"sft {name}: {count} threads from step {step} on (planned from the steps' estimated costs)")
    queue = ctx.Queue()  # handed over at each worker's start: no manager process to outlive us
    stop = workdir / STOP_FILE
    stop.unlink(missing_ok=True)
    with ProcessPoolExecutor(processes, mp_context=ctx, initializer=_worker_start,
                             initargs=(os.getpid(), queue)) as pool:
        futures = {name: pool.submit(_sft_worker, name, str(workdir), list(examples), cfg, threads,
                                     schedule[name], checkpoints.get(name))
                   for name, (_, examples, cfg) in jobs.items()}
        try:
            _show_progress(jobs, futures, queue, progress)
        except BaseException:  # Ctrl-C: leaving the pool would wait for every running and queued job
            _stop_workers(pool, futures, stop)
            raise
        losses = {}
        for name in names:
            try:
                losses[name] = futures[name].result()
            except Exception as exc:
                raise RuntimeError(f"SFT of {name!r} failed in its worker process: {exc}") from exc

    for name, (policy, _, _) in jobs.items():
        trained = HFPolicy.load(workdir / "trained" / name)
        policy.adopt(trained)
        policy.eval()
    return losses


def _show_progress(jobs: dict[str, tuple[Any, Sequence[SFTExample], SFTConfig]], futures: dict[str, Any],
                   queue: Any, progress: bool) -> None:
    """One live display, a row per policy, fed by the workers' (name, loss, steps) messages until every
    worker has finished or failed."""
    names = list(jobs)
    totals = {name: total_steps(len(ex), cfg) for name, (_, ex, cfg) in jobs.items()}
    bars = Bar(progress, {"loss": "loss {:.3f}"})
    rows = {name: bars.row(f"sft {name}", totals[name]) for name in names}
    pending, seen = set(names), dict.fromkeys(names, 0)
    try:
        while pending:
            quiet = False
            try:
                name, loss, steps = queue.get(timeout=0.5)
                seen[name] += steps
                bars.advance(rows[name], steps, **({} if loss is None else {"loss": loss}))
            except queue_module.Empty:  # no progress in 0.5 s: look for finished or failed workers
                quiet = True
            # a finished worker's last messages may still be on their way: wait for them, or a quiet 0.5 s
            for name in [n for n in pending if futures[n].done() and (quiet or seen[n] >= totals[n])]:
                pending.discard(name)
    finally:
        bars.close()


STOP_WAIT_S = 10.0  # after Ctrl-C, how long trainers get to notice before they are terminated
# in the workdir, made on Ctrl-C: each trainer looks for it every step (a file, not a multiprocessing Event,
# whose semaphores the spawn context's resource tracker reported leaked)
STOP_FILE = "stop"


class _Stopped(Exception):
    """Raised in a trainer that the parent told to stop."""


def _stop_workers(pool: ProcessPoolExecutor, futures: dict[str, Any], stop: Path) -> None:
    """Every trainer stops at its next step (its checkpoint keeps the last saved one), jobs not yet started
    never start, and a worker still busy after STOP_WAIT_S is terminated."""
    stop.touch()
    for future in futures.values():
        future.cancel()
    concurrent.futures.wait(list(futures.values()), timeout=STOP_WAIT_S)
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
    else:  # the pool's own processes: no public handle before 3.14
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


# attention's cost per token and layer, in units of hidden_size x context length, relative to a parameter's 2:
# fitted to CPU step times of the demo's tiny planner and coder (one thread; 0.31 s and 0.50 s a step,
# where padded tokens alone predict 0.44 s for the coder)
ATTENTION_COST = 17.0


def step_costs(policy: HFPolicy, examples: Sequence[SFTExample], cfg: SFTConfig) -> list[float]:
    """Each SFT step's estimated cost, from the batch plan that `train_sft` will follow: a padded batch of
    B examples of length L costs B x L x (2 x parameters + ATTENTION_COST x layers x hidden_size x L), or
    B x L for a model without those config fields. No examples: no steps (the trainer reports the error)."""
    if not examples:
        return []
    lengths = [len(p) + len(c) for p, c in tokenize_examples(policy, examples)]
    config = getattr(getattr(policy, "model", None), "config", None)
    layers, hidden = getattr(config, "num_hidden_layers", None), getattr(config, "hidden_size", None)
    per_token, per_context = 1.0, 0.0
    if isinstance(layers, int) and isinstance(hidden, int):
        per_token = 2.0 * sum(p.numel() for p in policy.model.parameters())
        per_context = ATTENTION_COST * layers * hidden
    costs = []
    for batch in batch_plan(lengths, cfg):
        longest = max(lengths[i] for i in batch)
        costs.append(len(batch) * longest * (per_token + per_context * longest))
    return costs


def thread_schedule(costs: dict[str, Sequence[float]], processes: int, threads: int) -> dict[str, dict[int, int]]:
    """When each parallel trainer changes its torch thread count: {name: {step: threads from that step on}}.

    Torch's CPU kernels split their sums by thread count, so a step's arithmetic depends on it; a trainer
    that took over a finished one's CPUs whenever it noticed would end, run to run, in weights a few
    float32 ulps apart (and a resumed run would not match an uninterrupted one). The schedule is fixed
    before training instead, by simulating it from each step's estimated cost (`costs[name][step]`, a
    step with k threads taking cost / k): jobs start in order on `processes` processes of `threads`
    threads; a job that ends hands its process to the next waiting job, or, when none waits, its threads
    to the running job with the most time left, from that job's next step on. An estimate that is off
    costs speed (a CPU idles, or one is shared for a while), never reproducibility.
    """
    if processes < 1 or threads < 1:
        raise ValueError(f"thread_schedule needs processes >= 1 and threads >= 1, got {processes} and {threads}")
    steps = {name: list(c) for name, c in costs.items()}
    bad = [(name, c) for name, cs in steps.items() for c in cs if not c > 0]
    if bad:
        raise ValueError(f"thread_schedule: step costs must be > 0; {bad[0][0]!r} has {bad[0][1]}")
    schedule: dict[str, dict[int, int]] = {name: {} for name in steps}
    order = {name: i for i, name in enumerate(steps)}  # ties go to the job submitted first
    waiting = list(steps)
    running: dict[str, int] = {}  # name -> threads
    done: dict[str, float] = {name: 0.0 for name in steps}  # steps done, fractional
    while waiting or running:
        while waiting and len(running) < processes:
            running[waiting.pop(0)] = threads
        left = {name: _work_left(steps[name], done[name]) / k for name, k in running.items()}
        first = min(left, key=lambda name: left[name])
        for name, k in running.items():
            done[name] = _advance(steps[name], done[name], left[first] * k)
        freed = running.pop(first)
        done[first] = float(len(steps[first]))
        if waiting:
            freed -= threads  # the next job starts on this process with the usual threads
        busy = [name for name in running if done[name] < len(steps[name])]
        if freed > 0 and busy:
            taker = max(busy, key=lambda name: (_work_left(steps[name], done[name]) / running[name], -order[name]))
            running[taker] += freed
            schedule[taker][math.ceil(done[taker])] = running[taker]
    return schedule


def _work_left(costs: Sequence[float], done: float) -> float:
    whole = int(done)
    return sum(costs[whole:]) - (done - whole) * (costs[whole] if whole < len(costs) else 0.0)


def _advance(costs: Sequence[float], done: float, work: float) -> float:
    """Steps done after spending `work` more from `done` (fractional) on."""
    whole = int(done)
    part = (done - whole) * (costs[whole] if whole < len(costs) else 0.0)
    while whole < len(costs) and work >= costs[whole] - part:
        work -= costs[whole] - part
        whole, part = whole + 1, 0.0
    return float(whole) if whole >= len(costs) else whole + (part + work) / costs[whole]


_PROGRESS: Any = None  # in a worker: the queue its (name, loss, steps) messages go to


def _worker_start(parent: int, queue: Any) -> None:
    """A worker's first act: die with the process that started it, so that a killed experiment leaves no
    trainer behind holding the CPUs (Linux; elsewhere a worker notices only when its pipe breaks), and leave
    Ctrl-C to the parent, which stops the workers through STOP_FILE (a worker interrupted by the terminal's
    SIGINT would only go on to the next queued job)."""
    global _PROGRESS
    _PROGRESS = queue
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The signal follows the parent *thread* that started this worker: ProcessPoolExecutor (spawn, no
    # max_tasks_per_child) starts its workers in the thread that calls submit, which waits in train_sft_many
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            warnings.warn(f"SFT worker: prctl(PR_SET_PDEATHSIG) failed (errno {ctypes.get_errno()}); it will not "
                          "die with a killed parent", RuntimeWarning, stacklevel=1)
    if os.getppid() != parent:  # the parent was gone before the line above took effect
        os._exit(1)


def _sft_worker(name: str, workdir: str, examples: list[SFTExample], cfg: SFTConfig, threads: int,
                schedule: dict[int, int], checkpoint: Path | None = None) -> list[float]:
    """One trainer; `schedule` ({step: threads from then on}, `thread_schedule`) sets its thread count."""
    queue = _PROGRESS
    stop = Path(workdir) / STOP_FILE
    if stop.exists():  # a job queued before Ctrl-C
        raise _Stopped(name)

    torch.set_num_threads(schedule.get(0, threads))
    policy = HFPolicy.load(Path(workdir) / "init" / name)

    def log(metrics: dict[str, float]) -> None:
        if stop.exists():
            raise _Stopped(name)
        if "sft/resumed_at" in metrics:  # the steps a checkpoint already holds
            start = int(metrics["sft/resumed_at"])
            queue.put((name, metrics.get("sft/loss"), start))
            earlier = [step for step in schedule if step <= start]
            if earlier:
                torch.set_num_threads(schedule[max(earlier)])
            return
        queue.put((name, metrics["sft/loss"], 1))
        following = int(metrics["sft/step"]) + 1
        if following in schedule:
            torch.set_num_threads(schedule[following])

    losses = train_sft(policy, examples, cfg, log=log, progress=False, checkpoint=checkpoint)
    policy.save(Path(workdir) / "trained" / name)
    return losses
