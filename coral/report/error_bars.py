"""Error bars for the figures experiments print: the standard error of a mean over seeds, and of a pass
rate over tasks. This module does NOT compute paired per-task changes (benchmarks/metrics.paired_change)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """(mean, standard error of the mean); the error is nan with fewer than two values (no spread to
    measure), never a made-up 0."""
    if not values:
        raise ValueError("mean_se: no values")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan")
    return mean, statistics.stdev(values) / math.sqrt(len(values))


def rate_se(rate: float, n: int) -> float:
    """Standard error of a pass rate measured on n independent tasks: sqrt(p (1 - p) / n)."""
    if n < 1:
        raise ValueError(f"rate_se: n must be >= 1, got {n}")
    if not 0 <= rate <= 1:
        raise ValueError(f"rate_se: rate must be in [0, 1], got {rate}")
    return math.sqrt(rate * (1 - rate) / n)


def fmt_mean_se(values: Sequence[float]) -> str:
    mean, se = mean_se(values)
    return f"{mean:.3f} ± {se:.3f} (SE over {len(values)})"
