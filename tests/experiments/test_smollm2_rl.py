"""experiments/smollm2_rl.py: what each stage holds out (no model is loaded: train_corecode is replaced)."""

import json

import pytest

from experiments import smollm2_rl


@pytest.fixture
def seen(monkeypatch):
    got = []
    monkeypatch.setattr("coral.corecode.recipe.train_corecode", lambda cfg: got.append(cfg) or {})
    return got


def test_run_holds_out_the_test_split_and_the_fresh_tasks_of_rl_s_stream(seen):
    smollm2_rl.main(["run", "--seed", "1", "--set", "rl_steps=3"])
    cfg = seen[0]
    assert (cfg.held_out_split, cfg.n_fresh_tasks, cfg.fresh_source) == ("test", 40, "rl")
    assert (cfg.seed, cfg.rl_steps, cfg.out_dir) == (1, 3, "runs/smollm2/run/seed1")


def test_a_sweep_chooses_on_validation_and_never_sees_the_fresh_tasks(seen):
    smollm2_rl.main(["sweep", "--name", "lr", "--set", "rl.lr=1e-4"])
    cfg = seen[0]
    assert (cfg.held_out_split, cfg.n_fresh_tasks, cfg.rl.lr) == ("validation", 0, 1e-4)


def test_run_refuses_the_validation_split():
    with pytest.raises(SystemExit, match="choose settings with stage sweep"):
        smollm2_rl.main(["run", "--set", "held_out_split=validation"])


