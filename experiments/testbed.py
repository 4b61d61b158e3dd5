"""Measure a testbed setting on the validation split: does the cold start give the algorithms what they
exploit? (the targets of docs/results/efficacy.md, "The testbed"):

    PYTHONPATH=. python -m experiments.testbed --set '{"name": "idioms x2", "mars2": {"solutions_per_task": 2}}'

A setting is a MARS2 cold start (`mars2`: MARS2Config fields) and optionally a CoRe-Code one (`corecode`:
CoReCodeConfig fields; planner and coder SFT'd at the recipe's cold start). Both are cached under
`cold_cache` by a hash of the fields that make them (a MARS2 cold start as the studies cache it,
mars2_compare.cached_cold_start: in two levels, so settings that differ only in the second SFT share the first).
On `n_val_tasks` validation tasks at the RL temperature it measures, per MARS2 agent, `samples` fresh answers
per task (entropy, flat best-of-N groups, pass@1, pass@k) and one refinement of each (refine of a failing
code against fresh samples of the same task, keep rate of a passing code), the agents' gap and failure
correlation, AB-MCTS-A trees of all agents (flat trees, Pass@1 / Pass@N), and CoRe-Code's rollout (flat coder
and planner groups, pass@1 / pass@8). Each run appends one row (setting, figures, command, commit, date, load
average) to `rows` (tracked beside the results page, so a fresh clone keeps every setting measured before) and
rewrites the table of every row in `results_md` (section "testbed"); the new row's figures are printed.

This module does NOT choose a setting (a person reads the table against the targets) and never touches the
test split.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from experiments.efficacy_protocol import markdown_table, provenance, set_fields, write_section
from experiments.testbed_measures import (
    agent_figures,
    corecode_chain,
    diversity,
    fresh_samples,
    mars2_trees,
    repair,
    rounded,
)


@dataclass(frozen=True)
class TestbedConfig:
    name: str = "default"  # the setting's name in the table
    seed: int = 0  # cold-start seed (and the validation draw, unless val_seed is set)
    # seed of the validation tasks and of the measurement's samples (None: `seed`); set it to measure the cold starts
    # of several seeds on the same tasks
    val_seed: int | None = None
    mars2: dict[str, Any] | None = field(default_factory=dict)  # MARS2Config fields of the cold start (None: not measured)
    corecode: dict[str, Any] | None = None  # CoReCodeConfig fields of a CoRe-Code cold start (None: not measured)
    # a CoRe-Code run directory (e.g. runs/demo) whose kept cold start (sft/cold_start) is measured, with that
    # run's config, instead of training one from `corecode`
    corecode_from: str | None = None
    # a finished MARS2 cold start folder (agent0, agent1, ...) to measure instead of the one `mars2` makes
    cold_dir: str | None = None
    n_val_tasks: int = 60  # validation tasks
    min_depth: int = 1  # validation tasks' depth range
    max_depth: int = 2
    samples: int = 8  # fresh answers per task and agent (pass@k for k up to this)
    tree_nodes: int = 8  # AB-MCTS-A nodes per tree (MARS2's RL and evaluation budget; 0: no trees measured)
    # ProceduralConfig fields of the validation tasks (e.g. {"report_output": false}: the failing-test feedback
    # of the family before it reported the value returned, which older cold starts were trained on)
    procedural: dict[str, Any] = field(default_factory=dict)
    # CoRe-Code's rollout shapes measured, (plans per task, codes per plan): the recipe's 4 x 2 and 2 x 4 (the
    # same 8 codes per task, twice the codes per coder group)
    chain_shapes: tuple[tuple[int, int], ...] = ((4, 2), (2, 4))
    rows: str = "docs/results/testbed_rows.jsonl"  # every measured setting's row; the table is made from them
    cold_cache: str = "runs/testbed/cold"
    results_md: str = "docs/results/efficacy.md"

    def __post_init__(self) -> None:
        for name in ("n_val_tasks", "samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"field {name!r} must be >= 1, got {getattr(self, name)}")
        if not self.chain_shapes or any(len(s) != 2 or min(s) < 1 for s in self.chain_shapes):
            raise ValueError(f"field 'chain_shapes' must hold (plans, codes) pairs >= 1, got {self.chain_shapes}")
        if self.tree_nodes < 0:
            raise ValueError(f"field 'tree_nodes' must be >= 0, got {self.tree_nodes}")
        if self.val_seed is not None and self.val_seed < 0:
            raise ValueError(f"field 'val_seed' must be >= 0 or None, got {self.val_seed}")
        if self.samples < 2:
            raise ValueError(f"field 'samples' must be >= 2 (a group of one has no spread), got {self.samples}")


def _key(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:12]


def corecode_cold_start(ccfg: Any, train: list[Any], sandbox: Any, cache: Path) -> tuple[str, dict[str, Any]]:
    """(cache name, planner and coder) after CoRe-Code's cold start (SFT of each role), trained once per config."""
    from coral.corecode.setup import build_policies, sft_corecode
    from coral.policy.hf import HFPolicy

    fields = {k: v for k, v in json.loads(json.dumps(asdict(ccfg), default=str)).items()
              if k not in ("out_dir", "rl_steps", "resume", "sandbox_workers", "sft_processes", "n_test_tasks",
                           "n_fresh_tasks", "eval_batch_samples", "eval_samples_per_task", "checkpoint_every_steps")}
    where = cache / f"corecode-{_key(fields)}"
    if (where / "done").exists():
        return where.name, {role: HFPolicy.load(where / role) for role in ccfg.chain_roles}
    policies = build_policies(ccfg, train, sandbox)
    sft_corecode(replace(ccfg, out_dir=str(where)), policies, train, progress=True, sandbox=sandbox)
    for role, policy in policies.items():
        policy.save(where / role)
    (where / "key.json").write_text(json.dumps(fields, indent=2))
    (where / "done").touch()
    shutil.rmtree(where / "sft_ckpt", ignore_errors=True)
    return where.name, policies


