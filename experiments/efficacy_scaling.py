"""Study A of issue #24: inference-time scaling without training. Held-out Pass@1 / Pass@N of best-of-N
and AB-MCTS-A (refinement from public-test feedback), each with one agent and with two, at node budgets
4, 8, 16, 32, from MARS2's cold-started tiny agents (cached per seed), over seeds with disjoint test tasks.

Protocol (experiments/efficacy_protocol.py):
1. Validation: each seed's cold-started first agent samples `val_budget` codes for each of `n_val_tasks`
   validation-split tasks per candidate depth range; the range whose mean per-sample pass rate over seeds
   is closest to 0.5 is chosen ("the depth where the cold start solves about half").
2. Test, once: every method grows one tree of the largest budget per test task of each seed. The figure
   at a smaller budget k is read from the first k nodes of that tree: exactly the tree a budget-k run
   grows, because selection draws from streams keyed by (seed, task, tree size), never by the budget,
   and every request's sampling stream is keyed by its node index (tests/experiments pin this down).
   For best-of-N it is the usual "first k samples" estimate.
Changes are paired per task against best-of-N with one agent at the same budget.

This module does NOT train; it does not tune the search (AB-MCTS-A's priors are the paper's).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from experiments.efficacy_protocol import (
    closest_to,
    fmt_change,
    fmt_mean_se,
    markdown_table,
    mean_rate,
    over_seeds,
    pooled_paired_change,
    save_run,
    write_section,
)

METHODS = {  # name -> (tree search, number of agents)
    "best-of-N, 1 agent": ("best_of_n", 1),
    "best-of-N, 2 agents": ("best_of_n", 2),
    "AB-MCTS-A, 1 agent": ("abmcts", 1),
    "AB-MCTS-A, 2 agents": ("abmcts", 2),
}
BASELINE = "best-of-N, 1 agent"


@dataclass(frozen=True)
class ScalingConfig:
    seeds: tuple[int, ...] = (0, 1, 2)  # each: its own cold start, validation draw and disjoint test tasks
    budgets: tuple[int, ...] = (4, 8, 16, 32)  # node budgets per tree, root excluded
    n_test_tasks: int = 40  # held-out test-split tasks per seed
    n_val_tasks: int = 30  # validation-split tasks per seed and depth range
    val_budget: int = 4  # samples per validation task (the per-sample pass rate is the figure)
    depths: tuple[tuple[int, int], ...] = ((1, 2), (2, 2), (3, 3))  # candidate (min, max) composition depths
    # MARS2Config fields of the cold start over the recipe's defaults, e.g. the testbed's best setting S3
    # (docs/results/efficacy.md "The testbed": the defaults are not it); the cache key holds all of them
    mars2: dict[str, Any] = field(default_factory=dict)
    # None: each seed its own cold start (the cached ones study B trains too); a seed: every seed searches
    # with that seed's cold-started agents (seeds then differ in test tasks and sampling streams only:
    # cheaper, and blind to cold-start spread; the first run of 2026-12-05 shared seed 0's)
    cold_start_seed: int | None = None
    # a finished cold start folder (agent0, agent1, ...; e.g. agents continued by experiments/keep_drill.py) that
    # every seed searches with instead of a cached one (seeds then differ in test tasks and streams, as above)
    cold_dir: str | None = None
    max_new_tokens: int = 96  # longest code, in tokens (MARS2's default)
    # stop before the test phase when the chosen depth's validation pass rate is below this: every method
    # would score about 0, and the test phase costs most of the study
    min_val_rate: float = 0.05
    out: str = "runs/efficacy/scaling"  # trees and per-run JSON
    cold_cache: str = "runs/efficacy_cold"  # cached cold starts, shared with experiments/mars2_compare.py
    results_md: str = "docs/results/efficacy.md"

    def __post_init__(self) -> None:
        if len(self.seeds) < 1 or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"field 'seeds' must be distinct, got {self.seeds}")
        if not self.budgets or min(self.budgets) < 1:
            raise ValueError(f"field 'budgets' must be >= 1, got {self.budgets}")
        if self.cold_dir is not None and self.cold_start_seed is not None:
            raise ValueError("fields 'cold_dir' and 'cold_start_seed' both name the cold start: set one")
        for lo, hi in self.depths:
            if not 1 <= lo <= hi:
                raise ValueError(f"field 'depths': ({lo}, {hi}) is not a depth range")


def budget_figures(trees: Sequence[Any], budgets: Sequence[int]) -> dict[int, dict[str, dict[str, float]]]:
    """budget -> {"pass@1": task -> 0/1, "pass@n": task -> 0/1} from each tree's first `budget` nodes."""
    from coral.mars2.tree import Tree

    out: dict[int, dict[str, dict[str, float]]] = {}
    for k in budgets:
        short = [t for t in trees if t.size < k]
        if short:
            raise ValueError(f"budget {k}: tree {short[0].task_id!r} holds only {short[0].size} nodes")
        prefixes = [Tree(t.task_id, t.nodes[:k + 1]) for t in trees]
        out[k] = {"pass@1": {t.task_id: float(t.pass_at_1()) for t in prefixes},
                  "pass@n": {t.task_id: float(t.pass_at_n()) for t in prefixes}}
    return out


