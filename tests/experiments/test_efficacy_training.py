"""experiments/efficacy_training.py: the analysis read from a run's metrics.jsonl (training reward early
and late, share of zero-advantage turns) and the study config's checks, on hand-written logs."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest


@pytest.fixture
def training(load_experiment):
    load_experiment("efficacy_protocol")
    load_experiment("mars2_compare")
    return load_experiment("efficacy_training")


def write_log(path, steps):
    path.write_text("".join(json.dumps(m) + "\n" for m in steps))
    return path


def test_analysis_reads_the_reward_rise_and_the_zero_advantage_share_of_a_mars2_log(training, tmp_path):
    steps = [{"step": i, "reward": r, "agent0/turns": 8.0, "agent0/trained_turns": t, "agent1/turns": 8.0,
              "agent1/trained_turns": 8.0} for i, (r, t) in enumerate([(0.1, 0.0), (0.2, 4.0), (0.3, 8.0), (0.5, 8.0)], 1)]
    a = training.run_analysis(write_log(tmp_path / "metrics.jsonl", steps), window=2)
    assert a["reward_first"] == pytest.approx(0.15) and a["reward_last"] == pytest.approx(0.4)
    # turns 4 x 16 = 64; trained 0 + 4 + 8 + 8 (agent0) + 32 (agent1) = 52 -> 12 / 64 had zero advantage
    assert a["zero_advantage_turns"] == pytest.approx(12 / 64) and a["steps"] == 4


def test_analysis_uses_the_coders_reward_in_a_corecode_log(training, tmp_path):
    steps = [{"step": 1, "coder/reward": 0.2, "coder/turns": 4.0, "coder/trained_turns": 2.0, "planner/reward": 0.9}]
    a = training.run_analysis(write_log(tmp_path / "metrics.jsonl", steps))
    assert a["reward_first"] == a["reward_last"] == pytest.approx(0.2) and a["zero_advantage_turns"] == pytest.approx(0.5)


def test_analysis_reads_entropy_and_flat_groups_where_the_run_logged_them(training, tmp_path):
    steps = [{"step": i, "reward": 0.5, "agent0/entropy": e0, "agent1/entropy": e1, "zero_variance_trees": z,
              "agent0/kl_ref": k, "agent1/kl_ref": 3 * k}
             for i, (e0, e1, z, k) in enumerate([(2.0, 4.0, 0.5, 0.0), (1.0, 3.0, 0.25, 0.01), (0.5, 1.5, 0.0, 0.02)], 1)]
    a = training.run_analysis(write_log(tmp_path / "metrics.jsonl", steps), window=1)
    assert a["entropy_first"] == pytest.approx(3.0) and a["entropy_last"] == pytest.approx(1.0)
    assert a["kl_ref_first"] == pytest.approx(0.0) and a["kl_ref_last"] == pytest.approx(0.04)
    assert a["zero_variance_groups"] == pytest.approx(0.25)
    old = training.run_analysis(write_log(tmp_path / "old.jsonl", [{"step": 1, "reward": 0.1}]))
    assert "entropy_first" not in old and "kl_ref_last" not in old  # a log from before these metrics: absent, not 0
    assert training.analysis_cells([a]) == ["0.500 → 0.500; nan; 0.25", "3.00 → 1.00; 0.0400"]  # no turns logged: nan
    assert training.analysis_cells([a, old])[1] == "n/a → n/a; n/a"  # one seed without the figure: not averaged


def test_a_frozen_role_is_left_out_of_the_turn_and_group_shares(training, tmp_path):
    # coder RL only: the planner samples 4 turns in 2 groups (one flat) but trains none of them
    steps = [{"step": 1, "coder/reward": 0.5, "coder/turns": 8.0, "coder/trained_turns": 6.0, "coder/zero_variance_groups": 0.25,
              "coder/entropy": 0.2, "planner/turns": 4.0, "planner/zero_variance_groups": 0.5, "pass_rate": 0.5}]
    a = training.run_analysis(write_log(tmp_path / "metrics.jsonl", steps))
    assert a["zero_advantage_turns"] == pytest.approx(2 / 8) and a["zero_variance_groups"] == pytest.approx(0.25)


def test_curves_give_each_steps_figures_over_the_trained_roles(training, tmp_path):
    steps = [{"step": 1, "pass_rate": 0.25, "coder/turns": 8.0, "coder/trained_turns": 6.0, "coder/entropy": 0.2,
              "planner/turns": 4.0, "planner/trained_turns": 0.0, "planner/entropy": 0.4, "coder/kl_ref": 0.0},
             {"step": 2, "pass_rate": 0.5, "coder/turns": 8.0, "coder/trained_turns": 8.0, "coder/entropy": 0.1,
              "planner/turns": 4.0, "planner/trained_turns": 2.0, "planner/entropy": 0.3, "coder/kl_ref": 0.5,
              "debugger/turns": 3.0, "debugger/entropy": 9.0}]  # a frozen debugger: left out
    c = training.run_curves(write_log(tmp_path / "metrics.jsonl", steps))
    assert c["training pass rate"] == [0.25, 0.5]
    assert c["zero-advantage turns"] == pytest.approx([6 / 12, 2 / 12])
    assert c["entropy (nats/token)"] == pytest.approx([0.3, 0.2]) and c["KL to the cold start"] == [0.0, 0.5]
    old = training.run_curves(write_log(tmp_path / "old.jsonl", [{"step": 1, "reward": 0.1, "pass_rate": 0.0}]))
    assert old == {"training pass rate": [0.0]}  # never logged: absent, not 0


def test_written_curves_are_the_seeds_mean_smoothed(training, load_experiment, tmp_path):
    import xml.etree.ElementTree as ET

    plot = load_experiment("efficacy_plot")
    assert plot.smoothed([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]
    for seed, rates in ((0, [0.0, 0.2, 0.4]), (1, [1.0, 0.6])):  # seed 1 stopped early: the mean runs 2 steps
        (tmp_path / f"s{seed}").mkdir()
        write_log(tmp_path / f"s{seed}" / "metrics.jsonl", [{"step": i, "pass_rate": r} for i, r in enumerate(rates, 1)])
    line = training.write_curves(tmp_path / "r.md", "x", {"a & b": [tmp_path / "s0", tmp_path / "s1"]}, "t")
    assert line == "Training curves (means over seeds, 1-step trailing average): `efficacy_x_curves.svg`.\n"
    root = ET.fromstring((tmp_path / "efficacy_x_curves.svg").read_text())
    [series] = [e for e in root.iter("{http://www.w3.org/2000/svg}polyline") if e.get("class") == "series"]
    assert series.get("data-method") == "a & b" and series.get("data-curve") == "training pass rate"
    # means 0.5 then 0.4, on an axis up to 0.5: the top of the panel, then 0.8 of the way up
    top, bottom = 20 + plot.CURVE_TOP, 20 + plot.CURVE_H - plot.CURVE_BOTTOM
    ys = [float(p.split(",")[1]) for p in series.get("points").split()]
    assert ys == pytest.approx([top, bottom - 0.8 * (bottom - top)], abs=0.05)


def curve_lines(svg) -> set[str]:
    """The variants drawn in a curves plot's training-pass-rate panel."""
    import xml.etree.ElementTree as ET

    return {e.get("data-method") for e in ET.fromstring(svg.read_text()).iter("{http://www.w3.org/2000/svg}polyline")
            if e.get("data-curve") == "training pass rate"}


