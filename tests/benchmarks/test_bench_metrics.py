"""pass@k against hand-computed values; per-test pass rate; NET/NMU; per-difficulty summary."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import pytest

from coral import trajectory
from coral.benchmarks.metrics import (
    TaskScore,
    efficiency_ratios,
    pass_at_k,
    per_test_pass_rate,
    score_task,
    summarize,
)
from coral.trajectory import ExecutionResult


@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (5, 2, 1, 0.4),  # c / n
    (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
    (200, 1, 100, 0.5),  # 1 - C(199,100)/C(200,100) = 1 - 100/200
    (10, 0, 3, 0.0),
    (10, 10, 1, 1.0),
    (4, 2, 3, 1.0),  # fewer wrong samples than k: a correct one is always drawn
])
def test_pass_at_k_matches_hand_computed_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_numerically_stable_for_large_n():
    n, c, k = 5000, 7, 250
    exact = 1 - Fraction(comb(n - c, k), comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-9)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (5, 6, 1), (5, 2, 0), (5, 2, 6), (5, -1, 1)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match=f"n={n}, c={c}, k={k}"):
        pass_at_k(n, c, k)


def _result(verdicts: str, cpu_s: float = 0.01, memory_mb: float = 2.0) -> ExecutionResult:
    names = {"p": "pass", "f": "fail", "t": "timeout"}
    cost = trajectory.TestCost(cpu_s=cpu_s, wall_s=2 * cpu_s, peak_memory_mb=memory_mb)
    return ExecutionResult(tests=tuple(trajectory.TestResult(verdict=names[v], cost=cost) for v in verdicts))


def test_per_test_pass_rate_counts_a_program_that_did_not_run_as_zero_of_all_tests():
    assert per_test_pass_rate(_result("ppf")) == pytest.approx(2 / 3)
    assert per_test_pass_rate(ExecutionResult(tests=(), error="SyntaxError"), num_tests=4) == 0.0


def test_efficiency_ratios_divide_solution_by_reference_time_and_memory():
    eff = efficiency_ratios(_result("pp", cpu_s=0.03, memory_mb=6.0), _result("pp", cpu_s=0.01, memory_mb=2.0))
    assert (eff.net, eff.nmu) == (pytest.approx(3.0), pytest.approx(3.0))
    wall = efficiency_ratios(_result("pp", cpu_s=0.03), _result("pp", cpu_s=0.01), clock="wall")
    assert wall.net == pytest.approx(3.0)


def test_efficiency_of_a_failing_solution_is_none():
    assert efficiency_ratios(_result("pf"), _result("pp")) is None


def test_efficiency_clamps_times_below_the_resolution_floor():
    eff = efficiency_ratios(_result("p", cpu_s=0.0), _result("p", cpu_s=0.0))
    assert eff.net == 1.0


def test_summarize_groups_by_difficulty_and_adds_an_all_row():
    scores = [
        TaskScore("a", "1", num_samples=5, num_correct=2, test_pass_rate=0.5, net=2.0, nmu=1.0),
        TaskScore("b", "1", num_samples=5, num_correct=0, test_pass_rate=0.1),
        TaskScore("c", "2", num_samples=5, num_correct=5, test_pass_rate=1.0, net=0.5, nmu=4.0),
    ]
    table = summarize(scores, ks=(1, 2))
    assert list(table) == ["1", "2", "all"]
    assert table["1"]["pass@1"] == pytest.approx((0.4 + 0.0) / 2)
    assert table["1"]["pass@2"] == pytest.approx(0.7 / 2)
    assert table["all"]["tasks"] == 3
    assert table["all"]["net"] == pytest.approx(1.0)  # geometric mean of 2.0 and 0.5
    assert "net" not in summarize(scores[1:2])["1"]


def test_score_task_averages_efficiency_over_passing_samples_only():
    ref = _result("pp", cpu_s=0.01)
    score = score_task("t", 3, [_result("pp", cpu_s=0.02), _result("pf", cpu_s=0.5)], num_tests=2, reference=ref)
    assert (score.num_samples, score.num_correct, score.difficulty) == (2, 1, "3")
    assert score.test_pass_rate == pytest.approx(0.75)
    assert score.net == pytest.approx(2.0)


def test_paired_change_is_the_mean_per_task_change_with_its_standard_error():
    from coral.benchmarks.metrics import paired_change

    # changes 0, +1, -0.5: mean 1/6; sample variance ((1/6)^2 + (5/6)^2 + (2/3)^2) / 2 = 7/12; se = sqrt(7/12 / 3)
    change = paired_change({"a": 1.0, "b": 0.0, "c": 0.5}, {"a": 1.0, "b": 1.0, "c": 0.0})
    assert change.mean == pytest.approx(1 / 6)
    assert change.se == pytest.approx((7 / 36) ** 0.5)
    assert (change.up, change.down, change.tasks) == (1, 1, 3)
    assert paired_change({"a": 0.0}, {"a": 1.0}).se == 0.0


def test_paired_change_refuses_different_task_sets():
    from coral.benchmarks.metrics import paired_change

    with pytest.raises(ValueError, match="different tasks, e.g. 'c' \\(1 task ids in only one"):
        paired_change({"a": 1.0, "c": 0.0}, {"a": 1.0})
    with pytest.raises(ValueError, match="no tasks"):
        paired_change({}, {})


def test_task_pass_rates_read_samples_and_name_a_bad_line(tmp_path):
    import json

    from coral.evaluation import task_pass_rates

    path = tmp_path / "samples.jsonl"
    rows = [{"task_id": "a", "passed": True}, {"task_id": "a", "passed": False}, {"task_id": "b", "passed": True}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert task_pass_rates(path) == {"a": 0.5, "b": 1.0}
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps({"task_id": "a"}) + "\n")
    with pytest.raises(ValueError, match="samples.jsonl:2: not an evaluation sample record"):
        task_pass_rates(path)
