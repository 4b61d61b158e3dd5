"""The CLI's parser and error handling: flags that survive a rebuild, dotted flags with their meaning in
--help, one-line messages only for user errors, and no subcommand that silently disappears."""

from __future__ import annotations

from pathlib import Path

import pytest

from coral.cli import build_parser, main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _flags(parser, command):
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return {opt: action for action in sub._actions for opt in action.option_strings}


def test_building_the_parser_twice_keeps_every_train_flag():
    first, second = _flags(build_parser(), "train"), _flags(build_parser(), "train")
    assert "--rl.lr" in first and "--max-nodes-per-tree" in first and "--plans-per-task" in first
    assert set(first) == set(second)


def test_every_recipe_flag_says_what_it_means_not_only_its_default():
    for command in ("demo", "train", "eval", "search"):
        for opt, action in _flags(build_parser(), command).items():
            if opt in ("-h", "--help"):
                continue
            meaning = (action.help or "").split("(default")[0].strip()
            assert len(meaning) > 5, f"coral {command} {opt} has no meaning in --help: {action.help!r}"
    demo = _flags(build_parser(), "demo")
    assert "--rl.loss.eps-low" in demo and "--rl.loss.tis-cap" in demo and "--rl.micro-batch-size" in demo
    assert "(default: 0.0001)" in demo["--rl.lr"].help  # CoRe-Code's own RL lr, not GRPOConfig's


def test_dotted_flags_reach_the_nested_config(tmp_path, monkeypatch):
    import coral.cli
    import coral.corecode.recipe

    seen = {}
    monkeypatch.setattr(coral.corecode.recipe, "run_demo", lambda cfg, progress: seen.update(cfg=cfg))
    assert main(["demo", "--rl.lr", "2e-5", "--rl.loss.eps-low", "0.1", "--sft.epochs", "2",
                 "--out-dir", str(tmp_path)]) == 0
    cfg = seen["cfg"]
    assert (cfg.rl.lr, cfg.rl.loss.eps_low, cfg.sft.epochs, cfg.rl.advantage) == (2e-5, 0.1, 2.0, "dr_grpo")


def test_the_demo_yaml_holds_what_coral_demo_runs(tmp_path, monkeypatch):
    """configs/corecode_tiny.yaml says it holds the `coral demo` settings, but `coral demo` reads
    CoReCodeConfig's defaults: a default changed without the yaml (or the yaml without the default) fails here."""
    import dataclasses

    import coral.corecode.recipe
    from coral.config import load_config

    seen = {}
    monkeypatch.setattr(coral.corecode.recipe, "run_demo", lambda cfg, progress: seen.update(cfg=cfg))
    assert main(["demo", "--out-dir", str(tmp_path)]) == 0
    yaml = load_config(coral.corecode.recipe.CoReCodeConfig, str(CONFIGS / "corecode_tiny.yaml"))
    assert dataclasses.replace(yaml, out_dir=str(tmp_path)) == seen["cfg"]


def test_a_bad_nested_flag_names_the_dotted_field(capsys):
    assert main(["demo", "--rl.loss.eps-low", "1.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "field 'rl.loss.eps_low'" in err and len(err.splitlines()) == 1, err


def test_train_refuses_a_flag_of_another_recipe(tmp_path, capsys):
    cfg = tmp_path / "m.yaml"
    cfg.write_text("recipe: mars2\n")
    assert main(["train", str(cfg), "--plans-per-task", "3"]) == 2
    assert "flag --plans-per-task is not a field of recipe 'mars2'" in capsys.readouterr().err


def test_an_internal_error_keeps_its_traceback(monkeypatch, tmp_path):
    import coral.corecode.recipe

    def broken(cfg, progress):
        raise KeyError("a bug, not bad input")

    monkeypatch.setattr(coral.corecode.recipe, "run_demo", broken)
    with pytest.raises(KeyError, match="a bug"):
        main(["demo", "--out-dir", str(tmp_path)])
    monkeypatch.setattr(coral.corecode.recipe, "run_demo", lambda cfg, progress: (_ for _ in ()).throw(ValueError("bug")))
    with pytest.raises(ValueError, match="bug"):
        main(["demo", "--out-dir", str(tmp_path)])


def test_a_subcommand_whose_import_fails_raises(monkeypatch):
    import coral.cli

    monkeypatch.setitem(coral.cli.COMMANDS, "search", ("coral.no_such_module", "SearchConfig", None))
    with pytest.raises(ImportError):
        build_parser()
