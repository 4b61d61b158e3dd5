from dataclasses import dataclass, field
from typing import Literal

import pytest

from coral.config import ConfigError, load_config


@dataclass(frozen=True)
class Demo:
    steps: int = 1
    lr: float = 0.1
    name: str = "x"
    mode: Literal["a", "b"] = "a"
    ks: tuple[int, ...] = (1,)
    limit: int | None = None
    flag: bool = False

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError(f"field 'steps' must be >= 1, got {self.steps}")


def test_yaml_then_flags_override(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("steps: 3\nlr: 0.5\nks: [1, 5]\n")
    cfg = load_config(Demo, path, {"lr": "0.25", "flag": "true", "limit": "none"})
    assert cfg == Demo(steps=3, lr=0.25, ks=(1, 5), flag=True, limit=None)


def test_comma_separated_flag_becomes_a_tuple():
    assert load_config(Demo, None, {"ks": "1,10"}).ks == (1, 10)


def test_unknown_field_is_named_with_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("stepz: 3\n")
    with pytest.raises(ConfigError, match=r"c.yaml: unknown field 'stepz'"):
        load_config(Demo, path)


def test_wrong_type_names_field_and_value():
    with pytest.raises(ConfigError, match=r"field 'steps': expected int, got 'many'"):
        load_config(Demo, None, {"steps": "many"})


def test_literal_outside_choices_is_rejected():
    with pytest.raises(ConfigError, match=r"field 'mode': 'c' is not one of \['a', 'b'\]"):
        load_config(Demo, None, {"mode": "c"})


def test_validation_in_post_init_surfaces_as_config_error():
    with pytest.raises(ConfigError, match="'steps' must be >= 1"):
        load_config(Demo, None, {"steps": 0})


def test_malformed_yaml_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("steps: [1,\n")
    with pytest.raises(ConfigError, match="bad.yaml: malformed YAML"):
        load_config(Demo, path)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(Demo, tmp_path / "nope.yaml")


def test_every_shipped_config_loads_into_its_recipe():
    """configs/*.yaml are what the README tells users to run: each must be a valid config of its recipe."""
    from pathlib import Path

    import yaml

    from coral.cli import recipes

    paths = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
    assert len(paths) >= 3
    for path in paths:
        data = yaml.safe_load(path.read_text())
        cls, _ = recipes()[data.pop("recipe", "corecode")]
        cfg = load_config(cls, None, data)
        assert cfg.out_dir == data["out_dir"], path
        for key, value in data.get("rl", {}).items():  # nested values reach the nested config
            if not isinstance(value, dict):
                assert getattr(cfg.rl, key) == value, (path, key)


@dataclass(frozen=True)
class Inner:
    eps: float = 0.2
    kind: str = "a"

    def __post_init__(self):
        if not 0 <= self.eps < 1:
            raise ValueError(f"Inner.eps must be in [0, 1), got {self.eps}")


@dataclass(frozen=True)
class Outer:
    lr: float = 0.1  # the learning rate
    # how many steps. A second sentence that --help leaves out
    steps: int = 1
    inner: Inner = field(default_factory=lambda: Inner(kind="b"))  # the nested part


def test_nested_mappings_and_dotted_flags_apply_on_top_of_the_field_default(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lr: 0.5\ninner:\n  eps: 0.3\n")
    cfg = load_config(Outer, path, {"inner.eps": "0.4"})
    assert cfg == Outer(lr=0.5, inner=Inner(eps=0.4, kind="b"))  # kind keeps Outer's default "b", not Inner's "a"
    assert load_config(Outer, None, {}).inner.kind == "b"


def test_a_bad_nested_value_names_the_dotted_field(tmp_path):
    with pytest.raises(ConfigError, match=r"field 'inner.eps': Inner.eps must be in \[0, 1\), got 1.5"):
        load_config(Outer, None, {"inner.eps": "1.5"})
    with pytest.raises(ConfigError, match=r"unknown field 'inner.epz'"):
        load_config(Outer, None, {"inner.epz": "1"})
    with pytest.raises(ConfigError, match=r"field 'inner.eps': expected float, got 'x'"):
        load_config(Outer, None, {"inner": {"eps": "x"}})
    path = tmp_path / "c.yaml"
    path.write_text("inner: 3\n")
    with pytest.raises(ConfigError, match=r"field 'inner': expected a mapping"):
        load_config(Outer, path)


def test_field_help_is_the_comment_or_its_first_sentence():
    from coral.config import field_help

    assert field_help(Outer) == {"lr": "the learning rate", "steps": "how many steps.", "inner": "the nested part"}
