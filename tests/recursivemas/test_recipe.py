"""The recipe end to end through `coral train` on a tiny JSONL run: files written, resume, eval entry."""

from __future__ import annotations

import json

import pytest
import yaml

from coral.cli import main
from coral.config import from_mapping
from coral.recursivemas import RecursiveMASConfig, eval_run, eval_workflow, train_recursivemas

RECORDS = [{"question": f"question {i}", "plan": f"plan {i}", "refined_plan": f"refined {i}", "answer": f"a{i}"}
           for i in range(6)]


@pytest.mark.slow  # ~10 s quiet, ~65 s on the loaded 2-core machine: BPE tokenizer, two agents, 3 evaluations
def test_coral_train_runs_the_recipe_then_resumes_and_evaluates(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the summary table's rows on one line each
    data = tmp_path / "records.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    fields = dict(pattern="distillation", rounds=1, latent_steps=2, data=str(data), n_train_tasks=4,
                  n_test_tasks=2, agent_widths=[16, 24], n_layers=1, vocab_size=300, inner={"steps": 2}, outer={"steps": 1},
                  batch_size=2, max_new_tokens=4, out_dir=str(tmp_path / "run"), checkpoint_every_steps=1)
    config = tmp_path / "rm.yaml"
    config.write_text(yaml.safe_dump({"recipe": "recursivemas", **fields}))
    assert main(["train", str(config), "--no-progress"]) == 0
    run = tmp_path / "run"
    printed = capsys.readouterr().out
    assert "coral train: RecursiveMAS" in printed and "test records, RecursiveMAS" in printed
    assert "inner/loss=" not in printed and "step=" not in printed  # no raw key=value lines per step
    assert "held-out accuracy" in (run / "report.html").read_text() or "loss" in (run / "report.html").read_text()
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in steps] == [1, 2, 3]
    assert {"after/test/recursive/accuracy", "after/test/single/decoded_tokens_per_sample"} <= set(
        json.loads((run / "summary.json").read_text()))
    cfg = from_mapping(RecursiveMASConfig, {**fields, "outer": {"steps": 2}})
    summary = train_recursivemas(cfg, progress=False)  # resumes after step 3: one more outer step
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in steps] == [1, 2, 3, 4] and "outer/loss" in steps[-1]
    assert "before/train/recursive/accuracy" in summary  # the untrained links' figures survive the resume
    assert set(summary["change"]) == {"train/recursive", "train/single", "test/recursive", "test/single"}
    for workflow in ("recursive", "text-mas"):
        summary = eval_run(run, workflow) if workflow == "recursive" else eval_workflow(cfg, workflow)
        assert set(summary) == {"accuracy", "decoded_tokens_per_sample", "wall_s_per_sample"}
        lines = (run / f"eval_{workflow}_R1.jsonl").read_text().splitlines()
        record = json.loads(lines[0])  # the one sample schema of coral eval: decoded tokens on the answer's turn
        assert len(lines) == 2 and record["workflow"] == workflow and record["turns"][0]["completion_tokens"] > 0
