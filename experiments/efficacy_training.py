"""Studies B and C of issue #24: what RL buys over the cold start, over seeds with disjoint test tasks.

B (`mars2`): single-agent GRPO (best-of-N rollouts) against MARS2 without and with tree-consistent
shaping, at equal samples (same nodes per tree, tasks per step and RL steps), from one cached cold start
per seed (MARS2Config's defaults with the fields of `mars2` over them, e.g. the testbed's S3 setting). The RL learning rate of each variant is chosen on
validation-split tasks (mean Pass@1 over seeds); the test split is then searched once per variant with the
chosen run's final agents. Per-agent and system Pass@1 / Pass@N; paired changes against the cold start.
Finished runs and searches of the same config are read back, so seeds can train in parallel processes
(`mars2_test: false`, validation only) and one later run with every seed chooses the lrs and tests.

C (`corecode`): the CoRe-Code ablation (coder RL only, planner RL only, both; each run's own SFT
evaluation is the "SFT only" row) at the recipe's default settings (no tuning here), and single-coder
GRPO (MARS2's best-of-N recipe with one agent, as many codes per task as plans x codes) on the same test
tasks, compared by sampled pass@1 (the per-sample pass rate at the RL temperature).

Analysis of every run from its metrics.jsonl: training reward over the first and last steps and the
fraction of sampled turns with zero advantage (their group's rewards all tie, so they teach nothing).
Every run logs `kl_ref` (rl.log_kl: KL of the sampler to its cold start, k3, token mean) and `entropy`
(-log p of the sampled tokens); the analysis reads both over the first and last steps.
It does NOT tune CoRe-Code, and it reuses the recipes' trainers unchanged.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from experiments.efficacy_protocol import (
    best_of,
    fmt_change,
    fmt_mean_se,
    markdown_table,
    over_seeds,
    pooled_paired_change,
    save_run,
    write_section,
)
from experiments.efficacy_scaling import cold_start_summary

MARS2_VARIANTS = {  # name -> MARS2Config overrides
    "single-agent GRPO": dict(algorithm="best_of_n", shaping=False, agents=1),
    "MARS2, no shaping": dict(algorithm="abmcts", shaping=False),
    "MARS2 + shaping": dict(algorithm="abmcts", shaping=True),
}
CORECODE_VARIANTS = {"coder RL only": ("coder",), "planner RL only": ("planner",), "both (CoRe-Code)": ("planner", "coder")}
CORECODE_ROLES = ("retriever", "planner", "coder", "debugger")


def corecode_variants(roles: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Study C's runs for a chain of `roles`: each role's RL alone, every role but one, and all roles (the
    last is CoRe-Code). For planner and coder alone: CORECODE_VARIANTS, whose 'all but' runs are the
    'only' ones."""
    roles = tuple(r for r in CORECODE_ROLES if r in roles)
    if roles == ("planner", "coder"):
        return dict(CORECODE_VARIANTS)
    out = {f"{r} RL only": (r,) for r in roles}
    out.update({f"all but {r} RL": tuple(x for x in roles if x != r) for r in roles})
    out["all roles RL (CoRe-Code)"] = roles
    return out


