"""The end of every training recipe, in one shape: its held-out figures as a before/after table printed in
the terminal and written, with the training dashboard, to out_dir/report.html. One function per recipe
reads that recipe's summary (the dict its train function returns and writes to summary.json).

This module does NOT compute any figure: the recipes' summaries hold them, paired changes included.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from coral.report.run_report import Report, write_run_report
from coral.terminal import BeforeAfter, print_before_after


def finish(report: Report) -> Path:
    """Write report.html, print the held-out table, the facts and the report's path; returns the path."""
    path = write_run_report(report)
    facts = "; ".join(f"{k} {v}" for k, v in report.facts)
    print_before_after(f"coral train: {report.recipe}, {report.figure}", report.rows, report.before, report.after,
                       [*report.notes, facts, f"report: {path}"])
    return path


def kl_hint(run_dir: str | Path) -> list[str]:
    """Where the run did not log its KL to the cold start, how to: the dashboard has no such panel then."""
    path = Path(run_dir) / "config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    if config.get("rl", {}).get("log_kl", True):
        return []
    return ["the KL to the cold start is not logged in this run (rl.log_kl: true logs it, at one reference forward a turn)"]


def _minutes(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds / 60:.1f} min"


def corecode_report(run_dir: str | Path, summary: Mapping[str, Any]) -> Report:
    """pass@1 after SFT and after SFT + RL of every held-out set, with its paired per-task change."""
    rows = [BeforeAfter(f"{e['what']}, {e['how'].replace(' samples per task at temperature ', '/task at T=')}",
                        e["tasks"], summary[e["sft"]]["pass@1"],
                        summary[e["rl"]]["pass@1"], summary["change"][e["change"]]) for e in summary["evaluations"]]
    facts = [("seed", summary["seed"]), ("RL steps", summary["rl_steps"]), ("SFT", _minutes(summary.get("sft_s"))),
             ("wall time", _minutes(summary["wall_s"]))]
    # a run without a cold start (cold_start "none": a pretrained model) compares the model as loaded with it after RL
    before, after = ("SFT", "SFT+RL") if summary.get("cold_start", "sft") == "sft" else ("start", "RL")
    return Report("CoRe-Code", Path(run_dir), rows, before, after, facts, figure="held-out pass@1",
                  notes=kl_hint(run_dir))


MARS2_FIGURES = (("pass@1", "Pass@1 (best-public node)"), ("pass@n", "Pass@N (any node)"))


def mars2_report(run_dir: str | Path, summary: Mapping[str, Any]) -> Report:
    """System Pass@1 and Pass@N of the held-out trees after the cold start and after RL (paired over tasks),
    and each agent's own."""
    before, after, change = summary.get("before"), summary["after"], summary.get("change", {})
    tasks = int(summary.get("tasks", 0))
    rows = [BeforeAfter(label, tasks, None if before is None else before[key], after[key], change.get(key))
            for key, label in MARS2_FIGURES]
    agents = sorted({k.split("/")[1] for k in after if k.startswith("agent/")})
    rows += [BeforeAfter(f"{agent}'s nodes only, {key.replace('n', 'N')}", tasks,
                         None if before is None else before.get(f"agent/{agent}/{key}"), after[f"agent/{agent}/{key}"],
                         None) for agent in agents for key in ("pass@1", "pass@n")]
    facts = [("seed", summary["seed"]), ("RL steps", summary.get("rl_steps", "n/a")),
             ("wall time", _minutes(summary.get("wall_s")))]
    notes = [] if before is not None else ["no evaluation before RL (eval_before off): nothing to compare with"]
    return Report("MARS2", Path(run_dir), rows, "cold", "RL", facts, [*notes, *kl_hint(run_dir)],
                  figure="held-out search trees")


RMAS_WORKFLOWS = (("recursive", "RecursiveMAS"), ("single", "final agent alone"))


def recursivemas_report(run_dir: str | Path, summary: Mapping[str, Any]) -> Report:
    """Accuracy of the latent system and of its final agent alone, on test and train records, with the
    untrained links and after training (paired over records)."""
    change = summary.get("change", {})
    rows = []
    for split in ("test", "train"):
        for workflow, label in RMAS_WORKFLOWS:
            key = f"{split}/{workflow}"
            after = summary.get(f"after/{key}/accuracy")
            if after is None:
                continue
            rows.append(BeforeAfter(f"{split} records, {label}", int(summary.get(f"{split}_records", 0)),
                                    summary.get(f"before/{key}/accuracy"), after, change.get(key)))
    facts = [("seed", summary.get("seed", "n/a")), ("steps", summary.get("steps", "n/a")),
             ("wall time", _minutes(summary.get("wall_s")))]
    return Report("RecursiveMAS", Path(run_dir), rows, "untrained", "trained", facts, recursivemas_notes(summary),
                  x_label="step (inner loop, then outer loop)", figure="accuracy, links untrained -> trained")


def recursivemas_notes(summary: Mapping[str, Any]) -> list[str]:
    """What a newcomer needs to read the figures: when nothing was answered right, not even by the final
    agent alone, the agents are too weak for the records at this size; the solver's loss on the gold
    answer is then the figure that shows whether the links learned."""
    notes = []
    accuracies = [v for k, v in summary.items() if k.endswith("/accuracy") and isinstance(v, (int, float))]
    if accuracies and max(accuracies) == 0:
        notes.append("Accuracy 0.0 everywhere, the final agent alone included: these agents answer none of the "
                     "records at this size (tiny models, few records), so accuracy cannot move. That is not a "
                     "failure of the links; bigger agents or more cold-start epochs are needed for it to move.")
    ce: Sequence[float] = summary.get("outer_ce", ())
    if len(ce) >= 2:
        notes.append(f"Links: the solver's cross-entropy on the gold answer (last round) went {ce[0]:.3f} -> "
                     f"{ce[-1]:.3f} over the outer loop (first and last step).")
    return notes
