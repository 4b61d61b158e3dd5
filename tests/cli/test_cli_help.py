"""What --help, --version and a mistyped flag or field tell a user: choices listed, defaults as typed (not
Python reprs), `train` grouped by recipe and taking --config like every command, suggestions for near
misses; the eval table's headers whole at 80 columns; the shipped configs inside the package."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

from coral.cli import build_parser, main
from coral.config import ConfigError, load_config
from coral.evaluation import EvalConfig

ROOT = Path(__file__).resolve().parents[2]


def _help(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_coral_version_prints_the_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == "coral 0.1.0"


def test_top_level_help_says_what_each_command_does_not_its_config_class(capsys):
    text = " ".join(_help(capsys).split())
    assert "(config:" not in text and "EvalConfig" not in text
    assert "pass@k" in text and "recipe: corecode, mars2 or recursivemas" in text


def test_train_help_is_grouped_by_recipe_with_choices_and_one_plain_default_each(capsys):
    text = " ".join(_help(capsys, "train").split())
    for group in ("fields of every recipe:", "fields of recipe corecode:", "fields of recipe mars2:",
                  "fields of recipe recursivemas:", "fields of recipes corecode and mars2:"):
        assert group in text
    assert text.index("fields of recipe mars2:") < text.index("--max-nodes-per-tree") < text.index(
        "fields of recipe recursivemas:")
    assert "--algorithm {abmcts,uct,best_of_n}" in text and "--coder-group {plan,task}" in text
    assert "--shaping {true,false}" in text
    assert "(default: corecode runs/demo; mars2 runs/mars2; recursivemas runs/recursivemas)" in text


def test_every_flag_has_at_most_one_default_clause_and_no_python_repr(capsys):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    for command in ("eval", "search", "demo", "train"):
        for action in sub[command]._actions:
            help_text = action.help or ""
            assert help_text.count("(default") <= 1, (command, action.option_strings, help_text)
            default = help_text.split("(default: ")[1] if "(default: " in help_text else ""
            for repr_ in ("(1,)", "'", "None)", "True)", "False)", "()"):
                assert repr_ not in default, (command, action.option_strings, help_text)
    eval_flags = {o: a for a in sub["eval"]._actions for o in a.option_strings}
    assert eval_flags["--ks"].help.endswith("(default: 1)") and eval_flags["--ks"].metavar == "KS,..."


def test_a_mistyped_flag_gets_the_commands_usage_and_a_suggestion(capsys):
    with pytest.raises(SystemExit) as done:
        main(["eval", "--tempreature", "0.5"])
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert err.startswith("usage: coral eval") and "did you mean --temperature?" in err
    assert len(err.strip().splitlines()) == 2


def test_train_takes_its_yaml_as_config_like_every_command_or_positionally(tmp_path, monkeypatch, capsys):
    import coral.cli

    seen = []
    real = coral.cli.recipes

    def recipes():
        return {name: (cls, lambda cfg, progress: seen.append(cfg)) for name, (cls, _) in real().items()}

    monkeypatch.setattr(coral.cli, "recipes", recipes)
    cfg = tmp_path / "m.yaml"
    cfg.write_text(f"recipe: mars2\nout_dir: {tmp_path / 'run'}\n")
    assert main(["train", "--config", str(cfg), "--rl-steps", "3"]) == 0
    assert main(["train", str(cfg)]) == 0
    assert [c.rl_steps for c in seen] == [3, 10]
    assert main(["train"]) == 2
    assert "needs one YAML config: --config FILE" in capsys.readouterr().err
    assert main(["train", "--config", str(cfg), str(cfg)]) == 2
    assert "give the YAML config once" in capsys.readouterr().err


def test_a_shipped_config_is_found_by_name_from_any_folder(tmp_path, monkeypatch):
    import coral.cli

    seen = []
    real = coral.cli.recipes
    monkeypatch.setattr(coral.cli, "recipes", lambda: {n: (c, lambda cfg, progress: seen.append(cfg))
                                                         for n, (c, _) in real().items()})
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", "mars2_tiny", "--out-dir", str(tmp_path / "run")]) == 0
    assert main(["train", "corecode_tiny.yaml", "--out-dir", str(tmp_path / "run2")]) == 0
    assert [type(c).__name__ for c in seen] == ["MARS2Config", "CoReCodeConfig"]


def test_the_shipped_configs_are_package_data():
    shipped = sorted(p.relative_to(ROOT / "coral").as_posix() for p in (ROOT / "coral" / "configs").glob("*.yaml"))
    section = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1]
    patterns = ast.literal_eval(section.split("coral = ", 1)[1].splitlines()[0])  # no tomllib before 3.11
    assert len(shipped) >= 5
    assert all(any(fnmatch.fnmatch(path, pattern) for pattern in patterns) for path in shipped)
    assert (ROOT / "configs").resolve() == (ROOT / "coral" / "configs").resolve()  # the README's paths work


def test_an_unknown_yaml_field_gets_a_suggestion(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("tempreature: 0.5\n")
    with pytest.raises(ConfigError, match=r"unknown field 'tempreature'; did you mean 'temperature'\?$"):
        load_config(EvalConfig, path)
    path.write_text("rl:\n  temprature: 0.1\n")
    from coral.corecode.recipe import CoReCodeConfig

    with pytest.raises(ConfigError, match=r"unknown field 'rl.temprature'; did you mean 'rl.temperature'\?"):
        load_config(CoReCodeConfig, path)


def test_the_eval_table_keeps_every_header_whole_at_80_columns(monkeypatch, capsys):
    from coral.evaluation import print_summary

    monkeypatch.setenv("COLUMNS", "80")
    summary = {"samples": 3.0, "accuracy": 0.333, "decoded_tokens_per_sample": 4.0, "wall_s_per_sample": 0.01,
               "decoded_tokens": 12.0, "wall_s": 0.03}
    print_summary(summary, EvalConfig(workflow="recursive", latent_run_dir="runs/x"))
    text = capsys.readouterr().out
    assert "…" not in text and "decoded_tokens_per_sample" in text and "decoded_tokens " in text
    monkeypatch.setenv("COLUMNS", "200")
    print_summary({"tasks": 5.0, "pass@1": 0.6}, EvalConfig())
    assert any("tasks" in line and "pass@1" in line for line in capsys.readouterr().out.splitlines())  # columns


def test_version_and_a_bad_eval_value_answer_without_importing_torch():
    """Building every command's flags imports the recipes, and torch with them: 8.5 s at load 9."""
    import subprocess
    import sys

    script = ("import sys\nfrom coral.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
              "print('torch' in sys.modules)")
    for argv in (["--version"], ["eval", "--limit", "-1", "--no-progress"]):
        done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=120,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        assert done.stdout.strip().splitlines()[-1] == "False", (argv, done.stdout, done.stderr)
