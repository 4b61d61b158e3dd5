"""Which procedural tasks a training run uses for what: the train split (cold start and RL), the test
split (held out, new skeletons), the tasks kept for RL only, and the "fresh" held-out tasks of the
training skeletons.

`ProceduralSplits` holds the numbers; a recipe config builds one from its fields. Held-out compositions
never enter a training set. This module does NOT generate compositions (benchmarks/procedural.py) and
does NOT train or evaluate anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coral.benchmarks.procedural import make_tasks, parse_composition, skeleton_unit
from coral.trajectory import Task

RL_SKELETON_SALT = "coral-rl-skeletons/"
RL_STREAM_SEED = 17  # rl_max_depth: the RL pool is the train split drawn with seed + this


@dataclass(frozen=True)
class ProceduralSplits:
    seed: int = 0
    n_train_tasks: int = 4000
    n_test_tasks: int = 200
    n_fresh_tasks: int = 0  # held-out tasks of the training skeletons (0: none)
    # where the fresh tasks come from: "train" (the train split after SFT's tasks, depth min-max) or "rl" (the
    # RL stream of rl_max_depth after the RL pool's tasks: RL's own distribution, never trained on)
    fresh_source: str = "train"
    min_depth: int = 1
    max_depth: int = 2
    rl_max_depth: int | None = None  # RL on train-split tasks up to this depth (None: SFT's tasks)
    rl_skeleton_fraction: float = 0.0  # share of train skeletons kept out of SFT, for RL alone
    held_out_split: str = "test"  # the split held out for evaluation: "test" (reported) or "validation" (for settings)


def build_tasks(spec: ProceduralSplits) -> tuple[list[Task], list[Task]]:
    """(train split, held-out split): the first n_train_tasks / n_test_tasks tasks of each, seeded. The held-out
    split is the test split, or the validation split (held_out_split "validation") for choosing settings."""
    if spec.held_out_split not in ("test", "validation"):
        raise ValueError(f"held_out_split must be 'test' or 'validation', got {spec.held_out_split!r}")
    train = make_tasks(spec.n_train_tasks, "train", min_depth=spec.min_depth, max_depth=spec.max_depth,
                       seed=spec.seed)
    test = make_tasks(spec.n_test_tasks, spec.held_out_split, min_depth=spec.min_depth, max_depth=spec.max_depth,
                      seed=spec.seed + 1)
    return train, test


def _split_off_rl_skeletons(spec: ProceduralSplits, train: list[Task]) -> tuple[list[Task], list[Task]]:
    """(SFT's tasks, RL's tasks): train tasks whose skeleton hashes below rl_skeleton_fraction go to RL."""
    sft: list[Task] = []
    rl: list[Task] = []
    for task in train:
        comp = parse_composition(task.metadata["family"], task.metadata["composition"])
        (rl if skeleton_unit(comp, RL_SKELETON_SALT) < spec.rl_skeleton_fraction else sft).append(task)
    return sft, rl


def sft_tasks(spec: ProceduralSplits, train: list[Task]) -> list[Task]:
    """The cold start's tasks: the train split, less the skeletons kept for RL (rl_skeleton_fraction)."""
    if spec.rl_skeleton_fraction == 0:
        return train
    return _split_off_rl_skeletons(spec, train)[0]


def rl_tasks(spec: ProceduralSplits, train: list[Task]) -> list[Task]:
    """The RL stream's tasks: SFT's training tasks; or (rl_skeleton_fraction > 0) the train tasks whose
    skeletons SFT never saw; or (rl_max_depth set) other train-split tasks up to that depth, generated
    with another seed. Held-out compositions never enter any of them."""
    if spec.rl_skeleton_fraction > 0:
        tasks = _split_off_rl_skeletons(spec, train)[1]
        if not tasks:
            raise ValueError(f"rl_skeleton_fraction={spec.rl_skeleton_fraction} keeps no train task for RL; raise it")
        return tasks
    if spec.rl_max_depth is None:
        return train
    # the train split alone: the held-out split may have fewer tasks than n_test_tasks up to rl_max_depth
    return make_tasks(spec.n_train_tasks, "train", min_depth=spec.min_depth, max_depth=spec.rl_max_depth,
                      seed=spec.seed + RL_STREAM_SEED)


