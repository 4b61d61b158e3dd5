"""CoRe-Code GRPO on SmolLM2-135M-Instruct (planner and coder as two LoRA adapters on one shared base, bfloat16,
no cold start): one step's time and its parts, settings chosen on the validation split, then seeds reported on
the test split, before and after, with their training curves.

From the repository root (each stage resumable; long ones under nohup, one thread each, at most two at once):
    python -m experiments.smollm2_rl steptime                      # time of RL steps and their parts, no evaluation
    python -m experiments.smollm2_rl sweep --name lr3e-4 --set rl.lr=3e-4   # one setting, held out on validation
    python -m experiments.smollm2_rl run --seed 0                  # the chosen settings, held out on test
    python -m experiments.smollm2_rl report                        # tables of every run under runs/smollm2/
    python -m experiments.smollm2_rl compare --name A --against B   # sweep B against sweep A, paired per task
    python -m experiments.smollm2_rl curves --runs A B --svg c.svg  # 10-step means of runs' curves, and a chart
    python -m experiments.smollm2_rl shots --runs A B              # pass@1 by the prompt's solved example

Every run is `coral train configs/corecode_smollm2.yaml` with overrides (`--set field=value`, dotted for nested
fields) in `runs/smollm2/<stage>/<name>`: checkpoints every few steps, and a killed run started again with the
same command resumes from its last one. `sweep` runs hold out the validation split (held_out_split validation),
so the settings are chosen on validation pass@1 and training reward; `run` holds out the test split and is
started only with settings chosen that way. `run` also holds out 40 "fresh" tasks (fresh_source rl): the RL
stream's tasks after the pool, RL's own distribution (up to rl_max_depth, compositions RL never saw);
`sweep` does not evaluate them (n_fresh_tasks 0), so no setting is chosen on a reported set. This module
does NOT choose the task set (experiments/smollm2_tasks.py does); its charts are experiments/efficacy_plot.py's
(each run's report.html also draws its curves).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from coral.config import merge

CONFIG = Path("configs/corecode_smollm2.yaml")
OUT = Path("runs/smollm2")
STEP_LINE = re.compile(r"^\s*(xs|s)\s*=", re.M)  # a step of a code written as a sibling's gold code is
CURVE_KEYS = ("coder/reward", "planner/reward", "pass_rate", "coder/kl_ref", "planner/kl_ref", "coder/entropy",
              "planner/entropy", "coder/logp_mismatch", "coder/zero_variance_groups", "step_s")


def parse_sets(items: list[str]) -> dict[str, Any]:
    """`field=value` pairs (dotted fields nest: rl.lr=3e-4) as a nested mapping; values read as YAML."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected field=value")
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return out


def config(overrides: dict[str, Any]) -> Any:
    """CoReCodeConfig from the study's YAML file and `overrides`."""
    from coral.config import from_mapping
    from coral.corecode.config import CoReCodeConfig

    base = yaml.safe_load(CONFIG.read_text())
    base.pop("recipe", None)
    return from_mapping(CoReCodeConfig, merge(base, overrides), f"{CONFIG} + overrides")


