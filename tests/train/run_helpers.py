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
