"""The run loop every recipe shares: a run directory, its metrics log, checkpoints, the data cursor and
the driver that calls a recipe's step function.

A recipe (CoRe-Code, MARS2, ...) sets itself up (tasks, policies, cold start), builds its agents as
`TrainedAgent`s, and hands `drive` a step function `step_fn(step, batch) -> metrics`. `drive` draws each
step's batch from a seeded endless shuffle, logs the metrics (metrics.jsonl + TensorBoard), and saves a
checkpoint (every agent's weights and learner state, RNG states, step, data position, metrics) every
`checkpoint_every_steps` steps, atomically. A run killed at any moment restarts from its latest
checkpoint (`Run.restore`) and ends in the state the uninterrupted run would have reached, provided the
step function is deterministic given the restored RNG states and step number.

This module does NOT roll out, score or update anything (the step function does), and does NOT decide
what a recipe evaluates.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from coral.config import UserInputError
from coral.jsonl import append_jsonl, write_atomic
from coral.train.checkpoints import TrainedAgent, latest_checkpoint, load_checkpoint, save_checkpoint

logger = logging.getLogger(__name__)
T = TypeVar("T")

Order = Callable[[int, int, int], Sequence[int]]
"""(number of items, seed, epoch) -> that epoch's permutation of the item indices."""

StepFn = Callable[[int, Sequence[Any]], dict[str, float]]
"""A recipe's training step: (step number from 1, this step's batch of tasks) -> metrics to log."""


def tensorboard_writer(out_dir: Path) -> Any:
    """A TensorBoard writer of `out_dir`/tb, or None (with a warning) when tensorboard cannot be imported."""
    try:
        # lazy: tensorboard costs about a second to import, only a run that logs needs it
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is a declared dependency: a broken install is reported, not hidden
        logger.warning("tensorboard is not importable; nothing goes to %s", out_dir / "tb")
        return None
    return SummaryWriter(str(out_dir / "tb"))


class MetricsLog:
    """metrics.jsonl (rewritten from `history` on start, then appended and flushed per step) and
    TensorBoard scalars, both under `out_dir`. Rewriting on start drops the steps a crashed run logged
    after its last checkpoint, which the resumed run computes again."""

    def __init__(self, out_dir: str | Path, history: Sequence[dict[str, float]] = ()):
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / "metrics.jsonl"
        write_atomic(self.path, "".join(json.dumps(m) + "\n" for m in history))
        self.history: list[dict[str, float]] = list(history)
        self.tb = tensorboard_writer(out_dir)

    def __call__(self, metrics: dict[str, float]) -> None:
        self.history.append(metrics)
        append_jsonl(self.path, metrics)  # a whole line or none, on a full disk too
        if self.tb is not None:
            for key, value in metrics.items():
                if key != "step":
                    self.tb.add_scalar(key, value, int(metrics["step"]))
            self.tb.flush()


def log_sft_curves(out_dir: str | Path, curves: Mapping[str, Sequence[float]]) -> None:
    """A cold start's loss curves: `out_dir`/sft_loss.jsonl (one line per role: {"role", "loss"}, which the run
    report draws) and TensorBoard scalars sft/ROLE/loss against the SFT step (from 1)."""
    out_dir = Path(out_dir)
    (out_dir / "sft_loss.jsonl").write_text("".join(json.dumps({"role": r, "loss": list(c)}) + "\n"
                                                    for r, c in curves.items()))
    tb = tensorboard_writer(out_dir)
    if tb is not None:
        for role, curve in curves.items():
            for step, loss in enumerate(curve, 1):
                tb.add_scalar(f"sft/{role}/loss", loss, step)
        tb.close()


def log_evaluation(out_dir: str | Path, figures: Mapping[str, float], step: int) -> None:
    """Held-out figures (e.g. {"eval/pass@1": 0.41}) as TensorBoard scalars at RL step `step` (0: before RL),
    beside the training curves; the run's summary.json holds them too."""
    tb = tensorboard_writer(Path(out_dir))
    if tb is not None:
        for key, value in figures.items():
            tb.add_scalar(key, value, step)
        tb.close()


