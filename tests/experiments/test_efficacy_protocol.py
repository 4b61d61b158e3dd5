"""experiments/efficacy_protocol.py: validation-only choices, means and standard errors over seeds, paired
per-task changes pooled over seeds, markdown tables and result sections, on hand-computed numbers."""

from __future__ import annotations

import json
import math

import pytest


@pytest.fixture
def protocol(load_experiment):
    return load_experiment("efficacy_protocol")


def test_closest_to_picks_the_validation_figure_nearest_the_target_and_the_first_on_ties(protocol):
    assert protocol.closest_to({"1-2": 0.62, "2-2": 0.41, "3-3": 0.12}, 0.5) == "2-2"  # |0.12| vs |0.09|
    assert protocol.closest_to({"a": 0.4, "b": 0.6}, 0.5) == "a"


def test_best_of_picks_the_highest_validation_figure(protocol):
    assert protocol.best_of({"5e-05": 0.30, "0.0001": 0.35, "0.0002": 0.20}) == "0.0001"


def test_choices_refuse_an_empty_mapping(protocol):
    with pytest.raises(ValueError, match="no validation figures"):
        protocol.best_of({})


def test_over_seeds_gives_the_mean_and_the_standard_error_of_the_mean(protocol):
    stats = protocol.over_seeds({0: 0.2, 1: 0.4, 2: 0.6})
    # sample std of (0.2, 0.4, 0.6) is 0.2; SE = 0.2 / sqrt(3)
    assert stats["mean"] == pytest.approx(0.4)
    assert stats["se"] == pytest.approx(0.2 / math.sqrt(3))
    assert stats["seeds"] == 3


def test_one_seed_has_no_standard_error_and_the_table_says_so(protocol):
    stats = protocol.over_seeds({0: 0.5})
    assert math.isnan(stats["se"])
    assert protocol.fmt_mean_se(stats) == "0.500 ± n/a"


def test_pooled_paired_change_pairs_tasks_within_each_seed(protocol):
    before = {0: {"t1": 0.0, "t2": 1.0}, 1: {"t1": 0.0, "t3": 0.0}}
    after = {0: {"t1": 1.0, "t2": 1.0}, 1: {"t1": 1.0, "t3": 0.0}}
    change = protocol.pooled_paired_change(before, after)
    # diffs: seed0 t1 +1, t2 0; seed1 t1 +1, t3 0 -> mean 0.5, sample var 1/3, SE sqrt(1/3 / 4)
    assert change["mean"] == pytest.approx(0.5)
    assert change["se"] == pytest.approx(math.sqrt(1 / 3 / 4))
    assert (change["up"], change["down"], change["tasks"]) == (2, 0, 4)


def test_pooled_paired_change_refuses_different_seeds_or_tasks(protocol):
    with pytest.raises(ValueError, match="seeds"):
        protocol.pooled_paired_change({0: {"t": 1.0}}, {1: {"t": 1.0}})
    with pytest.raises(ValueError, match="different tasks"):
        protocol.pooled_paired_change({0: {"t": 1.0}}, {0: {"u": 1.0}})


def test_markdown_table_has_a_header_a_rule_and_one_line_per_row(protocol):
    text = protocol.markdown_table(["a", "b"], [[1, "x"], [2, "y"]])
    assert text == "| a | b |\n|---|---|\n| 1 | x |\n| 2 | y |\n"
    with pytest.raises(ValueError, match="2 headers"):
        protocol.markdown_table(["a", "b"], [[1]])


def test_write_section_replaces_only_its_own_section(protocol, tmp_path):
    md = tmp_path / "r.md"
    md.write_text("# title\n\nprose stays\n")
    protocol.write_section(md, "scaling", "old table")
    protocol.write_section(md, "mars2", "other table")
    protocol.write_section(md, "scaling", "new table")
    text = md.read_text()
    assert text.startswith("# title\n\nprose stays\n")
    assert "new table" in text and "old table" not in text and "other table" in text
    assert text.index("new table") < text.index("other table")  # replaced in place


def test_save_run_keeps_the_command_commit_config_and_numbers_together(protocol, tmp_path):
    protocol.save_run(tmp_path / "run.json", {"seeds": [0, 1]}, {"pass@1": 0.25})
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved["config"] == {"seeds": [0, 1]} and saved["numbers"] == {"pass@1": 0.25}
    assert saved["commit"] and saved["command"] and saved["date_utc"]