def sample_pass_rate(trees: Sequence[Any]) -> float:
    """Fraction of all nodes (samples) whose code passes the private tests."""
    nodes = [n for t in trees for n in t.nodes[1:]]
    if not nodes:
        raise ValueError("sample_pass_rate: no nodes")
    return sum(n.private is not None and n.private.passed for n in nodes) / len(nodes)


def node_stats(trees: Sequence[Any]) -> dict[str, list[int]]:
    """Why a search helps or not: [passing, all] private verdicts of the nodes, by kind (a fresh answer
    to the task; a refinement of a failing or of a passing code) and by agent."""
    out: dict[str, list[int]] = {}
    for tree in trees:
        for node in tree.nodes[1:]:
            parent = tree.nodes[node.parent]
            kind = ("fresh answer" if node.depth == 1 else
                    "refinement of a passing code" if parent.private is not None and parent.private.passed else
                    "refinement of a failing code")
            for key in (kind, f"{node.agent}'s nodes"):
                count = out.setdefault(key, [0, 0])
                count[0] += int(node.private is not None and node.private.passed)
                count[1] += 1
    return out


def why_table(stats: Mapping[str, Mapping[str, Sequence[int]]]) -> str:
    """Per method: private pass rate (and node count) of each kind of node and of each agent's nodes, over
    every test tree of every seed at the largest budget."""
    keys = sorted({k for s in stats.values() for k in s}, key=lambda k: (not k.startswith(("fresh", "refinement")), k))
    rows = [[method, *(f"{s[k][0] / s[k][1]:.3f} ({s[k][1]})" if s.get(k) else "-" for k in keys)]
            for method, s in stats.items()]
    return markdown_table(["method (all nodes of all test trees)", *keys], rows)


def _grow(cold: tuple[str, Sequence[Any]], n_agents: int, tasks: Sequence[Any], algorithm: str, budget: int,
          seed: int, sandbox: Any, path: Path, max_new_tokens: int) -> list[Any]:
    """One tree per task with the first `n_agents` agents of `cold` = (cold start's name, its policies)
    (loaded from `path` when an earlier run grew it with the same settings and the same cold start)."""
    from coral.mars2 import tree as tree_search
    from coral.mars2.recipe import MARS2Config, make_tree_agents
    from coral.seeding import EVAL_STEP

    name, policies = cold[0], cold[1][:n_agents]
    key = {"algorithm": algorithm, "budget": budget, "seed": seed, "agents": len(policies), "max_new_tokens": max_new_tokens,
           "tasks": [t.id for t in tasks], "cold_start": name}
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved["key"] == key:
            return [tree_search.Tree.from_dict(d) for d in saved["trees"]]
    agents = make_tree_agents(MARS2Config(seed=seed, agents=len(policies), max_new_tokens=max_new_tokens), policies)
    trees = tree_search.search(tasks, agents, sandbox, tree_search.TreeConfig(algorithm, budget, seed=seed), step=EVAL_STEP)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "trees": [t.to_dict() for t in trees]}))
    return trees


def _cold_start(cfg: ScalingConfig, seed: int, sandbox: Any) -> tuple[str, list[Any]]:
    """Seed `seed`'s cold start (cached): its name (`cold_start_name`: key and weights digest) and its agents."""
    from coral.benchmarks.splits import build_tasks
    from coral.config import from_mapping
    from coral.mars2.recipe import MARS2Config
    from experiments.mars2_compare import cached_cold_start, cold_start_name

    mcfg = from_mapping(MARS2Config, {**cfg.mars2, "seed": seed}, "--set mars2")
    policies = cached_cold_start(mcfg, build_tasks(mcfg.splits)[0], sandbox, Path(cfg.cold_cache))
    return cold_start_name(mcfg, Path(cfg.cold_cache)), policies


