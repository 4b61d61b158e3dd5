"""CoRe-Code on a pretrained model's terms: no cold start, chat prompts, tasks stated for an instruct model,
evaluations on the validation split for choosing settings, and each step's time split into its parts."""

import json

import pytest

from coral.agents import PROMPT_STYLES, TEMPLATES
from coral.benchmarks.splits import build_tasks
from coral.corecode.config import CoReCodeConfig
from coral.corecode.setup import make_agents, stated_tasks
from coral.train.sft import SFTConfig

SMALL = dict(n_train_tasks=40, n_test_tasks=4, n_fresh_tasks=0, d_model=32, n_layers=1,
             sft=SFTConfig(epochs=0.3, batch_size=8), rl_steps=2, tasks_per_step=2, plans_per_task=2,
             codes_per_plan=2, max_new_tokens=16, checkpoint_every_steps=1, efficiency_weight=0.0,
             eval_batch_samples=8, eval_samples_per_task=0, sandbox_workers=1)


def test_prompt_style_auto_is_short_for_tiny_models_and_chat_for_the_others():
    assert CoReCodeConfig().style == "short" and CoReCodeConfig(model="smollm2").style == "chat"
    assert CoReCodeConfig(model="smollm2", prompt_style="short").style == "short"


def test_chat_agents_use_the_instruct_prompts_and_short_ones_the_tiny_models_own():
    policies = {"planner": object(), "coder": object()}
    chat = make_agents(CoReCodeConfig(model="smollm2"), policies)
    short = make_agents(CoReCodeConfig(), policies)
    for role in ("planner", "coder"):
        assert chat[role].template == PROMPT_STYLES["chat"][role]
        assert short[role].template == TEMPLATES[role]


def test_chat_prompts_exist_for_planner_and_coder_only():
    with pytest.raises(ValueError, match="prompt_style.*'debugger'"):
        CoReCodeConfig(model="smollm2", debug_rounds=1)


@pytest.mark.parametrize("field,value", [("task_style", "poem"), ("cold_start", "later"),
                                         ("held_out_split", "train"), ("prompt_style", "terse")])
def test_bad_values_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"field '{field}'"):
        CoReCodeConfig(**{field: value})


def test_no_cold_start_and_a_fork_of_one_are_refused_together():
    with pytest.raises(ValueError, match="cold_start"):
        CoReCodeConfig(cold_start="none", cold_start_from="runs/x")


def test_the_held_out_split_can_be_validation_for_choosing_settings():
    cfg = CoReCodeConfig(**{**SMALL, "held_out_split": "validation"})
    train, held_out = build_tasks(cfg.splits)
    assert {t.metadata["split"] for t in held_out} == {"validation"}
    assert {t.metadata["split"] for t in build_tasks(CoReCodeConfig(**SMALL).splits)[1]} == {"test"}


def test_tasks_are_stated_in_the_task_style_and_left_alone_in_the_short_one():
    cfg = CoReCodeConfig(**SMALL)
    tasks = build_tasks(cfg.splits)[1]
    assert stated_tasks(cfg, tasks) == tasks
    stated = stated_tasks(CoReCodeConfig(**{**SMALL, "task_style": "docstring"}), tasks)
    assert [t.id for t in stated] == [t.id for t in tasks]
    assert all(t.prompt.startswith("def f(") and '"""' in t.prompt for t in stated)


def test_a_run_without_cold_start_skips_sft_evaluates_the_model_as_loaded_and_times_each_step(tmp_path, capsys):
    from coral.corecode.recipe import train_corecode

    out = tmp_path / "run"
    summary = train_corecode(CoReCodeConfig(**{**SMALL, "cold_start": "none", "task_style": "docstring",
                                               "out_dir": str(out)}), progress=True)
    said = capsys.readouterr().out
    assert "pass@1 after nothing (the model as loaded), held out" in said and "pass@1 after RL, held out" in said
    assert "after SFT" not in said
    assert summary["cold_start"] == "none" and summary["sft_loss"] == {} and summary["sft_s"] == 0.0
    assert not (out / "sft_loss.jsonl").exists() and (out / "eval_sft" / "samples.jsonl").is_file()
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    for m in steps:
        assert 0 <= m["judge_s"] <= m["rollout_s"] <= m["step_s"]
        assert m["update_s"] <= m["step_s"] - m["rollout_s"] + 1e-6


def test_an_rl_pool_of_the_simplest_tasks_needs_no_held_out_tasks_at_that_depth():
    # the test split of one seed slot has 3 compositions of depth 1: RL on depth 1 must not ask it for 40
    from coral.benchmarks.splits import rl_tasks

    cfg = CoReCodeConfig(**{**SMALL, "n_test_tasks": 40, "max_depth": 2, "rl_max_depth": 1})
    pool = rl_tasks(cfg.splits, build_tasks(cfg.splits)[0])
    assert len(pool) == cfg.n_train_tasks and {t.metadata["difficulty"] for t in pool} == {1}
    assert {t.metadata["split"] for t in pool} == {"train"}