def fresh_tasks(spec: ProceduralSplits, train: Sequence[Task], rl_pool: Sequence[Task],
                sft_trains: bool = True) -> list[Task]:
    """spec.n_fresh_tasks held-out tasks of the training skeletons: the train split's tasks after the first
    n_train_tasks (make_tasks extends its list deterministically), less any the RL pool holds (rl_max_depth
    draws other train-split tasks). Neither SFT nor RL sees them; their skeletons are the train split's,
    where the test split's are new. fresh_source "rl": the RL stream's tasks after the pool instead (see
    `fresh_after_rl_pool`); `sft_trains` False (no cold start) lets them be SFT's unused tasks too."""
    n = spec.n_fresh_tasks
    if n == 0:
        return []
    if spec.fresh_source == "rl":
        return fresh_after_rl_pool(spec, rl_pool, {t.id for t in train} if sft_trains else set())
    if spec.fresh_source != "train":
        raise ValueError(f"field 'fresh_source' must be 'train' or 'rl', got {spec.fresh_source!r}")
    return _tasks_after(train, n, {t.id for t in train} | {t.id for t in rl_pool}, min_depth=spec.min_depth,
                        max_depth=spec.max_depth, seed=spec.seed,
                        too_many=f"field 'n_fresh_tasks'={n} asks for more train-split tasks than there are",
                        not_prefix="fresh_tasks: `train` is not the train split's first n_train_tasks tasks")


def fresh_after_rl_pool(spec: ProceduralSplits, rl_pool: Sequence[Task], trained: set[str]) -> list[Task]:
    """spec.n_fresh_tasks tasks of the RL stream (train split, depth min_depth-rl_max_depth) after the RL pool's
    n_train_tasks, less any in `trained` (SFT's tasks): the distribution RL trains on (same depths, same
    skeletons, other compositions), never trained on."""
    if spec.rl_max_depth is None:
        raise ValueError("field 'fresh_source' 'rl' needs 'rl_max_depth' (the RL stream it continues)")
    n = spec.n_fresh_tasks
    return _tasks_after(rl_pool, n, trained, min_depth=spec.min_depth, max_depth=spec.rl_max_depth,
                        seed=spec.seed + RL_STREAM_SEED,
                        too_many=f"field 'n_fresh_tasks'={n} with fresh_source 'rl' asks for more tasks of depth "
                                 f"{spec.min_depth}-{spec.rl_max_depth} than the train split has after the RL pool "
                                 f"of {len(rl_pool)}",
                        not_prefix="fresh_after_rl_pool: `rl_pool` is not the RL stream's first n_train_tasks tasks")


def _tasks_after(prefix: Sequence[Task], n: int, excluded: set[str], *, min_depth: int, max_depth: int, seed: int,
                 too_many: str, not_prefix: str) -> list[Task]:
    """The first `n` tasks, less those whose id is in `excluded`, of the train-split stream (depth
    `min_depth`-`max_depth`, `seed`) after its first len(prefix), which must be `prefix` (RuntimeError
    `not_prefix` otherwise). The stream is drawn longer until `n` remain; ValueError `too_many`, with
    make_tasks's reason, when the split runs out."""
    extra = 0
    while True:
        try:
            stream = make_tasks(len(prefix) + n + extra, "train", min_depth=min_depth, max_depth=max_depth, seed=seed)
        except ValueError as exc:
            raise ValueError(f"{too_many}: {exc}") from exc
        if [t.id for t in stream[:len(prefix)]] != [t.id for t in prefix]:
            raise RuntimeError(not_prefix)
        found = [t for t in stream[len(prefix):] if t.id not in excluded]
        if len(found) >= n:
            return found[:n]
        extra += n - len(found)
