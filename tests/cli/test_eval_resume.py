"""coral eval resumes: after an interrupt the next run keeps the finished tasks' samples, runs the others and
ends with the samples an uninterrupted run writes; samples made otherwise are refused, not mixed in."""

from __future__ import annotations

import json

import pytest

import coral.evaluation
from coral.benchmarks import load_benchmark
from coral.cli import main


def _replies(tmp_path, n=5):
    """Replies keyed by task prompt (the same reply for a task whatever its batch): the reference for even
    tasks, a wrong function for odd ones."""
    tasks = load_benchmark("procedural-test", limit=n)
    replies = {t.prompt: (f"```python\n{t.reference}\n```" if i % 2 == 0 else
                          f"```python\ndef {t.entry_point}(*args):\n    return None\n```") for i, t in enumerate(tasks)}
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(replies))
    return path


def _eval(out, replies, *extra):
    return main(["eval", "--workflow", "single", "--limit", "5", "--tasks-per-batch", "2", "--model",
                 f"scripted:{replies}", "--out-dir", str(out), "--no-progress", *extra])


def _samples(out):
    return [(r["task_id"], r["sample"], r["code"], r["passed"])
            for r in map(json.loads, (out / "samples.jsonl").read_text().splitlines())]


def _interrupt_at_batch(monkeypatch, n):
    real, calls = coral.evaluation.run_chain, []

    def run_chain(batch, *args, **kwargs):
        calls.append([t.id for t in batch])
        if len(calls) == n:
            raise KeyboardInterrupt
        return real(batch, *args, **kwargs)

    monkeypatch.setattr(coral.evaluation, "run_chain", run_chain)
    return calls


def test_an_interrupted_eval_resumes_and_ends_with_the_uninterrupted_samples(tmp_path, monkeypatch, capsys):
    replies = _replies(tmp_path)
    assert _eval(tmp_path / "whole", replies) == 0
    _interrupt_at_batch(monkeypatch, 2)
    assert _eval(tmp_path / "cut", replies) == 130  # Ctrl-C during the second batch
    assert len(_samples(tmp_path / "cut")) == 2
    calls = _interrupt_at_batch(monkeypatch, 0)
    assert _eval(tmp_path / "cut", replies) == 0
    assert "2 of 5 tasks kept" in capsys.readouterr().out
    whole = _samples(tmp_path / "whole")
    assert [ids for batch in calls for ids in batch] == [t for t, *_ in whole[2:]]  # only the other tasks ran
    assert _samples(tmp_path / "cut") == whole
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())["summary"]
    assert summary["pass@1"] == pytest.approx(3 / 5) and summary["kept_samples"] == 2


def test_a_task_cut_short_mid_write_runs_again(tmp_path, monkeypatch):
    replies = _replies(tmp_path)
    out = tmp_path / "e"
    assert main(["eval", "--workflow", "single", "--limit", "5", "--samples-per-task", "2", "--temperature", "1",
                 "--model", f"scripted:{replies}", "--out-dir", str(out), "--no-progress"]) == 0
    whole = _samples(out)
    lines = (out / "samples.jsonl").read_text().splitlines()
    (out / "samples.jsonl").write_text("\n".join(lines[:5]) + "\n")  # task 3 kept one of its two samples
    calls = _interrupt_at_batch(monkeypatch, 0)
    assert main(["eval", "--workflow", "single", "--limit", "5", "--samples-per-task", "2", "--temperature", "1",
                 "--model", f"scripted:{replies}", "--out-dir", str(out), "--no-progress"]) == 0
    assert calls == [[t for t, s, *_ in whole[4::2]]]  # tasks 3 to 5 ran, the first two were kept
    assert _samples(out) == whole


def test_samples_of_other_settings_or_a_retrained_model_are_refused_in_one_line(tmp_path, capsys):
    replies = _replies(tmp_path)
    out = tmp_path / "e"
    assert _eval(out, replies) == 0
    capsys.readouterr()
    assert _eval(out, replies, "--max-new-tokens", "64") == 2
    err = capsys.readouterr().err.strip()
    assert "made with max_new_tokens 256, not 64" in err and "--resume false" in err and len(err.splitlines()) == 1
    replies.write_text(replies.read_text())  # the same model name, its file written again
    assert _eval(out, replies) == 2
    assert "model_files" in capsys.readouterr().err
    assert _eval(out, replies, "--resume", "false") == 0  # starts over
    assert _eval(out, replies, "--ks", "1", "--tasks-per-batch", "3", "--sandbox-workers", "1") == 0


def test_the_evalplus_export_has_task_ids_and_whole_programs(tmp_path):
    replies = _replies(tmp_path)
    assert _eval(tmp_path / "e", replies, "--export", "evalplus") == 0
    lines = [json.loads(x) for x in (tmp_path / "e" / "samples.evalplus.jsonl").read_text().splitlines()]
    tasks = load_benchmark("procedural-test", limit=5)
    assert [set(x) for x in lines] == [{"task_id", "solution"}] * 5
    assert [x["task_id"] for x in lines] == [t.id for t in tasks]
    code = _samples(tmp_path / "e")[0][2]
    assert tasks[0].reference.strip() in code and lines[0]["solution"] == tasks[0].program(code)
