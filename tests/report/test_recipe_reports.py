"""Every recipe ends the same way: a held-out table printed and report.html written, from its summary."""

from __future__ import annotations

import json

import pytest

from coral.report.recipes import finish, mars2_report, recursivemas_report

CHANGE = {"mean": 0.5, "se": 0.5, "up": 1, "down": 0, "tasks": 2}


def test_mars2_reports_pass_at_1_and_pass_at_n_with_their_paired_change_and_each_agent(tmp_path):
    figures = {"pass@1": 0.0, "pass@n": 0.5, "agent/agent0/pass@1": 0.0, "agent/agent0/pass@n": 0.5,
               "agent/agent0/nodes": 3.0}
    summary = {"seed": 0, "before": figures, "after": {**figures, "pass@1": 0.5}, "tasks": 2, "rl_steps": 3,
               "change": {"pass@1": CHANGE, "pass@n": {**CHANGE, "mean": 0.0, "up": 0}}, "wall_s": 60.0}
    report = mars2_report(tmp_path, summary)
    assert [(r.label, r.before, r.after, r.change is not None) for r in report.rows] == [
        ("Pass@1 (best-public node)", 0.0, 0.5, True), ("Pass@N (any node)", 0.5, 0.5, True),
        ("agent0's nodes only, pass@1", 0.0, 0.0, False), ("agent0's nodes only, pass@N", 0.5, 0.5, False)]


def test_recursivemas_says_why_accuracy_0_everywhere_is_not_a_bug_and_shows_the_loss_that_moved(tmp_path, capsys,
                                                                                                  monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the table's rows on one line each
    summary = {f"{when}/{split}/{wf}/accuracy": 0.0 for when in ("before", "after") for split in ("train", "test")
               for wf in ("recursive", "single")}
    summary.update(seed=0, steps=200, train_records=64, test_records=32, wall_s=300.0, outer_ce=[2.5, 1.25],
                   change={"test/recursive": {**CHANGE, "mean": 0.0, "se": 0.0, "up": 0, "tasks": 32}})
    finish(recursivemas_report(tmp_path, summary))
    out = " ".join(capsys.readouterr().out.split())
    assert "the final agent alone included" in out and "2.500 -> 1.250" in out
    assert "test records, RecursiveMAS" in out and f"report: {tmp_path / 'report.html'}" in out
    assert "the final agent alone included" in (tmp_path / "report.html").read_text()


TINY = {"n_train_tasks": 30, "n_test_tasks": 2, "agents": 2, "sft": {"epochs": 0.2, "batch_size": 8},
        "sft_processes": 1, "refine_examples": 6, "rl_steps": 2, "tasks_per_step": 2, "max_nodes_per_tree": 2,
        "max_new_tokens": 12, "sandbox_workers": 1}


@pytest.mark.slow  # a tiny MARS2 run, cold start included: about half a CPU-minute
def test_coral_train_with_mars2_prints_its_table_and_writes_a_report(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    from coral.cli import main

    config = tmp_path / "m.yaml"
    config.write_text(json.dumps({"recipe": "mars2", **TINY, "out_dir": str(tmp_path / "run")}))
    assert main(["train", str(config), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "coral train: MARS2, held-out search trees" in out and "Pass@1 (best-public node)" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert set(summary["change"]) == {"pass@1", "pass@n"} and summary["change"]["pass@1"]["tasks"] == 2
    page = (tmp_path / "run" / "report.html").read_text()
    assert "cold start: SFT loss per role" in page and "mean reward per role" in page and "change ± SE" in page
