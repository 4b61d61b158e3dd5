"""The several correct programs of a procedural task: every combination of its primitives' idioms
(primitives.IDIOMS) written as a function, a seeded draw of them for a cold start, and the one nearest to a
wrong code for a refinement example.

This module does NOT generate tasks or tests (procedural.py) and runs no code: the idioms are checked
against the canonical expressions by tests/benchmarks/test_procedural_gold_codes.py.
"""

from __future__ import annotations

import difflib
import itertools
import random

from coral.benchmarks.procedural import Composition, parse_composition, signature
from coral.trajectory import Task


def gold_codes(comp: Composition, limit: int = 64) -> list[str]:
    """Up to `limit` distinct correct codes of the composition: every combination of its lines' idioms
    (primitives.IDIOMS), the canonical `gold_code` first, then in a fixed order (the first line's idiom
    varies slowest)."""
    if limit < 1:
        raise ValueError(f"gold_codes: limit must be >= 1, got {limit}")
    out = []
    for exprs in itertools.islice(itertools.product(*(p.variants for p in comp)), limit):
        out.append("\n".join([signature(comp), *(p.line(e) for p, e in zip(comp, exprs, strict=True))]) + "\n")
    return out


def task_gold_codes(task: Task, limit: int = 64) -> list[str]:
    """`gold_codes` of a procedural task (from its metadata's composition). Raises ValueError for a task
    that is not procedural."""
    if "composition" not in task.metadata:
        raise ValueError(f"task {task.id!r} is not procedural (no metadata 'composition'): no gold codes")
    return gold_codes(parse_composition(task.metadata["family"], task.metadata["composition"]), limit)


def gold_solutions(task: Task, k: int, seed: int) -> list[str]:
    """k distinct gold codes of `task` (all of them when it has fewer), a seeded draw; k = 1 or a task that
    is not procedural: its reference alone."""
    if task.reference is None:
        raise ValueError(f"task {task.id!r} has no reference code for SFT")
    if k == 1 or "composition" not in task.metadata:
        return [task.reference]
    golds = task_gold_codes(task)
    return random.Random(f"{seed}:{task.id}").sample(golds, min(k, len(golds)))


def nearest_gold(task: Task, code: str) -> str:
    """The gold code of `task` closest to `code` (difflib's similarity ratio; the first on ties): the
    smallest correct edit of a wrong code, which a refinement example teaches."""
    golds = task_gold_codes(task)
    return max(golds, key=lambda g: difflib.SequenceMatcher(None, code, g, autojunk=False).ratio())