@functools.lru_cache(maxsize=4)
def _data_order(n: int, seed: int, epoch: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(seed * 7919 + epoch).shuffle(order)
    return tuple(order)


def next_batch(items: Sequence[T], position: int, size: int, seed: int, order: Order | None = None) -> list[T]:
    """Items [position, position + size) of an endless stream of seeded per-epoch shuffles of `items`
    (`order`: a recipe's own shuffle, default `_data_order`)."""
    if not items:
        raise ValueError("next_batch: no items to draw from")
    order = order or _data_order
    out = []
    for pos in range(position, position + size):
        epoch, i = divmod(pos, len(items))
        out.append(items[order(len(items), seed, epoch)[i]])
    return out


class DataCursor(Generic[T]):
    """Where a run is in its task stream: `take(size)` returns the next batch and moves on. The position
    is all a checkpoint needs to continue the same stream."""

    def __init__(self, items: Sequence[T], seed: int, position: int = 0, order: Order | None = None):
        self.items, self.seed, self.position, self.order = items, seed, position, order

    def take(self, size: int) -> list[T]:
        batch = next_batch(self.items, self.position, size, self.seed, self.order)
        self.position += size
        return batch


class Run:
    """One run directory: config.json, metrics.jsonl and tb/, checkpoints under ckpt/ (atomic, newest two
    kept). `restore` reads the latest checkpoint into the agents; `save` writes one. `start_over` deletes
    the checkpoints an earlier run left (a recipe's `resume: false`). With `may_change` (dotted field
    names), a run that has a checkpoint is resumed only under the config of its config.json, up to those
    fields (check_resumable_config). `elapsed_s()` is the run's time over all its sessions: each checkpoint
    keeps it (state["elapsed_s"]) and a restored run goes on from there (the time between a run's last
    checkpoint and its kill is not counted)."""

    def __init__(self, out_dir: str | Path, config: Any = None, start_over: bool = False,
                 may_change: Sequence[str] | None = None):
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self._t0, self._before_s = time.perf_counter(), 0.0
        self.ckpt_root = self.out / "ckpt"
        if start_over:
            shutil.rmtree(self.ckpt_root, ignore_errors=True)
        if config is not None and may_change is not None and self.latest() is not None:
            check_resumable_config(self.out / "config.json", config, may_change)
        if config is not None:
            data = _fields_of(config)
            write_atomic(self.out / "config.json", json.dumps(data, indent=2))

    def latest(self) -> Path | None:
        return latest_checkpoint(self.ckpt_root)

    def restore(self, agents: Mapping[str, TrainedAgent]) -> dict[str, Any] | None:
        """The trainer state of the latest checkpoint, with the agents and RNG states restored in place;
        None when the run has no checkpoint yet."""
        path = self.latest()
        if path is None:
            return None
        state = load_checkpoint(path, dict(agents))
        self._before_s = float(state.get("elapsed_s", 0.0))  # 0 for a checkpoint of an older coral
        return state

    def elapsed_s(self) -> float:
        """Seconds this run has taken: the earlier sessions' (up to their last checkpoint) and this one's."""
        return self._before_s + time.perf_counter() - self._t0

    def save(self, agents: Mapping[str, TrainedAgent], state: dict[str, Any]) -> Path:
        state["elapsed_s"] = self.elapsed_s()
        return save_checkpoint(self.ckpt_root, int(state["step"]), dict(agents), state)


def _fields_of(config: Any) -> dict[str, Any]:
    """A config (a dataclass instance or a mapping) as a dict of its fields."""
    return asdict(config) if is_dataclass(config) and not isinstance(config, type) else dict(config)


def check_resumable_config(path: Path, config: Any, may_change: Sequence[str],
                           advice: str = "use another out_dir or resume: false") -> None:
    """Refuse (UserInputError naming the field, both values and the file) to resume a run whose `path`
    (config.json) differs from `config` in a field outside `may_change`: a run resumed under other
    settings would mix two runs in one set of figures. Fields on one side only (added or removed by
    another coral version) are not compared; a missing `path` has nothing to compare."""
    if not path.is_file():
        return
    mine = flat_fields(json.loads(json.dumps(_fields_of(config))))
    theirs = flat_fields(json.loads(path.read_text()))
    diff = sorted(k for k in mine.keys() & theirs.keys() if k not in may_change and mine[k] != theirs[k])
    if diff:
        raise UserInputError(f"{path}: the run was written with another config (field {diff[0]!r}: "
                             f"{theirs[diff[0]]!r}, now {mine[diff[0]]!r}); {advice}")


def flat_fields(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one mapping of dotted names."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(flat_fields(value, f"{prefix}{key}.") if isinstance(value, Mapping) else {prefix + key: value})
    return out


def new_state(**extra: Any) -> dict[str, Any]:
    """The trainer state of a run before its first step: step 0, data position 0, no metrics."""
    return {"step": 0, "position": 0, "metrics": [], **extra}


def drive(run: Run, step_fn: StepFn, tasks: Sequence[Any], agents: Mapping[str, TrainedAgent],
          state: dict[str, Any], *, steps: int, tasks_per_step: int, seed: int, checkpoint_every_steps: int,
          on_step: Callable[[dict[str, float], list[dict[str, float]]], None] | None = None,
          order: Order | None = None) -> dict[str, Any]:
    """Steps state["step"] + 1 .. `steps`: batch -> step_fn -> log -> (every `checkpoint_every_steps`
    steps and at the last) checkpoint. `on_step(metrics, history)` runs after each step is logged (a
    progress line, a warning); `order` replaces the default per-epoch shuffle of `tasks`. Returns the
    final trainer state."""
    if checkpoint_every_steps < 1 or tasks_per_step < 1:
        raise ValueError(f"drive: checkpoint_every_steps and tasks_per_step must be >= 1, "
                         f"got {checkpoint_every_steps} and {tasks_per_step}")
    log = MetricsLog(run.out, state["metrics"])
    cursor = DataCursor(tasks, seed, state["position"], order)
    for step in range(state["step"] + 1, steps + 1):
        metrics = step_fn(step, cursor.take(tasks_per_step))
        state.update(step=step, position=cursor.position)
        log(metrics)
        state["metrics"] = log.history
        if on_step is not None:
            on_step(metrics, log.history)
        if step % checkpoint_every_steps == 0 or step == steps:
            run.save(agents, state)
    return state
