"""bench/ray_two_nodes.py as a test: on a two-node Ray cluster (two raylets on this host) the actors land
one per node, and after one node is removed mid-run its actors restart on the other with the same
rollouts, rewards and evaluation texts as without Ray. Slow: a fresh cluster and four actor starts
(each imports torch) take 2-6 min on the 2-core build machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_nodes_spread_the_actors_and_a_lost_node_changes_no_result(tmp_path):
    out = tmp_path / "two_nodes.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "ray_two_nodes.py"), "--tasks", "2",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    runs = json.loads(out.read_text())["runs"]
    for name in ("2 nodes", "2 nodes, one lost after step 1"):
        for group, nodes in runs[name]["nodes"].items():
            assert len(set(nodes)) == 2, f"{name}: {group}'s actors share a node: {nodes}"
    lost = runs["2 nodes, one lost after step 1"]
    assert lost["restarts"] == {"RolloutPool": 1, "RaySandbox": 1}
    assert all(len(set(nodes)) == 1 for nodes in lost["nodes_after"].values())
    assert runs["2 nodes"]["restarts"] == {"RolloutPool": 0, "RaySandbox": 0}
