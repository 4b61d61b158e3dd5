"""Helpers of the kill-and-resume tests: start a training subprocess and kill -9 its whole process group
once its metrics log holds a given number of steps."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def kill_once_logged(cmd: list[str], metrics: Path, steps: int, timeout_s: float = 600) -> None:
    """Run `cmd` in a new session; kill -9 it once `metrics` holds `steps` lines (the last step's checkpoint
    may or may not be written by then)."""
    proc = subprocess.Popen(cmd, start_new_session=True)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= steps:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def corecode_cmd(fields: dict) -> list[str]:
    """A command line that runs train_corecode on the CoReCodeConfig given by `fields` (JSON-able)."""
    import json
    import sys

    code = ("import json,sys; from coral.config import from_mapping; "
            "from coral.corecode.recipe import CoReCodeConfig, train_corecode; "
            "train_corecode(from_mapping(CoReCodeConfig, json.loads(sys.argv[1])), progress=False)")
    return [sys.executable, "-c", code, json.dumps(fields)]


def clean_and_resumed_runs(cmd, tmp_path: Path, steps: int = 2) -> tuple[Path, Path]:
    """Run `cmd(out_dir)` once to the end, and once killed -9 after `steps` logged steps then restarted
    to the end; returns (clean run dir, resumed run dir)."""
    clean, crashed = tmp_path / "clean", tmp_path / "crashed"
    subprocess.run(cmd(clean), check=True, timeout=600)
    kill_once_logged(cmd(crashed), crashed / "metrics.jsonl", steps=steps)
    assert not (crashed / "summary.json").exists(), "the run ended before it was killed"
    subprocess.run(cmd(crashed), check=True, timeout=600)
    return clean, crashed
