"""Frozen-dataclass configs from YAML files and `--field value` flags, validated field by field.

A field whose type is itself a config dataclass (a recipe's `rl: GRPOConfig`) is a nested mapping in YAML
and dotted in flags (`rl.loss.eps_low`); values given for it are applied on top of the field's default
(the recipe's own GRPO settings), not on top of the nested class's defaults. Errors name the file and
the full dotted field (and the bad value); a key listed in the class's `RENAMED_FIELDS` (old name -> new)
is refused with its new name. `field_help` reads each field's one-line meaning from its
metadata or its source comment, for `--help`. This module does NOT define any config; each entry point
owns its dataclass.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import io
import re
import textwrap
import tokenize
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")  # a config class: a dataclass


class UserInputError(ValueError):
    """Bad input a user gave (a value, a name, a run directory that does not fit): the CLI prints its
    message as one line. Internal errors are not this and keep their traceback."""


class ConfigError(UserInputError):
    """A config value is missing, unknown or of the wrong type; the message names it."""


def _coerce(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        if isinstance(value, str) and value.lower() in ("none", "null") and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {value!r}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    if origin in (tuple, list):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        inner = args[0] if args else Any
        return origin(_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value))
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if hint in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            out = hint(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}") from None
        if hint is int and isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return out
    if hint is str:
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


def check_at_least(cfg: Any, low: float, names: Sequence[str], *, above: bool = False) -> None:
    """For a config's `__post_init__`: ValueError naming the first field of `names` below `low` (with
    `above`: at or below it). None passes: it means "not set" (e.g. `limit: None`, all tasks)."""
    for name in names:
        value = getattr(cfg, name)
        if value is not None and (value <= low if above else value < low):
            raise ValueError(f"field {name!r} must be {'>' if above else '>='} {low:g}, got {value!r}")


def is_config_class(hint: Any) -> bool:
    """A nested config: a dataclass type (its fields become `name.field` flags)."""
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def from_mapping(cls: type[C], data: Mapping[str, Any], source: str = "config", *, base: C | None = None,
                 prefix: str = "") -> C:
    """Build `cls` from a mapping (on top of `base` when given); unknown fields, wrong types and failed
    checks name the field with its dotted path (`prefix`)."""
    if not isinstance(data, Mapping):
        where = f"field {prefix.rstrip('.')!r}: " if prefix else ""
        raise ConfigError(f"{source}: {where}expected a mapping of field: value, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    renames: dict[str, str] = getattr(cls, "RENAMED_FIELDS", {})  # a config's old keys
    renamed = [k for k in unknown if k in renames]
    if renamed:
        raise ConfigError(f"{source}: field {prefix + renamed[0]!r} was renamed: use "
                          f"{renames[renamed[0]]} (a nested section in YAML, a dotted flag)")
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(fields), n=1, cutoff=0.6)
        hint = f"did you mean {prefix + close[0]!r}?" if close else f"known fields: {', '.join(sorted(fields))}"
        raise ConfigError(f"{source}: unknown field {prefix + unknown[0]!r}; {hint}")
    kwargs = {}
    for name, value in data.items():
        hint, where = hints[name], f"{source}: field {prefix + name!r}"
        if is_config_class(hint) and not isinstance(value, hint):
            inner = getattr(base, name) if base is not None else _default(fields[name])
            kwargs[name] = from_mapping(hint, value, source, base=inner, prefix=f"{prefix}{name}.")
        else:
            kwargs[name] = _coerce(value, hint, where)
    try:
        return dataclasses.replace(base, **kwargs) if base is not None else cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {_name_field(str(exc), fields, prefix)}") from None


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _name_field(message: str, fields: Mapping[str, Any], prefix: str) -> str:
    """A nested class's check, reworded to name the full dotted field ('rl.loss.eps_low')."""
    if not prefix:
        return message
    for name in fields:  # "field 'eps_low' ..." or "LossConfig.eps_low ..." or "... eps_low ..."
        if re.search(rf"(?<![\w.])'{name}'|\.{name}\b|\b{name}\b", message):
            return f"field {prefix + name!r}: {message}"
    return f"field {prefix.rstrip('.')!r}: {message}"


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{"rl.loss.eps_low": v} -> {"rl": {"loss": {"eps_low": v}}}."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"flags: field {key!r}: {part!r} is both a value and a group of fields")
        node[leaf] = value
    return out


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Nested mappings merged key by key; `over` wins."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


@functools.cache
def field_help(cls: type) -> dict[str, str]:
    """{field: one line saying what it means}: `metadata["help"]` when set, else the field's trailing
    comment, else the first sentence of the comment block right above it. Fields without either are
    missing from the result."""
    out: dict[str, str] = {}
    try:
        lines, _ = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        lines = []
    if lines:
        source = textwrap.dedent("".join(lines))
        comments: dict[int, tuple[str, bool]] = {}  # line -> (text, alone on its line)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                alone = not tok.line[:tok.start[1]].strip()
                comments[tok.start[0]] = (tok.string.lstrip("#").strip(), alone)
        definition = ast.parse(source).body[0]
        assert isinstance(definition, ast.ClassDef), "the source of a class is its definition"
        for node in definition.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                text, alone = comments.get(node.lineno, ("", True))
                if not text or alone:
                    above: list[str] = []
                    i = node.lineno - 1
                    while i in comments and comments[i][1]:
                        above.insert(0, comments[i][0])
                        i -= 1
                    text = " ".join(above)
                if text:
                    out[node.target.id] = _first_sentence(text)
    for f in dataclasses.fields(cls):
        if f.metadata.get("help"):
            out[f.name] = f.metadata["help"]
    return out


def _first_sentence(text: str) -> str:
    match = re.search(r"(?<=[a-z0-9)\]])\.\s+[A-Z0-9(]", text)
    return text[:match.start() + 1] if match else text

def load_config(cls: type[C], path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> C:
    """YAML file (optional) then overrides (e.g. parsed CLI flags, dotted for nested fields) on top."""
    data: dict[str, Any] = {}
    source = "flags"
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: malformed YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of field: value at the top level")
        data.update(loaded)
        source = str(path)
    data = merge(data, nest({k: v for k, v in (overrides or {}).items() if v is not None}))
    return from_mapping(cls, data, source)
