"""Line charts as inline SVG for the run reports: one panel per metric, each series drawn raw (faint) and
smoothed (a centred moving average) over real axes with tick labels; the legend is HTML above the panel,
so no entry can sit under a line or under another entry.

Hand-written rather than matplotlib or plotly: a panel is a few polylines and two axes; matplotlib is not
a dependency (about 40 MB with its own dependencies, and a second or more of import per report), and
plotly inlines about 4.5 MB of JavaScript into every page. This module does NOT read run files or decide
which metrics to draw (run_report.py does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
# each series also has its own dash pattern: two series with equal values still both show
DASHES = ("", "7 4", "2 3", "10 3 2 3")
WIDTH, HEIGHT = 440, 230  # one panel, in CSS pixels
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 10, 40  # margins inside a panel: room for the tick labels


@dataclass(frozen=True)
class Series:
    name: str
    x: Sequence[float]
    y: Sequence[float]


def nice_ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """About `count` round tick values (steps of 1, 2 or 5 x 10^k; with `integer`, at least 1) covering
    [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"nice_ticks: bounds must be finite, got {lo} and {hi}")
    if hi < lo:
        lo, hi = hi, lo
    if hi - lo <= 1e-9 * max(abs(lo), abs(hi)):  # equal, or apart by rounding only (0.9999999999999999 and 1.0)
        hi = lo
    if hi == lo:
        pad = 1.0 if integer else abs(lo) * 0.1 or 0.5
        lo, hi = (lo, hi + pad) if lo == 0 or integer else (lo - pad, hi + pad)
    raw = (hi - lo) / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))
    step = max(step, 1.0) if integer else step
    first = math.floor(lo / step + 1e-9) * step
    ticks, k = [], 0
    while True:
        value = first + k * step
        ticks.append(0.0 if abs(value) < step * 1e-9 else value)
        if value >= hi - step * 1e-9:
            return ticks
        k += 1


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Centred moving average over `window` points (odd; fewer at the ends), skipping non-finite values."""
    half = max(0, window // 2)
    out = []
    for i in range(len(values)):
        near = [v for v in values[max(0, i - half): i + half + 1] if math.isfinite(v)]
        out.append(sum(near) / len(near) if near else math.nan)
    return out


def smoothing_window(points: int) -> int:
    """The smoothing window for a series of `points` steps: about a tenth of them, odd, at least 1."""
    window = max(1, points // 10)
    return window if window % 2 else window + 1


def _fmt_tick(value: float, step: float) -> str:
    if step >= 1 and abs(value) < 1e6:
        return f"{value:.0f}"
    if abs(value) >= 1e4 or (value and abs(value) < 1e-3):
        return f"{value:.1e}"
    decimals = max(0, -math.floor(math.log10(step)))
    return f"{value:.{decimals}f}"


def _style(i: int) -> tuple[str, str]:
    return COLOURS[i % len(COLOURS)], DASHES[i % len(DASHES)]


def line_chart(series: Sequence[Series], x_label: str, smoothing: bool = True,
               y_range: tuple[float, float] | None = None) -> str:
    """An HTML figure: the legend (one entry per series) and an SVG panel with x (integer steps) and y axes
    and ticks; `y_range` fixes the y axis (e.g. (0, 1) for a rate) unless a value falls outside it.
    Points whose value is not finite are left out; a series with one point is drawn as a dot."""
    clean = [Series(s.name, *zip(*[(x, y) for x, y in zip(s.x, s.y, strict=True) if math.isfinite(y)], strict=True))
             if any(math.isfinite(y) for y in s.y) else Series(s.name, (), ()) for s in series]
    xs = [x for s in clean for x in s.x]
    ys = [y for s in clean for y in s.y]
    legend = "".join(f'<span class="key"><svg width="22" height="8"><line x1="0" x2="22" y1="4" y2="4" '
                     f'stroke="{_style(i)[0]}" stroke-width="2" stroke-dasharray="{_style(i)[1]}"/></svg>'
                     f'{escape(s.name)}</span>' for i, s in enumerate(series))
    if not xs:
        return f'<figure><div class="legend">{legend}</div><p class="empty">no finite values logged</p></figure>'
    lo, hi = min(ys), max(ys)
    if y_range is not None:
        lo, hi = min(lo, y_range[0]), max(hi, y_range[1])
    xt, yt = nice_ticks(min(xs), max(xs), integer=True), nice_ticks(lo, hi)
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * (WIDTH - LEFT - RIGHT)

    def py(y: float) -> float:
        return HEIGHT - BOTTOM - (y - y0) / (y1 - y0) * (HEIGHT - TOP - BOTTOM)

    bottom, xstep, ystep = HEIGHT - BOTTOM, xt[1] - xt[0], yt[1] - yt[0]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
             f'height="{HEIGHT}" font-family="sans-serif" font-size="11">']
    for y in yt:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#eee"/>'
                     f'<text class="ytick" x="{LEFT - 5}" y="{py(y) + 4:.1f}" text-anchor="end">{_fmt_tick(y, ystep)}</text>')
    for x in xt:
        parts.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{bottom}" y2="{bottom + 4}" stroke="#444"/>'
                     f'<text class="xtick" x="{px(x):.1f}" y="{bottom + 16}" text-anchor="middle">{_fmt_tick(x, xstep)}</text>')
    parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{bottom}" y2="{bottom}" stroke="#444"/>'
                 f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{bottom}" stroke="#444"/>'
                 f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - 6}" text-anchor="middle">{escape(x_label)}</text>')
    for i, s in enumerate(clean):
        colour, dash = _style(i)
        if len(s.x) == 1:
            parts.append(f'<circle cx="{px(s.x[0]):.1f}" cy="{py(s.y[0]):.1f}" r="3" fill="{colour}">'
                         f'<title>{escape(s.name)}: {s.y[0]:.4g}</title></circle>')
            continue
        if not s.x:
            continue
        raw = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(s.x, s.y, strict=True))
        window = smoothing_window(len(s.y)) if smoothing else 1
        if window > 1:
            parts.append(f'<polyline class="raw" points="{raw}" fill="none" stroke="{colour}" stroke-opacity="0.25" '
                         'stroke-width="1"/>')
            raw = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(s.x, smooth(s.y, window), strict=True))
        parts.append(f'<polyline class="smooth" points="{raw}" fill="none" stroke="{colour}" stroke-width="2" '
                     f'stroke-dasharray="{dash}">'
                     f'<title>{escape(s.name)}{f" (moving average over {window} steps)" if window > 1 else ""}'
                     '</title></polyline>')
    parts.append("</svg>")
    return f'<figure><div class="legend">{legend}</div>{"".join(parts)}</figure>'


CSS = """.panels{display:flex;flex-wrap:wrap;gap:18px}.panel{width:440px}.panel h3{font-size:14px;margin:4px 0}
.legend{display:flex;flex-wrap:wrap;gap:4px 12px;font-size:12px;min-height:16px}
.key svg{margin-right:4px;vertical-align:middle}
figure{margin:0}.empty{color:#888;font-size:12px}"""
