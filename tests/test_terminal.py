"""What coral prints: figures formatted one way, the before/after table's cells, progress rows that do
nothing when disabled."""

import math

from coral.terminal import (
    Bar,
    BeforeAfter,
    before_after_rows,
    fmt,
    print_before_after,
    print_metrics,
    time_left,
)


def test_figures_print_as_counts_or_three_decimals_and_missing_ones_as_n_a():
    assert [fmt(4), fmt(4.0), fmt(0.41234), fmt(None), fmt(math.nan), fmt("x")] == ["4", "4", "0.412", "n/a", "n/a", "x"]


def test_a_before_after_row_shows_the_change_with_its_paired_standard_error():
    change = {"mean": 0.125, "se": 0.0625, "up": 3, "down": 1, "tasks": 8}
    rows = before_after_rows([BeforeAfter("test split, greedy", 8, 0.25, 0.375, change),
                              BeforeAfter("no pairing", 8, None, 0.5, None)])
    assert rows == [["test split, greedy", 8, "0.250", "0.375", "+0.125 ± 0.062", "3 / 1"],
                    ["no pairing", 8, "n/a", "0.500", "n/a", "n/a"]]


def test_tables_print_their_title_figures_and_notes(capsys):
    print_metrics("coral eval: x", {"pass@1": 0.5, "tasks": 2.0}, ["samples: s.jsonl"])
    print_before_after("coral train: r", [BeforeAfter("set", 2, 0.0, 0.5, {"mean": 0.5, "se": 0.5, "up": 1, "down": 0})],
                       "SFT", "SFT+RL")
    out = capsys.readouterr().out
    assert "coral eval: x" in out and "0.500" in out and "samples: s.jsonl" in out
    assert "SFT+RL" in out and "+0.500 ± 0.500" in out and "paired standard error" in out


def test_a_disabled_bar_shows_nothing_and_accepts_every_call(capsys):
    with Bar(False, {"loss": "loss {:.3f}"}) as bar:
        row = bar.row("sft", 10)
        bar.advance(row, 3, loss=1.0)
    assert capsys.readouterr().out == ""


def test_an_enabled_bar_reports_its_figures_and_the_time_left():
    bar = Bar(True, {"loss": "loss {:.3f}", "rate": "pass {:.3f}"})
    row = bar.row("sft", 10)
    bar.advance(row, 4, loss=1.25)
    task = bar.progress.tasks[row]
    assert task.completed == 4 and task.fields["figures"] == "loss 1.250  rate n/a"
    bar.close()


def test_the_time_left_is_the_steps_left_at_the_pace_of_the_last_ten_steps():
    assert time_left([100.0] * 5 + [2.0] * 10, 30) == "ETA 60 s"
    assert time_left([6.0], 100) == "ETA 10.0 min"
    assert time_left([], 3) == "ETA n/a"
