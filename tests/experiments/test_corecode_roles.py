"""experiments/corecode_roles.py: the benchmark table from hand-written per-task pass rates (no training)."""

from __future__ import annotations

import pytest


@pytest.fixture
def roles(load_experiment):
    load_experiment("efficacy_protocol")
    return load_experiment("corecode_roles")


def run(sft, rl, fix=None):
    rates = {"greedy/sft": sft, "greedy/rl": rl}
    return {"rates": rates, "fix": fix or {}, "wall_s": 1.0}


def test_the_table_pairs_rl_with_sft_and_the_debugger_arm_with_planner_coder_on_the_same_tasks(roles):
    runs = {
        "planner+coder": {0: run({"a": 0, "b": 1}, {"a": 1, "b": 1}), 1: run({"c": 0, "d": 0}, {"c": 0, "d": 1})},
        "planner+coder+debugger": {
            0: run({"a": 1, "b": 1}, {"a": 1, "b": 1}, {"sft": {"fix_rate": 0.5, "debugged": 2.0}}),
            1: run({"c": 0, "d": 1}, {"c": 1, "d": 1}, {"sft": {"fix_rate": 0.25, "debugged": 4.0}}),
        },
    }
    text = roles.table(runs)
    # planner+coder: SFT 0.5 and 0.0 -> mean 0.250; RL 1.0 and 0.5 -> 0.750; 2 of 4 tasks up, none down
    assert "| planner+coder | pass@1 greedy | 0.250 ± 0.250 | 0.750 ± 0.250 | +0.500 ± 0.289 (2↑ 0↓) | 2 |" in text
    # debugger - planner+coder after SFT: a +1, b 0, c 0, d +1 -> +0.5, 2 up
    assert "| planner+coder+debugger | pass@1 greedy | after SFT | +0.500 ± 0.289 (2↑ 0↓) | 2 |" in text
    assert "| planner+coder+debugger | sft | 0.375 ± 0.125 | 2 / 4 |" in text
    assert "sampled" not in text  # no sampled evaluations were given: no row for them


def test_every_debugger_arm_is_paired_with_planner_coder(roles):
    base = {0: run({"a": 0, "b": 1}, {"a": 1, "b": 1})}
    runs = {"planner+coder": base,
            "planner+coder+debugger": {0: run({"a": 0, "b": 1}, {"a": 1, "b": 1}, {"sft": {"fix_rate": 0.0, "debugged": 1.0}})},
            "planner+coder+debugger-from-coder": {0: run({"a": 1, "b": 1}, {"a": 1, "b": 0},
                                                         {"rl": {"fix_rate": 1.0, "debugged": 1.0}})}}
    text = roles.table(runs)
    assert "| planner+coder+debugger | pass@1 greedy | after SFT | +0.000 ± 0.000 (0↑ 0↓) | 1 |" in text
    assert "| planner+coder+debugger-from-coder | pass@1 greedy | after SFT | +0.500 ± 0.500 (1↑ 0↓) | 1 |" in text
    assert "| planner+coder+debugger-from-coder | pass@1 greedy | after SFT + RL | -0.500 ± 0.500 (0↑ 1↓) | 1 |" in text
    assert "| planner+coder+debugger-from-coder | rl | 1.000 ± n/a | 1 |" in text


def test_a_run_directory_made_with_other_settings_is_refused_and_the_default_tokenizer_roles_match(roles, tmp_path):
    import json
    from dataclasses import asdict

    from coral.corecode.recipe import CoReCodeConfig

    path = tmp_path / "config.json"
    old = CoReCodeConfig(debug_rounds=1)  # tokenizer_roles None: the chain's roles, as before the field existed
    path.write_text(json.dumps(asdict(old)))
    roles.check_same_config(path, CoReCodeConfig(debug_rounds=1, tokenizer_roles=("planner", "coder", "debugger")))
    with pytest.raises(ValueError, match=r"config.json was made with other settings \(tokenizer_roles: "
                                         r"\('planner', 'coder'\) there"):
        path.write_text(json.dumps(asdict(CoReCodeConfig())))
        roles.check_same_config(path, CoReCodeConfig(tokenizer_roles=("planner", "coder", "debugger")))
    roles.check_same_config(tmp_path / "absent.json", CoReCodeConfig())  # a new run: nothing to compare


def test_training_averages_each_roles_reward_over_the_first_and_last_window_of_steps(roles, tmp_path):
    import json

    path = tmp_path / "metrics.jsonl"
    steps = [{"step": i, "coder/reward": float(i), "pass_rate": 0.1 * i, "planner/reward": 1.0} for i in range(1, 6)]
    path.write_text("".join(json.dumps(m) + "\n" for m in steps))
    out = roles.training(path, window=2)
    assert out["coder/first"] == pytest.approx(1.5) and out["coder/last"] == pytest.approx(4.5)  # (1+2)/2, (4+5)/2
    assert out["pass_rate/first"] == pytest.approx(0.15) and out["pass_rate/last"] == pytest.approx(0.45)
    assert out["planner/first"] == out["planner/last"] == 1.0
    assert "debugger/first" not in out  # the debugger never logged a reward
    assert roles.training(tmp_path / "absent.jsonl") == {}


def test_the_training_table_gives_first_and_last_means_over_seeds_and_each_seeds_change(roles):
    runs = {"planner+coder": {0: {"training": {"coder/first": 0.2, "coder/last": 0.5}},
                              1: {"training": {"coder/first": 0.4, "coder/last": 0.5}}}}
    text = roles.training_table(runs)
    # first 0.2 and 0.4 -> 0.300 ± 0.100; last 0.5 both -> 0.500 ± 0.000; changes +0.3 and +0.1
    assert "| planner+coder | coder reward | 0.300 ± 0.100 | 0.500 ± 0.000 | +0.300, +0.100 | 2 |" in text
    assert roles.training_table({"planner+coder": {0: {"training": {}}}}) == ""
