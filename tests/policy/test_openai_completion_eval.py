"""`coral eval --prompt-style completion` through an OpenAI-compatible server: /completions, the raw prompt."""

from __future__ import annotations

import json

from coral.benchmarks import load_benchmark
from coral.evaluation import EvalConfig, run_eval


def test_completion_style_sends_the_raw_prompt_to_completions_with_the_stop_sequences(server, tmp_path):
    tasks = load_benchmark("humaneval", limit=3)
    # the canonical body for the first two, a wrong body for the third, each followed by text past a stop
    answers = {t.completion_prompt: "\n" + t.reference[len(t.prompt):] + "\n\ndef extra():\n    pass\n"
               for t in tasks[:2]}
    answers[tasks[2].completion_prompt] = "\n    return None\n"
    server.complete = answers.__getitem__
    cfg = EvalConfig(bench="humaneval", limit=3, workflow="single", model=f"openai:{server.url}#m",
                     prompt_style="completion", out_dir=str(tmp_path), max_new_tokens=512)
    summary = run_eval(cfg, progress=False)
    assert set(server.paths) == {"/v1/completions"}
    assert sorted(b["prompt"] for b in server.bodies) == sorted(t.prompt.strip() for t in tasks)
    assert all(b["stop"] == sorted(tasks[0].completion_stop) for b in server.bodies)
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [s["passed"] for s in samples] == [True, True, False]
    assert "def extra" not in samples[0]["code"] and samples[0]["prompt_style"] == "completion"
    assert summary["pass@1"] == 2 / 3
