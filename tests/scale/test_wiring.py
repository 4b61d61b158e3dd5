"""`coral eval --ray-address local` writes the samples `coral eval` writes without Ray."""

from __future__ import annotations

import json

import pytest

from coral.cli import main


def samples(path):
    return [(r["task_id"], [t["text"] for t in r["turns"]], r["passed"])
            for r in map(json.loads, path.read_text().splitlines())]


@pytest.mark.slow  # starts its own rollout actors (a torch import each) and runs coral eval twice: ~2 min loaded
def test_coral_eval_on_ray_writes_the_samples_of_coral_eval_without_ray(ray_cluster, tmp_path):
    args = ["eval", "--workflow", "chain", "--model", "tiny", "--limit", "3", "--max-new-tokens", "8",
            "--sandbox-workers", "1", "--no-progress"]
    assert main([*args, "--out-dir", str(tmp_path / "plain")]) == 0
    assert main([*args, "--out-dir", str(tmp_path / "ray"), "--ray-address", "local"]) == 0
    plain = samples(tmp_path / "plain" / "samples.jsonl")
    assert len(plain) == 3 and all(texts[0] for _, texts, _ in plain)
    assert samples(tmp_path / "ray" / "samples.jsonl") == plain
