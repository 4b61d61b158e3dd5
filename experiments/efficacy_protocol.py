"""The fixed protocol of the efficacy studies (issue #24), shared by experiments/efficacy*.py.

- Settings are chosen from validation numbers only: `closest_to` and `best_of` take a mapping of
  setting -> validation figure and never see a test figure.
- Each seed has its own test tasks (the procedural test split gives seeds 0-7 disjoint test sets), and
  each setting's test split is evaluated once, after the choice.
- Figures over seeds are a mean with its standard error over seeds (coral.report.error_bars.mean_se);
  a method against a baseline is also a paired per-task change, tasks of all seeds pooled
  (coral.benchmarks.metrics.paired_change), with tasks up / down.
- Every run's command, config, commit, date and load average are saved next to its numbers (JSON).
- Tables are markdown, written into a named section of a results file so prose around them stays.

This module does NOT train, search or evaluate anything; it holds no study-specific settings.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from coral.benchmarks.metrics import paired_change
from coral.config import UserInputError
from coral.report.error_bars import mean_se


def set_fields(text: str) -> dict[str, Any]:
    """The fields a study's `--set` flag gives, as JSON; a one-line error naming the flag when it is not JSON."""
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserInputError(f"--set: not JSON ({exc})") from None
    return fields


def closest_to(validation: Mapping[str, float], target: float) -> str:
    """The setting whose validation figure is closest to `target` (the first given, on ties)."""
    if not validation:
        raise ValueError("closest_to: no validation figures to choose from")
    return min(validation, key=lambda k: abs(validation[k] - target))


def best_of(validation: Mapping[str, float]) -> str:
    """The setting with the highest validation figure (the first given, on ties)."""
    if not validation:
        raise ValueError("best_of: no validation figures to choose from")
    return max(validation, key=lambda k: validation[k])


def over_seeds(per_seed: Mapping[int, float]) -> dict[str, float]:
    """{"mean", "se", "seeds"}: the mean over seeds and its standard error (nan with one seed)."""
    mean, se = mean_se([per_seed[s] for s in sorted(per_seed)])
    return {"mean": mean, "se": se, "seeds": len(per_seed)}


def pooled_paired_change(before: Mapping[int, Mapping[str, float]],
                         after: Mapping[int, Mapping[str, float]]) -> dict[str, float]:
    """Per-task change after - before, the tasks of every seed pooled (seed -> task id -> pass rate):
    {"mean", "se", "up", "down", "tasks"}. Both sides must cover the same seeds and tasks."""
    if set(before) != set(after):
        raise ValueError(f"pooled_paired_change: seeds {sorted(before)} before but {sorted(after)} after")
    flat_before = {f"{s}/{t}": v for s, rates in before.items() for t, v in rates.items()}
    flat_after = {f"{s}/{t}": v for s, rates in after.items() for t, v in rates.items()}
    return asdict(paired_change(flat_before, flat_after))


def mean_rate(per_task: Mapping[str, float]) -> float:
    """The mean of per-task pass rates (task id -> rate): one run's pass rate over its tasks."""
    return sum(per_task.values()) / len(per_task)


def fmt_mean_se(stats: Mapping[str, float]) -> str:
    se = "n/a" if math.isnan(stats["se"]) else f"{stats['se']:.3f}"
    return f"{stats['mean']:.3f} ± {se}"


def fmt_change(change: Mapping[str, float]) -> str:
    return f"{change['mean']:+.3f} ± {change['se']:.3f} ({change['up']}↑ {change['down']}↓)"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; every row must have one cell per header."""
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"markdown_table: row {list(row)} has {len(row)} cells for {len(headers)} headers")
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_section(path: Path, name: str, text: str) -> None:
    """Replace the text between `<!-- name:begin -->` and `<!-- name:end -->` in `path` (appended at the
    end, with its markers, when the file or the section does not exist yet)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    old = path.read_text() if path.exists() else ""
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if begin in old:
        if end not in old or old.index(end) < old.index(begin):
            raise ValueError(f"{path}: section {name!r} has a begin marker without an end marker after it")
        new = old[:old.index(begin)] + block + old[old.index(end) + len(end):]
    else:
        new = old + ("\n" if old and not old.endswith("\n") else "") + ("\n" if old else "") + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


def provenance() -> dict[str, Any]:
    """The command line, commit, date and load average of this process: saved next to its numbers."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                    text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RuntimeError(f"provenance: cannot read the git commit ({exc}); run from the repository") from exc
    loadavg = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    return {"command": " ".join([os.path.relpath(sys.executable)] + sys.argv), "commit": commit + ("+dirty" if dirty else ""),
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "loadavg": " ".join(loadavg)}


def save_run(path: Path, config: Any, numbers: Mapping[str, Any], **extra: Any) -> None:
    """`path` (JSON): provenance, the config (a dataclass or mapping) and the numbers it produced."""
    cfg = asdict(config) if hasattr(config, "__dataclass_fields__") else dict(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**provenance(), **extra, "config": cfg, "numbers": numbers}, indent=2, default=str))
    os.replace(tmp, path)
