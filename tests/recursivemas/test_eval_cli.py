"""`coral eval --workflow recursive | text-mas` on a tiny trained RecursiveMAS run directory."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from coral.cli import main
from coral.recursivemas.agents import build_records
from coral.recursivemas.config import InnerLoopConfig, OuterLoopConfig, RecursiveMASConfig
from coral.recursivemas.patterns import get_pattern
from coral.recursivemas.recipe import CONFIG_FILE, load_or_build_agents
from coral.recursivemas.system import RecursiveMAS
from coral.recursivemas.train import new_state, train_links
from coral.train.loop import Run
from coral.train.loop import new_state as new_trainer_state

RECORDS = [{"question": f"question {i}", "plan": f"plan {i}", "refined_plan": f"refined {i}", "answer": f"a{i}"}
           for i in range(7)]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run as `coral train` leaves it (config.json, agents/, ckpt/), with 2 inner + 1 outer step."""
    root = tmp_path_factory.mktemp("latent_eval")
    data = root / "records.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    cfg = RecursiveMASConfig(pattern="distillation", rounds=2, latent_steps=2, data=str(data), n_train_tasks=4,
                             n_test_tasks=3, agent_widths=(16, 24), n_layers=1, vocab_size=300,
                             inner=InnerLoopConfig(steps=2), outer=OuterLoopConfig(steps=1), batch_size=2,
                             max_new_tokens=4, out_dir=str(root / "run"))
    (root / "run").mkdir()
    (root / "run" / CONFIG_FILE).write_text(json.dumps(asdict(cfg)))
    train, _ = build_records(cfg)
    system = RecursiveMAS(get_pattern(cfg.pattern), load_or_build_agents(cfg, train, False), cfg.latent_steps)
    train_links(new_state(cfg, system), train, Run(cfg.out_dir), new_trainer_state())  # writes ckpt/step_000003
    return root / "run"


@pytest.mark.parametrize("workflow", ["recursive", "text-mas"])
def test_coral_eval_runs_a_latent_workflow_and_writes_tokens_and_wall_time_per_sample(run_dir, tmp_path, workflow):
    out = tmp_path / "eval"
    assert main(["eval", "--workflow", workflow, "--latent-run-dir", str(run_dir), "--latent-rounds", "1",
                 "--out-dir", str(out), "--no-progress"]) == 0
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [s["task_id"] for s in samples] == ["records/5", "records/6", "records/7"]  # the run's 3 test records
    assert all(s["workflow"] == workflow and s["metrics"]["rounds"] == 1 for s in samples)
    assert all(1 <= s["turns"][0]["completion_tokens"] <= (4 if workflow == "recursive" else 8) for s in samples)
    assert all(s["metrics"]["wall_s"] > 0 for s in samples)
    # batches of 2 (the run's batch_size): the third sample's batch is itself alone
    assert samples[0]["metrics"]["batch_wall_s"] == pytest.approx(2 * samples[0]["metrics"]["wall_s"])
    assert samples[2]["metrics"]["batch_wall_s"] == pytest.approx(samples[2]["metrics"]["wall_s"])
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert summary["samples"] == 3
    assert summary["decoded_tokens"] == sum(s["turns"][0]["completion_tokens"] for s in samples)
    assert summary["wall_s"] == pytest.approx(sum(s["metrics"]["wall_s"] for s in samples))
    assert summary["accuracy"] == sum(s["passed"] for s in samples) / 3


def test_coral_eval_of_a_latent_run_on_humaneval_judges_its_first_tasks(run_dir, tmp_path):
    out = tmp_path / "eval"
    assert main(["eval", "--workflow", "recursive", "--latent-run-dir", str(run_dir), "--bench", "humaneval",
                 "--limit", "2", "--out-dir", str(out), "--no-progress"]) == 0
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [s["task_id"] for s in samples] == ["HumanEval/0", "HumanEval/1"]
    assert all(s["passed"] is False for s in samples)  # 4 tokens of an untrained tiny agent: no code


def test_a_bench_given_by_name_is_evaluated_even_when_it_is_the_chain_workflows_default(run_dir, tmp_path):
    """`--bench procedural-test` used to mean "no bench" (it is the chain's default) and the run's own
    records were evaluated instead."""
    out = tmp_path / "eval"
    assert main(["eval", "--workflow", "recursive", "--latent-run-dir", str(run_dir), "--bench", "procedural-test",
                 "--limit", "2", "--out-dir", str(out), "--no-progress"]) == 0
    ids = [json.loads(line)["task_id"] for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(ids) == 2 and all(i.startswith("procedural") for i in ids), ids


def test_coral_eval_names_the_missing_run_directory(tmp_path, capsys):
    assert main(["eval", "--workflow", "recursive", "--out-dir", str(tmp_path)]) == 2
    assert "latent_run_dir" in capsys.readouterr().err
    assert main(["eval", "--workflow", "text-mas", "--latent-run-dir", str(tmp_path / "nope"),
                 "--out-dir", str(tmp_path)]) == 2
    assert "not a RecursiveMAS run directory" in capsys.readouterr().err


def test_a_latent_workflows_samples_have_the_keys_of_every_other_workflows(run_dir, tmp_path):
    from coral.benchmarks import load_benchmark

    assert main(["eval", "--workflow", "recursive", "--latent-run-dir", str(run_dir), "--out-dir",
                 str(tmp_path / "latent"), "--no-progress"]) == 0
    task = load_benchmark("procedural-test", limit=1)[0]
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([f"```python\n{task.reference}\n```"]))
    assert main(["eval", "--workflow", "single", "--limit", "1", "--model", f"scripted:{replies}",
                 "--out-dir", str(tmp_path / "single"), "--no-progress"]) == 0
    latent, single = ([json.loads(line) for line in (tmp_path / name / "samples.jsonl").read_text().splitlines()]
                      for name in ("latent", "single"))
    assert set(latent[0]) == set(single[0])
    assert set(latent[0]["turns"][0]) == set(single[0]["turns"][0])
