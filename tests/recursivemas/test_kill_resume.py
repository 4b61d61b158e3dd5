"""`coral train` with recipe recursivemas killed -9 in its outer loop and started again ends with the links,
metrics and summary of an uninterrupted run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]
RECORDS = [{"question": f"question {i}", "plan": f"plan {i}", "refined_plan": f"refined {i}", "answer": f"a{i}"}
           for i in range(6)]


def _run_helpers():
    spec = importlib.util.spec_from_file_location("latent_run_helpers", ROOT / "tests" / "run_helpers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _links(run: Path) -> dict[str, torch.Tensor]:
    (ckpt,) = sorted((run / "ckpt").glob("step_*"))[-1:]
    assert ckpt.name == "step_000006"
    return {f"{loop}.{k}": v for loop in ("inner", "outer")
            for k, v in torch.load(ckpt / loop / "model.pt", weights_only=True).items()}


@pytest.mark.slow(reason="three tiny `coral train` subprocesses (tokenizer, two agents, evaluations before and "
                         "after): 56 s at load average 6-9 on 2 cores")
def test_a_run_killed_in_the_outer_loop_resumes_to_the_links_of_an_uninterrupted_one(tmp_path):
    data = tmp_path / "records.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    config = tmp_path / "rm.yaml"
    config.write_text(yaml.safe_dump({
        "recipe": "recursivemas", "pattern": "distillation", "rounds": 2, "latent_steps": 2, "data": str(data),
        "n_train_tasks": 4, "n_test_tasks": 2, "agent_widths": [16, 24], "n_layers": 1, "vocab_size": 300,
        "inner": {"steps": 3, "lr": 0.01}, "outer": {"steps": 3, "lr": 0.01}, "batch_size": 2, "max_new_tokens": 4,
        "checkpoint_every_steps": 2}))

    def cmd(out: Path) -> list[str]:
        return [sys.executable, "-m", "coral.cli", "train", str(config), "--no-progress", "--out-dir", str(out)]

    # killed once step 5 (outer) is logged: its checkpoint (every 2 steps) is step 4, so step 5 runs again
    clean, crashed = _run_helpers().clean_and_resumed_runs(cmd, tmp_path, steps=5)
    want, got = _links(clean), _links(crashed)
    assert want.keys() == got.keys() and len(want) > 0
    for k in want:
        assert torch.equal(want[k], got[k]), k
    metrics = [[{k: v for k, v in json.loads(line).items() if k != "time_s"}
                for line in (run / "metrics.jsonl").read_text().splitlines()] for run in (clean, crashed)]
    assert metrics[0] == metrics[1] and [m["step"] for m in metrics[0]] == [1, 2, 3, 4, 5, 6]
    summaries = [{k: v for k, v in json.loads((run / "summary.json").read_text()).items() if "wall" not in k}
                 for run in (clean, crashed)]
    assert summaries[0] == summaries[1]
