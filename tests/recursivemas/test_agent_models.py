"""`agent_models`: a role's agent is a tiny model built here or a pretrained one loaded by spec (here a
saved tiny model directory standing in for SmolLM2: its own byte-level tokenizer, another vocabulary)."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest
import torch

from coral.config import UserInputError, from_mapping
from coral.policy.tiny import build_model
from coral.recursivemas.agents import AGENT_FILE, load_saved_agents
from coral.recursivemas.config import ColdStartConfig, RecursiveMASConfig
from coral.recursivemas.recipe import CONFIG_FILE, check_resumable, load_or_build_agents
from coral.train.loop import Run
from tests.recursivemas.conftest import tiny_agent

RECORDS = [{"question": f"question {i}", "plan": f"plan {i}", "refined_plan": f"refined {i}", "answer": f"a{i}"}
           for i in range(4)]


@pytest.fixture
def pretrained_dir(tmp_path):
    """A saved model directory (what load_policy reads), 24 wide, byte-level tokenizer (260 tokens)."""
    path = tmp_path / "pretrained"
    tiny_agent(24, seed=7).save(path)
    return path


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def config(tmp_path, models, **kw) -> RecursiveMASConfig:
    data = tmp_path / "records.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    return RecursiveMASConfig(pattern="sequential", data=str(data), n_train_tasks=3, n_test_tasks=1,
                              agent_widths=(16,), n_layers=1, vocab_size=300, agent_models=tuple(models),
                              out_dir=str(tmp_path / "run"), **kw)


def test_model_specs_cycle_over_the_roles_and_default_to_tiny():
    assert RecursiveMASConfig().agent_models == ("tiny",)
    cfg = RecursiveMASConfig(pattern="sequential", agent_models=("smollm2", "tiny"))
    assert [cfg.agent_model(i) for i in range(3)] == ["smollm2", "tiny", "smollm2"]
    assert from_mapping(RecursiveMASConfig, {"agent_models": ["tiny", "smollm2"]}).agent_models == ("tiny", "smollm2")
    assert from_mapping(RecursiveMASConfig, {"agent_models": "tiny,smollm2"}).agent_models == ("tiny", "smollm2")


@pytest.mark.parametrize("models, match", [
    (("tiny",) * 4, r"field 'agent_models': pattern 'sequential' has 3 roles .* got \['tiny', 'tiny', 'tiny', 'tiny'\]"),
    ((), r"field 'agent_models': pattern 'sequential' has 3 roles"),
    (("tiny", ""), r"field 'agent_models': bad model spec ''"),
    ((" smollm2",), r"field 'agent_models': bad model spec ' smollm2'"),
])
def test_a_wrong_count_or_a_bad_spec_is_refused_naming_the_field(models, match):
    with pytest.raises(UserInputError, match=match):
        RecursiveMASConfig(pattern="sequential", agent_models=models)


def test_a_spec_that_does_not_load_is_one_line_naming_the_field_and_value(tmp_path):
    cfg = config(tmp_path, ["tiny", str(tmp_path / "no_such_model")])
    with pytest.raises(UserInputError, match=r"field 'agent_models': cannot load '.*no_such_model'") as err:
        load_or_build_agents(cfg, [], False)
    assert "\n" not in str(err.value)


def test_a_pretrained_agent_gets_no_cold_start_and_is_saved_as_its_spec_only(tmp_path, pretrained_dir):
    cfg = config(tmp_path, ["tiny", str(pretrained_dir)], sft=ColdStartConfig(epochs=1.0, batch_size=4))
    from coral.recursivemas.agents import build_records

    train, _ = build_records(cfg)
    agents = load_or_build_agents(cfg, train, False)
    on_disk = tiny_agent(24, seed=7)
    assert same_weights(agents["critic"].model, on_disk.model)
    assert len(agents["critic"].tokenizer) == 260 and len(agents["planner"].tokenizer) == 300
    assert agents["planner"].tokenizer is agents["solver"].tokenizer  # the tiny agents share one tokenizer
    fresh = build_model(agents["planner"].tokenizer, seed=cfg.seed, d_model=16, n_layers=1, n_heads=4,
                        max_len=cfg.max_len_tokens)  # the planner's init: its cold start moved it
    assert not same_weights(agents["planner"].model, fresh)

    critic_dir = tmp_path / "run" / "agents" / "critic"
    assert sorted(p.name for p in critic_dir.iterdir()) == [AGENT_FILE]  # no weights copied into the run
    assert json.loads((critic_dir / AGENT_FILE).read_text()) == {"spec": str(pretrained_dir)}
    again = load_or_build_agents(cfg, train, False)  # reloaded, not rebuilt
    for role in ("planner", "critic", "solver"):
        assert same_weights(again[role].model, agents[role].model)


def test_saved_agents_of_another_spec_are_refused(tmp_path, pretrained_dir):
    cfg = config(tmp_path, ["tiny", str(pretrained_dir)])
    from coral.recursivemas.agents import build_records

    load_or_build_agents(cfg, build_records(cfg)[0], False)
    with pytest.raises(UserInputError, match=r"critic: agent saved for model '.*pretrained', but field "
                                              r"'agent_models' gives 'tiny' for role 'critic'"):
        load_saved_agents(replace(cfg, agent_models=("tiny",)), tmp_path / "run" / "agents")


def test_a_checkpointed_run_refuses_other_agent_models(tmp_path):
    cfg = RecursiveMASConfig(out_dir=str(tmp_path))
    run = Run(tmp_path)
    (tmp_path / CONFIG_FILE).write_text(json.dumps(asdict(cfg)))
    (run.ckpt_root / "step_000001").mkdir(parents=True)
    with pytest.raises(UserInputError, match=r"field 'agent_models': \['tiny'\], now \['smollm2'\]"):
        check_resumable(replace(cfg, agent_models=("smollm2",)), run)
