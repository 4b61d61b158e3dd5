"""A training run's report: one self-contained HTML page with the summary table and reward curves.

Reads `metrics.jsonl` and `summary.json` from a run directory. Does NOT compute any metric itself.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path

CURVES = (("coder/reward", "#1f77b4"), ("planner/reward", "#ff7f0e"), ("pass_rate", "#2ca02c"))


def svg_curves(history: Sequence[dict[str, float]], keys=CURVES, width: int = 640, height: int = 260) -> str:
    """Line chart of the given metric keys against step (y from 0 to max(1, values))."""
    pad = 40
    steps = [m["step"] for m in history]
    if not steps:
        return "<p>no RL steps logged</p>"
    ymax = max([0.05] + [1.1 * m.get(k, 0.0) for m in history for k, _ in keys])  # fit the data, not [0, 1]
    x0, x1 = min(steps), max(steps) if max(steps) > min(steps) else min(steps) + 1

    def xy(step: float, val: float) -> str:
        x = pad + (step - x0) / (x1 - x0) * (width - 2 * pad)
        y = height - pad - val / ymax * (height - 2 * pad)
        return f"{x:.1f},{y:.1f}"

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">',
             f'<rect width="{width}" height="{height}" fill="white" stroke="#ccc"/>']
    for frac in (0, 0.5, 1):
        y = height - pad - frac * (height - 2 * pad)
        parts.append(f'<line x1="{pad}" x2="{width - pad}" y1="{y}" y2="{y}" stroke="#eee"/>'
                     f'<text x="4" y="{y + 4}" font-size="11">{frac * ymax:.2f}</text>')
    parts.append(f'<text x="{width / 2}" y="{height - 8}" font-size="11">RL step</text>')
    for i, (key, color) in enumerate(keys):
        pts = " ".join(xy(m["step"], m[key]) for m in history if key in m)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>'
                     f'<text x="{width - pad - 120}" y="{16 + 14 * i}" fill="{color}" font-size="12">'
                     f'{html.escape(key)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def write_run_report(run_dir: Path) -> Path:
    run_dir = Path(run_dir)
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    summary = json.loads((run_dir / "summary.json").read_text())
    config = (run_dir / "config.json").read_text() if (run_dir / "config.json").exists() else "{}"
    figures = []
    for e in summary.get("evaluations", []):  # each held-out set, as train_corecode's summary lists them
        label = "greedy" if e["how"] == "greedy" else f"{summary['eval_samples_per_task']} samples per task"
        figures += [(f"held-out pass@1, {e['what']}, after SFT ({label})", summary[f"{e['figure']}_sft"]),
                    (f"held-out pass@1, {e['what']}, after SFT + RL ({label})", summary[f"{e['figure']}_rl"])]
    figures.append(("wall time (min)", summary["wall_s"] / 60))
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v:.3f}</td></tr>" for k, v in figures)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>coral run report</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:900px}}td{{padding:2px 12px}}</style></head><body>
<h1>coral run report</h1><p>{html.escape(str(run_dir))}, seed {summary['seed']}</p>
<table>{rows}</table><h2>Rewards during RL (mean per step)</h2>{svg_curves(history)}
<h2>Config</h2><pre>{html.escape(config)}</pre></body></html>"""
    path = run_dir / "report.html"
    path.write_text(page)
    return path
