"""Ctrl-C during parallel SFT (four policies on two processes, as configs/corecode_roles_tiny.yaml trains its
roles) ends the run within seconds, not after the running and queued jobs, and each policy resumes from the
checkpoint it kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coral.benchmarks.procedural import make_tasks
from coral.corecode.data import corecode_sft_examples
from coral.policy.tiny import tiny_policy
from coral.train.sft import SFTConfig, train_sft

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("retriever", "planner", "coder", "debugger")
EPOCHS = 400.0  # 800 steps per policy: minutes of work left when Ctrl-C comes


def jobs() -> dict:
    data = corecode_sft_examples(make_tasks(16, "train", seed=0))["coder"]
    cfg = SFTConfig(epochs=EPOCHS, batch_size=8, warmup_steps=1, seed=0)
    return {role: (tiny_policy(seed=i, d_model=32, n_layers=1), data, cfg) for i, role in enumerate(ROLES)}


SCRIPT = """
import faulthandler
import signal
import sys
from pathlib import Path
from coral.train.sft_parallel import train_sft_many
sys.path.insert(0, {tests!r})
from test_sft_interrupt import jobs

if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for the stacks of a run that hangs
    out = Path(sys.argv[1])
    try:
        train_sft_many(jobs(), out / "work", progress=False, processes=2,
                       checkpoints={{role: out / (role + ".pt") for role in jobs()}})
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
"""


@pytest.mark.slow  # spawns two trainers (each imports torch) and waits for their first checkpoint: ~30-60 s
def test_ctrl_c_stops_parallel_sft_within_seconds_and_each_policy_resumes_from_its_checkpoint(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 240
        while not list(tmp_path.glob("*.pt")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
        assert list(tmp_path.glob("*.pt")), "no trainer saved a checkpoint"
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
        start = time.monotonic()
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGUSR1)  # its threads' stacks, then the whole group goes
            time.sleep(2)
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail(f"parallel SFT went on for more than 30 s after Ctrl-C; its output and stacks:\n{out[-4000:]}")
        print(f"exited {time.monotonic() - start:.1f} s after Ctrl-C")
        assert time.monotonic() - start < 20 and proc.returncode == 130, out
        assert "interrupted" in out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    kept = {p.stem for p in tmp_path.glob("*.pt")}
    assert kept and kept <= set(ROLES)
    for role, (policy, data, cfg) in jobs().items():
        if role not in kept:
            continue
        resumed = []

        def log(metrics, resumed=resumed):
            resumed.append(metrics.get("sft/resumed_at"))
            raise KeyboardInterrupt  # enough: the checkpoint loaded

        with pytest.raises(KeyboardInterrupt):
            train_sft(policy, data, cfg, progress=False, log=log, checkpoint=tmp_path / f"{role}.pt")
        assert resumed[0] is not None and resumed[0] >= 50 and resumed[0] % 50 == 0