def _folder_cold_start(where: Path) -> tuple[str, list[Any]]:
    """The agents saved in `where` (agent0, agent1) and their name: the folder and a digest of their weights."""
    from experiments.mars2_compare import _load, weights_name

    return weights_name(where), _load(where, len(list(where.glob("agent*"))))


def cold_start_summary(overrides: Mapping[str, Any], shared_seed: int | None, cold_dir: str | None = None) -> str:
    """The cold start in words: the recipe's defaults, any field a study overrides, and whose it is (each
    seed's own, or `shared_seed`'s for every seed: the studies' `cold_start_seed`), or the folder `cold_dir`."""
    if cold_dir is not None:
        return f"the agents saved in {cold_dir} (shared by all seeds)"
    whose = "(one per seed)" if shared_seed is None else f"(seed {shared_seed}'s, shared by all seeds)"
    return "at MARS2's defaults" + (f" but {json.dumps(dict(overrides))}" if overrides else "") + f" {whose}"


def validate(cfg: ScalingConfig, cold: Mapping[int, tuple[str, list[Any]]], sandbox: Any) -> dict[str, Any]:
    """Per depth range: each seed's per-sample pass rate of the first agent on validation tasks."""
    from coral.benchmarks.procedural import make_tasks

    rates: dict[str, dict[int, float]] = {}
    for lo, hi in cfg.depths:
        name = f"{lo}-{hi}"
        for seed in cfg.seeds:
            tasks = make_tasks(cfg.n_val_tasks, "validation", min_depth=lo, max_depth=hi, seed=seed)
            trees = _grow(cold[seed], 1, tasks, "best_of_n", cfg.val_budget, seed, sandbox,
                          Path(cfg.out) / f"seed{seed}" / f"val_{name}.json", cfg.max_new_tokens)
            rates.setdefault(name, {})[seed] = sample_pass_rate(trees)
            print(f"validation depth {name} seed {seed}: per-sample pass rate {rates[name][seed]:.3f}", flush=True)
    means = {name: over_seeds(r)["mean"] for name, r in rates.items()}
    return {"per_seed": rates, "mean": means, "chosen": closest_to(means, 0.5)}


def too_weak(val: Mapping[str, Any], min_rate: float) -> str | None:
    """Why the test phase would be wasted (the chosen depth's validation rate is below `min_rate`), or None."""
    rate = val["mean"][val["chosen"]]
    if rate >= min_rate:
        return None
    rates = ", ".join(f"depth {d}: {r:.3f}" for d, r in val["mean"].items())
    return (f"the cold start's per-sample validation pass rate is {rate:.3f} at its best depth ({rates}), below "
            f"min_val_rate={min_rate}: every method would score about 0 on test. Train a stronger cold start "
            f"(the cold start's fields in `mars2`) before the test phase.")


def evaluate_test(cfg: ScalingConfig, cold: Mapping[int, tuple[str, list[Any]]], depth: tuple[int, int], sandbox: Any,
         ) -> tuple[dict[str, dict[int, Any]], dict[str, dict[str, list[int]]]]:
    """(method -> seed -> budget -> figure -> task -> 0/1, on each seed's own test tasks; method -> node_stats
    summed over seeds)."""
    from coral.benchmarks.procedural import make_tasks

    figures: dict[str, dict[int, Any]] = {m: {} for m in METHODS}
    stats: dict[str, dict[str, list[int]]] = {}
    for seed in cfg.seeds:
        # seed + 1, as coral.benchmarks.splits.build_tasks draws the test split of a seed
        tasks = make_tasks(cfg.n_test_tasks, "test", min_depth=depth[0], max_depth=depth[1], seed=seed + 1)
        for method, (algorithm, n_agents) in METHODS.items():
            t0 = time.perf_counter()
            trees = _grow(cold[seed], n_agents, tasks, algorithm, max(cfg.budgets), seed, sandbox,
                          Path(cfg.out) / f"seed{seed}" / f"test_{algorithm}_{n_agents}.json", cfg.max_new_tokens)
            figures[method][seed] = budget_figures(trees, cfg.budgets)
            for key, (ok, n) in node_stats(trees).items():
                count = stats.setdefault(method, {}).setdefault(key, [0, 0])
                count[0], count[1] = count[0] + ok, count[1] + n
            top = figures[method][seed][max(cfg.budgets)]
            print(f"test seed {seed} {method}: pass@1 {mean_rate(top['pass@1']):.3f} pass@N {mean_rate(top['pass@n']):.3f} "
                  f"({time.perf_counter() - t0:.0f}s)", flush=True)
    return figures, stats