@dataclass(frozen=True)
class TrainingStudyConfig:
    seeds: tuple[int, ...] = (0, 1, 2)
    rl_steps: int = 40  # RL steps of every variant (equal samples: same budget x tasks per step x steps)
    # B: RL learning rates tried on validation. At 5e-5 and 1e-4 seed 0's agents hardly moved in 40 steps (KL
    # to the cold start 0.001-0.011); a probe of 3e-4 on seed 0's validation split scored below 1e-4 for every
    # variant (single-agent GRPO 0.600, MARS2 0.600 and 0.560 with shaping, against 0.740, 0.740, 0.660), so
    # the other seeds did not run it (`--set '{"seeds": [0], "lrs": [3e-4], "mars2_test": false}'` reads it back)
    lrs: tuple[float, ...] = (5e-5, 1e-4)
    n_val_tasks: int = 50  # B: validation-split tasks per seed
    n_test_tasks: int = 100  # test-split tasks per seed
    max_nodes_per_tree: int = 8  # B: nodes per tree in training and evaluation
    tasks_per_step: int = 16
    max_new_tokens: int = 96  # B: longest code, in tokens
    # B: MARS2Config fields of the cold start and RL's tasks over the recipe's defaults, e.g. the testbed's best
    # setting S3 (docs/results/efficacy.md "The testbed": the defaults are not it)
    mars2: dict[str, Any] = field(default_factory=dict)
    # B: None, each seed RL-trains its own cold start; a seed: every seed starts from that seed's cold start (the
    # seeds then differ in RL streams, RL tasks and test tasks only: a third of the cold-start cost, blind to the
    # cold start's spread; study A's field of the same name). Runs go to seed<s>_cold<c> folders
    cold_start_seed: int | None = None
    # B: the variants trained (names of MARS2_VARIANTS), e.g. the papers' claim alone: single-agent GRPO and MARS2 +
    # shaping; the claims the table pairs are those whose two variants ran
    mars2_variants: tuple[str, ...] = tuple(MARS2_VARIANTS)
    # C: further CoReCodeConfig fields of every ablation run (e.g. {"n_train_tasks": 2000}); the single coder
    # takes n_train_tasks, max_new_tokens and plans x codes from the same resolved config
    corecode: dict[str, Any] = field(default_factory=dict)
    # C: the chain's roles (planner and coder, plus retriever and/or debugger); each role's RL on and off
    corecode_roles: tuple[str, ...] = ("planner", "coder")
    eval_samples_per_task: int = 4  # C: samples per test task for sampled pass@1
    single_coder: bool = True  # C: also train and score single-coder GRPO (false: the role ablation only)
    ablation: bool = True  # C: false runs the full chain's RL alone (no role's RL on its own), e.g. to fit a session
    # B: false trains and scores on validation only, so seeds can run in parallel processes; a later run with
    # every seed reads those runs back, chooses the lrs and searches the test split
    mars2_test: bool = True
    out: str = "runs/efficacy"
    cold_cache: str = "runs/efficacy_cold"
    results_md: str = "docs/results/efficacy.md"

    def __post_init__(self) -> None:
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"field 'seeds' must be distinct and non-empty, got {self.seeds}")
        if not self.lrs or min(self.lrs) <= 0:
            raise ValueError(f"field 'lrs' must be positive learning rates, got {self.lrs}")
        if self.rl_steps < 1:
            raise ValueError(f"field 'rl_steps' must be >= 1, got {self.rl_steps}")
        unknown_variants = [v for v in self.mars2_variants if v not in MARS2_VARIANTS]
        if unknown_variants or not self.mars2_variants:
            raise ValueError(f"field 'mars2_variants' must name some of {list(MARS2_VARIANTS)}, got {list(self.mars2_variants)}")
        if self.cold_start_seed is not None and self.cold_start_seed < 0:
            raise ValueError(f"field 'cold_start_seed' must be a seed >= 0 or null, got {self.cold_start_seed}")
        unknown = sorted(set(self.corecode_roles) - set(CORECODE_ROLES))
        if unknown or not {"planner", "coder"} <= set(self.corecode_roles):
            raise ValueError(f"field 'corecode_roles' must hold planner and coder and only {CORECODE_ROLES}, "
                             f"got {self.corecode_roles}")


