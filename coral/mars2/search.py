"""`coral search`: grow one MARS2 search tree per task with several agents, save and draw the trees.

Trees are saved to `<out_dir>/trees.json` after every lockstep step (written to a temporary file and
renamed), so an interrupted search resumes where it stopped, under the same config and the same weights:
each model's digest is saved with the trees (of its weights; of its replies for a scripted model), and a
model retrained at the same path is refused by name. A model behind a server cannot be digested: its
trees resume on trust, with a warning. Does NOT train.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from coral.agents import make_agent
from coral.benchmarks import load_benchmark
from coral.config import UserInputError, check_at_least
from coral.mars2.tree import Tree, TreeConfig, search, tree_metrics
from coral.mars2.viewer import write_tree_html
from coral.policy import load_policy
from coral.policy.base import DTYPE_HELP, Policy, SamplingParams, check_dtype
from coral.policy.scripted import ScriptedPolicy
from coral.sandbox import Sandbox
from coral.scale import ScaleOut, distribute_agents
from coral.terminal import Bar, fmt, print_metrics
from coral.train.checkpoints import policy_weights, weights_digest

if TYPE_CHECKING:
    from coral.policy.hf import HFPolicy

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchConfig:
    bench: str = "procedural-test"  # benchmark name or a JSONL/parquet file of tasks
    models: tuple[str, ...] = ("tiny",)  # one agent per model spec
    dtype: str = field(default="auto", metadata={"help": DTYPE_HELP})
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
        check_dtype(self.dtype)
        if not self.models:
            raise ValueError("field 'models' needs at least one model spec")
        check_at_least(self, 1, ("max_nodes", "limit", "max_new_tokens", "sandbox_workers"))
        check_at_least(self, 0, ("seed", "temperature"))
        check_at_least(self, 0, ("timeout_s",), above=True)


# fields that do not change the trees: a search may resume under other values
RESUMABLE_CHANGES = ("resume", "sandbox_workers", "ray_address")


def _compared(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in RESUMABLE_CHANGES}


def _save_trees(path: Path, trees: list[Any], cfg: SearchConfig, digests: dict[str, str | None]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"config": asdict(cfg), "weights": digests, "trees": [t.to_dict() for t in trees]}))
    os.replace(tmp, path)


def policy_digest(policy: Policy) -> str | None:
    """What identifies a policy's behaviour: a digest of its weights (a torch policy), of its replies (a
    scripted one), or None when it cannot be seen (a server's model)."""
    if isinstance(policy, ScriptedPolicy):
        replies = policy.replies
        return None if callable(replies) else hashlib.sha256(json.dumps(replies, sort_keys=True).encode()).hexdigest()
    if hasattr(policy, "state_dict") or hasattr(getattr(policy, "model", None), "state_dict"):
        # weights by either route are a transformers policy's (HFPolicy or an adapter on a shared base)
        return weights_digest(policy_weights(cast("HFPolicy", policy)))
    return None


def check_same_models(path: Path, saved: dict[str, Any], digests: dict[str, str | None]) -> None:
    """Refuse to grow saved trees on with models whose weights changed since (a retrained model at the same
    path would mix two models' nodes in one tree); warn for models whose weights cannot be seen."""
    if "weights" not in saved:
        raise UserInputError(f"{path} was written by an older coral that kept no digest of the models' weights; "
                             "pass --resume false to grow the trees anew, or another --out-dir")
    for spec, digest in digests.items():
        then = saved["weights"].get(spec)
        if digest is None:
            logger.warning("%s: the weights of model %r cannot be checked; its trees resume as saved", path, spec)
        elif then != digest:
            raise UserInputError(f"{path}: model {spec!r} has other weights than when these trees were grown (digest "
                                 f"{str(then)[:12]}, now {digest[:12]}); pass --resume false to grow them anew, or "
                                 "another --out-dir")


def run_search(cfg: SearchConfig, progress: bool = True) -> dict[str, float]:

    tasks = load_benchmark(cfg.bench, limit=cfg.limit, seed=cfg.seed)
    sampling = SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=cfg.seed)
    agents = [make_agent("solver", load_policy(spec, dtype=cfg.dtype), agent_id=f"agent{i}:{spec}", sampling=sampling)
              for i, spec in enumerate(cfg.models)]
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "trees.json"
    trees = None
    digests = {spec: policy_digest(agent.policy) for spec, agent in zip(cfg.models, agents, strict=True)}
    if cfg.resume and path.is_file():
        saved = json.loads(path.read_text())
        if _compared(saved["config"]) != _compared(json.loads(json.dumps(asdict(cfg)))):
            raise UserInputError(f"{path} was written with another config; pass --resume false or another --out-dir")
        check_same_models(path, saved, digests)
        trees = [Tree.from_dict(d) for d in saved["trees"]]
        if progress:
            print(f"resuming {len(trees)} trees from {path} ({sum(t.size for t in trees)} nodes so far)")
    tcfg = TreeConfig(algorithm=cfg.algorithm, max_nodes=cfg.max_nodes, seed=cfg.seed)
    start = time.perf_counter()
    done = min((t.size for t in trees), default=0) if trees else 0

    with Bar(progress, {"pass@1": "pass@1 {:.3f}", "pass@n": "pass@N {:.3f}"}) as bar, \
            Sandbox(workers=cfg.sandbox_workers, timeout_s=cfg.timeout_s) as sandbox, \
            ScaleOut(cfg.ray_address) as scale:
        row = bar.row(f"search: {len(tasks)} trees, one node each per step", cfg.max_nodes, done=done)

        def on_step(current: list[Any]) -> None:
            _save_trees(path, current, cfg, digests)
            m = tree_metrics(current)
            bar.advance(row, 1, **{"pass@1": m["pass@1"], "pass@n": m["pass@n"]})

        agents, sandbox = distribute_agents(agents, sandbox, scale)
        trees = search(tasks, agents, sandbox, tcfg, trees=trees, on_step=on_step)
    _save_trees(path, trees, cfg, digests)
    metrics = tree_metrics(trees)
    metrics["wall_s"] = time.perf_counter() - start
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    html_path = write_tree_html(trees, out / "trees.html", tasks=tasks)
    # the results, also with --no-progress
    print_metrics(f"coral search: {cfg.algorithm} / {cfg.bench} / {', '.join(cfg.models)}",
                  {k: v for k, v in metrics.items() if not k.startswith("agent/")},
                  [f"{agent}: " + ", ".join(f"{k.rsplit('/', 1)[1]} {fmt(metrics[k])}" for k in metrics
                                            if k.startswith(f"agent/{agent}/"))
                   for agent in dict.fromkeys(k[6:k.rindex("/")] for k in metrics if k.startswith("agent/"))]
                  + [f"trees: {path}", f"viewer: {html_path}"])
    return metrics