def test_analysis_of_a_missing_log_fails_loudly(training, tmp_path):
    with pytest.raises(FileNotFoundError, match="no metrics log"):
        training.run_analysis(tmp_path / "metrics.jsonl")


def test_a_run_dir_names_study_seed_variant_and_lr(training):
    cfg = training.TrainingStudyConfig(out="runs/x")
    assert training.run_dir(cfg, "mars2", 1, "MARS2 + shaping", 5e-5) == "runs/x/mars2/seed1/MARS2___shaping_lr5e-05"


def test_study_b_with_a_shared_cold_start_starts_every_seed_from_that_seeds_and_keeps_its_runs_apart(
        training, tmp_path, monkeypatch):
    import sys

    import coral.mars2.recipe

    asked, trained = [], []
    monkeypatch.setattr(sys.modules["experiments.mars2_compare"], "cached_cold_start",
                        lambda cfg, train, sandbox, cache: asked.append(cfg.seed) or ["agent0", "agent1"])
    monkeypatch.setattr(coral.mars2.recipe, "evaluate_search", lambda cfg, policies, tasks, sandbox: ({}, []))
    monkeypatch.setattr(coral.mars2.recipe, "train_mars2", lambda cfg, policies, **kw: trained.append(
        (cfg.seed, cfg.out_dir, tuple(policies))) or {"after": {"pass@1": 0.5}})
    claim = ("single-agent GRPO", "MARS2 + shaping")
    cfg = training.TrainingStudyConfig(seeds=(2,), lrs=(1e-4,), cold_start_seed=0, n_val_tasks=2, mars2_variants=claim,
                                       mars2={"n_train_tasks": 20}, out=str(tmp_path))
    assert set(training._mars2_seed(cfg, 2, None)["val"]) == set(claim)  # the variants asked for, no other
    assert set(asked) == {0}  # seed 2's RL starts from seed 0's cold start
    assert {seed for seed, _, _ in trained} == {2} and len(trained) == 2
    assert [len(policies) for _, _, policies in trained] == [1, 2]  # single agent, then both
    assert all(f"{tmp_path}/mars2/seed2_cold0/" in out for _, out, _ in trained)
    assert training.run_dir(replace(cfg, cold_start_seed=None), "mars2", 2, "x") == f"{tmp_path}/mars2/seed2/x"
    assert training.run_dir(cfg, "corecode", 2, "x") == f"{tmp_path}/corecode/seed2/x"  # B's field only


