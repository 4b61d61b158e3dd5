"""RecursiveMAS records: question / plan / refined_plan / answer, from the procedural family or JSONL.

A procedural task gives: question = its prompt (description + signature), plan = its gold plan,
refined_plan = each plan step followed by the line of gold code that does it, answer = the gold code.
The task is kept with the record so that answers are judged by running its tests in the sandbox. A
JSONL record has the four string fields (and optional "id"); its answers are judged by exact match of
the stripped text. `benchmark_records` wraps benchmark tasks (HumanEval) for evaluation only.
This module does NOT tokenize or score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from coral.benchmarks.records import parse_jsonl
from coral.recursivemas.patterns import RECORD_FIELDS
from coral.trajectory import Task


@dataclass(frozen=True)
class Record:
    id: str
    question: str
    plan: str
    refined_plan: str
    answer: str
    task: Task | None = None  # set: judge by the task's tests; None: judge by exact match

    def field(self, name: str) -> str:
        if name not in RECORD_FIELDS:
            raise ValueError(f"unknown record field {name!r}; fields are {RECORD_FIELDS}")
        return str(getattr(self, name))


def refined_plan(plan: str, code: str) -> str:
    """Plan steps, each followed by its gold code line (the signature line is not a step)."""
    steps = [s for s in plan.strip().split("\n") if s.strip()]
    body = [c.strip() for c in code.strip().split("\n")[1:] if c.strip()]
    if len(steps) != len(body):
        raise ValueError(f"plan has {len(steps)} steps but the code has {len(body)} body lines")
    return "\n".join(f"{s} -> {c}" for s, c in zip(steps, body, strict=True))


def procedural_records(tasks: Sequence[Task]) -> list[Record]:
    out = []
    for task in tasks:
        plan, code = task.metadata.get("gold_plan"), task.reference
        if not plan or not code:
            raise ValueError(f"task {task.id} has no gold plan or reference code (not a procedural task?)")
        out.append(Record(task.id, task.prompt, plan, refined_plan(plan, code), code.strip(), task))
    return out


def benchmark_records(tasks: Sequence[Task]) -> list[Record]:
    """Evaluation-only records of benchmark tasks (HumanEval, MBPP): question = the task's prompt, judged by
    its private tests. They have no gold plan, so plan and refined_plan are empty: links are not trained on
    them (the inner loop would regress nothing)."""
    return [Record(t.id, t.prompt, "", "", (t.reference or "").strip(), t) for t in tasks]


def load_records(path: str | Path) -> list[Record]:
    """JSONL with string fields question, plan, refined_plan, answer (and optional id) per line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"RecursiveMAS records file not found: {path}")
    out = []
    for index, rec in enumerate(parse_jsonl(path.read_text(), str(path)), start=1):
        for name in RECORD_FIELDS:
            if not isinstance(rec.get(name), str) or not rec[name].strip():
                raise ValueError(f"{path}: record {index}: field {name!r} must be a non-empty string")
        out.append(Record(str(rec.get("id", f"{path.stem}/{index}")), *(rec[name] for name in RECORD_FIELDS)))
    if not out:
        raise ValueError(f"{path}: no records")
    return out
