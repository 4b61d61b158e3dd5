"""The testbed's measures on hand-computed values, and one tiny end-to-end measurement."""

from __future__ import annotations

import json
import math

import pytest

from experiments.testbed_measures import (
    agent_figures,
    failure_correlation,
    flat_share,
    mean_pass_at_k,
    refine_figures,
    token_entropy,
)


def test_flat_share_counts_groups_whose_rewards_are_all_equal():
    assert flat_share([[1, 1, 1], [0, 0], [0, 1], [0.5, 0.5, 0.25]]) == 0.5
    assert flat_share([[1.0]]) == 1.0


def test_mean_pass_at_k_is_the_unbiased_estimator_averaged_over_tasks():
    # n=4, c=1: pass@1 = 1/4, pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 1/2; n=4, c=0: 0; n=4, c=4: 1
    counts = [(4, 1), (4, 0), (4, 4)]
    assert mean_pass_at_k(counts, 1) == pytest.approx((0.25 + 0 + 1) / 3)
    assert mean_pass_at_k(counts, 2) == pytest.approx((0.5 + 0 + 1) / 3)


def test_token_entropy_is_the_token_mean_of_minus_log_p():
    assert token_entropy([[-1.0, -2.0], [-3.0]]) == pytest.approx(2.0)
    assert math.isnan(token_entropy([]))


def test_failure_correlation_is_one_for_agents_failing_the_same_tasks_and_minus_one_for_opposite_tasks():
    a = {"t1": 0.0, "t2": 1.0, "t3": 0.5}
    assert failure_correlation(a, dict(a)) == pytest.approx(1.0)
    assert failure_correlation(a, {"t1": 1.0, "t2": 0.0, "t3": 0.5}) == pytest.approx(-1.0)
    assert math.isnan(failure_correlation(a, {"t1": 1.0, "t2": 1.0, "t3": 1.0}))  # constant: undefined
    with pytest.raises(ValueError, match="different tasks"):
        failure_correlation(a, {"t1": 1.0})


def test_refine_figures_compare_a_failing_parents_refinement_with_the_other_fresh_samples_of_its_task():
    # task a: samples [F, F, T, T]; task b: [T, T]
    samples = {"a": [False, False, True, True], "b": [True, True]}
    parents = [("a", False), ("a", False), ("a", True), ("b", True), ("b", True)]
    refined = [True, False, True, True, False]
    out = refine_figures(parents, refined, samples)
    assert out["refine_fail"] == 0.5  # 1 of the 2 failing parents' refinements passes
    # each failing parent of task a: the other three samples [F, T, T] pass 2/3
    assert out["fresh_same_tasks"] == pytest.approx(2 / 3)
    assert out["keep"] == pytest.approx(2 / 3)  # 2 of 3 passing parents stay passing
    assert (out["failing_parents"], out["passing_parents"]) == (2.0, 3.0)


def test_agent_figures_give_the_relative_gap_of_the_per_sample_pass_rates():
    out = agent_figures([{"t1": 0.5, "t2": 0.3}, {"t1": 0.4, "t2": 0.2}])
    assert out["agent0_pass"] == pytest.approx(0.4) and out["agent1_pass"] == pytest.approx(0.3)
    assert out["agent_gap"] == pytest.approx(0.25)  # |0.4 - 0.3| / 0.4
    assert out["failure_correlation"] == pytest.approx(1.0)
    assert out["agent_gap_se"] == pytest.approx(0.0)  # the same difference, 0.1, on both tasks


def test_the_agent_gaps_standard_error_is_the_paired_per_task_differences_over_the_stronger_rate():
    from experiments.testbed_measures import agent_figures

    out = agent_figures([{"t1": 1.0, "t2": 0.5}, {"t1": 0.5, "t2": 0.5}])
    assert out["agent_gap"] == pytest.approx(0.25 / 0.75)
    # differences 0.5 and 0: sample sd 0.5 / sqrt(2), SE 0.25, over the stronger rate 0.75
    assert out["agent_gap_se"] == pytest.approx(0.25 / 0.75)


