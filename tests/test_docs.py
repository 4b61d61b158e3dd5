"""User docs name only what exists: every repository path in README.md and docs/**/*.md is a file or folder
of this checkout (a pytest node id's test too), every `coral` subcommand and flag they show is one the CLI
parses, and every `python -m` module, script and `make` target they run exists. They name no internal
issue number (a user cannot open our tracker), and the README stays short enough to read in a minute."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

from coral.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TOP = ("coral", "tests", "bench", "experiments", "docs", "configs", ".ci")
PATH = re.compile(r"(?<![\w/.~-])((?:" + "|".join(re.escape(t) for t in TOP) + r")/[\w./{},*-]*[\w*}](?:::\w+)?)")
CODE = re.compile(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", re.S)
# "issue #24", "issues 19 and 25", "(#25)"; not "&#123;", "[x](#anchor)" or "HumanEval/75"
ISSUE = re.compile(r"\bissues?\s+#?\d+|(?<![\w&#])#\d+\b", re.I)
README_MAX_BYTES = 10 * 1024


def _expand(path: str) -> list[str]:
    """`a_{x,y}.svg` -> a_x.svg, a_y.svg."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",") for p in _expand(path[:m.start()] + alt + path[m.end():])]


def _exists(path: str) -> bool:
    path, _, test = path.partition("::")
    hits = sorted(ROOT.glob(path)) if "*" in path else [ROOT / path]
    if not hits or not all(h.exists() for h in hits):
        return False
    return not test or re.search(rf"\bdef {re.escape(test)}\b", hits[0].read_text()) is not None


def missing_paths(text: str) -> list[str]:
    return [p for raw in PATH.findall(text) for p in _expand(raw.rstrip(".")) if not _exists(p)]


def issue_numbers(text: str) -> list[str]:
    return ISSUE.findall(text)


@cache
def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@cache
def _make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text()
    return frozenset(t for line in re.findall(r"^([\w .-]+):(?!=)", text, re.M) for t in line.split())


def _commands(text: str) -> list[str]:
    """Shell command lines of the code blocks and inline code spans, continuation lines joined."""
    out = []
    for block, span in CODE.findall(text):
        body = (block or span).replace("\\\n", " ")
        for line in body.splitlines():
            line = re.sub(r"^\s*(?:\$ |[\w=.]+=\S+ )*", "", line).split(" #")[0].strip()
            out.extend(part.strip() for part in re.split(r"&&|;|\|", line) if part.strip())
    return out


def _words(command: str) -> list[str]:
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    while words and (re.fullmatch(r"\w+=\S*", words[0]) or words[0] in ("time", "nice", "-n", "10", "5")):
        words.pop(0)
    return words


def command_problems(command: str) -> list[str]:
    """What in one command line does not exist (empty when all of it does, or it is no command of ours)."""
    words = _words(command)
    if not words:
        return []
    exe = words[0].rsplit("/", 1)[-1]
    if exe == "coral" and len(words) > 1 and not words[1].startswith("-") and words[1] != "...":
        sub = _subcommands().get(words[1])
        if sub is None:
            return [f"no subcommand {words[1]!r}"]
        known = set(sub._option_string_actions)
        return [f"coral {words[1]}: no flag {w.split('=')[0]}" for w in words[2:]
                if w.startswith("--") and w.split("=")[0] not in known]
    if exe.startswith("python") and len(words) > 1:
        if words[1] == "-m" and len(words) > 2:
            return [] if importlib.util.find_spec(words[2].split(" ")[0]) else [f"no module {words[2]}"]
        if words[1].endswith(".py"):
            return [] if (ROOT / words[1]).exists() else [f"no script {words[1]}"]
    if exe == "make":
        return [f"no make target {w!r}" for w in words[1:] if not w.startswith("-") and "=" not in w
                and w not in _make_targets()]
    return []


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_path_a_doc_names_exists(doc):
    assert missing_paths(doc.read_text()) == []


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_command_a_doc_shows_exists(doc):
    problems = [f"{c}: {p}" for c in _commands(doc.read_text()) for p in command_problems(c)]
    assert problems == []


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_no_doc_names_an_internal_issue_number(doc):
    assert issue_numbers(doc.read_text()) == []


def test_the_readme_stays_under_10_kib():
    assert len((ROOT / "README.md").read_bytes()) < README_MAX_BYTES


def test_the_checks_catch_what_does_not_exist():
    assert missing_paths("see `coral/nowhere.py` and tests/train/test_loop.py::test_nobody_wrote_this") == [
        "coral/nowhere.py", "tests/train/test_loop.py::test_nobody_wrote_this"]
    assert missing_paths("docs/results/{efficacy,nope}.md") == ["docs/results/nope.md"]
    assert command_problems("coral evaluate --bench humaneval") == ["no subcommand 'evaluate'"]
    assert command_problems("coral eval --no-such-flag 1") == ["coral eval: no flag --no-such-flag"]
    assert command_problems("python -m experiments.nothing_here") == ["no module experiments.nothing_here"]
    assert command_problems("make nothing") == ["no make target 'nothing'"]
    assert command_problems("coral eval --bench humaneval --limit 3") == []
    assert issue_numbers("the studies of issue #24 (issue 19, structure part), issues 7; fixed (#25)") == [
        "issue #24", "issue 19", "issues 7", "#25"]
    assert issue_numbers("[x](#anchor), &#123;, HumanEval/75, `URL#model`, # A heading") == []
