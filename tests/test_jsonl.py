"""JSON Lines are written whole: a write that fails part way (here a file-size limit, as a full disk does)
leaves the file ending with the last whole line; replaced files are old or new, never a mix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coral.jsonl import write_atomic

ROOT = Path(__file__).resolve().parents[1]

# In a child process (the limit would bind pytest's own files too): RLIMIT_FSIZE makes the write that crosses
# it short and the next one fail with EFBIG, what a disk that fills mid-line does with ENOSPC.
FILL = """
import errno, resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
{setup}
try:
    for i in range(100):
        {write}
except OSError as exc:
    assert exc.errno == errno.EFBIG, exc
    print("failed at", i)
"""


def _fill(tmp_path: Path, setup: str, write: str) -> str:
    script = FILL.format(setup=setup, write=write)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "failed at" in done.stdout  # the limit was reached
    return done.stdout


def _whole_lines(path: Path) -> list[dict]:
    text = path.read_text()
    assert text.endswith("\n"), f"{path} ends in a cut line: {text[-40:]!r}"
    return [json.loads(line) for line in text.splitlines()]


def test_a_jsonl_writer_cut_short_by_a_full_disk_leaves_only_whole_lines(tmp_path):
    _fill(tmp_path, "from coral.jsonl import JsonlWriter\nw = JsonlWriter('s.jsonl')",
          "w.write({'i': i, 'text': 'x' * 37})")
    records = _whole_lines(tmp_path / "s.jsonl")
    assert [r["i"] for r in records] == list(range(len(records))) and 0 < len(records) < 100


def test_the_metrics_log_cut_short_by_a_full_disk_leaves_only_whole_lines(tmp_path):
    _fill(tmp_path, "from coral.train.loop import MetricsLog\nlog = MetricsLog('.')\nlog.tb = None",
          "log({'step': i, 'loss': 0.123456789, 'reward/coder': 0.5})")
    records = _whole_lines(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(len(records))) and len(records) > 0


def test_a_failed_atomic_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    write_atomic(path, "old")

    def full(self, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError):
        write_atomic(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]

