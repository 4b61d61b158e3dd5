"""Parsing model output: think tags, `[CONTENT]{json}[/CONTENT]` blocks, fenced code, JSON objects.

Every function returns None (or an empty list) when nothing usable is found, so callers report the
failure as data; none of them raises on model text. Malformed JSON gets two repairs, in order:
trailing commas removed, then Python-literal syntax (single quotes, True/None) via `ast.literal_eval`.

This module does NOT validate what the JSON means (keys, types): callers check their fields.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

_THINK = re.compile(r"<think>.*?</think>|<think>.*$", re.S)
_CONTENT = re.compile(r"\[CONTENT\](.*?)\[/CONTENT\]", re.S)
_FENCE = re.compile(r"```([\w+.-]*)[^\n]*\n(.*?)```", re.S)


def strip_think(text: str) -> str:
    """Remove <think>...</think> spans (and an unclosed trailing <think>)."""
    return _THINK.sub("", text).strip()


def loads_lenient(text: str) -> Any | None:
    """json.loads with the two repairs of the module docstring; None when all fail."""
    text = text.strip()
    for candidate in (text, re.sub(r",\s*([}\]])", r"\1", text)):
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    try:
        return ast.literal_eval(re.sub(r"\btrue\b|\bfalse\b|\bnull\b",
                                       lambda m: {"true": "True", "false": "False", "null": "None"}[m[0]], text))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def first_json_object(text: str) -> dict | None:
    """The first balanced {...} in `text` that parses (leniently) to a dict."""
    start = text.find("{")
    while start != -1:
        depth, in_str, escape = 0, "", False
        for end in range(start, len(text)):
            ch = text[end]
            if in_str:
                escape = ch == "\\" and not escape
                if ch == in_str and not escape:
                    in_str = ""
                continue
            if ch in "\"'":
                in_str = ch
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    value = loads_lenient(text[start:end + 1])
                    if isinstance(value, dict):
                        return value
                    break
        start = text.find("{", start + 1)
    return None


def content_json(text: str) -> dict | None:
    """The JSON object of a `[CONTENT]...[/CONTENT]` block (a fenced ```json inside is allowed);
    without the tags, the first JSON object of the text."""
    text = strip_think(text)
    match = _CONTENT.search(text)
    body = match.group(1) if match else text
    fenced = _FENCE.search(body)
    if fenced:
        body = fenced.group(2)
    value = loads_lenient(body)
    return value if isinstance(value, dict) else first_json_object(body)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order, think spans removed."""
    return [(lang.lower(), body) for lang, body in _FENCE.findall(strip_think(text))]


def first_code_block(text: str, language: str | None = None) -> str | None:
    """The body of the first fenced block (of `language` when given)."""
    for lang, body in fenced_blocks(text):
        if language is None or lang == language or (language == "yaml" and lang == "yml"):
            return body
    return None
