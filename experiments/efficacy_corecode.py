"""Study C of issue #24: the CoRe-Code ablation (SFT only, coder RL only, planner RL only, both) and
CoRe-Code against single-coder GRPO given the same number of sampled codes per task, over seeds. With
`corecode_roles` holding a retriever and/or a debugger (issue #25), the ablation is each role's RL alone,
every role's but one, and all roles; the single coder then gets the coder's codes per task only (the
debugger's rewrites are extra samples CoRe-Code draws).

Each ablation run is `train_corecode` at the recipe's defaults with `train_roles` set (no tuning: the
defaults come from earlier studies, docs/results/corecode.md); its own evaluation after SFT is the
"SFT only" figure, so every change is paired against the same cold start. Single-coder GRPO is MARS2's
best-of-N recipe with one agent of the coder's shape, `plans_per_task x codes_per_plan` codes per task,
the same tasks per step, RL steps, the coder's SFT (epochs, gold codes per task) and learning rate; both are
scored by sampled pass@1 (the per-sample pass rate at the RL temperature) on the same test tasks. The single
coder has the coder's shape (d_model, n_layers).

This module does NOT change either recipe; see experiments/efficacy_training.py for the shared analysis.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from experiments.efficacy_protocol import (
    fmt_change,
    fmt_mean_se,
    markdown_table,
    mean_rate,
    over_seeds,
    pooled_paired_change,
    save_run,
    write_section,
)
from experiments.efficacy_training import (
    TrainingStudyConfig,
    analysis_cells,
    corecode_variants,
    finished,
    run_analysis,
    run_dir,
    write_curves,
)

SINGLE = "single-coder GRPO"


def corecode_config(cfg: TrainingStudyConfig, seed: int, name: str) -> Any:
    """The ablation run's CoReCodeConfig: the study's shared fields over `cfg.corecode`, the chain of
    `cfg.corecode_roles` (one debug round, one retrieved example, unless `cfg.corecode` says otherwise),
    trained roles from `name`. Every variant of a seed has the same chain, so the same tokenizer and SFT: the
    full variant trains it, the others start from it (`cold_start_from`) instead of training it again."""
    from coral.config import from_mapping
    from coral.corecode.recipe import CoReCodeConfig

    chain = {"debug_rounds": int("debugger" in cfg.corecode_roles), "retrieved_examples": int("retriever" in cfg.corecode_roles)}
    fields = {"n_fresh_tasks": 0, **chain, **cfg.corecode, "seed": seed, "rl_steps": cfg.rl_steps, "n_test_tasks": cfg.n_test_tasks,
              "tasks_per_step": cfg.tasks_per_step, "eval_samples_per_task": cfg.eval_samples_per_task,
              "train_roles": list(corecode_variants(cfg.corecode_roles)[name]), "out_dir": run_dir(cfg, "corecode", seed, name),
              "cold_start_from": None if name == full_variant(cfg) else run_dir(cfg, "corecode", seed, full_variant(cfg))}
    ccfg = from_mapping(CoReCodeConfig, fields, "--set corecode")
    return replace(ccfg, rl=replace(ccfg.rl, log_kl=True))


def _corecode_run(cfg: TrainingStudyConfig, seed: int, name: str) -> dict[str, Any]:
    from coral.corecode.recipe import train_corecode
    from coral.evaluation import task_pass_rates

    ccfg = corecode_config(cfg, seed, name)
    out = Path(ccfg.out_dir)
    # a finished run of this very config is read back (a rerun of the study, or seeds run in parallel
    # processes and tabled together); another config there is refused by the recipe's resume guard
    summary = json.loads((out / "summary.json").read_text()) if finished(out, ccfg) else train_corecode(ccfg, progress=False)
    return {"sft": task_pass_rates(out / "eval_sft_sampled" / "samples.jsonl"),
            "rl": task_pass_rates(out / "eval_rl_sampled" / "samples.jsonl"),
            "greedy": {"sft": summary["pass@1_sft"], "rl": summary["pass@1_rl"]},
            "greedy_tasks": {w: task_pass_rates(out / f"eval_{w}" / "samples.jsonl") for w in ("sft", "rl")},
            "analysis": run_analysis(out / "metrics.jsonl")}


def _single_coder(cfg: TrainingStudyConfig, seed: int, ccfg: Any, sandbox: Any) -> dict[str, Any]:
    """MARS2's single-agent best-of-N GRPO with CoRe-Code's codes per task, train tasks, code length, SFT
    and learning rate (`ccfg`); sampled pass@1 per task from `eval_samples_per_task` independent samples
    on the test split, before and after RL."""
    from coral.benchmarks.procedural import make_tasks
    from coral.benchmarks.splits import build_tasks
    from coral.mars2.recipe import MARS2Config, make_tree_agents, train_mars2
    from coral.mars2.tree import TreeConfig, search
    from coral.policy.hf import HFPolicy
    from coral.seeding import EVAL_STEP
    from experiments.efficacy_scaling import sample_pass_rate
    from experiments.mars2_compare import cached_cold_start

    codes_per_task = ccfg.plans_per_task * ccfg.codes_per_plan
    base = MARS2Config(seed=seed, agents=1, algorithm="best_of_n", shaping=False, n_train_tasks=ccfg.n_train_tasks,
                       n_test_tasks=ccfg.n_test_tasks, rl_steps=ccfg.rl_steps, tasks_per_step=ccfg.tasks_per_step,
                       max_nodes_per_tree=codes_per_task, max_new_tokens=ccfg.max_new_tokens,
                       min_depth=ccfg.min_depth, max_depth=ccfg.max_depth, out_dir=run_dir(cfg, "corecode", seed, SINGLE),
                       # the coder's shape and gold codes per task; best-of-N never refines: no refine examples
                       agent_shapes=((ccfg.d_model, ccfg.n_layers),), solutions_per_task=ccfg.sft_codes_per_task,
                       refine_from="mutants", refine_examples=0)
    coder_epochs = ccfg.sft.epochs if ccfg.sft_coder_epochs is None else ccfg.sft_coder_epochs
    mcfg = replace(base, sft=replace(base.sft, epochs=coder_epochs, lr=ccfg.sft.lr, batch_size=ccfg.sft.batch_size),
                   rl=replace(base.rl, lr=ccfg.rl.lr, log_kl=True))
    done = Path(mcfg.out_dir) / "pass_rates.json"
    if finished(Path(mcfg.out_dir), mcfg) and done.is_file():
        return {**json.loads(done.read_text()), "analysis": run_analysis(Path(mcfg.out_dir) / "metrics.jsonl")}
    train, test = build_tasks(mcfg.splits)
    cold = cached_cold_start(mcfg, train, sandbox, Path(cfg.cold_cache))
    # train_mars2 searches its second task list after RL: one validation task, so the test split is searched once
    val = make_tasks(1, "validation", min_depth=mcfg.min_depth, max_depth=mcfg.max_depth, seed=seed)
    train_mars2(mcfg, policies=cold, tasks=(train, val), sandbox=sandbox, progress=False, eval_before=False)
    trained = [HFPolicy.load(Path(mcfg.out_dir) / "final" / "agent0")]
    rates = {}
    for when, policies in (("sft", cold), ("rl", trained)):
        trees = search(test, make_tree_agents(mcfg, policies), sandbox,
                       TreeConfig("best_of_n", cfg.eval_samples_per_task, seed=seed), step=EVAL_STEP)
        rates[when] = {t.task_id: sample_pass_rate([t]) for t in trees}
    done.write_text(json.dumps(rates))
    return {**rates, "analysis": run_analysis(Path(mcfg.out_dir) / "metrics.jsonl")}


def run_corecode(cfg: TrainingStudyConfig) -> dict[str, Any]:
    from coral.sandbox import Sandbox

    per_seed: dict[int, dict[str, Any]] = {}
    full = full_variant(cfg)
    names = list(corecode_variants(cfg.corecode_roles)) if cfg.ablation else [full]
    for seed in cfg.seeds:
        done = {full: _corecode_run(cfg, seed, full)}  # first: its cold start is shared
        runs = {name: done.get(name) or _corecode_run(cfg, seed, name) for name in names}
        if cfg.single_coder:
            with Sandbox(workers=2) as sandbox:
                runs[SINGLE] = _single_coder(cfg, seed, corecode_config(cfg, seed, full), sandbox)
        per_seed[seed] = runs
    table = _corecode_rows(per_seed, full) + "\n" + _seed_rows(per_seed, full)
    save_run(Path(cfg.out) / "corecode" / "results.json", asdict(cfg), {"per_seed": per_seed})
    head = (f"Seeds {list(cfg.seeds)}, {cfg.n_test_tasks} test tasks each, {cfg.rl_steps} RL steps, sampled pass@1 from "
            f"{cfg.eval_samples_per_task} samples per task at the RL temperature; CoRe-Code at its defaults"
            f"{'' if cfg.ablation else ' (no role RL alone: ablation false)'}.\n\n")
    variants = list(per_seed[cfg.seeds[0]])
    folders = {name: [run_dir(cfg, "corecode", s, name) for s in cfg.seeds] for name in variants}  # every run's out_dir
    curves = write_curves(Path(cfg.results_md), "corecode", folders, f"study C, seeds {list(cfg.seeds)}")
    write_section(Path(cfg.results_md), "corecode", head + table + "\n" + curves)
    return {"per_seed": per_seed}


def _greedy(per_seed: dict[int, dict[str, Any]], name: str) -> str:
    runs = [per_seed[s][name] for s in sorted(per_seed)]
    if any("greedy" not in r for r in runs):  # the single coder is scored by sampling only
        return "-"
    return " → ".join(f"{sum(r['greedy'][w] for r in runs) / len(runs):.3f}" for w in ("sft", "rl"))


def full_variant(cfg: TrainingStudyConfig) -> str:
    """The variant that trains every role of the chain: CoRe-Code itself."""
    return list(corecode_variants(cfg.corecode_roles))[-1]


def _corecode_rows(per_seed: dict[int, dict[str, Any]], both: str) -> str:
    seeds = sorted(per_seed)
    rows = []
    for name in per_seed[seeds[0]]:
        before = {s: per_seed[s][name]["sft"] for s in seeds}
        after = {s: per_seed[s][name]["rl"] for s in seeds}
        rows.append([name, fmt_mean_se(over_seeds({s: mean_rate(before[s]) for s in seeds})),
                     fmt_mean_se(over_seeds({s: mean_rate(after[s]) for s in seeds})),
                     fmt_change(pooled_paired_change(before, after)), _greedy(per_seed, name),
                     *analysis_cells([per_seed[s][name]["analysis"] for s in seeds])])
    vs = (pooled_paired_change({s: per_seed[s][SINGLE]["rl"] for s in seeds}, {s: per_seed[s][both]["rl"] for s in seeds})
          if SINGLE in per_seed[seeds[0]] else None)
    return (markdown_table(["variant", "SFT only (sampled pass@1)", "after RL", "change (paired, pooled over seeds)",
                            "greedy pass@1 SFT → RL (mean over seeds)",
                            "train reward first → last 3 steps; zero-advantage turns; flat groups",
                            "entropy first → last; KL to cold start last"], rows)
            + ("\nSingle-coder GRPO was not run (`single_coder: false`).\n" if vs is None else
               f"\nCoRe-Code after RL against single-coder GRPO after RL (paired per task): {fmt_change(vs)}\n"))


def _seed_rows(per_seed: dict[int, dict[str, Any]], full: str) -> str:
    """CoRe-Code's change over its SFT at each seed and pooled (sampled and greedy, paired per task), and its
    gap to the single coder after RL: the spread over seeds behind the table's pooled figures."""
    seeds = sorted(per_seed)

    def change(at: list[int], name: str, scored: str | None = None) -> str:
        """SFT -> RL of run `name` at seeds `at` (per task: its sampled rates, or `scored`'s, e.g. greedy_tasks)."""
        runs = {s: per_seed[s][name] if scored is None else per_seed[s][name][scored] for s in at}
        b, a = {s: r["sft"] for s, r in runs.items()}, {s: r["rl"] for s, r in runs.items()}
        rates = f"{mean_rate(b[at[0]]):.3f} → {mean_rate(a[at[0]]):.3f}, " if len(at) == 1 else ""
        return rates + fmt_change(pooled_paired_change(b, a))

    def gap(at: list[int]) -> str:
        return fmt_change(pooled_paired_change({s: per_seed[s][SINGLE]["rl"] for s in at},
                                               {s: per_seed[s][full]["rl"] for s in at}))

    single = SINGLE in per_seed[seeds[0]]
    rows = [[str(at[0]) if len(at) == 1 else "pooled", change(at, full), change(at, full, "greedy_tasks"),
             *([change(at, SINGLE), gap(at)] if single else [])]
            for at in [[s] for s in seeds] + ([seeds] if len(seeds) > 1 else [])]
    return ("Per seed (paired per task; greedy: the recipe's one plan, one code):\n\n"
            + markdown_table(["seed", f"{full}, sampled SFT → RL", f"{full}, greedy SFT → RL",
                              *([f"{SINGLE}, sampled SFT → RL", f"{full} − {SINGLE}, after RL"] if single else [])], rows))
