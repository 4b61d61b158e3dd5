"""A config dataclass as command-line flags: one `--dotted-name VALUE` per leaf field, its meaning (from the
field's comment), its choices and its default in plain words, in argparse groups; and "did you mean" for
a mistyped flag.

Flags are parsed as strings and handed to coral.config, which converts and checks them (so a bad value is
one line naming the field, whether it came from a flag or a YAML file). This module does NOT parse or
validate values, and does NOT know any command.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from coral.config import field_help, is_config_class


class Flag(NamedTuple):
    """One leaf field of a config: what it means, its default, its type hint."""

    meaning: str
    default: Any
    hint: Any


def config_flags(cls: type, prefix: str = "", defaults: Any = None) -> dict[str, Flag]:
    """{dotted field: Flag} of every leaf field of `cls`, nested configs expanded (their defaults are the
    enclosing config's, e.g. CoRe-Code's rl.lr, not GRPOConfig's)."""
    out: dict[str, Flag] = {}
    hints = typing.get_type_hints(cls)
    helps = field_help(cls)
    for f in dataclasses.fields(cls):
        if defaults is not None:
            default = getattr(defaults, f.name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        else:
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if is_config_class(hints[f.name]):
            out.update(config_flags(hints[f.name], f"{prefix}{f.name}.", default))
        else:
            out[prefix + f.name] = Flag(helps.get(f.name, ""), default, hints[f.name])
    return out


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def plain(value: Any) -> str:
    """A default as a user would type it: 1,5 not (1, 5); true not True; none not None."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return ",".join(plain(v) for v in value) or "(empty)"
    return str(value)


def metavar(field: str, hint: Any) -> str:
    """{a,b,c} for a choice of literals, {true,false} for a switch, NAME,... for a list, else NAME."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        hint = args[0]
    if typing.get_origin(hint) is typing.Literal:
        return "{" + ",".join(map(str, typing.get_args(hint))) + "}"
    if hint is bool:
        return "{true,false}"
    name = field.rsplit(".", 1)[-1].upper()
    return f"{name},..." if typing.get_origin(hint) in (tuple, list) else name


def add_flags(parser: argparse.ArgumentParser | Any, flags: Mapping[str, Flag],
              defaults: Mapping[str, str] | None = None) -> None:
    """A flag per field on `parser` (or an argument group); `defaults` overrides a field's default clause
    (e.g. one default per recipe)."""
    for name, flag in flags.items():
        default = (defaults or {}).get(name, plain(flag.default))
        said = "default:" in flag.meaning.lower()  # "default: the coder's model" says it better
        parser.add_argument(flag_name(name), dest=name, default=None, metavar=metavar(name, flag.hint),
                            help=flag.meaning if said else f"{flag.meaning} (default: {default})".lstrip())


def did_you_mean(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> str:
    """'unrecognized arguments: --tempreature 0.5 (did you mean --temperature?)'."""
    known = [opt for action in parser._actions for opt in action.option_strings]
    hints = []
    for arg in unknown:
        if arg.startswith("--"):
            close = difflib.get_close_matches(arg.split("=")[0], known, n=1, cutoff=0.6)
            hints += [f"did you mean {close[0]}?"] if close else []
    return f"unrecognized arguments: {' '.join(unknown)}" + (f" ({'; '.join(hints)})" if hints else "")
