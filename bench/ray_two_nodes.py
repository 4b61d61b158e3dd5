"""coral on a Ray cluster of two nodes, and a node lost mid-run: the multi-node check this one machine
allows. Both nodes run on this host (ray.cluster_utils.Cluster: two raylets, each with its own object
store and its own CPUs), so Ray places, ships and restarts actors as across machines, but the network
and the throughput of a real cluster are not measured.

    PYTHONPATH=. python bench/ray_two_nodes.py --tasks 4 --json runs/ray_two_nodes.json

Runs bench/ray_overhead.py's CoRe-Code-style RL step (planner -> coder rollout, sandbox rewards, GRPO
update of both agents) and a greedy `coral eval` pass three times with one seed: without Ray; on the
two-node cluster (2 rollout actors and 2 sandbox actors, which Ray's SPREAD puts one per node); and on
the cluster again with the second node removed after the first step (its actors die; the next step must
restart them on the head node and give the same results). Prints each actor's node, the restarts, and
whether every setting produced the no-Ray rollouts, rewards and evaluation texts (exit 1 otherwise).

Each actor asks for 0.25 CPU by default, so the head node has room for the lost node's actors. With
`--fair-share` the actors share the cluster's CPUs evenly (what `--ray-address` gives), the head node is
full when the other is lost, and the run must end in an error naming the CPUs a replacement needs (not
wait forever). Both nodes listen on 127.0.0.1 only, and Ray's files (with the address file Ray writes
for a cluster like this one, which a plain `ray.init()` would join) go to a private temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # ray_overhead, the step and eval pass this bench runs


def run(bench: Any, tasks: Sequence[Any], args: argparse.Namespace, address: str | None,
        lose: Any = None) -> dict[str, Any]:
    """Two RL steps and one eval pass, on Ray at `address` (None: no Ray). `lose()`, when given, runs after
    the first step (it removes a node). Returns the results, actor nodes, restarts and wall seconds, or
    the error that ended the run (`error`) and the seconds from the node loss to it (`error_after_loss_s`)."""
    from coral.sandbox import Sandbox
    from coral.scale import ActorLostError, ScaleOut

    t0 = time.perf_counter()
    policies = bench.make_policies(d_model=args.d_model, n_layers=1)
    learners = bench.make_learners(policies)  # on the trainer policies, before the swap
    out: dict[str, Any] = {"steps": [], "nodes": {}, "restarts": {}}
    cpus = None if args.fair_share else args.cpus_per_worker
    with Sandbox(workers=1, timeout_s=bench.TIMEOUT_S) as local, \
            ScaleOut(address, rollout_workers=2, sandbox_actors=2, cpus_per_worker=cpus) as scale:
        views, sandbox = scale.distribute(policies, local)
        groups = {type(g).__name__: g.group for g in scale.started}
        out["nodes"] = {name: g.nodes() for name, g in groups.items()}
        out["cpus_per_actor"] = {name: g.each["CPU"] for name, g in groups.items()}
        lost_at = None
        try:
            for step in range(2):
                out["steps"].append(bench.rl_step(views, learners, sandbox, tasks, step,
                                                  max_new_tokens=args.max_new_tokens))
                if step == 0 and lose is not None:
                    lose()
                    lost_at = time.perf_counter()
            with tempfile.TemporaryDirectory() as tmp:
                out["texts"] = bench.eval_pass(views, sandbox, tasks, tmp, args.max_new_tokens)
            out["nodes_after"] = {name: g.nodes() for name, g in groups.items()}
        except (ActorLostError, TimeoutError) as error:
            out["error"] = f"{type(error).__name__}: {error}"
            out["error_after_loss_s"] = None if lost_at is None else time.perf_counter() - lost_at
        out["restarts"] = {name: g.restarts for name, g in groups.items()}
    out["wall_s"] = time.perf_counter() - t0
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=4, help="procedural-train tasks in each step and eval pass")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="longest plan or code, in tokens")
    parser.add_argument("--d-model", type=int, default=32, help="width of the tiny planner and coder")
    parser.add_argument("--cpus-per-node", type=int, default=1, help="CPUs each of the two Ray nodes offers")
    parser.add_argument("--cpus-per-worker", type=float, default=0.25, help="CPUs each rollout or sandbox actor asks for")
    parser.add_argument("--fair-share", action="store_true",
                        help="actors share the cluster's free CPUs evenly (ScaleOut's default) instead")
    parser.add_argument("--runs", default="intact,lost", help="Ray runs, comma-separated: intact, lost")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args(argv)
    import ray_overhead as bench
    import torch

    from coral.benchmarks import load_benchmark

    torch.set_num_threads(1)
    tasks = load_benchmark("procedural-train", limit=args.tasks, seed=0)
    runs = {"no ray": run(bench, tasks, args, None)}
    # Ray's files, and the address file a Cluster writes, in a folder of this run's own (short: socket paths)
    ray_tmp = os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="coral-ray-")
    try:
        runs.update(on_two_nodes(bench, tasks, args))
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return report(bench, runs, args)


def on_two_nodes(bench: Any, tasks: Sequence[Any], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The Ray runs named in --runs, on two nodes of this host that listen on 127.0.0.1 only."""
    import ray
    from ray.cluster_utils import Cluster

    from coral.scale.cluster import on_loopback

    runs = {}
    with on_loopback() as loopback:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": args.cpus_per_node,
                                                                "node_ip_address": loopback})
        try:
            second = cluster.add_node(num_cpus=args.cpus_per_node, node_ip_address=loopback)
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
            if "intact" in args.runs:
                runs["2 nodes"] = run(bench, tasks, args, cluster.address)
            if "lost" in args.runs:
                runs["2 nodes, one lost after step 1"] = run(bench, tasks, args, cluster.address,
                                                             lose=lambda: cluster.remove_node(second))
        finally:
            ray.shutdown()
            cluster.shutdown()
    return runs


def report(bench: Any, runs: dict[str, dict[str, Any]], args: argparse.Namespace) -> int:
    failed = 0
    for name, r in runs.items():
        problem = r.get("error") or bench.same_results(runs["no ray"], r)
        failed += problem is not None
        where = "; ".join(f"{g} on nodes {[n[:6] for n in nodes]}" for g, nodes in r["nodes"].items())
        after = "; ".join(f"{g} {[n[:6] for n in nodes]}" for g, nodes in r.get("nodes_after", {}).items())
        print(f"{name:<32} {r['wall_s']:6.1f} s  same as no Ray: {'yes' if problem is None else problem}")
        if where:
            print(f"{'':<32} actors: {where}; at the end: {after}; restarts: {r['restarts']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        slim = {n: {k: v for k, v in r.items() if k not in ("steps", "texts")} for n, r in runs.items()}
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": slim}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