@pytest.mark.slow  # two tiny cold starts (MARS2 with its own-refine stage, CoRe-Code) and every measure: about a minute
def test_a_tiny_setting_is_measured_end_to_end_and_its_row_written_to_the_table(tmp_path):
    from experiments.testbed import TestbedConfig, measure

    tiny = {"n_train_tasks": 40, "agent_shapes": [[32, 1], [32, 1]], "sft": {"epochs": 0.3, "batch_size": 8},
            "refine_from": "own", "refine_examples": 10, "refine_sft": {"epochs": 0.3, "batch_size": 8},
            "max_new_tokens": 16, "solutions_per_task": 2, "sft_processes": 1}
    cfg = TestbedConfig(name="tiny", mars2=tiny, corecode={"n_train_tasks": 40, "d_model": 32, "n_layers": 1,
                                                           "sft": {"epochs": 0.3, "batch_size": 8}, "max_new_tokens": 16,
                                                           "sft_processes": 1},
                        n_val_tasks=3, samples=2, tree_nodes=2, rows=str(tmp_path / "rows.jsonl"), cold_cache=str(tmp_path / "cold"),
                        results_md=str(tmp_path / "r.md"))
    row = measure(cfg)
    for key in ("agent0_entropy", "agent1_flat_groups", "agent0_refine_fail", "agent_gap", "tree_flat", "coder_flat@4x2",
                "chain_pass@8@4x2", "coder_flat_fraction@2x4"):
        assert key in row["figures"]
    assert json.loads((tmp_path / "rows.jsonl").read_text())["name"] == "tiny"
    assert "| tiny |" in (tmp_path / "r.md").read_text()
    again = measure(cfg)  # cold starts read back from the cache: nothing trained twice
    assert again["cold_start"] == row["cold_start"]


def test_a_setting_may_measure_no_trees_but_not_a_negative_number_of_nodes():
    from experiments.testbed import TestbedConfig

    assert TestbedConfig(tree_nodes=0).tree_nodes == 0
    with pytest.raises(ValueError, match="tree_nodes"):
        TestbedConfig(tree_nodes=-1)


class _Drawn(Exception):
    pass


def test_val_seed_draws_the_validation_tasks_in_place_of_seed(monkeypatch):
    import coral.benchmarks.procedural as procedural
    from experiments.testbed import TestbedConfig, measure

    def stop(*args, seed, **kw):
        raise _Drawn(seed)

    monkeypatch.setattr(procedural, "make_tasks", stop)
    for cfg, drawn in ((TestbedConfig(seed=2), 2), (TestbedConfig(seed=2, val_seed=0), 0)):
        with pytest.raises(_Drawn) as err:
            measure(cfg)
        assert err.value.args == (drawn,)
    with pytest.raises(ValueError, match="val_seed"):
        TestbedConfig(val_seed=-1)


def test_each_table_lists_only_the_settings_that_measured_its_system():
    from experiments.testbed import table

    prov = {"commit": "abc", "date_utc": "2026-12-06 10:00", "loadavg": "1.0 1.0 1.0"}
    mars2_row = {"name": "m", "figures": {"agent0_pass@1": 0.3, "agent1_pass@1": 0.2}, **prov}
    corecode_row = {"name": "c", "figures": {"corecode_cold_start": "x", "chain_pass@1@4x2": 0.5}, **prov}
    both = table([mars2_row, corecode_row])
    mars2_part, corecode_part = both.split("CoRe-Code's planner and coder")
    assert "| m |" in mars2_part and "| c |" not in mars2_part
    assert "| c |" in corecode_part and "| m |" not in corecode_part
    assert table([corecode_row]).startswith("CoRe-Code's planner and coder")
    assert "CoRe-Code" not in table([mars2_row])


def test_a_saved_row_joins_the_rows_before_it_in_the_table(tmp_path):
    from experiments.testbed import save_row

    prov = {"commit": "abc", "date_utc": "2026-12-06 10:00", "loadavg": "1.0 1.0 1.0"}
    md = tmp_path / "r.md"
    md.write_text("<!-- testbed:begin -->\n<!-- testbed:end -->\n")
    for name in ("first", "second"):
        save_row({"name": name, "figures": {"agent0_pass@1": 0.3}, **prov}, tmp_path / "rows.jsonl", md)
    assert "| first |" in md.read_text() and "| second |" in md.read_text()


def test_the_results_pages_testbed_table_is_made_from_the_tracked_rows():
    # the rows live in the repository: a run in a fresh clone adds its row to every setting measured before
    import json
    from pathlib import Path

    from experiments.testbed import TestbedConfig, table

    cfg = TestbedConfig()
    rows = [json.loads(x) for x in Path(cfg.rows).read_text().splitlines()]
    section = Path(cfg.results_md).read_text().split("<!-- testbed:begin -->")[1].split("<!-- testbed:end -->")[0]
    assert table(rows).strip() == section.strip()
