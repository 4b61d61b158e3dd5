"""`coral search`: grow one MARS2 search tree per task with several agents, save and draw the trees.

Trees are saved to `<out_dir>/trees.json` after every lockstep step (written to a temporary file and
renamed), so an interrupted search resumes where it stopped. Does NOT train.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from coral.agents import make_agent
from coral.benchmarks import load_benchmark
from coral.config import UserInputError
from coral.mars2.tree import Tree, TreeConfig, search, tree_metrics
from coral.mars2.viewer import write_tree_html
from coral.policy import load_policy
from coral.policy.base import SamplingParams
from coral.sandbox import Sandbox
from coral.scale import ScaleOut, distribute_agents


@dataclass(frozen=True)
class SearchConfig:
    bench: str = "procedural-test"  # benchmark name or a JSONL/parquet file of tasks
    models: tuple[str, ...] = ("tiny",)  # one agent per model spec
    algorithm: Literal["abmcts", "uct", "best_of_n"] = "abmcts"  # the tree search
    max_nodes: int = 8  # node budget of each tree, root excluded
    limit: int | None = 20  # search only the first N tasks (None: all)
    seed: int = 0  # base seed of the search and sampling
    temperature: float = 1.0  # sampling temperature of every agent
    max_new_tokens: int = 256  # longest completion, in tokens
    timeout_s: float = 4.0  # time limit of each test in the sandbox
    sandbox_workers: int = 2  # sandbox worker processes that run the tests
    out_dir: str = "runs/search"  # where trees.json and the tree viewer go
    resume: bool = True  # continue the saved partial trees in out_dir
    ray_address: str | None = None  # "local", "auto" or an address: rollouts and sandbox jobs on Ray (coral.scale)

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("field 'models' needs at least one model spec")
        if self.max_nodes < 1:
            raise ValueError(f"field 'max_nodes' must be >= 1, got {self.max_nodes}")


def _save_trees(path: Path, trees: list[Any], cfg: SearchConfig) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"config": asdict(cfg), "trees": [t.to_dict() for t in trees]}))
    os.replace(tmp, path)


def run_search(cfg: SearchConfig, progress: bool = True) -> dict[str, float]:

    tasks = load_benchmark(cfg.bench, limit=cfg.limit, seed=cfg.seed)
    sampling = SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=cfg.seed)
    agents = [make_agent("solver", load_policy(spec), agent_id=f"agent{i}:{spec}", sampling=sampling)
              for i, spec in enumerate(cfg.models)]
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "trees.json"
    trees = None
    if cfg.resume and path.is_file():
        saved = json.loads(path.read_text())
        if saved["config"] != json.loads(json.dumps(asdict(cfg))):
            raise UserInputError(f"{path} was written with another config; pass --resume false or another --out-dir")
        trees = [Tree.from_dict(d) for d in saved["trees"]]
        if progress:
            print(f"resuming {len(trees)} trees from {path} ({sum(t.size for t in trees)} nodes so far)")
    tcfg = TreeConfig(algorithm=cfg.algorithm, max_nodes=cfg.max_nodes, seed=cfg.seed)
    start = time.perf_counter()
    steps = [0]

    def on_step(current: list[Any]) -> None:
        _save_trees(path, current, cfg)
        steps[0] += 1
        if progress:
            m = tree_metrics(current)
            print(f"step {steps[0]}: nodes/tree {m['nodes_per_tree']:.1f}  pass@1 {m['pass@1']:.3f}  "
                  f"pass@N {m['pass@n']:.3f}  {time.perf_counter() - start:.1f}s", flush=True)

    with Sandbox(workers=cfg.sandbox_workers, timeout_s=cfg.timeout_s) as sandbox, ScaleOut(cfg.ray_address) as scale:
        agents, sandbox = distribute_agents(agents, sandbox, scale)
        trees = search(tasks, agents, sandbox, tcfg, trees=trees, on_step=on_step)
    _save_trees(path, trees, cfg)
    metrics = tree_metrics(trees)
    metrics["wall_s"] = time.perf_counter() - start
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    html_path = write_tree_html(trees, out / "trees.html", tasks=tasks)
    if progress:
        print(json.dumps(metrics, indent=2))
        print(f"trees: {path}\nviewer: {html_path}")
    return metrics
