"""bench/humaneval_dtype.py: the paired comparison by hand, and one problem in each precision end to end."""

from __future__ import annotations

import pytest


@pytest.fixture
def bench(load_bench):
    return load_bench("humaneval_dtype")


def test_mcnemar_p_is_the_two_sided_binomial_tail_of_the_discordant_tasks(bench):
    assert bench.mcnemar_p(0, 0) == 1.0
    assert bench.mcnemar_p(1, 5) == pytest.approx(2 * (1 + 6) / 64)
    assert bench.mcnemar_p(3, 3) == 1.0


def test_the_paired_table_counts_tasks_and_the_difference_of_pass_rates(bench):
    a = {"t1": True, "t2": True, "t3": False, "t4": False, "only_in_a": True}
    b = {"t1": True, "t2": False, "t3": True, "t4": True}
    p = bench.paired(a, b)
    assert (p["tasks"], p["both"], p["only_a"], p["only_b"], p["neither"]) == (4, 1, 1, 2, 0)
    assert p["diff"] == pytest.approx(0.25)
    assert p["se"] == pytest.approx((2.75 / 3 / 4) ** 0.5)


def test_an_unknown_run_is_refused(bench):
    with pytest.raises(SystemExit, match="float16"):
        bench.main(["--runs", "float16"])


@pytest.mark.slow  # two `coral eval` processes (torch import, tiny model, 256 tokens, sandbox): 20-100 s
def test_one_problem_in_each_precision_prints_both_runs_and_their_pairing(bench, tmp_path, capsys):
    bench.main(["--limit", "1", "--model", "tiny", "--runs", "float32,bfloat16", "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "bfloat16 vs float32: 1 tasks" in out
    assert (tmp_path / "bfloat16" / "samples.jsonl").is_file()