def test_study_b_pairs_only_the_variants_that_ran(training):
    per_seed = {0: {"test": {"single-agent GRPO": {"pass@1": {"a": 0.0, "b": 1.0}},
                             "MARS2 + shaping": {"pass@1": {"a": 1.0, "b": 1.0}}}}}
    text = training._mars2_pairs(per_seed)
    assert text == ("\nMARS2 + shaping against single-agent GRPO, after RL (Pass@1, paired per task): "
                    "+0.500 ± 0.500 (1↑ 0↓)\n")


def test_the_study_config_refuses_repeated_seeds_and_bad_lrs(training, load_experiment):
    from coral.config import UserInputError, from_mapping

    with pytest.raises(UserInputError, match="seeds"):
        from_mapping(training.TrainingStudyConfig, {"seeds": [0, 0]}, "--set")
    with pytest.raises(UserInputError, match="lrs"):
        from_mapping(training.TrainingStudyConfig, {"lrs": [0.0]}, "--set")
    with pytest.raises(UserInputError, match="mars2_variants.*MARS2 shaping"):
        from_mapping(training.TrainingStudyConfig, {"mars2_variants": ["MARS2 shaping"]}, "--set")
    with pytest.raises(UserInputError, match="cold_start_seed"):
        from_mapping(training.TrainingStudyConfig, {"cold_start_seed": -1}, "--set")