def _kept_corecode_cold_start(run: Path, sandbox: Any) -> tuple[str, Any, dict[str, Any]]:
    """(name, config, planner and coder) of the cold start a CoRe-Code run kept (its config.json and
    sft/cold_start: the policies are built as that run built them, then loaded)."""
    from coral.benchmarks.splits import build_tasks
    from coral.config import from_mapping
    from coral.corecode.config import CoReCodeConfig
    from coral.corecode.fork import COLD_START_DIR, load_kept_cold_start
    from coral.corecode.setup import build_policies
    from experiments.mars2_compare import weights_name

    ccfg = from_mapping(CoReCodeConfig, json.loads((run / "config.json").read_text()), str(run / "config.json"))
    policies = build_policies(ccfg, build_tasks(ccfg.splits)[0], sandbox)
    load_kept_cold_start(run, policies)
    return weights_name(run / COLD_START_DIR, "*.pt"), ccfg, policies


def measure(cfg: TestbedConfig) -> dict[str, Any]:
    """Every figure of the module docstring for one setting; the row saved and the table rewritten."""
    from coral.benchmarks.procedural import ProceduralConfig, make_tasks
    from coral.config import from_mapping
    from coral.sandbox import Sandbox

    t0 = time.perf_counter()
    family = from_mapping(ProceduralConfig, cfg.procedural, "--set procedural")
    val = make_tasks(cfg.n_val_tasks, "validation", min_depth=cfg.min_depth, max_depth=cfg.max_depth,
                     seed=draw_seed(cfg), config=family)
    figures: dict[str, Any] = {}
    name = None
    with Sandbox(workers=2) as sandbox:
        if cfg.mars2 is not None:
            name = _mars2(cfg, val, sandbox, figures)
        if cfg.corecode is not None or cfg.corecode_from:
            figures.update(_corecode(cfg, val, sandbox))
    row = {"name": cfg.name, "setting": asdict(cfg), "cold_start": name, "figures": rounded(figures),
           **provenance(), "wall_s": round(time.perf_counter() - t0)}
    save_row(row, Path(cfg.rows), Path(cfg.results_md))
    print(table([row]), flush=True)
    return row


def draw_seed(cfg: TestbedConfig) -> int:
    """The seed of the validation tasks and of the measurement's samples."""
    return cfg.seed if cfg.val_seed is None else cfg.val_seed


def save_row(row: dict[str, Any], rows: Path, results_md: Path) -> None:
    """Append `row` to the `rows` file and rewrite the testbed table of `results_md` from all its rows."""
    rows.parent.mkdir(parents=True, exist_ok=True)
    with rows.open("a") as f:
        f.write(json.dumps(row) + "\n")
    write_section(results_md, "testbed", table([json.loads(x) for x in rows.read_text().splitlines()]))


def _mars2(cfg: TestbedConfig, val: list[Any], sandbox: Any, figures: dict[str, Any]) -> str:
    """MARS2's figures (into `figures`) of the cold start of `cfg.mars2` (or `cfg.cold_dir`); its name."""
    from coral.benchmarks.splits import build_tasks
    from coral.config import from_mapping
    from coral.mars2.recipe import MARS2Config, make_tree_agents
    from experiments.mars2_compare import _load, cached_cold_start, cold_start_name, weights_name

    t0 = time.perf_counter()
    mcfg = from_mapping(MARS2Config, {**(cfg.mars2 or {}), "seed": cfg.seed}, "--set mars2")
    if cfg.cold_dir:
        name = weights_name(Path(cfg.cold_dir))  # the row names the weights it measured
        policies = _load(Path(cfg.cold_dir), mcfg.agents)
    else:
        policies = cached_cold_start(mcfg, build_tasks(mcfg.splits)[0], sandbox, Path(cfg.cold_cache), progress=True)
        name = cold_start_name(mcfg, Path(cfg.cold_cache))
    print(f"cold start {name} ready ({time.perf_counter() - t0:.0f}s)", flush=True)
    agents = make_tree_agents(mcfg, policies)
    per_task = []
    for i, agent in enumerate(agents):
        trees = fresh_samples(agent, val, sandbox, cfg.samples, draw_seed(cfg))
        div = diversity(trees)
        per_task.append(div.pop("per_task"))
        figures.update({f"agent{i}_{k}": v for k, v in div.items()})
        figures.update({f"agent{i}_{k}": v for k, v in repair(agent, val, trees, sandbox).items()})
        print(f"agent{i}: {rounded(div)}", flush=True)
    figures.update(agent_figures(per_task))
    if cfg.tree_nodes:
        figures.update(mars2_trees(agents, val, sandbox, cfg.tree_nodes, draw_seed(cfg)))
    return name


