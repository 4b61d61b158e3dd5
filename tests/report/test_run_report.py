"""The run report: charts with real axes (golden ticks and smoothing), every logged metric in a panel, the
held-out table with its paired change, the config collapsed; in headless Chromium, no console error,
tick labels on every axis and no legend entry over another."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from coral.report.charts import Series, line_chart, nice_ticks, smooth, smoothing_window
from coral.report.run_report import Report, panels, write_run_report
from coral.terminal import BeforeAfter
from tests.browser import Page, chromium


def test_ticks_are_round_numbers_that_cover_the_data():
    assert nice_ticks(0, 1) == [0, 0.5, 1]
    assert nice_ticks(1, 200, integer=True) == [0, 50, 100, 150, 200]
    assert nice_ticks(3, 3, integer=True) == [3, 4]  # one step: an axis of one unit, not of fractions
    assert nice_ticks(0.18, 0.26) == pytest.approx([0.18, 0.20, 0.22, 0.24, 0.26])
    assert nice_ticks(-1.3, 0.2) == pytest.approx([-1.5, -1.0, -0.5, 0.0, 0.5])
    # a ratio logged as 0.9999999999999999 and 1.0: one value to the axis, not a 1e-16 range of equal ticks
    assert nice_ticks(0.9999999999999999, 1.0) == pytest.approx([0.9, 0.95, 1.0, 1.05, 1.1])


def test_smoothing_is_a_centred_moving_average_that_skips_missing_values():
    assert smooth([0, 3, 6, math.nan, 3], 3) == [1.5, 3, 4.5, 4.5, 3]
    assert [smoothing_window(n) for n in (1, 9, 20, 200)] == [1, 1, 3, 21]


def test_a_chart_labels_both_axes_and_draws_raw_and_smoothed_lines():
    steps = list(range(1, 41))
    html = line_chart([Series("coder", steps, [s % 3 for s in steps]), Series("planner", steps, [1.0] * 40)], "RL step")
    assert re.findall(r'class="xtick"[^>]*>([^<]+)<', html) == ["0", "10", "20", "30", "40"]
    assert re.findall(r'class="ytick"[^>]*>([^<]+)<', html) == ["0.0", "0.5", "1.0", "1.5", "2.0"]
    assert html.count('class="raw"') == 2 and html.count('class="smooth"') == 2
    assert html.index('class="legend"') < html.index("<svg xmlns")  # the legend sits above the plot, not on it


def test_a_chart_leaves_out_non_finite_values_and_draws_a_single_point_as_a_dot():
    html = line_chart([Series("a", [1, 2], [math.nan, 0.5]), Series("b", [1], [math.inf])], "step")
    assert "<circle" in html and "NaN" not in html and "inf" not in html


def test_every_logged_metric_lands_in_a_panel_with_a_line_per_role():
    history = [{"step": s, "coder/reward": 0.1 * s, "planner/reward": 0.2, "pass_rate": 0.5, "coder/loss": 1.0,
                "coder/kl_ref": 0.01, "coder/entropy": 2.0, "coder/zero_variance_groups": 0.25,
                "coder/grad_norm": 3.0, "step_s": 1.5, "rollout_s": 1.0, "coder/turns": 8.0, "planner/turns": 4.0}
               for s in (1, 2, 3)]
    got = {title: [s.name for s in series] for title, series in panels(history)}
    assert got == {"mean reward per role": ["coder", "planner"], "pass rate of the step's rollouts": ["pass_rate"],
                   "loss": ["coder"], "KL to the cold start (k3, sampled turns)": ["coder"],
                   "entropy of the sampling distribution (nats per token)": ["coder"],
                   "zero-advantage share (groups whose rewards are all equal)": ["coder"],
                   "gradient norm (before clipping)": ["coder"], "step time (s)": ["step_s", "rollout_s"],
                   "turns": ["coder", "planner"]}


def write_run(run: Path, steps: int = 60) -> Path:
    """A run directory as a recipe leaves it: metrics, SFT curves, config."""
    run.mkdir(parents=True, exist_ok=True)
    rows = [{"step": s, "coder/reward": 0.3 + 0.004 * s + 0.1 * math.sin(s), "planner/reward": 0.3 + 0.003 * s,
             "pass_rate": 0.2 + 0.005 * s, "coder/loss": 0.05 * math.cos(s), "coder/entropy": 2 - 0.01 * s,
             "coder/zero_variance_groups": 0.5 - 0.004 * s, "coder/grad_norm": 1 + 0.5 * math.sin(3 * s),
             "step_s": 4 + math.sin(s), "coder/turns": 8.0} for s in range(1, steps + 1)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "sft_loss.jsonl").write_text("".join(json.dumps({"role": r, "loss": [3 / (1 + 0.1 * i) for i in range(80)]})
                                                + "\n" for r in ("planner", "coder")))
    (run / "config.json").write_text(json.dumps({"seed": 0, "rl": {"lr": 1e-4, "loss": {"kind": "ppo_clip"}}}))
    return run


def report_of(run: Path) -> Report:
    change = {"mean": 0.05, "se": 0.02, "up": 12, "down": 2, "tasks": 200}
    return Report("CoRe-Code", run, [BeforeAfter("new skeletons (test split), greedy", 200, 0.41, 0.46, change)],
                  "SFT", "SFT+RL", [("seed", 0), ("wall time", "15.2 min")], figure="held-out pass@1")


def test_the_page_shows_the_change_with_its_paired_se_and_the_config_collapsed(tmp_path):
    page = write_run_report(report_of(write_run(tmp_path / "run"))).read_text()
    assert "<td>+0.050 ± 0.020</td><td>12 / 2</td>" in page and "<th>SFT+RL</th>" in page
    assert '<details><summary>config (3 fields)</summary>' in page and "<td>rl.loss.kind</td>" in page
    assert "cold start: SFT loss per role" in page and "every other logged metric (1 panels)" in page
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


@pytest.mark.skipif(chromium() is None, reason="chromium is not installed (make browser)")
def test_in_chromium_the_report_renders_without_errors_with_labelled_axes_and_legends_apart(tmp_path):
    path = write_run_report(report_of(write_run(tmp_path / "run")))
    with Page(tmp_path / "profile") as page:
        page.open(path.as_uri())
        charts = page.evaluate("""[...document.querySelectorAll('figure')].map(f => ({
            xticks: [...f.querySelectorAll('.xtick')].filter(t => t.getBBox().width > 0).length,
            yticks: [...f.querySelectorAll('.ytick')].filter(t => t.getBBox().width > 0).length,
            keys: [...f.querySelectorAll('.key')].map(k => { const r = k.getBoundingClientRect();
                                                            return [r.left, r.top, r.right, r.bottom]; })}))""")
        if os.environ.get("CORAL_SCREENSHOTS"):  # for people: look at the page
            page.screenshot(Path(os.environ["CORAL_SCREENSHOTS"]) / "run_report.png")
        assert page.errors == []
    assert len(charts) >= 7
    for chart in charts:
        assert chart["xticks"] >= 2 and chart["yticks"] >= 2
        keys = chart["keys"]
        for i, a in enumerate(keys):
            for b in keys[i + 1:]:
                assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], f"legend entries overlap: {keys}"


@pytest.mark.skipif(chromium() is None, reason="chromium is not installed (make browser)")
def test_the_browser_check_sees_a_console_error(tmp_path):
    """The check above can fail: a page that throws is reported."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!doctype html><html><body><script>null.x()</script></body></html>")
    with Page(tmp_path / "profile") as page:
        page.open(bad.as_uri())
        assert page.errors and "TypeError" in page.errors[0]
