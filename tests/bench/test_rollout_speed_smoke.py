"""bench/rollout_speed.py: every variant runs on the tiny model, and the baseline is the commit's own code."""

from __future__ import annotations

import subprocess

import pytest

BASELINE = "7ae0e0e"


@pytest.fixture
def bench(load_bench):
    return load_bench("rollout_speed")


def test_the_baseline_is_the_hf_policy_of_the_named_commit(bench):
    found = subprocess.run(["git", "-C", str(bench.REPO), "cat-file", "-e", f"{BASELINE}^{{commit}}"])
    if found.returncode:
        pytest.skip(f"commit {BASELINE} is not in this clone's history")
    cls = bench.baseline_class(BASELINE)
    assert cls.__module__ == f"coral_policy_{BASELINE}.hf"
    assert "dtype" not in cls.__init__.__code__.co_varnames  # the float32-only policy of that commit


@pytest.mark.slow  # six variants, bfloat16 ones compile their oneDNN kernels on first use: about 10 s
def test_every_variant_runs_and_prints_its_row(bench, capsys):
    found = subprocess.run(["git", "-C", str(bench.REPO), "cat-file", "-e", f"{BASELINE}^{{commit}}"])
    variants = [v for v in bench.VARIANTS if v != "baseline" or not found.returncode]
    bench.main(["--model", "tiny", "--prompts", "2", "--samples", "2", "--new-tokens", "3", "--repeats", "1",
                "--variants", ",".join(variants)])
    rows = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert set(variants) <= rows


def test_an_unknown_variant_is_refused(bench):
    with pytest.raises(SystemExit, match="float16"):
        bench.main(["--model", "tiny", "--variants", "float16"])
