"""RecursiveMAS records from the procedural family and from JSONL."""

from __future__ import annotations

import json

import pytest

from coral.benchmarks.procedural import make_tasks
from coral.recursivemas.data import load_records, procedural_records


def test_procedural_records_pair_each_plan_step_with_its_code_line():
    rec = procedural_records(make_tasks(3, "train", max_depth=3))[2]
    steps = rec.refined_plan.split("\n")
    code = rec.answer.split("\n")[1:]
    assert len(steps) == len(rec.plan.split("\n")) == len(code)
    assert all(s.endswith(c.strip()) for s, c in zip(steps, code, strict=True))
    assert rec.question == rec.task.prompt and rec.answer.startswith("def f(")


def test_jsonl_records_load_and_a_missing_field_is_named(tmp_path):
    good = {"question": "q", "plan": "p", "refined_plan": "rp", "answer": "a"}
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "id": "x"}) + "\n")
    recs = load_records(path)
    assert [r.id for r in recs] == ["r/1", "x"] and recs[0].task is None
    path.write_text(json.dumps({**good, "plan": ""}) + "\n")
    with pytest.raises(ValueError, match="record 1: field 'plan'"):
        load_records(path)