def write_samples(path, rows):
    path.mkdir(parents=True, exist_ok=True)
    (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def sample(task, passed, code="", plan_error=None):
    return {"task_id": task, "passed": passed, "code": code,
            "turns": [{"role": "planner", "parse_error": plan_error}, {"role": "coder", "parse_error": None}]}


def test_code_forms_counts_step_lines_and_numbered_plans(tmp_path):
    write_samples(tmp_path, [
        sample("a", True, "def f(xs):\n    xs = [x for x in xs]\n    return xs"),  # a step line
        sample("b", False, "def f(s):\n    s = s.upper()\n    return s", plan_error="no numbered steps"),
        sample("c", True, "def f(xs):\n    return [x + 1 for x in xs]  # ys = xs", plan_error="no numbered steps"),
        sample("d", True, "def f(xs):\n    total = sum(xs)\n    return total"),  # another name: not a step line
    ])
    assert smollm2_rl.code_forms(tmp_path / "samples.jsonl") == {
        "codes": 4, "step_codes": 2, "plans": 4, "numbered_plans": 2}


def test_compare_pairs_two_sweeps_on_their_tasks(tmp_path, capsys):
    for run, start, after in (("a", [1, 0, 0, 0], [1, 0, 0, 0]), ("b", [1, 0, 0, 0], [1, 1, 1, 0])):
        for when, passed in (("sft", start), ("rl", after)):
            write_samples(tmp_path / run / f"eval_{when}", [sample(f"t{i}", bool(p)) for i, p in enumerate(passed)])
    got = smollm2_rl.compare(tmp_path, "a", "b")
    # changes 0, +1, +1, 0: mean 0.5, sd sqrt(1/3), SE sqrt(1/3)/2
    assert (got["after"].mean, got["after"].up, got["after"].down) == (0.5, 2, 0)
    assert got["after"].se == pytest.approx((1 / 3) ** 0.5 / 2)
    assert (got["start"].mean, got["start"].up) == (0.0, 0)
    assert "b - a, greedy pass@1 after RL on 4 tasks: +0.500" in capsys.readouterr().out


def test_compare_refuses_runs_on_different_tasks(tmp_path):
    for run, task in (("a", "t0"), ("b", "t9")):
        for when in ("sft", "rl"):
            write_samples(tmp_path / run / f"eval_{when}", [sample(task, True)])
    with pytest.raises(ValueError, match="different tasks"):
        smollm2_rl.compare(tmp_path, "a", "b")


def test_compare_names_the_missing_evaluation(tmp_path):
    write_samples(tmp_path / "a" / "eval_sft", [sample("t0", True)])
    with pytest.raises(SystemExit, match=r"a/eval_rl/samples.jsonl not found"):
        smollm2_rl.compare(tmp_path, "a", "b")


def test_window_means_averages_ten_step_windows_and_the_last_ten():
    steps = [{"coder/reward": i / 100, "step_s": 10.0} for i in range(1, 36)]  # rewards 0.01 .. 0.35
    steps[0]["coder/entropy"] = 0.5  # logged at one step of the first window only
    got = smollm2_rl.window_means(steps)
    assert [span for span, _ in got] == ["1-10", "21-30", "26-35"]
    assert got[0][1]["coder/reward"] == pytest.approx(0.055) and got[0][1]["coder/entropy"] == 0.5
    assert got[1][1]["coder/reward"] == pytest.approx(0.255) and "coder/entropy" not in got[1][1]
    assert got[2][1]["coder/reward"] == pytest.approx(0.305) and got[2][1]["step_s"] == 10.0
    assert [span for span, _ in smollm2_rl.window_means(steps[:10])] == ["1-10"]


def test_curves_prints_the_windows_draws_every_step_and_names_a_missing_run(tmp_path, capsys):
    run = tmp_path / "run" / "a"
    run.mkdir(parents=True)
    rows = [{"coder/reward": 0.2, "pass_rate": 0.1, "step_s": 30.0}] * 10 + [{"coder/reward": 0.8, "pass_rate": 0.7,
                                                                             "step_s": 20.0}] * 10
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    smollm2_rl.curves(tmp_path, ["run/a"], tmp_path / "c.svg")
    out = capsys.readouterr().out
    assert "| run/a | 1-10 | 0.200 | 0.100 | - |" in out and "| run/a | 11-20 | 0.800 | 0.700 | - |" in out
    assert (tmp_path / "c.svg").read_text().count('data-method="run/a"') == 2  # reward, pass rate; the rest not logged
    with pytest.raises(SystemExit, match="run/b/metrics.jsonl not found"):
        smollm2_rl.curves(tmp_path, ["run/b"], None)


def finished_run(run, steps, change):
    """A run folder as report reads it: summary, config, metrics and both evaluations (one task)."""
    for when in ("sft", "rl"):
        write_samples(run / f"eval_{when}", [sample("t0", when == "rl")])
    (run / "config.json").write_text(json.dumps({"held_out_split": "validation"}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    summary = {"change": {"greedy": {"mean": change, "se": 0.0}}, "pass@1_sft": 0.0, "pass@1_rl": change,
               "evaluations": [{"tasks": 1}]}
    (run / "summary.json").write_text(json.dumps(summary))


def test_report_gives_the_first_and_last_ten_steps_and_dashes_for_a_run_without_rl(tmp_path, capsys):
    steps = [{"coder/reward": i / 100, "coder/entropy": 0.5, "step_s": float(i)} for i in range(1, 16)]
    steps[-1]["coder/kl_ref"] = 0.25  # logged at one of the last ten steps only
    finished_run(tmp_path / "sweep" / "a", steps, 1.0)
    finished_run(tmp_path / "run" / "none", [], 0.0)  # rl_steps 0: nothing logged
    smollm2_rl.report(tmp_path)
    rows = {line.split(" | ")[1]: line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")}
    # rewards 0.01..0.15: steps 1-10 mean 0.055, steps 6-15 mean 0.105; the median of 15 step times is the 8th
    assert "| 15 | 0.055 / 0.105 | 0.250 | 0.500 / 0.500 | 8 | 0 -> 0 of 1; 1 -> 1 of 1 |" in rows["a"]
    assert "| 0 | - / - | - | - / - | - |" in rows["none"]


def test_by_shot_splits_pass_at_1_by_the_prompt_s_example_and_counts_copies_of_the_fixed_shot(tmp_path, capsys):
    shot = "def f(xs: list[int]) -> int:\n    xs = [x for x in xs if x % 2 == 1]\n    return len(xs)"
    run = tmp_path / "a"
    write_samples(run / "eval_sft", [sample("s1", False), sample("s2", True), sample("x1", False), sample("x2", False)])
    write_samples(run / "eval_rl", [sample("s1", True), sample("s2", True), sample("x1", False, shot + "\n"),
                                    sample("x2", False, "def f(xs):\n    return 0")])
    kinds = {"s1": "sibling", "s2": "sibling", "x1": "fixed", "x2": "fixed"}
    got = smollm2_rl.by_shot([run], kinds=lambda _: kinds)
    assert got[("new skeletons", "sibling")] == {"tasks": 2, "before": 1, "after": 2, "copies": 0}
    assert got[("new skeletons", "fixed")] == {"tasks": 2, "before": 0, "after": 0, "copies": 1}
    assert ("fresh", "fixed") not in got  # a run without the fresh evaluations
    assert "| new skeletons | fixed | 2 | 0.000 | 0.000 | 1 of 2 |" in capsys.readouterr().out
