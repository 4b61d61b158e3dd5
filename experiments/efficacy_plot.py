"""Hand-written SVG line charts, the efficacy studies' plots without a plotting library (matplotlib is
not installed): pass rate against node budget (log2 x axis), one line per method with standard-error
bars (study A), and training curves per RL step, one panel per figure and a line per variant (B, C).

This module does NOT compute any figure; it draws (and smooths) the numbers it is given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
WIDTH, HEIGHT, PANEL = 900, 380, 400  # image size; width of one panel (Pass@1, Pass@N)
LEFT, TOP, BOTTOM = 50, 40, 60  # margins inside a panel


def _x(budget: int, budgets: Sequence[int], x0: float) -> float:
    lo, hi = math.log2(min(budgets)), math.log2(max(budgets))
    frac = 0.5 if hi == lo else (math.log2(budget) - lo) / (hi - lo)
    return x0 + LEFT + frac * (PANEL - LEFT - 20)


def _y(rate: float) -> float:
    return TOP + (1 - rate) * (HEIGHT - TOP - BOTTOM)


def _panel(summary: Mapping[str, Any], budgets: Sequence[int], fig: str, x0: float) -> list[str]:
    parts = [f'<text x="{x0 + PANEL / 2:.0f}" y="24" text-anchor="middle" font-weight="bold">{escape(fig)}</text>',
             f'<line x1="{x0 + LEFT}" y1="{_y(0):.1f}" x2="{x0 + PANEL - 20}" y2="{_y(0):.1f}" stroke="black"/>',
             f'<line x1="{x0 + LEFT}" y1="{_y(0):.1f}" x2="{x0 + LEFT}" y2="{_y(1):.1f}" stroke="black"/>']
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<text x="{x0 + LEFT - 6}" y="{_y(tick) + 4:.1f}" text-anchor="end" font-size="11">{tick:g}</text>')
    for b in budgets:
        parts.append(f'<text x="{_x(b, budgets, x0):.1f}" y="{_y(0) + 16:.1f}" text-anchor="middle" '
                     f'font-size="11">{b}</text>')
    parts.append(f'<text x="{x0 + PANEL / 2:.0f}" y="{_y(0) + 34:.1f}" text-anchor="middle" font-size="12">'
                 'nodes per tree (log scale)</text>')
    for i, (method, per_budget) in enumerate(summary.items()):
        colour = COLOURS[i % len(COLOURS)]
        pts = [(_x(b, budgets, x0), per_budget[b][fig]) for b in budgets]
        path = " ".join(f"{x:.1f},{_y(e['mean']):.1f}" for x, e in pts)
        parts.append(f'<polyline class="series" data-method="{escape(method)}" points="{path}" fill="none" '
                     f'stroke="{colour}" stroke-width="2"/>')
        for x, e in pts:
            if not math.isnan(e["se"]):
                lo, hi = max(0.0, e["mean"] - e["se"]), min(1.0, e["mean"] + e["se"])
                parts.append(f'<line x1="{x:.1f}" y1="{_y(lo):.1f}" x2="{x:.1f}" y2="{_y(hi):.1f}" stroke="{colour}"/>')
            parts.append(f'<circle cx="{x:.1f}" cy="{_y(e["mean"]):.1f}" r="3" fill="{colour}"/>')
    return parts


def scaling_svg(summary: Mapping[str, Any], budgets: Sequence[int], title: str) -> str:
    """method -> budget -> {"pass@1": {"mean", "se"}, "pass@n": {...}} drawn as two panels and a legend."""
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT + 20 * len(summary)}" '
             'font-family="sans-serif">', '<rect width="100%" height="100%" fill="white"/>',
             f'<text x="{WIDTH / 2:.0f}" y="12" text-anchor="middle" font-size="12">{escape(title)}</text>']
    parts += _panel(summary, budgets, "pass@1", 0) + _panel(summary, budgets, "pass@n", PANEL + 50)
    for i, method in enumerate(summary):
        y = HEIGHT + 20 * i
        parts.append(f'<line x1="{LEFT}" y1="{y - 4}" x2="{LEFT + 24}" y2="{y - 4}" stroke="{COLOURS[i % len(COLOURS)]}" '
                     f'stroke-width="2"/><text x="{LEFT + 30}" y="{y}" font-size="12">{escape(method)} '
                     '(bars: ± 1 SE over seeds)</text>')
    return "\n".join(parts + ["</svg>"]) + "\n"


CURVE_W, CURVE_H = 440, 240  # one panel of the training curves
CURVE_LEFT, CURVE_TOP, CURVE_BOTTOM = 56, 30, 36


def smoothed(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average over `window` steps (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def _curve_panel(per_variant: Mapping[str, Mapping[str, Sequence[float]]], curve: str, x0: float, y0: float,
                 window: int) -> list[str]:
    series = {name: smoothed(c[curve], window) for name, c in per_variant.items() if c.get(curve)}
    parts = [f'<text x="{x0 + CURVE_W / 2:.0f}" y="{y0 + 18:.0f}" text-anchor="middle" font-weight="bold">'
             f'{escape(curve)}</text>']
    if not series:
        return parts + [f'<text x="{x0 + CURVE_W / 2:.0f}" y="{y0 + CURVE_H / 2:.0f}" text-anchor="middle">not logged</text>']
    top = max(max(v) for v in series.values())
    top = 1.0 if top <= 0 else (10 ** math.floor(math.log10(top))) * math.ceil(top / 10 ** math.floor(math.log10(top)))
    steps = max(len(v) for v in series.values())
    bottom, right = y0 + CURVE_H - CURVE_BOTTOM, x0 + CURVE_W - 12

    def xy(i: int, v: float) -> str:
        x = x0 + CURVE_LEFT + (i / max(steps - 1, 1)) * (right - x0 - CURVE_LEFT)
        return f"{x:.1f},{bottom - (v / top) * (bottom - y0 - CURVE_TOP):.1f}"

    parts += [f'<polyline points="{xy(0, top)} {xy(0, 0)} {xy(steps - 1, 0)}" fill="none" stroke="black"/>']
    for frac in (0.0, 0.5, 1.0):
        parts.append(f'<text x="{x0 + CURVE_LEFT - 6}" y="{bottom - frac * (bottom - y0 - CURVE_TOP) + 4:.1f}" '
                     f'text-anchor="end" font-size="11">{frac * top:.3g}</text>')
    parts.append(f'<text x="{x0 + CURVE_W / 2:.0f}" y="{bottom + 28:.0f}" text-anchor="middle" font-size="11">'
                 f'RL step (1-{steps})</text>')
    for i, (name, values) in enumerate(series.items()):
        points = " ".join(xy(k, v) for k, v in enumerate(values))
        parts.append(f'<polyline class="series" data-method="{escape(name)}" data-curve="{escape(curve)}" '
                     f'points="{points}" fill="none" stroke="{COLOURS[i % len(COLOURS)]}" stroke-width="1.5"/>')
    return parts


def curves_svg(per_variant: Mapping[str, Mapping[str, Sequence[float]]], curves: Sequence[str], title: str,
               window: int) -> str:
    """variant -> curve -> per-step values (means over seeds), as a grid of panels two wide, one per curve,
    each line a `window`-step trailing moving average, and a legend."""
    rows = math.ceil(len(curves) / 2)
    height = 20 + rows * CURVE_H + 20 * len(per_variant) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * CURVE_W}" height="{height}" font-family="sans-serif">',
             '<rect width="100%" height="100%" fill="white"/>',
             f'<text x="{CURVE_W:.0f}" y="14" text-anchor="middle" font-size="12">{escape(title)}</text>']
    for k, curve in enumerate(curves):
        parts += _curve_panel(per_variant, curve, (k % 2) * CURVE_W, 20 + (k // 2) * CURVE_H, window)
    for i, name in enumerate(per_variant):
        y = 20 + rows * CURVE_H + 20 * i + 10
        parts.append(f'<line x1="{CURVE_LEFT}" y1="{y - 4}" x2="{CURVE_LEFT + 24}" y2="{y - 4}" '
                     f'stroke="{COLOURS[i % len(COLOURS)]}" stroke-width="2"/><text x="{CURVE_LEFT + 30}" y="{y}" '
                     f'font-size="12">{escape(name)}</text>')
    return "\n".join(parts + ["</svg>"]) + "\n"