def run_analysis(metrics_jsonl: Path, window: int = 3) -> dict[str, float]:
    """Training reward over the first and last `window` steps, and the fraction of sampled turns with
    zero advantage (turns minus trained turns, summed over every trained agent/role), from a run's
    metrics.jsonl; where the run logged them, the sampled entropy and the KL to the cold start (means over
    agents) over the first and last steps and the share of groups (trees for MARS2) whose rewards were all
    equal, averaged over steps. A frozen role (CoRe-Code's planner in "coder RL only") logs its turns and
    groups but trains none of them: it is left out of the turn and group shares."""
    steps = _read_steps(metrics_jsonl)
    turns = sum(v for m in steps for k, v in _trained(m).items() if k.endswith("/turns"))
    trained = sum(v for m in steps for k, v in _trained(m).items() if k.endswith("/trained_turns"))
    key = "reward" if "reward" in steps[0] else "coder/reward"
    first, last = steps[:window], steps[-window:]
    out = {"reward_first": sum(m[key] for m in first) / len(first), "reward_last": sum(m[key] for m in last) / len(last),
           "zero_advantage_turns": 1 - trained / turns if turns else float("nan"), "steps": len(steps)}
    for name, suffixes, where in (("entropy_first", ("/entropy",), first), ("entropy_last", ("/entropy",), last),
                                  ("kl_ref_first", ("/kl_ref",), first), ("kl_ref_last", ("/kl_ref",), last),
                                  ("zero_variance_groups", ("/zero_variance_groups", "zero_variance_trees"), steps)):
        values = [v for m in where for k, v in _trained(m).items() if k.endswith(suffixes)]
        if values:
            out[name] = sum(values) / len(values)
    return out


CURVES = ("training pass rate", "zero-advantage turns", "entropy (nats/token)", "KL to the cold start")


def run_curves(metrics_jsonl: Path) -> dict[str, list[float]]:
    """Per step, the figures `run_analysis` summarises (CURVES): the training samples' pass rate, the
    share of trained agents'/roles' turns with zero advantage, and the mean entropy and KL over trained
    agents/roles; a figure the run never logged is left out."""
    curves: dict[str, list[float]] = {}
    for m in _read_steps(metrics_jsonl):
        mine = _trained(m)
        turns = sum(v for k, v in mine.items() if k.endswith("/turns"))
        values = {"training pass rate": m.get("pass_rate"),
                  "zero-advantage turns": 1 - sum(v for k, v in mine.items() if k.endswith("/trained_turns")) / turns
                  if turns else None}
        for name, suffix in (("entropy (nats/token)", "/entropy"), ("KL to the cold start", "/kl_ref")):
            found = [v for k, v in mine.items() if k.endswith(suffix)]
            values[name] = sum(found) / len(found) if found else None
        for name, v in values.items():
            if v is not None:
                curves.setdefault(name, []).append(float(v))
    return curves


