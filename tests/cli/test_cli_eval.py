import json

import pytest

from coral.benchmarks import load_benchmark
from coral.cli import main


def _replies_file(tmp_path, replies):
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(replies))
    return path


def test_eval_chain_writes_samples_and_prints_a_table(tmp_path, capsys):
    tasks = load_benchmark("procedural-test", limit=3)
    # a scripted policy that plans once then answers with the reference of each task in turn
    replies = []
    for t in tasks:
        replies += [t.metadata["gold_plan"], f"```python\n{t.reference}\n```"]
    out = tmp_path / "run"
    rc = main(["eval", "--workflow", "chain", "--bench", "procedural-test", "--limit", "3",
               "--tasks-per-batch", "1", "--model", f"scripted:{_replies_file(tmp_path, replies)}",
               "--out-dir", str(out), "--no-progress"])
    assert rc == 0
    lines = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in lines] == [t.id for t in tasks]
    assert all(r["passed"] for r in lines)
    assert [t["role"] for t in lines[0]["turns"]] == ["planner", "coder"]
    assert lines[0]["private"]["tests"][0]["verdict"] == "pass"
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert summary["pass@1"] == 1.0 and summary["tasks"] == 3
    printed = capsys.readouterr().out
    assert "pass@1" in printed and "1" in printed


def test_eval_counts_wrong_answers_as_failures(tmp_path):
    out = tmp_path / "run"
    replies = ["```python\ndef f(xs):\n    return None\n```"]
    assert main(["eval", "--workflow", "single", "--bench", "procedural-test", "--limit", "2",
                 "--model", f"scripted:{_replies_file(tmp_path, replies)}", "--out-dir", str(out),
                 "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert summary["pass@1"] == 0.0 and summary["samples"] == 2


@pytest.mark.parametrize("args, message", [
    (["--bench", "nope"], "unknown benchmark 'nope'"),
    (["--model", "/nonexistent/model"], "/nonexistent/model"),
    (["--samples-per-task", "x"], "field 'samples_per_task': expected int, got 'x'"),
    (["--ks", "1,5"], "field 'ks': 5 is not within 1..samples_per_task=1"),
    (["--model", "openai:http://127.0.0.1:9/v1", "--limit", "1"], "http://127.0.0.1:9/v1"),
    (["--bench", "/no/such/file.jsonl"], "/no/such/file.jsonl"),
])
def test_bad_input_ends_with_one_clear_line(args, message, capsys, tmp_path):
    rc = main(["eval", *args, "--out-dir", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert message in err and len(err.splitlines()) == 1, err


def test_malformed_config_file_is_named(tmp_path, capsys):
    bad = tmp_path / "eval.yaml"
    bad.write_text("workflow: chain\nsamples_per_task: [\n")
    assert main(["eval", "--config", str(bad)]) == 2
    assert "eval.yaml: malformed YAML" in capsys.readouterr().err


def test_demo_runs_end_to_end_and_writes_a_report(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["demo", "--no-progress", "--out-dir", str(out), "--n-train-tasks", "40", "--n-test-tasks", "4",
               "--d-model", "32", "--n-layers", "1", "--sft.epochs", "0.5", "--rl-steps", "2",
               "--tasks-per-step", "2", "--plans-per-task", "2", "--codes-per-plan", "2",
               "--max-new-tokens", "16", "--sandbox-workers", "1", "--n-fresh-tasks", "3"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "held-out pass@1 after SFT -> after SFT + RL (seed 0" in printed
    # both held-out sets, greedy and sampled (4 samples per task is the demo's default)
    assert "new skeletons (test split), 4 tasks, greedy:" in printed
    assert "new skeletons (test split), 4 tasks, 4 samples per task at temperature 1.0:" in printed
    assert "tasks of the training skeletons, 3 tasks, greedy:" in printed
    assert "tasks of the training skeletons, 3 tasks, 4 samples per task at temperature 1.0:" in printed
    assert printed.count("paired standard error") == 5  # four changes and the note on noise
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= {"pass@1_sft", "pass@1_rl", "seed", "wall_s", "pass@1_fresh_sft", "pass@1_fresh_rl"}
    # the printed change is the per-task mean: with k = 1 it equals the difference of the pass@1 figures
    change = summary["change"]
    assert {k: change[k]["tasks"] for k in change} == {"greedy": 4, "sampled": 4, "fresh_greedy": 3,
                                                        "fresh_sampled": 3}
    for key, figure in (("greedy", ""), ("sampled", "_sampled"), ("fresh_greedy", "_fresh"),
                        ("fresh_sampled", "_fresh_sampled")):
        assert change[key]["mean"] == pytest.approx(summary[f"pass@1{figure}_rl"] - summary[f"pass@1{figure}_sft"])
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    labels = {d: json.loads((out / d / "summary.json").read_text())["config"]["bench"]
              for d in ("eval_sft", "eval_rl_sampled", "eval_sft_fresh", "eval_rl_fresh_sampled")}
    assert labels == {"eval_sft": "procedural-test", "eval_rl_sampled": "procedural-test",
                      "eval_sft_fresh": "procedural-train-unseen", "eval_rl_fresh_sampled": "procedural-train-unseen"}
    page = (out / "report.html").read_text()
    assert "<polyline" in page and "new skeletons (test split), after SFT + RL (greedy)" in page
    assert "tasks of the training skeletons, after SFT + RL (4 samples per task)" in page
    assert (out / "final" / "coder" / "config.json").is_file()
    # the saved coder is a model `coral eval --model` accepts
    assert main(["eval", "--workflow", "single", "--bench", "procedural-test", "--limit", "2",
                 "--max-new-tokens", "8", "--model", str(out / "final" / "coder"),
                 "--out-dir", str(tmp_path / "ev"), "--no-progress"]) == 0


def test_train_names_an_unknown_recipe_and_a_bad_flag(tmp_path, capsys):
    cfg = tmp_path / "t.yaml"
    cfg.write_text("recipe: nope\n")
    assert main(["train", str(cfg)]) == 2
    assert "field 'recipe': 'nope' is not one of ['corecode', 'mars2', 'recursivemas']" in capsys.readouterr().err
    cfg.write_text("recipe: mars2\nshaping: maybe\n")
    assert main(["train", str(cfg)]) == 2
    assert "field 'shaping': expected true/false, got 'maybe'" in capsys.readouterr().err