@pytest.mark.slow  # no SFT, but trains 3 variants x 2 lrs x 2 seeds and searches: 10-60 s on 2 busy cores
def test_a_tiny_mars2_study_chooses_lrs_on_validation_and_reports_every_variant(training, load_experiment, tmp_path,
                                                                                monkeypatch):
    import sys

    import coral.mars2.recipe
    from coral.policy import tiny_policy

    tiny = [tiny_policy(seed=i, d_model=32, n_layers=1) for i in range(2)]
    monkeypatch.setattr(sys.modules["experiments.mars2_compare"], "cached_cold_start", lambda cfg, train, sandbox, cache: tiny)
    md = tmp_path / "efficacy.md"
    fields = {"seeds": [0, 1], "rl_steps": 1, "lrs": [1e-4, 2e-4], "n_val_tasks": 2, "n_test_tasks": 2,
              "max_nodes_per_tree": 2, "tasks_per_step": 2, "mars2": {"n_train_tasks": 20}, "max_new_tokens": 8,
              "out": str(tmp_path / "out"), "results_md": str(md)}

    def study(**changes):
        monkeypatch.setattr(sys, "argv", ["efficacy.py", "mars2", "--set", json.dumps({**fields, **changes})])
        load_experiment("efficacy").main()

    for seed in (0, 1):  # seeds in separate processes: validation only, no lr chosen, no test split searched
        study(seeds=[seed], mars2_test=False)
    assert not md.exists() and not (tmp_path / "out" / "mars2" / "results.json").exists()

    def refuse(*a, **k):
        raise AssertionError("run again")

    monkeypatch.setattr(coral.mars2.recipe, "train_mars2", refuse)  # every seed's runs are read back
    study()
    saved = json.loads((tmp_path / "out" / "mars2" / "results.json").read_text())
    assert set(saved["numbers"]["chosen_lr"]) == set(training.MARS2_VARIANTS)
    assert set(saved["numbers"]["per_seed"]["0"]["val"]["MARS2 + shaping"]) == {"0.0001", "0.0002"}
    text = md.read_text()
    for name in [*training.MARS2_VARIANTS, "cold start, 1 agent", "cold start, 2 agents"]:
        assert f"| {name} |" in text
    assert "MARS2 + shaping against single-agent GRPO, after RL (Pass@1, paired per task): " in text
    assert "`efficacy_mars2_curves.svg`" in text and curve_lines(tmp_path / "efficacy_mars2_curves.svg") == set(
        training.MARS2_VARIANTS)
    monkeypatch.setattr(coral.mars2.recipe, "evaluate_search", refuse)  # and the test searches too, the second time
    study()
    assert json.loads((tmp_path / "out" / "mars2" / "results.json").read_text())["numbers"] == saved["numbers"]


def test_a_saved_search_is_read_back_only_under_the_config_that_made_it(training, tmp_path):
    cfg = training.TrainingStudyConfig(seeds=(0,))
    where = tmp_path / "a" / "test.json"
    assert training.read_back(where, cfg) is None
    assert training.write_back(where, cfg, {"pass@1": 0.5}) == {"pass@1": 0.5}
    assert training.read_back(where, cfg) == {"pass@1": 0.5}
    assert training.read_back(where, training.TrainingStudyConfig(seeds=(1,))) is None


