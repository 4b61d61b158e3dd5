"""JSON Lines written whole, and files replaced whole.

`JsonlWriter(path).write(record)` appends one line with unbuffered writes on a file opened for
appending; a write that fails part way (a full disk, a file-size limit, a quota) is cut back to the end of
the last whole line before its error goes on, so a reader never meets half a line and a resumed run
appends after whole lines. `write_atomic(path, text)` writes a temporary file beside `path` and renames it
over `path`: a crash or a full disk leaves the old file or the new one, never a mix.

This module does NOT lock files (one writer per file) and does NOT fsync (whole lines survive a killed
process, not a power cut).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class JsonlWriter:
    """Appends records to `path` (created if missing; `truncate=True` empties it first), a line at a time."""

    def __init__(self, path: str | Path, truncate: bool = False) -> None:
        self.path = Path(path)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | (os.O_TRUNC if truncate else 0)
        self._fd: int | None = os.open(self.path, flags, 0o644)

    def write(self, record: Mapping[str, Any]) -> None:
        """One line; on an error it leaves the file as it was and raises."""
        if self._fd is None:
            raise ValueError(f"JsonlWriter for {self.path} is closed")
        data = (json.dumps(record) + "\n").encode()
        start = os.lseek(self._fd, 0, os.SEEK_END)
        done = 0
        try:
            while done < len(data):  # a full disk first writes part of the buffer, then fails
                done += os.write(self._fd, data[done:])
        except BaseException as exc:  # an OSError, or Ctrl-C between two partial writes
            if done:
                os.ftruncate(self._fd, start)
            if isinstance(exc, OSError) and exc.filename is None:
                exc.filename = str(self.path)  # os.write's errors name no file
            raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def append_jsonl(path: str | Path, record: Mapping[str, Any]) -> None:
    """One record appended to `path` as a whole line (opens and closes the file)."""
    with JsonlWriter(path) as writer:
        writer.write(record)


def write_atomic(path: str | Path, text: str) -> None:
    """`path` holds `text` or, after any failure, what it held before."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

