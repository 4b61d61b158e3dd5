"""What coral prints in the terminal, in one style for every command: progress of long work (a rich
display with one row per job: done / total, elapsed time, the time left at the pace so far, and any figures
the job reports, e.g. its loss; nothing when disabled) and the summary a command prints when it finishes (a
rich table with a title, numbers formatted one way, then notes and the paths of what was written). `coral
eval` prints its figures as one row; a training run prints one row per held-out figure: before, after, the
paired per-task change and its standard error.

This module does NOT log metrics (train/loop.py does) and does NOT compute any figure
(benchmarks/metrics.paired_change computes the change).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal


class Bar:
    """`Bar(enabled, fields={"loss": "loss {:.3f}"})`: `row(name, total)` adds a row and returns its id,
    `advance(row, steps, loss=...)` moves it on; `close()` (or leaving a `with` block) ends the display.
    `fields` name the figures shown after the bar, each with its format; a figure not reported yet shows
    as n/a."""

    def __init__(self, enabled: bool, fields: Mapping[str, str] | None = None):
        self.fields = dict(fields or {})
        self.progress: Any = None
        if not enabled:
            return
        # lazy: rich's live display only for a command that shows one
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(TextColumn("[bold]{task.description}[/]"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[figures]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn())
        self.progress.start()

    def _figures(self, values: Mapping[str, Any]) -> str:
        return "  ".join(fmt.format(values[k]) if values.get(k) is not None else f"{k} n/a"
                         for k, fmt in self.fields.items())

    def row(self, name: str, total: int | None, done: int = 0, **values: Any) -> int:
        if self.progress is None:
            return -1
        return self.progress.add_task(name, total=total, completed=done, figures=self._figures(values), values=values)

    def advance(self, row: int, steps: int = 1, **values: Any) -> None:
        if self.progress is None:
            return
        merged = {**self.progress.tasks[row].fields["values"], **values}
        self.progress.update(row, advance=steps, figures=self._figures(merged), values=merged)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        self.close()
        return False


NOISE_NOTE = ("change ± SE: the mean per-task change and its paired standard error; a change within about two "
              "of them of zero is within this evaluation's noise")


def time_left(step_s: Sequence[float], steps_left: int) -> str:
    """"ETA 3.2 min": the steps left at the mean pace of the last (up to ten) steps timed."""
    recent = list(step_s)[-10:]
    if not recent:
        return "ETA n/a"
    seconds = steps_left * sum(recent) / len(recent)
    return f"ETA {seconds:.0f} s" if seconds < 90 else f"ETA {seconds / 60:.1f} min"


def fmt(value: Any) -> str:
    """A figure as every summary shows it: integers plainly, other floats to 3 decimals, None and NaN as n/a."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value)}"
    return f"{value:.3f}"


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], notes: Sequence[str] = (),
                labels: bool = True) -> None:
    """The table, then one line per note. With `labels`, the first column names each row (left-aligned,
    wrapped); figures are right-aligned and never wrapped."""
    # lazy: rich's console costs import time that `coral --help` does without
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, column in enumerate(columns):
        first = labels and i == 0
        table.add_column(column, justify="left" if first else "right", no_wrap=labels and not first, min_width=24 if first else None)
    for row in rows:
        table.add_row(*[fmt(v) for v in row])
    console = Console()
    console.print(table)
    for note in notes:
        console.print(note, highlight=False, soft_wrap=True)


def print_metrics(title: str, metrics: Mapping[str, Any], notes: Sequence[str] = ()) -> None:
    """One row of figures under their names (`coral eval`'s table); a row per figure when the terminal is
    too narrow for every name whole (rich would cut them, two of RecursiveMAS's to the same `decoded_toke…`)."""
    from rich.console import Console  # lazy: as in print_table

    width = 1 + sum(max(len(str(name)), len(fmt(value))) + 3 for name, value in metrics.items())  # padding, border
    if width <= Console().width:
        print_table(title, list(metrics), [list(metrics.values())], notes, labels=False)
    else:
        print_table(title, ["figure", "value"], [[name, value] for name, value in metrics.items()], notes)


@dataclass(frozen=True)
class BeforeAfter:
    """One held-out figure of a training run: its value before and after training and the paired per-task
    change (None when the run kept no per-task results to pair, e.g. no evaluation before training)."""

    label: str  # which figure, on which tasks, how sampled
    tasks: int
    before: float | None
    after: float
    change: Mapping[str, float] | None  # PairedChange as a dict: mean, se, up, down, tasks


BEFORE_AFTER_COLUMNS = ("figure", "tasks", "{before}", "{after}", "change ± SE", "up/down")


def before_after_rows(rows: Sequence[BeforeAfter]) -> list[list[Any]]:
    """Each figure's cells, as strings: rates to 3 decimals, the change signed."""
    out = []
    for r in rows:
        c = r.change
        out.append([r.label, r.tasks, "n/a" if r.before is None else f"{r.before:.3f}", f"{r.after:.3f}",
                    "n/a" if c is None else f"{c['mean']:+.3f} ± {c['se']:.3f}",
                    "n/a" if c is None else f"{c['up']} / {c['down']}"])
    return out


def before_after_columns(before: str, after: str) -> list[str]:
    return [c.format(before=before, after=after) for c in BEFORE_AFTER_COLUMNS]


def print_before_after(title: str, rows: Sequence[BeforeAfter], before: str = "before", after: str = "after",
                       notes: Sequence[str] = ()) -> None:
    """A training run's held-out figures, one row each, with the note on noise when a change is shown."""
    noise = [NOISE_NOTE] if any(r.change is not None for r in rows) else []
    print_table(title, before_after_columns(before, after), before_after_rows(rows), [*noise, *notes])