def steptime(cfg: Any, steps: int) -> list[dict[str, float]]:
    """`steps` RL steps from the model as loaded, on the run's training tasks, no evaluation: each step's
    time and its parts (generation = rollout - judging), tokens and peak memory."""
    from coral.benchmarks.splits import build_tasks
    from coral.corecode.recipe import rl_step
    from coral.corecode.setup import build_policies, make_learners, sft_references, stated_tasks
    from coral.sandbox import Sandbox

    train = stated_tasks(cfg, build_tasks(cfg.splits)[0])
    t_load = time.perf_counter()
    with Sandbox(workers=cfg.sandbox_workers) as sandbox:
        policies = build_policies(cfg, train, sandbox)
        learners = make_learners(cfg, policies, sft_references(cfg, policies, saved=False))
        print(f"policies and learners built in {time.perf_counter() - t_load:.1f} s", flush=True)
        rows = []
        for step in range(1, steps + 1):
            batch = train[(step - 1) * cfg.tasks_per_step: step * cfg.tasks_per_step]
            m = rl_step(cfg, step, batch, policies, learners, sandbox)
            m["generate_s"] = m["rollout_s"] - m["judge_s"]
            m["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            m["load_avg"] = os.getloadavg()[0]
            rows.append(m)
            print(json.dumps({k: round(v, 4) for k, v in m.items()}), flush=True)
    return rows


def train_run(stage: str, name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """One training run of `stage` (sweep: held out on validation; run: on test), resumed when it exists."""
    from coral.corecode.recipe import train_corecode

    if stage == "sweep":
        overrides = merge(overrides, {"held_out_split": "validation", "n_fresh_tasks": 0})
    elif overrides.get("held_out_split", "test") != "test":
        raise SystemExit("stage run reports the test split; choose settings with stage sweep")
    cfg = config(merge(overrides, {"out_dir": str(OUT / stage / name)}))
    print(f"{stage} {name}: {cfg.out_dir}, held out {cfg.held_out_split}", flush=True)
    return train_corecode(cfg)


def code_forms(samples_jsonl: Path) -> dict[str, int]:
    """How an evaluation's samples are written: codes with a step line (`xs = ...` or `s = ...`, the form of a
    sibling's gold code) and plans the planner wrote as numbered steps (parsed without error), of all of them."""
    from coral.benchmarks.records import read_records

    rows = read_records(samples_jsonl)
    plans = [t for r in rows for t in r.get("turns") or [] if t.get("role") == "planner"]
    return {"codes": len(rows), "step_codes": sum(bool(STEP_LINE.search(r.get("code") or "")) for r in rows),
            "plans": len(plans), "numbered_plans": sum(t.get("parse_error") is None for t in plans)}


def forms_cell(run: Path) -> str:
    """`step-line codes before -> after of N; numbered plans before -> after of M` for one finished run."""
    before, after = (code_forms(run / f"eval_{when}" / "samples.jsonl") for when in ("sft", "rl"))
    return (f"{before['step_codes']} -> {after['step_codes']} of {after['codes']}; "
            f"{before['numbered_plans']} -> {after['numbered_plans']} of {after['plans']}")


def compare(stage_dir: Path, name: str, against: str) -> dict[str, Any]:
    """Greedy pass@1 after RL of run `against` minus run `name`, paired per held-out task (the same tasks: one
    seed, one split), and the two starting evaluations' difference (nonzero only if the model as loaded
    generates differently, e.g. on another CPU)."""
    from coral.benchmarks.metrics import paired_change
    from coral.evaluation import task_pass_rates

    files = {(run, when): stage_dir / run / f"eval_{when}" / "samples.jsonl" for run in (name, against)
             for when in ("sft", "rl")}
    if missing := [str(f) for f in files.values() if not f.is_file()]:
        raise SystemExit(f"compare: {missing[0]} not found (is that sweep run finished?)")
    rates = {key: task_pass_rates(f) for key, f in files.items()}
    after = paired_change(rates[name, "rl"], rates[against, "rl"])
    start = paired_change(rates[name, "sft"], rates[against, "sft"])
    print(f"{against} - {name}, greedy pass@1 after RL on {after.tasks} tasks: {after.mean:+.3f} "
          f"(paired SE {after.se:.3f}; {after.up} up, {after.down} down); at the start: {start.mean:+.3f} "
          f"({start.up} up, {start.down} down)")
    return {"after": after, "start": start}


CURVE_TABLE = (("coder reward", "coder/reward"), ("pass rate", "pass_rate"), ("completion tokens",
               "coder/completion_tokens"), ("coder entropy", "coder/entropy"), ("KL coder", "coder/kl_ref"),
               ("logp mismatch", "coder/logp_mismatch"), ("flat groups", "coder/zero_variance_groups"),
               ("step s", "step_s"))
DIGITS = {"step_s": 1, "coder/completion_tokens": 0, "coder/kl_ref": 4, "coder/logp_mismatch": 4}  # else 3
CHARTED = ("coder reward", "pass rate", "completion tokens", "coder entropy", "KL coder", "flat groups")


def window_means(steps: list[dict], width: int = 10, every: int = 20) -> list[tuple[str, dict[str, float]]]:
    """(`first-last`, key -> mean) of the windows of `width` steps starting at steps 1, 1 + every, ..., and the
    last `width` steps; a key logged at no step of a window is left out of it."""
    starts = list(range(0, max(len(steps) - width, 0) + 1, every))
    if len(steps) > width and starts[-1] != len(steps) - width:
        starts.append(len(steps) - width)
    out = []
    for lo in starts:
        rows = steps[lo:lo + width]
        means = {k: sum(r[k] for r in rows if k in r) / n for _, k in CURVE_TABLE if (n := sum(k in r for r in rows))}
        out.append((f"{lo + 1}-{lo + len(rows)}", means))
    return out


def logged_steps(metrics_jsonl: Path) -> list[dict[str, float]]:
    """The steps a run's metrics.jsonl logged (none for a run of rl_steps 0)."""
    return [json.loads(line) for line in metrics_jsonl.read_text().splitlines() if line.strip()]


def curves(root: Path, names: list[str], svg: Path | None) -> None:
    """The training curves of runs `names` (`stage/name` under `root`): a table of 10-step means (steps 1-10, 21-30, ...,
    and the last 10) and, given `svg`, a chart of every step, one line per run."""
    from experiments.efficacy_plot import curves_svg

    runs = {}
    for name in names:
        path = root / name / "metrics.jsonl"
        if not path.is_file():
            raise SystemExit(f"curves: {path} not found (has that run trained?)")
        runs[name] = logged_steps(path)
    print("| run | steps | " + " | ".join(label for label, _ in CURVE_TABLE) + " |")
    print("|---|---|" + "---|" * len(CURVE_TABLE))
    for name, steps in runs.items():
        for span, means in window_means(steps):
            cells = [f"{means[k]:.{DIGITS.get(k, 3)}f}" if k in means else "-" for _, k in CURVE_TABLE]
            print(f"| {name} | {span} | " + " | ".join(cells) + " |")
    if svg is not None:
        keys = dict(CURVE_TABLE)
        per_run = {name: {label: [r[keys[label]] for r in steps if keys[label] in r] for label in CHARTED}
                   for name, steps in runs.items()}
        svg.write_text(curves_svg(per_run, CHARTED, f"CoRe-Code GRPO on SmolLM2-135M-Instruct: {', '.join(names)}", window=5))
        print(f"\n{svg}: every step, 5-step trailing means")


def shot_kinds(run: Path) -> dict[str, str]:
    """Task id -> the solved example its prompt holds ("sibling" or "fixed", procedural_nl's sibling-shot), for the
    held-out and fresh tasks of a run (rebuilt from its config.json)."""
    from coral.benchmarks.splits import build_tasks, fresh_tasks, rl_tasks
    from coral.config import from_mapping
    from coral.corecode.config import CoReCodeConfig
    from coral.corecode.setup import stated_tasks

    cfg = from_mapping(CoReCodeConfig, json.loads((run / "config.json").read_text()), str(run / "config.json"))
    train, test = build_tasks(cfg.splits)
    fresh = fresh_tasks(cfg.splits, train, rl_tasks(cfg.splits, train), sft_trains=cfg.cold_start != "none")
    return {t.id: t.metadata.get("shot", "-") for tasks in (test, fresh) for t in stated_tasks(cfg, tasks)}


def by_shot(runs: list[Path],
            kinds: Callable[[Path], dict[str, str]] = shot_kinds) -> dict[tuple[str, str], dict[str, int]]:
    """(held-out set, shot) -> tasks, passes before and after RL, and failing codes after RL that are the fixed shot's
    own code, pooled over `runs` (`kinds(run)`: task id -> shot)."""
    from coral.benchmarks.procedural_nl import SHOT_CODE
    from coral.benchmarks.records import read_records

    def lines(code: str) -> list[str]:
        return [line.rstrip() for line in code.strip().splitlines()]

    shot_code = lines(SHOT_CODE)
    out: dict[tuple[str, str], dict[str, int]] = {}
    for run in runs:
        shot = kinds(run)
        for held, suffix in (("new skeletons", ""), ("fresh", "_fresh")):
            if not (run / f"eval_rl{suffix}" / "samples.jsonl").is_file():
                continue
            before = {r["task_id"]: r["passed"] for r in read_records(run / f"eval_sft{suffix}" / "samples.jsonl")}
            for r in read_records(run / f"eval_rl{suffix}" / "samples.jsonl"):
                cell = out.setdefault((held, shot[r["task_id"]]), {"tasks": 0, "before": 0, "after": 0, "copies": 0})
                cell["tasks"] += 1
                cell["before"] += before[r["task_id"]]
                cell["after"] += r["passed"]
                cell["copies"] += not r["passed"] and lines(r.get("code") or "") == shot_code
    print("| held out | shot | tasks | pass@1 start | after RL | failing after RL with the fixed shot's code |")
    print("|---|---|---|---|---|---|")
    for (held, kind), c in sorted(out.items()):
        print(f"| {held} | {kind} | {c['tasks']} | {c['before'] / c['tasks']:.3f} | {c['after'] / c['tasks']:.3f} | "
              f"{c['copies']} of {c['tasks'] - c['after']} |")
    return out


def report(root: Path) -> None:
    """One row per finished run under `root` (sweep and run): held-out pass@1 before and after with the paired
    change, and the training curves' first and last ten steps."""
    print("| stage | run | held out | tasks | pass@1 start | pass@1 after RL | change (paired SE) | fresh: start -> after "
          "(change, SE) | steps | R(coder) first/last 10 | KL coder last 10 | entropy coder first/last 10 | step s (median) "
          "| step-line codes; numbered plans (start -> after) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for summary_path in sorted(root.glob("*/*/summary.json")):
        run = summary_path.parent
        s = json.loads(summary_path.read_text())
        held = json.loads((run / "config.json").read_text()).get("held_out_split", "test")
        ch = s["change"]["greedy"]
        fresh = "-"
        if "fresh_greedy" in s["change"]:
            fc, before = s["change"]["fresh_greedy"], s["eval_sft_fresh"]["pass@1"]
            fresh = (f"{fc['tasks']} tasks: {before:.3f} -> {s['eval_rl_fresh']['pass@1']:.3f} "
                     f"({fc['mean']:+.3f}, {fc['se']:.3f}; {fc['up']} up, {fc['down']} down)")
        steps = logged_steps(run / "metrics.jsonl")
        windows = window_means(steps)
        first, last = windows[0][1], windows[-1][1]  # steps 1-10 and the last 10 (one window: a run of <= 10 steps)

        def mean(means: dict[str, float], key: str) -> str:
            return f"{means[key]:.3f}" if key in means else "-"

        times = sorted(r["step_s"] for r in steps)
        median_s = f"{times[len(times) // 2]:.0f}" if times else "-"  # "-": a run of rl_steps 0
        print(f"| {run.parent.name} | {run.name} | {held} | {s['evaluations'][0]['tasks']} | {s['pass@1_sft']:.3f} | "
              f"{s['pass@1_rl']:.3f} | {ch['mean']:+.3f} ({ch['se']:.3f}) | {fresh} | {len(steps)} | "
              f"{mean(first, 'coder/reward')} / {mean(last, 'coder/reward')} | {mean(last, 'coder/kl_ref')} | "
              f"{mean(first, 'coder/entropy')} / {mean(last, 'coder/entropy')} | {median_s} | "
              f"{forms_cell(run)} |")
    print(f"\nload average {os.getloadavg()[0]:.1f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=("steptime", "sweep", "run", "report", "compare", "curves", "shots"))
    ap.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="config overrides")
    ap.add_argument("--name", default=None, help="run name (sweep and compare: required; run: seed<seed>)")
    ap.add_argument("--against", default=None, help="compare: the sweep run set against --name's")
    ap.add_argument("--runs", nargs="*", default=[], help="curves, shots: runs of stage run by name, sweep runs as sweep/NAME")
    ap.add_argument("--svg", type=Path, default=None, help="curves: also draw every step's curves to this SVG")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=2, help="steptime: RL steps timed")
    args = ap.parse_args(argv)
    overrides = merge(parse_sets(args.set), {"seed": args.seed})
    if args.stage == "steptime":
        steptime(config(overrides), args.steps)
    elif args.stage == "report":
        report(OUT)
    elif args.stage == "compare":
        if not (args.name and args.against):
            raise SystemExit("compare needs --name and --against (two sweep runs)")
        compare(OUT / "sweep", args.name, args.against)
    elif args.stage == "curves":
        if not args.runs:
            raise SystemExit("curves needs --runs NAME [NAME ...] (runs of stage run, or sweep/NAME)")
        curves(OUT, [n if "/" in n else f"run/{n}" for n in args.runs], args.svg)
    elif args.stage == "shots":
        if not args.runs:
            raise SystemExit("shots needs --runs NAME [NAME ...] (finished runs of stage run, or sweep/NAME)")
        by_shot([OUT / (n if "/" in n else f"run/{n}") for n in args.runs])
    else:
        if args.stage == "sweep" and not args.name:
            raise SystemExit("sweep needs --name")
        train_run(args.stage, args.name or f"seed{args.seed}", overrides)


if __name__ == "__main__":
    main()
