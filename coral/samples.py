"""The one sample record every `coral eval` workflow writes, the samples an interrupted evaluation kept,
and exports of samples to other tools' formats.

A sample is one JSON line: task_id, sample (index within its task), workflow, prompt_style, turns (agent,
role, text, parsed, parse_error, completion_tokens of each agent call), code, public and private verdicts
(None where a workflow judges the answer as a whole), passed, metrics. `sample_record` writes it for a
judged trajectory, `answer_record` for a workflow that only answers (RecursiveMAS's).

Resuming: an evaluation writes `eval.json` (what made the samples: its settings and a stamp of the model
files) beside samples.jsonl; `kept_samples` returns the samples of the tasks a run with the same identity
finished, and refuses samples made otherwise. Exports: `evalplus` (EvalPlus's sample files: task_id with
`solution`, the whole program, or `completion`, what follows the prompt).

This module does NOT run or judge anything, and does NOT decide which settings may change on a resume
(its caller passes the identity).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from coral.benchmarks.records import parse_jsonl
from coral.config import UserInputError
from coral.jsonl import JsonlWriter, write_atomic
from coral.trajectory import Task, Trajectory, to_dict

EVAL_IDENTITY_FILE = "eval.json"  # beside samples.jsonl: what made them


def sample_record(traj: Trajectory, index: int, workflow: str, prompt_style: str | None) -> dict[str, Any]:
    """One JSONL line: what each agent wrote, the code, verdicts, tokens and time."""
    return {
        "task_id": traj.task_id,
        "sample": index,
        "workflow": workflow,
        "prompt_style": prompt_style,
        "turns": [{"agent": t.agent, "role": t.role, "text": t.text, "parsed": t.parsed,
                   "parse_error": t.parse_error, "completion_tokens": len(t.completion_ids) or
                   (t.usage or {}).get("completion_tokens", 0)} for t in traj.turns],
        "code": traj.code,
        "public": to_dict(traj.public),
        "private": to_dict(traj.private),
        "passed": traj.passed,
        "metrics": traj.metrics,
    }


def answer_record(task_id: str, workflow: str, answer: str, passed: bool, completion_tokens: int,
                  metrics: Mapping[str, float]) -> dict[str, Any]:
    """The sample of a workflow that answers once and is judged as a whole (RecursiveMAS's recursive and
    text-mas): the keys of `sample_record`, one turn (the final agent's answer, with every agent's decoded
    tokens), no per-test verdicts."""
    turn = {"agent": "final", "role": "solver", "text": answer, "parsed": answer, "parse_error": None,
            "completion_tokens": completion_tokens}
    return {"task_id": task_id, "sample": 0, "workflow": workflow, "prompt_style": None, "turns": [turn],
            "code": answer, "public": None, "private": None, "passed": passed, "metrics": dict(metrics)}


def kept_samples(out_dir: Path, identity: Mapping[str, Any], samples_per_task: int,
                 task_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The samples in `out_dir` of every task with all its `samples_per_task` samples, written by an
    evaluation of this `identity`; samples of a task cut short are dropped (it runs again). [] when there
    are none. Samples of another identity, or of a task not in `task_ids`, are refused, naming the
    difference: a resumed evaluation must score what an uninterrupted one would."""
    path, ident = out_dir / "samples.jsonl", out_dir / EVAL_IDENTITY_FILE
    if not path.is_file() or path.stat().st_size == 0:
        return []
    again = "pass --resume false to overwrite them or choose another --out-dir"
    if not ident.is_file():
        raise UserInputError(f"{path}: no {EVAL_IDENTITY_FILE} beside it says how these samples were made; {again}")
    saved = json.loads(ident.read_text())
    mine = json.loads(json.dumps(identity))
    changed = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k))
    if changed:
        key = changed[0]
        raise UserInputError(f"{path} holds samples made with {key} {saved.get(key)!r}, not {mine.get(key)!r}; {again}")
    records = parse_jsonl(path.read_text(), str(path))
    known = set(task_ids)
    foreign = [r["task_id"] for r in records if r["task_id"] not in known]
    if foreign:
        raise UserInputError(f"{path} holds samples of task {foreign[0]!r}, which this evaluation does not "
                             f"include (another --bench or a smaller --limit?); {again}")
    counts: dict[str, set[int]] = {}
    for r in records:
        counts.setdefault(r["task_id"], set()).add(r["sample"])
    whole = {task for task, got in counts.items() if got == set(range(samples_per_task))}
    return [r for r in records if r["task_id"] in whole]


def start_samples(out_dir: Path, identity: Mapping[str, Any], kept: Sequence[Mapping[str, Any]]) -> JsonlWriter:
    """samples.jsonl holding exactly `kept` (a task cut short loses its partial samples), the identity beside
    it, and a writer appending to it."""
    write_atomic(out_dir / "samples.jsonl", "".join(json.dumps(r) + "\n" for r in kept))
    write_atomic(out_dir / EVAL_IDENTITY_FILE, json.dumps(identity, indent=1))
    return JsonlWriter(out_dir / "samples.jsonl")


def export_evalplus(records: Sequence[Mapping[str, Any]], tasks: Sequence[Task], path: Path) -> None:
    """EvalPlus's sample file (`evalplus.evaluate --samples PATH`): a line per sample in task order, with
    `completion` (what follows the prompt; prompt style completion) or `solution` (the whole program coral
    judged: the benchmark's program prefix and the code). A sample without code gets an empty one (it fails)."""
    by_id = {t.id: t for t in tasks}
    order = {t.id: i for i, t in enumerate(tasks)}
    lines = []
    for r in sorted(records, key=lambda r: (order[r["task_id"]], r["sample"])):
        code = r["code"] or ""
        if r.get("prompt_style") == "completion":
            lines.append({"task_id": r["task_id"], "completion": code})
        else:
            lines.append({"task_id": r["task_id"], "solution": by_id[r["task_id"]].program(code) if code else ""})
    write_atomic(path, "".join(json.dumps(line) + "\n" for line in lines))
