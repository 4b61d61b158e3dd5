"""Paper input: a research paper read from Markdown, LaTeX or s2orc-doc2json JSON into one text.

Cleaning follows PaperCoder: from s2orc JSON the keys `cite_spans`, `ref_spans`, `eq_spans`,
`authors`, `bib_entries`, `year`, `venue`, `identifiers`, `_pdf_hash` and `header` are removed at
every depth and the rest is rendered as JSON; Markdown is used as is; LaTeX loses its `%` comments
(an escaped `\\%` stays) and runs of blank lines.

This module does NOT convert PDFs (run s2orc-doc2json / GROBID first) and does NOT shorten papers
that exceed a model's context.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coral.config import UserInputError

DROPPED_KEYS = ("cite_spans", "ref_spans", "eq_spans", "authors", "bib_entries", "year", "venue",
                "identifiers", "_pdf_hash", "header")
FORMATS = {".md": "markdown", ".markdown": "markdown", ".tex": "latex", ".json": "json"}
FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_PAPER = FIXTURES / "ncs_paper.md"  # the Shrunken Nearest Centroids paper
FIXTURE_REFERENCE = FIXTURES / "ncs_reference"  # its reference implementation (the gold repository)


@dataclass(frozen=True)
class Paper:
    name: str  # file stem, used to name run directories
    text: str  # what agents and judges read
    format: str  # "markdown" | "latex" | "json"


def clean_s2orc(data: Any) -> Any:
    """A copy of `data` without PaperCoder's dropped keys, at every depth."""
    if isinstance(data, dict):
        return {k: clean_s2orc(v) for k, v in data.items() if k not in DROPPED_KEYS}
    if isinstance(data, list):
        return [clean_s2orc(item) for item in data]
    return data


def clean_latex(text: str) -> str:
    """Drop `%` comments (not `\\%`) and collapse runs of blank lines."""
    lines = [re.sub(r"(?<!\\)%.*$", "", line).rstrip() for line in text.splitlines()]
    kept = [line for i, line in enumerate(lines) if line or (i > 0 and lines[i - 1])]
    return "\n".join(kept).strip() + "\n"


def prompt_text(paper: Paper) -> str:
    """The paper as Paper2Code's scripts put it into a prompt: the text, or for s2orc JSON the repr of the
    loaded object (they format the dict with an f-string), which the JSON text round-trips to."""
    return str(json.loads(paper.text)) if paper.format == "json" else paper.text


def load_paper(path: str | Path) -> Paper:
    """Read a paper, choosing the format by extension (.md, .markdown, .tex, .json)."""
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UserInputError(f"paper {path}: unknown format {path.suffix!r}, expected one of {sorted(FORMATS)}")
    if not path.is_file():
        raise FileNotFoundError(f"paper {path}: no such file")
    raw = path.read_text(encoding="utf-8")
    if not raw.strip():
        raise UserInputError(f"paper {path}: the file is empty")
    if fmt == "json":
        try:
            text = json.dumps(clean_s2orc(json.loads(raw)), ensure_ascii=False)
        except json.JSONDecodeError as exc:
            raise UserInputError(f"paper {path}: malformed JSON at line {exc.lineno}: {exc.msg}") from None
    elif fmt == "latex":
        text = clean_latex(raw)
    else:
        text = raw
    return Paper(name=path.stem, text=text, format=fmt)
