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


DEMO = ["demo", "--no-progress", "--n-train-tasks", "40", "--n-test-tasks", "4", "--d-model", "32", "--n-layers", "1",
        "--sft.epochs", "0.5", "--rl-steps", "2", "--tasks-per-step", "2", "--plans-per-task", "2",
        "--codes-per-plan", "2", "--max-new-tokens", "16", "--sandbox-workers", "1", "--n-fresh-tasks", "3"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One tiny demo run (about 40 s on a quiet machine): its directory and what it printed."""
    import contextlib
    import io
    import os

    out = tmp_path_factory.mktemp("demo") / "demo"
    printed = io.StringIO()
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "200"  # the table's rows on one line each
    try:
        with contextlib.redirect_stdout(printed):
            assert main([*DEMO, "--out-dir", str(out)]) == 0
    finally:
        os.environ.pop("COLUMNS") if columns is None else os.environ.update(COLUMNS=columns)
    return out, printed.getvalue()


def test_demo_runs_end_to_end_and_writes_a_report(demo, tmp_path):
    out, printed = demo
    assert "coral train: CoRe-Code, held-out pass@1" in printed
    # both held-out sets, greedy and sampled (4 samples per task is the demo's default), with their paired change
    for label in ("new skeletons (test split), greedy", "new skeletons (test split), 4/task at T=1.0",
                  "tasks of the training skeletons, greedy", "tasks of the training skeletons, 4/task at T=1.0"):
        assert f"│ {label} " in printed
    assert "change ± SE" in printed and "paired standard error" in printed
    assert f"report: {out / 'report.html'}" in printed.replace("\n", "")
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
    assert "<polyline" in page and "new skeletons (test split), greedy" in page and "change ± SE" in page
    assert "cold start: SFT loss per role" in page and "<details><summary>config (" in page
    assert (out / "final" / "coder" / "config.json").is_file()
    # the saved coder is a model `coral eval --model` accepts
    assert main(["eval", "--workflow", "single", "--bench", "procedural-test", "--limit", "2",
                 "--max-new-tokens", "8", "--model", str(out / "final" / "coder"),
                 "--out-dir", str(tmp_path / "ev"), "--no-progress"]) == 0


def test_tensorboard_holds_the_sft_loss_and_the_held_out_pass_at_1_before_and_after_rl(demo):
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    out, _ = demo
    events = EventMultiplexer({"run": str(out / "tb")}).Reload()
    tags = events.GetAccumulator("run").Tags()["scalars"]
    assert {"sft/planner/loss", "sft/coder/loss", "eval/pass@1", "eval/pass@1_fresh_sampled"} <= set(tags)
    assert [e.step for e in events.Scalars("run", "eval/pass@1")] == [0, 2]  # after SFT, after RL
    assert len(events.Scalars("run", "sft/coder/loss")) == len(json.loads(
        (out / "sft_loss.jsonl").read_text().splitlines()[1])["loss"])


def test_a_finished_demo_run_again_keeps_its_recorded_wall_time(demo, capsys):
    """Run again, the finished demo resumes at its last step and only evaluates again: its wall time is
    the run's (SFT, evaluations, RL, over both sessions), not the second session's few seconds."""
    out, _ = demo
    first = json.loads((out / "summary.json").read_text())
    assert main([*DEMO, "--out-dir", str(out)]) == 0
    again = json.loads((out / "summary.json").read_text())
    assert again["pass@1_rl"] == first["pass@1_rl"]
    assert again["wall_s"] >= first["sft_s"] > 0  # the SFT of the first session is counted


def test_train_names_an_unknown_recipe_and_a_bad_flag(tmp_path, capsys):
    cfg = tmp_path / "t.yaml"
    cfg.write_text("recipe: nope\n")
    assert main(["train", str(cfg)]) == 2
    assert "field 'recipe': 'nope' is not one of ['corecode', 'mars2', 'recursivemas']" in capsys.readouterr().err
    cfg.write_text("recipe: mars2\nshaping: maybe\n")
    assert main(["train", str(cfg)]) == 2
    assert "field 'shaping': expected true/false, got 'maybe'" in capsys.readouterr().err