def _corecode(cfg: TestbedConfig, val: list[Any], sandbox: Any) -> dict[str, float]:
    from coral.benchmarks.splits import build_tasks
    from coral.config import from_mapping
    from coral.corecode.config import CoReCodeConfig
    from coral.corecode.setup import make_agents
    from coral.seeding import EVAL_STEP

    if cfg.corecode_from:
        name, ccfg, policies = _kept_corecode_cold_start(Path(cfg.corecode_from), sandbox)
    else:
        ccfg = from_mapping(CoReCodeConfig, {**(cfg.corecode or {}), "seed": cfg.seed}, "--set corecode")
        name, policies = corecode_cold_start(ccfg, build_tasks(ccfg.splits)[0], sandbox, Path(cfg.cold_cache))
    agents = make_agents(ccfg, policies)
    out: dict[str, Any] = {"corecode_cold_start": name}
    for plans, codes in cfg.chain_shapes:
        figures = corecode_chain(agents["planner"], agents["coder"], val, sandbox, plans, codes, EVAL_STEP)
        out.update({f"{k}@{plans}x{codes}": v for k, v in figures.items()})
    return out


MARS2_COLUMNS = (  # (header, figure keys joined by " / ")
    ("entropy a0 / a1", ("agent0_entropy", "agent1_entropy")),
    ("flat best-of-8 groups a0 / a1", ("agent0_flat_groups", "agent1_flat_groups")),
    ("flat MARS2 trees", ("tree_flat",)),
    ("pass@1 a0 / a1", ("agent0_pass@1", "agent1_pass@1")),
    ("pass@8 a0 / a1", ("agent0_pass@8", "agent1_pass@8")),
    ("refine failing a0 / a1", ("agent0_refine_fail", "agent1_refine_fail")),
    ("fresh, same tasks a0 / a1", ("agent0_fresh_same_tasks", "agent1_fresh_same_tasks")),
    ("keep passing a0 / a1", ("agent0_keep", "agent1_keep")),
    ("agent gap (relative) / its SE", ("agent_gap", "agent_gap_se")),
    ("failure correlation", ("failure_correlation",)),
    ("AB-MCTS-A Pass@1 / Pass@N", ("tree_pass@1", "tree_pass@n")),
)
CORECODE_COLUMNS = (
    ("entropy planner / coder", ("planner_entropy@4x2", "coder_entropy@4x2")),
    ("4 x 2: flat coder groups (all pass / fraction) / planner groups", ("coder_flat@4x2", "coder_flat_fraction@4x2",
                                                                        "planner_flat@4x2")),
    ("4 x 2: pass@1 / pass@8", ("chain_pass@1@4x2", "chain_pass@8@4x2")),
    ("2 x 4: flat coder groups (all pass / fraction) / planner groups", ("coder_flat@2x4", "coder_flat_fraction@2x4",
                                                                        "planner_flat@2x4")),
)


def _cell(figures: dict[str, Any], keys: tuple[str, ...]) -> str:
    if not any(k in figures for k in keys):
        return "-"
    return " / ".join(f"{figures[k]:.2f}" if isinstance(figures.get(k), (int, float)) else "-" for k in keys)


def table(rows: list[dict[str, Any]]) -> str:
    """Every measured setting, in the order measured: MARS2's figures, then CoRe-Code's (each table only the
    settings that measured it), each row with its provenance."""
    def provenance_cell(r: dict[str, Any]) -> str:
        return f"{r['commit']}, {r['date_utc']}, load {r['loadavg'].split()[0] if r['loadavg'] else '?'}"

    mars2 = [[r["name"], *(_cell(r["figures"], keys) for _, keys in MARS2_COLUMNS), provenance_cell(r)]
             for r in rows if "agent0_pass@1" in r["figures"]]
    corecode = [[r["name"], *(_cell(r["figures"], keys) for _, keys in CORECODE_COLUMNS), provenance_cell(r)]
                for r in rows if "corecode_cold_start" in r["figures"]]
    head = ["setting", "commit, date (UTC), load"]
    sections = [f"{title} (validation):\n\n" + markdown_table([head[0], *(h for h, _ in columns), head[1]], cells)
                for title, columns, cells in (("MARS2's agents", MARS2_COLUMNS, mars2),
                                              ("CoRe-Code's planner and coder", CORECODE_COLUMNS, corecode)) if cells]
    return "\n".join(sections)


def main(argv: list[str] | None = None) -> None:
    from coral.config import from_mapping

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="{}", help="JSON of TestbedConfig fields")
    args = ap.parse_args(argv)
    fields = set_fields(args.set)
    measure(from_mapping(TestbedConfig, fields, "--set"))


if __name__ == "__main__":
    main()