def summarise(figures: Mapping[str, Mapping[int, Any]], budgets: Sequence[int]) -> dict[str, Any]:
    """method -> budget -> figure -> {mean, se over seeds, change vs BASELINE (paired, pooled)}."""
    out: dict[str, Any] = {}
    for method, per_seed in figures.items():
        for k in budgets:
            for fig in ("pass@1", "pass@n"):
                entry = over_seeds({s: mean_rate(per_seed[s][k][fig]) for s in per_seed})
                entry["per_seed"] = {s: mean_rate(per_seed[s][k][fig]) for s in per_seed}
                if method != BASELINE:
                    entry["change"] = pooled_paired_change({s: figures[BASELINE][s][k][fig] for s in per_seed},
                                                           {s: per_seed[s][k][fig] for s in per_seed})
                out.setdefault(method, {}).setdefault(k, {})[fig] = entry
    return out


def table(summary: Mapping[str, Any], budgets: Sequence[int]) -> str:
    rows = []
    for method, per_budget in summary.items():
        for k in budgets:
            e = per_budget[k]
            rows.append([method, k, fmt_mean_se(e["pass@1"]), fmt_mean_se(e["pass@n"]),
                         fmt_change(e["pass@1"]["change"]) if "change" in e["pass@1"] else "(baseline)",
                         fmt_change(e["pass@n"]["change"]) if "change" in e["pass@n"] else "(baseline)"])
    return markdown_table(["method", "nodes", "Pass@1 (mean ± SE over seeds)", "Pass@N", "Pass@1 change vs "
                           "best-of-N 1 agent (paired ± SE; tasks up/down)", "Pass@N change"], rows)


def run(cfg: ScalingConfig) -> dict[str, Any]:
    from coral.sandbox import Sandbox
    from experiments.efficacy_plot import scaling_svg

    t0 = time.perf_counter()
    with Sandbox(workers=2) as sandbox:
        if cfg.cold_dir is not None:
            shared = _folder_cold_start(Path(cfg.cold_dir))
            cold = {seed: shared for seed in cfg.seeds}
        elif cfg.cold_start_seed is None:
            cold = {seed: _cold_start(cfg, seed, sandbox) for seed in cfg.seeds}
        else:
            shared = _cold_start(cfg, cfg.cold_start_seed, sandbox)
            cold = {seed: shared for seed in cfg.seeds}
        print(f"cold starts ready ({time.perf_counter() - t0:.0f}s)", flush=True)
        val = validate(cfg, cold, sandbox)
        save_run(Path(cfg.out) / "validation.json", asdict(cfg), val)
        stop = too_weak(val, cfg.min_val_rate)
        if stop is not None:
            write_section(Path(cfg.results_md), "scaling", f"Stopped after validation (`{Path(cfg.out) / 'validation.json'}`): "
                          + stop + "\n")
            raise RuntimeError(stop)
        lo, hi = (int(x) for x in val["chosen"].split("-"))
        print(f"chosen on validation: depth {lo}-{hi} (per-sample pass rate {val['mean'][val['chosen']]:.3f})", flush=True)
        figures, stats = evaluate_test(cfg, cold, (lo, hi), sandbox)
    summary = summarise(figures, cfg.budgets)
    numbers = {"validation": val, "depth": [lo, hi], "summary": summary, "node_stats": stats,
               "wall_s": time.perf_counter() - t0}
    save_run(Path(cfg.out) / "results.json", asdict(cfg), numbers, per_task=figures)
    md = Path(cfg.results_md)
    svg = md.with_name("efficacy_scaling.svg")
    svg.write_text(scaling_svg(summary, cfg.budgets, f"held-out procedural tasks, depth {lo}-{hi}, "
                                                     f"{cfg.n_test_tasks} tasks x {len(cfg.seeds)} seeds"))
    head = (f"Depth {lo}-{hi} (chosen on validation; per-sample pass rate of the cold start by depth range: "
            + ", ".join(f"{d} {r:.3f}" for d, r in val["mean"].items()) + f"), {cfg.n_test_tasks} test tasks per "
            f"seed, seeds {list(cfg.seeds)}, cold start {cold_start_summary(cfg.mars2, cfg.cold_start_seed, cfg.cold_dir)}"
            f". Plot: `{svg.name}`.\n\n")
    why = ("\nWhy, from the test trees (private pass rate of each kind of node, node count in brackets):\n\n"
           + why_table(stats))
    write_section(md, "scaling", head + table(summary, cfg.budgets) + why)
    return numbers
