"""`coral eval | train | search | demo`: thin argument parsing over the entry points' configs.

Every config field is a flag (`--samples-per-task 4`); `--config FILE.yaml` loads a file first and
flags override it. Bad input ends with one line on stderr naming the file, field or value, exit 2 (set CORAL_DEBUG=1
for the traceback).
This module does NOT hold logic of its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from coral.config import ConfigError, load_config

_TRAIN_FIELDS: set[str] = set()  # flags of `coral train`: the fields of every recipe's config


def _add_fields(parser: argparse.ArgumentParser, cls: type, skip: set[str] = frozenset()) -> None:
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None,
                            metavar=f.name.upper(), help=f"(default: {f.default!r})"
                            if f.default is not dataclasses.MISSING else None)


def _config(cls: type, args: argparse.Namespace) -> Any:
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
    return load_config(cls, getattr(args, "config", None), overrides)


def _cmd_eval(args: argparse.Namespace) -> int:
    from coral.evaluation import EvalConfig, print_summary, run_eval

    cfg = _config(EvalConfig, args)
    summary = run_eval(cfg, progress=not args.no_progress)
    print_summary(summary, cfg)
    return 0


def _recipes() -> dict[str, tuple[type, Callable[..., Any]]]:
    from coral.latent import RecursiveMASConfig, train_recursivemas
    from coral.train.corecode import CoReCodeConfig, train_corecode
    from coral.train.mars2 import MARS2Config, train_mars2

    return {"corecode": (CoReCodeConfig, train_corecode), "mars2": (MARS2Config, train_mars2),
            "recursivemas": (RecursiveMASConfig, train_recursivemas)}


def _cmd_train(args: argparse.Namespace) -> int:
    """`recipe:` in the YAML file picks the recipe (default corecode); flags override its fields."""
    import yaml

    path = args.config_file
    try:
        with open(path) as fh:
            head = yaml.safe_load(fh) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: malformed YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(head, dict):
        raise ConfigError(f"{path}: expected a mapping of field: value at the top level")
    recipes = _recipes()
    recipe = head.pop("recipe", "corecode")
    if recipe not in recipes:
        raise ConfigError(f"{path}: field 'recipe': {recipe!r} is not one of {sorted(recipes)}")
    cls, train = recipes[recipe]
    flags = {k: v for k, v in vars(args).items() if k in _TRAIN_FIELDS and v is not None}
    cfg = load_config(cls, None, {**head, **flags})
    train(cfg, progress=not args.no_progress)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from coral.train.corecode import CoReCodeConfig, run_demo

    cfg = _config(CoReCodeConfig, args)
    run_demo(cfg, progress=not args.no_progress)
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    from coral.search import SearchConfig, run_search

    cfg = _config(SearchConfig, args)
    run_search(cfg, progress=not args.no_progress)
    return 0


COMMANDS: dict[str, tuple[str, str, Callable[[argparse.Namespace], int]]] = {
    "eval": ("coral.evaluation", "EvalConfig", _cmd_eval),
    "demo": ("coral.train.corecode", "CoReCodeConfig", _cmd_demo),
    "train": ("coral.train.corecode", "CoReCodeConfig", _cmd_train),
    "search": ("coral.search", "SearchConfig", _cmd_search),
}


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(prog="coral", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, cls_name, _) in COMMANDS.items():
        try:
            cls = getattr(importlib.import_module(module), cls_name)
        except (ImportError, AttributeError):
            continue  # that entry point is not built yet
        p = sub.add_parser(name, help=f"{name} (config: {cls_name})")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        if name == "train":
            p.add_argument("config_file", metavar="CONFIG", help="YAML config file (recipe: corecode | mars2 | recursivemas)")
            for recipe_cls, _ in _recipes().values():
                _add_fields(p, recipe_cls, skip=_TRAIN_FIELDS)
                _TRAIN_FIELDS.update(f.name for f in dataclasses.fields(recipe_cls))
            continue
        p.add_argument("--config", default=None, help="YAML config file; flags override it")
        _add_fields(p, cls)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # coral's warnings (a degraded sandbox, samples that do not parse) on stderr, marked as such
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return COMMANDS[args.command][2](args)
    except (ConfigError, FileNotFoundError, ValueError, ConnectionError, KeyError) as exc:
        if os.environ.get("CORAL_DEBUG"):  # the full traceback, for bug reports
            raise
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"coral {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"coral {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