def write_curves(results_md: Path, study: str, runs: Mapping[str, Sequence[Path]], title: str) -> str:
    """Each variant's training curves (`run_curves` of its seeds' run folders, mean over seeds up to the
    shortest run) drawn to `efficacy_<study>_curves.svg` beside `results_md`; returns the markdown line
    naming it."""
    from experiments.efficacy_plot import curves_svg

    per_variant = {}
    for name, folders in runs.items():
        each = [run_curves(Path(f) / "metrics.jsonl") for f in folders]
        per_variant[name] = {c: [sum(vs) / len(vs) for vs in zip(*(e[c] for e in each), strict=False)]  # up to the shortest run
                             for c in CURVES if all(c in e for e in each)}
    steps = max((len(v) for curves in per_variant.values() for v in curves.values()), default=1)
    window = max(1, steps // 20)
    svg = Path(results_md).with_name(f"efficacy_{study}_curves.svg")
    svg.write_text(curves_svg(per_variant, CURVES, title, window))
    return f"Training curves (means over seeds, {window}-step trailing average): `{svg.name}`.\n"


def _read_steps(metrics_jsonl: Path) -> list[dict[str, float]]:
    if not metrics_jsonl.is_file():
        raise FileNotFoundError(f"{metrics_jsonl}: no metrics log (did the run train?)")
    steps = [json.loads(line) for line in metrics_jsonl.read_text().splitlines() if line.strip()]
    if not steps:
        raise ValueError(f"{metrics_jsonl}: no steps logged")
    return steps


def _trained(step: Mapping[str, float]) -> dict[str, float]:
    """One step's metrics without those of frozen agents/roles (a "role/..." key whose role logged turns
    but no trained turns that step); unprefixed keys stay."""
    def frozen(role: str) -> bool:
        return f"{role}/turns" in step and f"{role}/trained_turns" not in step

    return {k: v for k, v in step.items() if "/" not in k or not frozen(k.split("/")[0])}


def _mars2_base(cfg: TrainingStudyConfig, seed: int, **fields: Any) -> Any:
    from coral.config import from_mapping
    from coral.mars2.recipe import MARS2Config

    base = from_mapping(MARS2Config, {**cfg.mars2, "seed": seed, "rl_steps": cfg.rl_steps, "n_test_tasks": cfg.n_test_tasks,
                                      "max_nodes_per_tree": cfg.max_nodes_per_tree, "tasks_per_step": cfg.tasks_per_step,
                                      "max_new_tokens": cfg.max_new_tokens, **fields}, "--set mars2")
    return replace(base, rl=replace(base.rl, log_kl=True))


def _per_task(trees: Sequence[Any]) -> dict[str, dict[str, float]]:
    return {"pass@1": {t.task_id: float(t.pass_at_1()) for t in trees},
            "pass@n": {t.task_id: float(t.pass_at_n()) for t in trees}}


def _mars2_seed(cfg: TrainingStudyConfig, seed: int, sandbox: Any) -> dict[str, Any]:
    """Cold-start test figures, and every (variant, lr) run trained and scored on validation. Finished runs
    and searches of the same config are read back, not run again."""
    from coral.benchmarks.procedural import make_tasks
    from coral.benchmarks.splits import build_tasks
    from coral.mars2.recipe import train_mars2
    from experiments.mars2_compare import cached_cold_start

    mcfg = _mars2_base(cfg, seed)
    train, test = build_tasks(mcfg.splits)
    val = make_tasks(cfg.n_val_tasks, "validation", min_depth=mcfg.min_depth, max_depth=mcfg.max_depth, seed=seed)
    ccfg = mcfg if cfg.cold_start_seed is None else replace(mcfg, seed=cfg.cold_start_seed)
    cold = functools.cache(lambda: cached_cold_start(ccfg, train if ccfg is mcfg else build_tasks(ccfg.splits)[0],
                                                     sandbox, Path(cfg.cold_cache)))
    out: dict[str, Any] = {"test": {}, "val": {}}
    for n in (1, 2):
        name, ncfg = f"cold start, {n} agent{'s' * (n > 1)}", replace(mcfg, agents=n)
        out["test"][name] = search_once(Path(run_dir(cfg, "mars2", seed, name)) / "test.json", ncfg,
                                        lambda n=n: cold()[:n], test, sandbox)
    for name in cfg.mars2_variants:
        for lr in cfg.lrs:
            vcfg = _variant_config(cfg, mcfg, name, lr)
            if finished(Path(vcfg.out_dir), vcfg):
                summary = json.loads((Path(vcfg.out_dir) / "summary.json").read_text())
            else:
                summary = train_mars2(vcfg, policies=cold()[:vcfg.agents], tasks=(train, val), sandbox=sandbox,
                                      progress=False, eval_before=False)
            out["val"].setdefault(name, {})[lr] = summary["after"]["pass@1"]
            print(f"seed {seed} {name} lr {lr:g}: validation pass@1 {summary['after']['pass@1']:.3f}", flush=True)
    return out


def _variant_config(cfg: TrainingStudyConfig, mcfg: Any, name: str, lr: float) -> Any:
    return replace(mcfg, out_dir=run_dir(cfg, "mars2", mcfg.seed, name, lr), rl=replace(mcfg.rl, lr=lr),
                   **MARS2_VARIANTS[name])


def finished(out: Path, config: Any) -> bool:
    """`out` holds a finished run (summary.json) written with exactly `config`."""
    saved = out / "config.json"
    return (out / "summary.json").is_file() and saved.is_file() and json.loads(saved.read_text()) == _as_saved(config)


def _as_saved(config: Any) -> Any:
    """`config` as it reads back from JSON (tuples become lists), to compare with a saved one."""
    return json.loads(json.dumps(asdict(config)))


def read_back(path: Path, config: Any) -> Any:
    """The numbers `write_back` saved at `path` with exactly `config`; None where there are none."""
    if not path.is_file():
        return None
    saved = json.loads(path.read_text())
    return saved["numbers"] if saved["config"] == _as_saved(config) else None


def write_back(path: Path, config: Any, numbers: Any) -> Any:
    """Save `numbers` with the `config` that made them (atomically) and return them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"config": asdict(config), "numbers": numbers}))
    tmp.replace(path)
    return numbers


def search_once(path: Path, config: Any, policies: Callable[[], Sequence[Any]], tasks: Sequence[Any],
                sandbox: Any) -> dict[str, Any]:
    """Per-task and summary figures of `config`'s search of `tasks` with `policies()`, saved at `path`
    (`write_back`) and read back from there, without loading the policies, when run again."""
    from coral.mars2.recipe import evaluate_search

    numbers = read_back(path, config)
    if numbers is None:
        metrics, trees = evaluate_search(config, policies(), tasks, sandbox)
        numbers = write_back(path, config, {"metrics": metrics, **_per_task(trees)})
    return numbers


def run_dir(cfg: TrainingStudyConfig, study: str, seed: int, name: str, lr: float | None = None) -> str:
    slug = "".join(c if c.isalnum() else "_" for c in name).strip("_")
    shared = study == "mars2" and cfg.cold_start_seed is not None
    folder = f"seed{seed}" + (f"_cold{cfg.cold_start_seed}" if shared else "")
    return str(Path(cfg.out) / study / folder / (slug + (f"_lr{lr:g}" if lr is not None else "")))


def _mars2_test(cfg: TrainingStudyConfig, seed: int, name: str, lr: float, sandbox: Any) -> dict[str, Any]:
    """The chosen run's final agents searched on this seed's test split (once; read back after that)."""
    from coral.benchmarks.splits import build_tasks
    from coral.policy.hf import HFPolicy

    vcfg = _variant_config(cfg, _mars2_base(cfg, seed), name, lr)
    where = Path(vcfg.out_dir)
    numbers = search_once(where / "test.json", vcfg,
                          lambda: [HFPolicy.load(where / "final" / f"agent{i}") for i in range(vcfg.agents)],
                          build_tasks(vcfg.splits)[1], sandbox)
    return {**numbers, "analysis": run_analysis(where / "metrics.jsonl")}


def run_mars2(cfg: TrainingStudyConfig) -> dict[str, Any]:
    from coral.sandbox import Sandbox

    with Sandbox(workers=2) as sandbox:
        per_seed = {seed: _mars2_seed(cfg, seed, sandbox) for seed in cfg.seeds}
        if not cfg.mars2_test:
            print("validation only (mars2_test false): run again with every seed to choose the lrs and search "
                  "the test split", flush=True)
            return {"per_seed": per_seed}
        chosen = {name: best_of({str(lr): over_seeds({s: per_seed[s]["val"][name][lr] for s in cfg.seeds})["mean"]
                                 for lr in cfg.lrs}) for name in cfg.mars2_variants}
        for seed in cfg.seeds:
            for name, lr in chosen.items():
                per_seed[seed]["test"][name] = _mars2_test(cfg, seed, name, float(lr), sandbox)
    rows = _mars2_rows(per_seed, chosen) + _mars2_pairs(per_seed)
    numbers = {"chosen_lr": chosen, "per_seed": per_seed}
    save_run(Path(cfg.out) / "mars2" / "results.json", asdict(cfg), numbers)
    head = (f"Seeds {list(cfg.seeds)}, {cfg.n_test_tasks} test tasks each, {cfg.rl_steps} RL steps x {cfg.tasks_per_step} "
            f"tasks x {cfg.max_nodes_per_tree} nodes, cold start {cold_start_summary(cfg.mars2, cfg.cold_start_seed)}; "
            f"lr per variant chosen on validation: {chosen}.\n\n")
    trained = {name: [run_dir(cfg, "mars2", s, name, float(lr)) for s in cfg.seeds] for name, lr in chosen.items()}
    curves = write_curves(Path(cfg.results_md), "mars2", trained, f"study B, seeds {list(cfg.seeds)}, chosen lrs")
    write_section(Path(cfg.results_md), "mars2", head + rows + "\n" + curves)
    return numbers


def _mars2_rows(per_seed: Mapping[int, Any], chosen: Mapping[str, str]) -> str:
    seeds = sorted(per_seed)
    rows = []
    for name in per_seed[seeds[0]]["test"]:
        base = "cold start, 1 agent" if name.startswith(("cold start, 1", "single")) else "cold start, 2 agents"
        cells = [name, chosen.get(name, "-")]
        for fig in ("pass@1", "pass@n"):
            cells.append(fmt_mean_se(over_seeds({s: per_seed[s]["test"][name]["metrics"][fig] for s in seeds})))
        change = pooled_paired_change({s: per_seed[s]["test"][base]["pass@1"] for s in seeds},
                                      {s: per_seed[s]["test"][name]["pass@1"] for s in seeds})
        cells.append("-" if name == base else fmt_change(change))
        agents = sorted(k for k in per_seed[seeds[0]]["test"][name]["metrics"] if k.startswith("agent/") and k.endswith("pass@1"))
        cells.append("; ".join(f"{k.split('/')[1]} {over_seeds({s: per_seed[s]['test'][name]['metrics'].get(k, float('nan')) for s in seeds})['mean']:.3f}"
                               for k in agents))
        a = [per_seed[s]["test"][name].get("analysis") for s in seeds]
        cells += ["-", "-"] if a[0] is None else analysis_cells(a)
        rows.append(cells)
    return markdown_table(["variant", "lr", "Pass@1", "Pass@N", "Pass@1 change vs its cold start (paired)",
                           "per-agent Pass@1 (its own nodes in the shared tree)", "train reward first → last 3 steps; zero-advantage turns; flat groups",
                           "entropy first → last; KL to cold start last"], rows)


def _mars2_pairs(per_seed: Mapping[int, Any]) -> str:
    """The papers' two claims as paired Pass@1 changes after RL: MARS2 against single-agent GRPO, and
    shaping against none."""
    def rates(name: str) -> dict[int, Any]:
        return {s: per_seed[s]["test"][name]["pass@1"] for s in per_seed}

    ran = set(per_seed[next(iter(per_seed))]["test"])
    pairs = [(a, b) for a, b in (("MARS2, no shaping", "single-agent GRPO"), ("MARS2 + shaping", "single-agent GRPO"),
                                 ("MARS2 + shaping", "MARS2, no shaping")) if {a, b} <= ran]
    return "\n" + "".join(f"{a} against {b}, after RL (Pass@1, paired per task): "
                          f"{fmt_change(pooled_paired_change(rates(b), rates(a)))}\n" for a, b in pairs)


def analysis_cells(runs: Sequence[Mapping[str, float]]) -> list[str]:
    """Two table cells from the `run_analysis` of each seed's run (means over seeds; `n/a` where a run did
    not log the figure): reward first → last; zero-advantage turns; flat groups, and entropy; KL."""
    def mean(key: str, fmt: str) -> str:
        values = [r[key] for r in runs if key in r]
        return format(sum(values) / len(values), fmt) if len(values) == len(runs) else "n/a"

    return [f"{mean('reward_first', '.3f')} → {mean('reward_last', '.3f')}; {mean('zero_advantage_turns', '.2f')}; "
            f"{mean('zero_variance_groups', '.2f')}",
            f"{mean('entropy_first', '.2f')} → {mean('entropy_last', '.2f')}; {mean('kl_ref_last', '.4f')}"]
