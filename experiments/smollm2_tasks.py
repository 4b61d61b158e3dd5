"""Which procedural tasks suit SmolLM2-135M-Instruct: greedy pass@1 on the validation split per prompt style,
depth and family, with the chat prompt (`coral eval --prompt-style chat`).

From the repository root:
    python -m experiments.smollm2_tasks                                  # every style x depth 1-4, 48 tasks each
    python -m experiments.smollm2_tasks --styles docstring --depths 1 2 --workflow chain
    python -m experiments.smollm2_tasks --report                         # the table of what finished

Each cell (workflow, style, depth) is one evaluation under `<out-dir>/<workflow>/<style>/depth<d>` (samples.jsonl,
summary.json); a finished cell is read back, so a killed run resumes where it stopped. The tasks are the
validation split's first `--tasks` of that single depth (seed 0); style "short" is the family's own prompt
(the tiny models'), the others are coral/benchmarks/procedural_nl.py's. Workflow "single" asks the coder
alone (the chat prompt), "chain" a planner then the coder (CoRe-Code's prompts in style chat). This study
only chooses the task set (prompt style and depths) on validation; it never reads the test split.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

STYLES = ("short", "docstring", "doc-noex", "instruction", "steps", "steps-shot", "plain", "plain-shot", "sibling-shot")


def depth_range(depth: str) -> tuple[int, int]:
    """"2" -> (2, 2), "1-2" -> (1, 2)."""
    low, _, high = depth.partition("-")
    return int(low), int(high or low)


def cell_tasks(style: str, depth: str, n: int, split: str = "validation", seed: int = 0) -> list[Any]:
    """The first `n` tasks of `split` at `depth` (one depth, "2", or a range, "1-2"), in `style`."""
    from coral.benchmarks.procedural import make_tasks
    from coral.benchmarks.procedural_nl import nl_tasks

    if split == "test":
        raise ValueError("experiments.smollm2_tasks chooses the task set: it never reads the test split")
    low, high = depth_range(depth)
    tasks = make_tasks(n, split, min_depth=low, max_depth=high, seed=seed)
    return tasks if style == "short" else nl_tasks(tasks, style)


def cell_dir(out: Path, split: str, workflow: str, style: str, depth: str) -> Path:
    return out / ("" if split == "validation" else split) / workflow / style / f"depth{depth}"


def run_cell(out: Path, split: str, workflow: str, style: str, depth: str, n: int, max_new_tokens: int,
             policy: Any) -> dict:
    """Greedy evaluation of one cell (read back when its summary exists); its summary row."""
    from coral.agents import PROMPT_STYLES, make_agent
    from coral.evaluation import EvalConfig, run_eval
    from coral.policy.base import SamplingParams

    where = cell_dir(out, split, workflow, style, depth)
    if not (where / "summary.json").is_file():
        tasks = cell_tasks(style, depth, n, split)
        sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)
        role = "coder" if workflow == "chain" else "solver"
        agents = {"coder": make_agent(role, policy, agent_id="coder", sampling=sampling,
                                      template=PROMPT_STYLES["chat"][role])}
        if workflow == "chain":
            agents["planner"] = make_agent("planner", policy, sampling=sampling, template=PROMPT_STYLES["chat"]["planner"])
        cfg = EvalConfig(bench=f"procedural-{split}/{style}", workflow=workflow, model="smollm2",
                         max_new_tokens=max_new_tokens, out_dir=str(where), prompt_style="chat", tasks_per_batch=16)
        run_eval(cfg, tasks=tasks, agents=agents, progress=False)
    return read_cell(where, split, style, depth, n)


def task_kinds(task: Any) -> list[str]:
    """The family-qualified kinds of a task's non-trivial primitives ("list:keep_even", "str:upper")."""
    from coral.benchmarks.procedural import parse_composition

    comp = parse_composition(task.metadata["family"], task.metadata["composition"])
    return [f"{p.family}:{p.kind}" for p in comp if not p.trivial]


def read_cell(where: Path, split: str, style: str, depth: str, n: int) -> dict:
    """A cell's pass@1, by family and by primitive kind, mean completion tokens and renamed functions (no `def f(`)."""
    records = [json.loads(line) for line in open(where / "samples.jsonl")]
    tasks = {t.id: t for t in cell_tasks("short", depth, n, split)}
    by_family: dict[str, list[bool]] = {}
    by_kind: dict[str, list[bool]] = {}
    for r in records:
        by_family.setdefault(tasks[r["task_id"]].metadata["family"], []).append(bool(r["passed"]))
        for kind in task_kinds(tasks[r["task_id"]]):
            by_kind.setdefault(kind, []).append(bool(r["passed"]))
    return {"split": split, "style": style, "depth": depth, "tasks": len(records),
            "pass@1": sum(r["passed"] for r in records) / max(len(records), 1),
            "by_family": {f: (sum(v), len(v)) for f, v in sorted(by_family.items())},
            "by_kind": {k: (sum(v), len(v)) for k, v in sorted(by_kind.items())},
            "renamed": sum("def f(" not in (r["code"] or "") for r in records),
            "tokens": sum(t["completion_tokens"] for r in records for t in r["turns"]) / max(len(records), 1)}


def report(rows: list[dict], workflow: str, split: str) -> None:
    print(f"\n### greedy pass@1 on the {split} split, workflow {workflow}, chat prompt\n")
    print("| style | depth | tasks | pass@1 | list | str | renamed f | tokens/sample |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        fam = {f: f"{p}/{n}" for f, (p, n) in r["by_family"].items()}
        print(f"| {r['style']} | {r['depth']} | {r['tasks']} | {r['pass@1']:.3f} | {fam.get('list', '-')} | "
              f"{fam.get('str', '-')} | {r['renamed']} | {r['tokens']:.0f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--styles", nargs="+", default=list(STYLES), choices=STYLES)
    ap.add_argument("--depths", nargs="+", default=["1", "2", "3", "4"], help='one depth ("2") or a range ("1-2") each')
    ap.add_argument("--workflow", default="single", choices=("single", "chain"))
    # never the test split: this study chooses the task set
    ap.add_argument("--split", default="validation", choices=("validation", "train"))
    ap.add_argument("--tasks", type=int, default=48, help="validation tasks per depth")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out-dir", default="runs/smollm2/tasks")
    ap.add_argument("--report", action="store_true", help="only print the cells that finished")
    args = ap.parse_args(argv)
    out = Path(args.out_dir)
    policy = None
    if not args.report:
        from coral.policy import load_policy

        policy = load_policy("smollm2", dtype=args.dtype)
    rows = []
    for style in args.styles:
        for depth in args.depths:
            where = cell_dir(out, args.split, args.workflow, style, depth)
            if args.report and not (where / "summary.json").is_file():
                continue
            rows.append(run_cell(out, args.split, args.workflow, style, depth, args.tasks, args.max_new_tokens, policy))
            print(json.dumps(rows[-1]), flush=True)
    report(rows, args.workflow, args.split)
    print(f"\nload average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
