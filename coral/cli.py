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
import errno
import importlib
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

import coral
from coral import __version__
from coral.config import ConfigError, UserInputError, from_mapping, load_config, merge, nest
from coral.evaluation import LATENT_WORKFLOWS, EvalConfig, print_summary, run_eval
from coral.flags import Flag, add_flags, config_flags, did_you_mean, flag_name, plain
from coral.hiras.cli import add_research_commands

KEY_ENV = "OPENAI_API_KEY"  # where openai: models read their API key
USER_ERRORS = (UserInputError, FileNotFoundError, ConnectionError, TimeoutError)  # one line; all else: traceback
# the state of the user's machine, not a bug: a full or read-only disk, a missing or forbidden folder
MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT,
                  errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP, errno.EMFILE,
                  errno.ENFILE, errno.EIO}


def user_error(exc: BaseException | None) -> BaseException | None:
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
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".coral-write-check-"):
            pass
    except OSError as exc:  # named by the folder, not by the probe's random name
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def _overrides(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def _config(cls: type, args: argparse.Namespace) -> Any:
    cfg: Any = load_config(cls, getattr(args, "config", None), _overrides(args, list(config_flags(cls))))
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
    path = train_config_path(args)
    try:
        with open(path) as fh:
            head = yaml.safe_load(fh) or {}
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
        raise ConfigError(f"flag {flag_name(foreign[0])} is not a field of recipe {recipe!r}")

    cfg: Any = from_mapping(cls, merge(head, nest(given)), f"{path} + flags")  # the recipe's config class
    check_writable(cfg.out_dir)
    train(cfg, progress=not args.no_progress)
    return 0


def train_config_path(args: argparse.Namespace) -> Path:
    """`coral train` takes its YAML as --config FILE (like every command) or as its one positional argument;
    a name that is no file is looked up among the configs shipped with coral (corecode_tiny, ...)."""
    given = [x for x in (args.config, args.config_file) if x is not None]
    if len(given) != 1:
        raise ConfigError("coral train needs one YAML config: --config FILE (or FILE alone)"
                          if not given else "coral train: give the YAML config once, as --config FILE or FILE")
    path = Path(given[0])
    if path.is_file():
        return path
    shipped = Path(__file__).parent / "configs"
    named = shipped / (path.name if path.suffix == ".yaml" else f"{path.name}.yaml")
    if named.is_file():
        return named
    names = sorted(p.stem for p in shipped.glob("*.yaml"))
    raise ConfigError(f"config file not found: {path} (shipped with coral: {', '.join(names)})")


def _train_flags() -> dict[str, Flag]:
    """The flags of `coral train`: every recipe's fields (a field of several recipes once)."""
    flags: dict[str, Flag] = {}
    for cls, _ in recipes().values():
        for name, flag in config_flags(cls).items():
            flags.setdefault(name, flag)
    return flags


def _add_train_flags(parser: argparse.ArgumentParser) -> None:
    """One group of flags per set of recipes that own them ("every recipe", "corecode", "corecode and
    mars2", ...); a default that differs between recipes is given for each."""
    owners: dict[str, dict[str, Flag]] = {}  # field -> {recipe: its Flag}
    for recipe, (cls, _) in recipes().items():
        for name, flag in config_flags(cls).items():
            owners.setdefault(name, {})[recipe] = flag
    groups: dict[tuple[str, ...], dict[str, Flag]] = {}
    for name, by_recipe in owners.items():
        groups.setdefault(tuple(by_recipe), {})[name] = next(iter(by_recipe.values()))
    for owned_by, flags in sorted(groups.items(), key=lambda kv: (-len(kv[0]), kv[0])):
        title = ("fields of every recipe" if len(owned_by) == len(recipes()) else
                 f"fields of recipe{'s' * (len(owned_by) > 1)} {' and '.join(owned_by)}")
        defaults = {name: "; ".join(f"{r} {plain(f.default)}" for r, f in owners[name].items())
                    for name in flags if len({plain(f.default) for f in owners[name].values()}) > 1}
        add_flags(parser.add_argument_group(title), flags, defaults)


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


ABOUT = {  # each command in a line, for `coral --help`
    "eval": "evaluate a workflow (single, chain, recursive, text-mas) on a benchmark: pass@k, tokens, time",
    "demo": "SFT + CoRe-Code GRPO on tiny models; held-out pass@1 before and after",
    "train": "train a recipe from a YAML config (recipe: corecode, mars2 or recursivemas)",
    "search": "grow MARS2 search trees over a benchmark; writes trees.html",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI, or with `only` the flags of that command alone (the others listed by name: their
    configs import torch, seconds that `coral eval --limit -1` or `coral --version` need not wait). Pure:
    building it again gives the same parser. A subcommand whose module fails to import raises (a broken
    install must not hide a command)."""
    parser = argparse.ArgumentParser(prog="coral", description=coral.__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"coral {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, cls_name, _) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=ABOUT.get(name))
            continue
        cls = getattr(importlib.import_module(module), cls_name)
        positional = " [CONFIG]" if name == "train" else ""
        p = sub.add_parser(name, help=ABOUT.get(name), description=ABOUT.get(name),
                           usage=f"coral {name} [--config FILE]{positional} [--FIELD VALUE ...] (--help: every field)")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        p.add_argument("--config", default=None, metavar="FILE", help="YAML config file; flags override it")
        if name == "train":
            p.add_argument("config_file", metavar="CONFIG", nargs="?", default=None,
                           help="the YAML config as a positional argument (same as --config)")
            _add_train_flags(p)
            continue
        add_flags(p, config_flags(cls))

    add_research_commands(sub)  # reproduce, judge: each sets args.handler
    for name in ("eval", "search", "reproduce", "judge"):  # the commands that may call a server
        sub.choices[name].add_argument(
            "--api-key-env", default=None, metavar="VAR",
            help=f"environment variable holding the API key of openai: models (default: {KEY_ENV}; "
                 "the key stays out of configs, logs and the command line)")
    return parser


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed command line; a flag no command knows ends with the command's usage and a suggestion
    (argparse alone would print coral's top-level usage, as if the command were wrong)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=next((a for a in argv if not a.startswith("-")), ""))
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = next(a for a in parser._actions
                       if a.dest == "command" and isinstance(a, argparse._SubParsersAction)).choices[args.command]
        command.error(did_you_mean(command, unknown))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
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
