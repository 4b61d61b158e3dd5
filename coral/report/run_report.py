"""A training run's report: one self-contained HTML page (no script, nothing fetched) with the held-out
figures before and after training (the paired change and its standard error, as the terminal prints
them), a dashboard of every metric the run logged (one panel per quantity, a line per role or agent, raw
and smoothed, real axes), the cold start's SFT loss, and the config, collapsed.

Reads `metrics.jsonl`, `sft_loss.jsonl` (when the recipe has a cold start) and `config.json` from the run
directory; the recipe gives the figures (`Report`). This module does NOT compute any figure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from coral.report.charts import CSS as CHART_CSS
from coral.report.charts import Series, line_chart
from coral.terminal import NOISE_NOTE, BeforeAfter, before_after_columns, before_after_rows, fmt

# (panel title, patterns): a key matching a pattern is a series of that panel, named by the pattern's group
# `s` (the role or agent). Keys no panel claims are grouped by their last path part. RATES: panels of
# fractions, drawn on a y axis from 0 to 1.
PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("mean reward per role", (r"^(?P<s>[^/]+)/reward$", r"^(?P<s>reward)$")),
    ("pass rate of the step's rollouts", (r"^(?P<s>pass_rate|coder_pass_rate|tree_pass@n)$",)),
    ("held-out accuracy during training", (r"^test/(?P<s>[^/]+)/accuracy$",)),
    ("loss", (r"^(?P<s>[^/]+)/loss$",)),
    ("the solver's cross-entropy on the gold answer, last round", (r"^outer/(?P<s>ce_last_round)$",)),
    ("KL to the cold start (k3, sampled turns)", (r"^(?P<s>[^/]+)/kl_ref$",)),
    ("entropy of the sampling distribution (nats per token)", (r"^(?P<s>[^/]+)/entropy$",)),
    ("zero-advantage share (groups whose rewards are all equal)",
     (r"^(?P<s>[^/]+)/zero_variance_groups$", r"^(?P<s>zero_variance_trees)$")),
    ("gradient norm (before clipping)", (r"^(?P<s>[^/]+)/grad_norm$",)),
    ("step time (s)", (r"^(?P<s>step_s|rollout_s|search_s|time_s)$",)),
)
RATES = ("pass rate of the step's rollouts", "held-out accuracy during training",
         "zero-advantage share (groups whose rewards are all equal)")


@dataclass(frozen=True)
class Report:
    recipe: str  # the recipe's name, for people: "CoRe-Code"
    run_dir: Path
    rows: Sequence[BeforeAfter]  # the held-out figures
    before: str = "before"  # the columns' names: "after SFT", "after SFT + RL"
    after: str = "after"
    facts: Sequence[tuple[str, Any]] = ()  # (what, value): seed, steps, wall time
    notes: Sequence[str] = ()  # shown under the table, as in the terminal
    x_label: str = "RL step"
    figure: str = "held-out figures"  # what the rows measure: the table's title
    extra: Mapping[str, Any] = field(default_factory=dict)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def panels(history: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Series]]]:
    """Every logged numeric metric in a panel: the named ones first (PANELS), the rest by their last part."""
    keys = list(dict.fromkeys(k for m in history for k, v in m.items()
                              if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)))
    claimed: dict[str, list[tuple[str, str]]] = {}
    rest: dict[str, list[tuple[str, str]]] = {}
    for key in keys:
        for title, patterns in PANELS:
            match = next((m for m in (re.match(p, key) for p in patterns) if m), None)
            if match:
                claimed.setdefault(title, []).append((match.group("s"), key))
                break
        else:
            head, _, last = key.rpartition("/")
            rest.setdefault(last, []).append((head or last, key))
    out = []
    for title, members in [*((t, claimed[t]) for t, _ in PANELS if t in claimed), *sorted(rest.items())]:
        series = [Series(name, [float(m["step"]) for m in history if key in m],
                         [float(m[key]) for m in history if key in m]) for name, key in members]
        out.append((title, series))
    return out


def _panel_html(title: str, series: Sequence[Series], x_label: str) -> str:
    chart = line_chart(series, x_label, y_range=(0.0, 1.0) if title in RATES else None)
    return f'<div class="panel"><h3>{escape(title)}</h3>{chart}</div>'


def dashboard(history: Sequence[Mapping[str, Any]], sft_curves: Mapping[str, Sequence[float]], x_label: str) -> str:
    all_panels = panels(history)
    main = [_panel_html(t, s, x_label) for t, s in all_panels if t in dict(PANELS)]
    more = [_panel_html(t, s, x_label) for t, s in all_panels if t not in dict(PANELS)]
    if sft_curves:
        sft = [Series(role, list(range(1, len(curve) + 1)), list(curve)) for role, curve in sft_curves.items()]
        main.insert(0, _panel_html("cold start: SFT loss per role", sft, "SFT step"))
    if not main and not more:
        return "<p>no training steps logged</p>"
    out = f'<div class="panels">{"".join(main)}</div>'
    if more:
        out += (f'<details><summary>every other logged metric ({len(more)} panels)</summary>'
                f'<div class="panels">{"".join(more)}</div></details>')
    return out


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, Mapping) else {prefix + key: value})
    return out


def config_html(config: Mapping[str, Any]) -> str:
    rows = "".join(f"<tr><td>{escape(k)}</td><td>{escape(json.dumps(v))}</td></tr>" for k, v in _flat(config).items())
    return (f'<details><summary>config ({len(_flat(config))} fields)</summary><table class="config">{rows}'
            "</table></details>")


def table_html(report: Report) -> str:
    if not report.rows:
        return "<p>no held-out evaluation</p>"
    head = "".join(f"<th>{escape(c)}</th>" for c in before_after_columns(report.before, report.after))
    body = "".join("<tr>" + "".join(f"<td>{escape(fmt(v))}</td>" for v in row) + "</tr>"
                   for row in before_after_rows(report.rows))
    noise = [NOISE_NOTE] if any(r.change is not None for r in report.rows) else []
    notes = "".join(f"<p class=note>{escape(n)}</p>" for n in [*noise, *report.notes])
    return f'<table class="figures"><tr>{head}</tr>{body}</table>{notes}'


PAGE_CSS = """body{font-family:sans-serif;margin:1.5em 2em;max-width:1400px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:1.6em}table{border-collapse:collapse}
td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right;font-size:13px}
td:first-child,th:first-child{text-align:left}.facts td{border:0;padding:1px 10px 1px 0}
.facts td{text-align:left}.note{color:#555;font-size:13px;margin:4px 0}details{margin-top:1em}summary{cursor:pointer;font-weight:bold}
.config td{text-align:left;font-family:monospace;font-size:12px}"""


def write_run_report(report: Report) -> Path:
    """Write `report.run_dir`/report.html and return its path."""
    run_dir = Path(report.run_dir)
    history = read_jsonl(run_dir / "metrics.jsonl")
    sft = {row["role"]: row["loss"] for row in read_jsonl(run_dir / "sft_loss.jsonl")}
    config = json.loads((run_dir / "config.json").read_text()) if (run_dir / "config.json").is_file() else {}
    facts = "".join(f"<tr><td>{escape(k)}</td><td>{escape(fmt(v))}</td></tr>" for k, v in report.facts)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>coral run report: {escape(report.recipe)}</title>
<style>{PAGE_CSS}\n{CHART_CSS}</style></head><body>
<h1>coral run report: {escape(report.recipe)}</h1><table class="facts"><tr><td>run</td><td>{escape(str(run_dir))}</td></tr>
{facts}</table>
<h2>{escape(report.figure[0].upper() + report.figure[1:])}</h2>{table_html(report)}
<h2>Training</h2><p class=note>Faint: each step's value; bold: its moving average over about a tenth of the steps.</p>
{dashboard(history, sft, report.x_label)}
<h2>Config</h2>{config_html(config)}</body></html>"""
    path = run_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
