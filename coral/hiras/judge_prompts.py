"""Judge prompt templates: the released files from local checkouts of the official repositories, or coral's
variants, and how their placeholders are filled.

The released texts are not ours to copy, so coral ships none of them; the user points coral at checkouts:

    protocol   file in the checkout                                           placeholders
    ref-free   going-doer/Paper2Code: data/prompts/ref_free.txt               {{Paper}} {{Code}}
    ref-based  going-doer/Paper2Code: data/prompts/ref_based.txt              {{Paper}} {{GoldCode}} {{Code}}
    p2c-ex     KOU-199024/HiRAS: prompts/p2c-ex/p2c-ex.yaml, key `evaluation`  {{Paper}} {{File_Count}}
                                                                              {{File_Structure}} {{Code}}

A .txt template is the file's bytes decoded as UTF-8 (no newline translation); the YAML template is the
`evaluation` value as yaml.safe_load reads it (the block without its indentation). A template that lacks
one of its protocol's placeholders is refused with its path, so a prompt never goes out without the code.

Filling, as Paper2Code's eval.py fills its files: {{Paper}} is the paper's text (an s2orc JSON paper as
eval.py formats the loaded object, `f"{paper_json}"`: Python's repr of the dict); {{Code}} and {{GoldCode}}
are one "```## File name: <path>\\n<text>\\n```\\n\\n" per file, the form eval.py gives any repository
(its --papercoder form, the task list's .py files then config.yaml, needs PaperCoder's planning
artifacts; one form for every pipeline lists them alike). {{File_Count}} is the number of target files
and {{File_Structure}} a newline and the tree of coral.hiras.workspace (HiRAS does not release its filler,
so both formats are coral's). One difference: all placeholders are replaced in one pass, where eval.py
replaces them one after another (a paper containing the text "{{Code}}" would receive the code there).

coral's variants (`CORAL_TEMPLATES`) are short prompts of our own with the same placeholders; they are
used when no checkout is given, and every judgement names the template it used (path and sha256).

This module does NOT sample or parse judgements (coral.hiras.judges does).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from coral.config import UserInputError

PROTOCOLS = ("ref-free", "ref-based", "p2c-ex")
PLACEHOLDERS = {"ref-free": ("{{Paper}}", "{{Code}}"),
                "ref-based": ("{{Paper}}", "{{GoldCode}}", "{{Code}}"),
                "p2c-ex": ("{{Paper}}", "{{File_Count}}", "{{File_Structure}}", "{{Code}}")}
# protocol -> (checkout, path inside it, YAML key or None for a plain text file)
RELEASED = {"ref-free": ("paper2code", "data/prompts/ref_free.txt", None),
            "ref-based": ("paper2code", "data/prompts/ref_based.txt", None),
            "p2c-ex": ("hiras", "prompts/p2c-ex/p2c-ex.yaml", "evaluation")}
CHECKOUT_REPOS = {"paper2code": "going-doer/Paper2Code", "hiras": "KOU-199024/HiRAS"}

_CRITERIA = """Rate the code repository on one metric and list critiques.

Correctness (1-5): how accurately the repository implements the paper's method, algorithms and
experiments, without logical errors.
1 = the core method is missing or fundamentally wrong; 2 = attempted with major mistakes or missing
components; 3 = core parts right with notable errors; 4 = correct with minor inaccuracies;
5 = complete and accurate.

Steps:
1. Identify the key aspects of the paper (method, data, protocol, reported numbers).
2. Examine how the repository implements each of them.
3. Note logical errors, missing steps and deviations from the paper.
"""
_ANSWER = """
Answer with one JSON object and nothing else:
{"critique_list": [{"file_name": "...", "func_name": "...", "severity_level": "high|medium|low",
"critique": "..."}], "score": <integer 1-5>}

Research paper:
{{Paper}}
"""
CORAL_TEMPLATES = {
    "ref-free": _CRITERIA + _ANSWER + "\nTarget repository:\n{{Code}}",
    "ref-based": _CRITERIA + """4. Compare with the gold repository below, written by the authors: it is correct by definition;
judge whether the target repository implements the same components, not the same file layout.
""" + _ANSWER + "\nGold repository:\n{{GoldCode}}\nTarget repository:\n{{Code}}",
    "p2c-ex": _CRITERIA + """4. Code verification: check that every key component of the paper is implemented as executable
code, judging the repository as a whole, not only the files it has. A component described only in a
README, a plan, a config file or a comment counts as missing and is a high-severity critique.
""" + _ANSWER + "\nTarget repository:\nFile count: {{File_Count}}\nFile structure: {{File_Structure}}\n{{Code}}",
}


@dataclass(frozen=True)
class Checkouts:
    """Local checkouts of the official repositories; None: coral's variant of that repository's prompts."""
    paper2code: Path | None = None
    hiras: Path | None = None


@dataclass(frozen=True)
class Template:
    protocol: str
    text: str
    source: str  # "coral variant" or the released file's path
    sha256: str  # of `text`


def load_template(protocol: str, checkouts: Checkouts = Checkouts()) -> Template:
    """The released template of `protocol` when its checkout is given, else coral's variant."""
    if protocol not in PROTOCOLS:
        raise UserInputError(f"judge protocol {protocol!r} is not one of {PROTOCOLS}")
    checkout_name, rel, key = RELEASED[protocol]
    checkout = getattr(checkouts, checkout_name)
    if checkout is None:
        text, source = CORAL_TEMPLATES[protocol], "coral variant"
    else:
        text, source = _read_released(Path(checkout), checkout_name, rel, key), str(Path(checkout) / rel)
    missing = [p for p in PLACEHOLDERS[protocol] if p not in text]
    if missing:
        raise UserInputError(f"judge prompt {source}: no {missing[0]} placeholder (protocol {protocol} needs "
                             f"{' '.join(PLACEHOLDERS[protocol])})")
    return Template(protocol, text, source, hashlib.sha256(text.encode()).hexdigest())


def _read_released(checkout: Path, name: str, rel: str, key: str | None) -> str:
    flag = f"--{name}-checkout"
    if not checkout.is_dir():
        raise UserInputError(f"{flag} {checkout}: no such directory (a checkout of {CHECKOUT_REPOS[name]})")
    path = checkout / rel
    if not path.is_file():
        raise UserInputError(f"{path}: no such file; is {checkout} a checkout of {CHECKOUT_REPOS[name]}?")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserInputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if key is None:
        return text
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserInputError(f"{path}: malformed YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(value, dict) or not isinstance(value.get(key), str):
        raise UserInputError(f"{path}: no text under the key {key!r}")
    return value[key]


def code_value(files: dict[str, str]) -> str:
    """{{Code}} / {{GoldCode}}: eval.py's block per file."""
    return "".join(f"```## File name: {rel}\n{text}\n```\n\n" for rel, text in files.items())


def fill(template: Template, values: dict[str, str]) -> str:
    """The template with each of its protocol's placeholders replaced by `values` in one pass."""
    wanted = PLACEHOLDERS[template.protocol]
    if set(values) != set(wanted):
        raise ValueError(f"protocol {template.protocol} fills {wanted}, got {sorted(values)}")
    pattern = re.compile("|".join(re.escape(p) for p in wanted))
    return pattern.sub(lambda m: values[m[0]], template.text)
