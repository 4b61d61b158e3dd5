"""`coral eval | train | search | demo | reproduce | judge`: thin argument parsing over the entry points' configs.

Every config field is a flag (`--samples-per-task 4`), nested fields dotted (`--rl.lr 1e-4`,
`--rl.loss.eps-low 0.1`); `--config FILE.yaml` loads a file first and flags override it. `--help` gives
each flag's meaning (from the config's field comments) and default. Bad user input (a ConfigError or
other UserInputError, a missing file, an unreachable server) ends with one line on stderr naming the
file, field or value, exit 2 (set CORAL_DEBUG=1 for the traceback); any other error is a bug and keeps
its traceback. This module does NOT hold logic of its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import importlib
import logging
import os
import sys
import tempfile
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from coral.config import (
    ConfigError,
    UserInputError,
    field_help,
    from_mapping,
    is_config_class,
    load_config,
    merge,
    nest,
)
from coral.evaluation import LATENT_WORKFLOWS, EvalConfig, print_summary, run_eval
from coral.hiras.cli import add_research_commands

KEY_ENV = "OPENAI_API_KEY"  # where openai: models read their API key
USER_ERRORS = (UserInputError, FileNotFoundError, ConnectionError, TimeoutError)  # one line; all else: traceback
# the state of the user's machine, not a bug: a full or read-only disk, a missing or forbidden folder
MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT,
                  errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP, errno.EMFILE,
                  errno.ENFILE, errno.EIO}


def user_error(exc: BaseException) -> BaseException | None:
    """The error in `exc`'s chain of causes that a user can act on (bad input, the machine's state), or None:
    a bug, whose traceback is kept."""
    while exc is not None:
        if isinstance(exc, USER_ERRORS) or (isinstance(exc, OSError) and exc.errno in MACHINE_ERRNOS):
            return exc
        exc = exc.__cause__
    return None


def one_line(exc: BaseException, cause: BaseException) -> str:
    """`exc`'s message on one line, with its `cause`'s when it does not already say it; an OS error of its
    own reads 'FILE: what went wrong' (not '[Errno 28] ...')."""
    if exc is cause and isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    else:
        text = str(exc) if exc is cause or str(cause) in str(exc) else f"{exc}: {cause}"
    return " ".join(text.split())


def use_api_key_env(name: str) -> None:
    """--api-key-env NAME: the key in $NAME becomes the one every openai: model of this command sends."""
    key = os.environ.get(name)
    if not key:
        raise UserInputError(f"--api-key-env {name}: the environment variable {name} is not set")
    os.environ[KEY_ENV] = key  # what OpenAIPolicy reads; the sandbox clears the environment of what it runs


def check_writable(folder: str | Path) -> None:
    """`folder` exists (made if missing) and takes a new file: a read-only or full disk fails here, in one
    line, before any work, not after it."""
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path, prefix=".coral-write-check-"):
        pass


def config_flags(cls: type, prefix: str = "", defaults: Any = None) -> dict[str, tuple[str, Any]]:
    """{dotted field: (one-line meaning, default)} of every leaf field of `cls`, nested configs expanded
    (their defaults are the enclosing config's, e.g. CoRe-Code's rl.lr, not GRPOConfig's)."""
    out: dict[str, tuple[str, Any]] = {}
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
            out[prefix + f.name] = (helps.get(f.name, ""), default)
    return out


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_flags(parser: argparse.ArgumentParser, flags: dict[str, tuple[str, Any]]) -> None:
    for name, (meaning, default) in flags.items():
        parser.add_argument(_flag(name), dest=name, default=None, metavar=name.rsplit(".", 1)[-1].upper(),
                            help=f"{meaning} (default: {default!r})".lstrip())


def _overrides(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def _config(cls: type, args: argparse.Namespace) -> Any:
    cfg = load_config(cls, getattr(args, "config", None), _overrides(args, list(config_flags(cls))))
    check_writable(cfg.out_dir)
    return cfg


def _cmd_eval(args: argparse.Namespace) -> int:
    cfg = _config(EvalConfig, args)
    if cfg.workflow in LATENT_WORKFLOWS:
        from coral.recursivemas import run_latent_eval  # lazy: torch and the agents only for this workflow

        summary = run_latent_eval(cfg)
    else:
        summary = run_eval(cfg, progress=not args.no_progress)
    print_summary(summary, cfg)
    return 0


def recipes() -> dict[str, tuple[type, Callable[..., Any]]]:
    """`coral train`'s recipes: name -> (config class, train function(cfg, progress=...))."""
    # lazy: the recipes import torch, which `coral --help` and the light commands do without
    from coral.corecode.recipe import CoReCodeConfig, train_corecode
    from coral.mars2.recipe import MARS2Config, train_mars2
    from coral.recursivemas import RecursiveMASConfig, train_recursivemas

    return {"corecode": (CoReCodeConfig, train_corecode), "mars2": (MARS2Config, train_mars2),
            "recursivemas": (RecursiveMASConfig, train_recursivemas)}


def _cmd_train(args: argparse.Namespace) -> int:
    """`recipe:` in the YAML file picks the recipe (default corecode); flags override its fields."""
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
    table = recipes()
    recipe = head.pop("recipe", "corecode")
    if recipe not in table:
        raise ConfigError(f"{path}: field 'recipe': {recipe!r} is not one of {sorted(table)}")
    cls, train = table[recipe]
    given = _overrides(args, list(_train_flags()))
    own = config_flags(cls)
    foreign = sorted(set(given) - set(own))
    if foreign:
        raise ConfigError(f"flag {_flag(foreign[0])} is not a field of recipe {recipe!r}")

    cfg = from_mapping(cls, merge(head, nest(given)), f"{path} + flags")
    check_writable(cfg.out_dir)
    train(cfg, progress=not args.no_progress)
    return 0


def _train_flags() -> dict[str, tuple[str, Any]]:
    """The flags of `coral train`: every recipe's fields; a field several recipes share says so."""
    flags: dict[str, tuple[str, Any]] = {}
    owners: dict[str, list[str]] = {}
    for recipe, (cls, _) in recipes().items():
        for name, (meaning, default) in config_flags(cls).items():
            flags.setdefault(name, (meaning, default))
            owners.setdefault(name, []).append(f"{recipe}: {default!r}")
    return {name: (f"{meaning} (default {'; '.join(owners[name])})", None) for name, (meaning, _) in flags.items()}


def _cmd_demo(args: argparse.Namespace) -> int:
    # lazy: keeps torch out of `coral --help` and the light commands
    from coral.corecode.recipe import CoReCodeConfig, run_demo

    cfg = _config(CoReCodeConfig, args)
    run_demo(cfg, progress=not args.no_progress)
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    # lazy: keeps torch out of `coral --help` and the light commands
    from coral.mars2.search import SearchConfig, run_search

    cfg = _config(SearchConfig, args)
    run_search(cfg, progress=not args.no_progress)
    return 0


COMMANDS: dict[str, tuple[str, str, Callable[[argparse.Namespace], int]]] = {
    "eval": ("coral.evaluation", "EvalConfig", _cmd_eval),
    "demo": ("coral.corecode.recipe", "CoReCodeConfig", _cmd_demo),
    "train": ("coral.corecode.recipe", "CoReCodeConfig", _cmd_train),
    "search": ("coral.mars2.search", "SearchConfig", _cmd_search),
}


def build_parser() -> argparse.ArgumentParser:
    """The whole CLI. Pure: building it again gives the same parser. A subcommand whose module fails to
    import raises (a broken install must not hide a command)."""
    parser = argparse.ArgumentParser(prog="coral", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, cls_name, _) in COMMANDS.items():
        cls = getattr(importlib.import_module(module), cls_name)
        p = sub.add_parser(name, help=f"{name} (config: {cls_name})")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        if name == "train":
            p.add_argument("config_file", metavar="CONFIG",
                           help="YAML config file (recipe: corecode | mars2 | recursivemas)")
            _add_flags(p, _train_flags())
            continue
        p.add_argument("--config", default=None, help="YAML config file; flags override it")
        _add_flags(p, config_flags(cls))

    add_research_commands(sub)  # reproduce, judge: each sets args.handler
    for name in ("eval", "search", "reproduce", "judge"):  # the commands that may call a server
        sub.choices[name].add_argument(
            "--api-key-env", default=None, metavar="VAR",
            help=f"environment variable holding the API key of openai: models (default: {KEY_ENV}; "
                 "the key stays out of configs, logs and the command line)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # coral's warnings (a degraded sandbox, samples that do not parse) on stderr, marked as such
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if getattr(args, "api_key_env", None):
            use_api_key_env(args.api_key_env)
        if getattr(args, "out_dir", None):  # reproduce's run folder; the config commands check theirs
            check_writable(args.out_dir)
        if getattr(args, "out", None):  # judge's result file, written at the end
            check_writable(Path(args.out).parent)
        return (getattr(args, "handler", None) or COMMANDS[args.command][2])(args)
    except Exception as exc:
        cause = user_error(exc)
        if cause is None or os.environ.get("CORAL_DEBUG"):  # a bug; or the full traceback, for bug reports
            raise
        print(f"coral {args.command}: error: {one_line(exc, cause)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"coral {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