@pytest.mark.slow  # three tiny CoRe-Code runs (SFT, RL, evaluations) and a single-coder run: about a minute
def test_a_tiny_corecode_ablation_reports_every_variant_and_the_single_coder(training, load_experiment, tmp_path,
                                                                             monkeypatch):
    import sys

    from coral.policy import tiny_policy

    monkeypatch.setattr(sys.modules["experiments.mars2_compare"], "cached_cold_start",
                        lambda cfg, train, sandbox, cache: [tiny_policy(seed=0, d_model=32, n_layers=1)])
    md = tmp_path / "efficacy.md"
    tiny = {"n_train_tasks": 40, "d_model": 32, "n_layers": 1, "plans_per_task": 2, "codes_per_plan": 2,
            "max_new_tokens": 16, "sandbox_workers": 1}
    tiny["sft"] = {"epochs": 0.5}
    fields = {"seeds": [0], "rl_steps": 1, "n_test_tasks": 3, "tasks_per_step": 2,
              "eval_samples_per_task": 2, "corecode": tiny, "out": str(tmp_path / "out"), "results_md": str(md)}
    monkeypatch.setattr(sys, "argv", ["efficacy.py", "corecode", "--set", json.dumps(fields)])
    load_experiment("efficacy").main()
    saved = json.loads((tmp_path / "out" / "corecode" / "results.json").read_text())
    runs = saved["numbers"]["per_seed"]["0"]
    assert set(runs) == {*training.CORECODE_VARIANTS, "single-coder GRPO"}
    assert all(len(r["rl"]) == 3 for r in runs.values())  # the same 3 test tasks for every run
    assert len({json.dumps(r["sft"], sort_keys=True) for n, r in runs.items() if n != "single-coder GRPO"}) == 1  # one cold start
    assert "against single-coder GRPO after RL" in md.read_text()
    assert curve_lines(tmp_path / "efficacy_corecode_curves.svg") == set(runs)
    # run again: every finished run is read back, none trained or searched again, the same numbers
    import coral.corecode.recipe
    import coral.mars2.recipe

    def refuse(*a, **k):
        raise AssertionError("a finished run was run again")

    for module, name in ((coral.corecode.recipe, "train_corecode"), (coral.mars2.recipe, "train_mars2"),
                         (sys.modules["experiments.mars2_compare"], "cached_cold_start")):
        monkeypatch.setattr(module, name, refuse)
    load_experiment("efficacy").main()
    again = json.loads((tmp_path / "out" / "corecode" / "results.json").read_text())["numbers"]["per_seed"]["0"]
    assert again == runs


def test_a_corecode_field_the_recipe_does_not_know_is_named(training, load_experiment):
    from coral.config import UserInputError

    cfg = training.TrainingStudyConfig(corecode={"plans_per_tsk": 2})
    with pytest.raises(UserInputError, match="plans_per_tsk"):
        load_experiment("efficacy_corecode").corecode_config(cfg, 0, "coder RL only")


def test_study_c_with_a_debugger_turns_each_roles_rl_on_and_off_on_one_chain(training, load_experiment):
    variants = training.corecode_variants(("debugger", "coder", "planner"))
    assert variants == {"planner RL only": ("planner",), "coder RL only": ("coder",), "debugger RL only": ("debugger",),
                        "all but planner RL": ("coder", "debugger"), "all but coder RL": ("planner", "debugger"),
                        "all but debugger RL": ("planner", "coder"),
                        "all roles RL (CoRe-Code)": ("planner", "coder", "debugger")}
    assert training.corecode_variants(("planner", "coder")) == training.CORECODE_VARIANTS
    corecode = load_experiment("efficacy_corecode")
    cfg = training.TrainingStudyConfig(corecode_roles=("planner", "coder", "debugger"))
    configs = {name: corecode.corecode_config(cfg, 0, name) for name in variants}
    assert {c.chain_roles for c in configs.values()} == {("planner", "coder", "debugger")}  # one chain, one SFT
    assert configs["debugger RL only"].train_roles == ("debugger",)
    assert corecode.full_variant(cfg) == "all roles RL (CoRe-Code)"
    # every other variant starts from the full variant's cold start instead of training the same one again
    full = configs["all roles RL (CoRe-Code)"]
    assert full.cold_start_from is None
    assert {c.cold_start_from for n, c in configs.items() if n != "all roles RL (CoRe-Code)"} == {full.out_dir}
    with pytest.raises(ValueError, match="field 'corecode_roles' must hold planner and coder"):
        training.TrainingStudyConfig(corecode_roles=("coder", "debugger"))


