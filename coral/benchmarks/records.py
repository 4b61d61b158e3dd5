"""Reading benchmark files into plain records, with errors that name the file and the record.

Formats: JSON Lines (`.jsonl`, optionally `.gz`), JSON (a list of objects, or an object whose values
are the records), Parquet (through pyarrow, imported lazily).

This module does NOT interpret records; each loader does that and reports problems with `RecordError`.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coral.config import UserInputError


class RecordError(UserInputError):
    """A malformed record: the message names the file, the record index and its id."""


def where(source: str, index: int, record: Mapping[str, Any] | None = None) -> str:
    ident = ""
    if record is not None:
        for key in ("task_id", "question_id", "problem_id", "name", "id"):
            if key in record:
                ident = f" ({key}={record[key]!r})"
                break
    return f"{source}: record {index}{ident}"


def require(record: Mapping[str, Any], fields: tuple[str, ...], at: str) -> None:
    missing = [f for f in fields if f not in record]
    if missing:
        raise RecordError(f"{at}: missing field(s) {missing}; has {sorted(record)}")


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """All records of a benchmark file. Raises FileNotFoundError naming the path, RecordError naming
    the line of a bad JSON line."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"benchmark file not found: {p}")
    name = p.name.lower()
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq  # lazy: only parquet users need it

        return pq.read_table(p).to_pylist()
    opener = gzip.open if name.endswith(".gz") else open
    with opener(p, "rt", encoding="utf-8") as f:
        text = f.read()
    stem = name.removesuffix(".gz")
    if stem.endswith(".jsonl") or (not stem.endswith(".json") and _looks_like_jsonl(text)):
        return parse_jsonl(text, str(p))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError(f"{p}: invalid JSON at line {e.lineno}: {e.msg}") from None
    if isinstance(data, Mapping):
        data = list(data.values())
    if not isinstance(data, list) or not all(isinstance(r, Mapping) for r in data):
        raise RecordError(f"{p}: expected a JSON list of objects (or an object of objects)")
    return [dict(r) for r in data]


def _looks_like_jsonl(text: str) -> bool:
    first = text.lstrip()[:1]
    return first == "{" and "\n{" in text.strip()


def parse_jsonl(text: str, source: str) -> list[dict[str, Any]]:
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordError(f"{source}: line {lineno} is not valid JSON: {e.msg}") from None
        if not isinstance(rec, dict):
            raise RecordError(f"{source}: line {lineno} is a JSON {type(rec).__name__}, not an object")
        out.append(rec)
    return out


def json_field(record: Mapping[str, Any], key: str, at: str) -> Any:
    """A field that the release stores as a JSON string (APPS, LiveCodeBench); already-decoded values
    (from `datasets`) pass through."""
    value = record[key]
    if not isinstance(value, str):
        return value
    if not value.strip():
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise RecordError(f"{at}: field {key!r} is not valid JSON: {e.msg}") from None
