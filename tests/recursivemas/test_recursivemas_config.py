"""RecursiveMASConfig: nested sections from YAML and dotted flags, `--help` lines, old flat keys named."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest
import yaml

from coral.cli import build_parser, main
from coral.config import ConfigError, UserInputError, from_mapping
from coral.recursivemas.config import RecursiveMASConfig
from coral.recursivemas.recipe import CONFIG_FILE, check_resumable
from coral.train.loop import Run


def test_nested_sections_read_from_yaml_with_defaults_for_the_rest():
    cfg = from_mapping(RecursiveMASConfig, {"sft": {"epochs": 2}, "outer": {"lr": 0.05, "steps": 7}})
    assert (cfg.sft.epochs, cfg.sft.lr, cfg.outer.lr, cfg.outer.steps, cfg.inner.lr) == (2.0, 3e-3, 0.05, 7, 1e-3)
    assert cfg.total_steps == cfg.inner.steps + 7


@pytest.mark.parametrize(("old", "new"), [("outer_lr", "outer.lr"), ("sft_epochs", "sft.epochs"),
                                          ("checkpoint_every", "checkpoint_every_steps"),
                                          ("gradient_checkpointing", "outer.gradient_checkpointing")])
def test_a_flat_key_of_the_old_config_is_refused_with_its_new_dotted_name(old, new):
    with pytest.raises(ConfigError, match=rf"field '{old}' was renamed: use {new}\b"):
        from_mapping(RecursiveMASConfig, {old: 1}, "rm.yaml")


def test_a_bad_nested_value_names_the_dotted_field():
    with pytest.raises(ConfigError, match=r"'outer.lr'"):
        from_mapping(RecursiveMASConfig, {"outer": {"lr": -1.0}}, "rm.yaml")


def test_coral_train_reports_an_old_key_in_one_line(tmp_path, capsys):
    path = tmp_path / "rm.yaml"
    path.write_text(yaml.safe_dump({"recipe": "recursivemas", "inner_steps": 3}))
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'inner_steps' was renamed: use inner.steps" in err


def test_dotted_flags_and_help_cover_the_nested_fields(capsys):
    args = build_parser().parse_args(["train", "configs/recursivemas_tiny.yaml", "--outer.lr", "0.05",
                                      "--inner.steps", "3"])
    assert (getattr(args, "outer.lr"), getattr(args, "inner.steps")) == ("0.05", "3")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--outer.earlier-round-weight" in help_text
    assert "loss weight of the final agent's answer in earlier rounds" in help_text
    assert "--checkpoint-every-steps" in help_text


def test_coral_train_applies_a_dotted_flag_on_top_of_the_yaml(tmp_path, monkeypatch):
    import coral.cli

    got = []
    monkeypatch.setattr(coral.cli, "recipes", lambda: {"recursivemas": (RecursiveMASConfig,
                                                                         lambda cfg, progress: got.append(cfg))})
    path = tmp_path / "rm.yaml"
    path.write_text(yaml.safe_dump({"recipe": "recursivemas", "outer": {"lr": 0.003, "steps": 5}}))
    assert main(["train", str(path), "--outer.lr", "0.05", "--sft.epochs", "2"]) == 0
    assert (got[0].outer.lr, got[0].outer.steps, got[0].sft.epochs) == (0.05, 5, 2.0)


def test_a_checkpointed_run_refuses_another_config_by_dotted_field(tmp_path):
    cfg = RecursiveMASConfig(out_dir=str(tmp_path))
    run = Run(tmp_path)
    (tmp_path / CONFIG_FILE).write_text(json.dumps(asdict(cfg)))
    other = from_mapping(RecursiveMASConfig, {"inner": {"lr": 0.5}, "out_dir": str(tmp_path)})
    check_resumable(other, run)  # no checkpoint yet: nothing to resume, anything goes
    (run.ckpt_root / "step_000001").mkdir(parents=True)
    check_resumable(replace(cfg, eval_every_steps=5), run)  # may change on resume
    with pytest.raises(UserInputError, match=r"field 'inner.lr': 0.001, now 0.5"):
        check_resumable(other, run)


@pytest.mark.parametrize("name", ["recursivemas_tiny.yaml"])
def test_the_shipped_config_loads(name):
    data = yaml.safe_load(open(f"configs/{name}"))
    assert data.pop("recipe") == "recursivemas"
    cfg = from_mapping(RecursiveMASConfig, data, name)
    assert (cfg.sft.epochs, cfg.outer.lr, cfg.checkpoint_every_steps) == (4.0, 0.003, 25)


def test_a_run_of_the_recipes_old_checkpoint_format_is_refused_not_restarted_silently(tmp_path):
    (tmp_path / "state.pt").write_bytes(b"")
    with pytest.raises(UserInputError, match=r"state.pt: a run of an older coral"):
        check_resumable(RecursiveMASConfig(out_dir=str(tmp_path)), Run(tmp_path))