def test_the_corecode_table_without_the_single_coder_says_so(training, load_experiment):
    corecode = load_experiment("efficacy_corecode")
    run = {"sft": {"a": 0.5, "b": 1.0}, "rl": {"a": 1.0, "b": 1.0}, "greedy": {"sft": 0.5, "rl": 0.75},
           "analysis": {"reward_first": 0.5, "reward_last": 0.7, "zero_advantage_turns": 0.4}}
    text = corecode._corecode_rows({0: {"both (CoRe-Code)": run}}, "both (CoRe-Code)")
    assert "| both (CoRe-Code) | 0.750 ± n/a | 1.000 ± n/a |" in text and "| 0.500 → 0.750 |" in text
    assert "Single-coder GRPO was not run" in text


def test_study_cs_per_seed_table_gives_each_seeds_paired_changes_and_the_pooled_ones(training, load_experiment):
    corecode = load_experiment("efficacy_corecode")
    full, single = "both (CoRe-Code)", corecode.SINGLE
    greedy = {"sft": {"a": 0.0, "b": 0.0}, "rl": {"a": 1.0, "b": 0.0}}
    per_seed = {0: {full: {"sft": {"a": 0.5, "b": 0.0}, "rl": {"a": 1.0, "b": 0.5}, "greedy_tasks": greedy},
                    single: {"sft": {"a": 0.75, "b": 0.5}, "rl": {"a": 1.0, "b": 1.0}}},
                1: {full: {"sft": {"a": 0.5, "b": 0.5}, "rl": {"a": 0.5, "b": 1.0}, "greedy_tasks": greedy},
                    single: {"sft": {"a": 0.5, "b": 0.5}, "rl": {"a": 0.5, "b": 1.0}}}}
    text = corecode._seed_rows(per_seed, full)
    # seed 0: sampled changes +0.5 and +0.5; greedy +1 and 0 (SE 0.5); against the single coder 0 and -0.5
    assert ("| 0 | 0.250 → 0.750, +0.500 ± 0.000 (2↑ 0↓) | 0.000 → 0.500, +0.500 ± 0.500 (1↑ 0↓) | "
            "0.625 → 1.000, +0.375 ± 0.125 (2↑ 0↓) | -0.250 ± 0.250 (0↑ 1↓) |") in text
    # pooled over both seeds' four tasks: sampled changes 0.5, 0.5, 0, 0.5 (mean 0.375, SD 0.25)
    assert "| pooled | +0.375 ± 0.125 (3↑ 0↓) | +0.500 ± 0.289 (2↑ 0↓) |" in text
    no_single = corecode._seed_rows({s: {full: r[full]} for s, r in per_seed.items()}, full)
    assert single not in no_single and "| 1 | 0.500 → 0.750, +0.250 ± 0.250 (1↑ 0↓) |" in no_single


def test_study_c_without_the_ablation_runs_the_full_chain_alone(training, load_experiment, tmp_path, monkeypatch):
    corecode = load_experiment("efficacy_corecode")
    run = {"sft": {"a": 0.5}, "rl": {"a": 1.0}, "greedy": {"sft": 0.5, "rl": 1.0},
           "greedy_tasks": {"sft": {"a": 0.0}, "rl": {"a": 1.0}}, "analysis": {}}
    seen = []
    monkeypatch.setattr(corecode, "_corecode_run", lambda cfg, seed, name: seen.append((seed, name)) or run)
    monkeypatch.setattr(corecode, "write_curves", lambda *args: "")
    md = tmp_path / "efficacy.md"
    md.write_text("<!-- corecode:begin -->\n<!-- corecode:end -->\n")
    cfg = training.TrainingStudyConfig(seeds=(0, 1), ablation=False, single_coder=False, out=str(tmp_path),
                                       results_md=str(md))
    corecode.run_corecode(cfg)
    assert seen == [(0, "both (CoRe-Code)"), (1, "both (CoRe-Code)")]
    text = md.read_text()
    assert "| both (CoRe-Code) |" in text and "RL only" not in text and "ablation false" in text
