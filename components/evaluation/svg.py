"""Small inline SVG charts for the HTML report: a line chart (learning curves) and a grouped bar chart (EM per system
and set). Nothing is loaded from anywhere, so the page draws offline; every label is escaped."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

PALETTE = ["#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477", "#66aa00"]
W, H = 560, 260
LEFT, RIGHT, TOP, BOTTOM = 52, 150, 28, 40  # the right margin holds the legend


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About `n` round tick values covering [lo, hi]."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if raw <= step * m)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _fmt(v: float) -> str:
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.3g}"


class _Frame:
    """Maps data coordinates to the plot area and draws the axes, grid and legend."""

    def __init__(self, x_range: tuple[float, float], y_range: tuple[float, float]):
        self.x0, self.x1 = x_range
        self.y0, self.y1 = y_range
        self.pw, self.ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(self, v: float) -> float:
        span = self.x1 - self.x0
        return LEFT + (self.pw * (v - self.x0) / span if span else self.pw / 2)

    def y(self, v: float) -> float:
        span = self.y1 - self.y0
        return TOP + self.ph - (self.ph * (v - self.y0) / span if span else self.ph / 2)

    def axes(self, title: str, x_label: str, y_label: str, x_ticks: Sequence[float] | None) -> str:
        parts = [f'<text class="title" x="{LEFT}" y="16">{_esc(title)}</text>']
        for t in _ticks(self.y0, self.y1):
            y = self.y(t)
            parts.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + self.pw}" y1="{y:.1f}" y2="{y:.1f}"/>'
                         f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')  # fmt: skip
        for t in x_ticks or []:
            x = self.x(t)
            parts.append(f'<text class="tick" x="{x:.1f}" y="{TOP + self.ph + 16}" text-anchor="middle">{_fmt(t)}</text>')
        parts.append(f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + self.ph}"/>'
                     f'<line class="axis" x1="{LEFT}" x2="{LEFT + self.pw}" y1="{TOP + self.ph}" y2="{TOP + self.ph}"/>'
                     f'<text class="label" x="{LEFT + self.pw / 2:.1f}" y="{H - 6}" text-anchor="middle">{_esc(x_label)}</text>'
                     f'<text class="label" transform="translate(14 {TOP + self.ph / 2:.1f}) rotate(-90)" '
                     f'text-anchor="middle">{_esc(y_label)}</text>')  # fmt: skip
        return "".join(parts)


def _legend(names: Sequence[str]) -> str:
    x = W - RIGHT + 14
    return "".join(f'<rect x="{x}" y="{TOP + 18 * i}" width="12" height="12" fill="{PALETTE[i % len(PALETTE)]}"/>'
                   f'<text class="legend" x="{x + 18}" y="{TOP + 18 * i + 10}">{_esc(n)}</text>'
                   for i, n in enumerate(names))  # fmt: skip


def _svg(id_: str, body: str, title: str) -> str:
    return (f'<svg id="{_esc(id_)}" class="chart" role="img" aria-label="{_esc(title)}" width="{W}" height="{H}" '
            f'viewBox="0 0 {W} {H}" xmlns="http://www.w3.org/2000/svg">{body}</svg>')  # fmt: skip


def line_chart(id_: str, title: str, series: dict[str, Sequence[tuple[float, float]]], x_label: str, y_label: str,
               y_range: tuple[float, float] | None = None) -> str:  # fmt: skip
    """One polyline (with a dot and a hover title per point) per named series of (x, y) points."""
    points = [p for pts in series.values() for p in pts]
    xs, ys = [p[0] for p in points] or [0.0], [p[1] for p in points] or [0.0]
    lo, hi = y_range or (min(ys), max(ys))
    frame = _Frame((min(xs), max(xs)), (lo, hi if hi > lo else lo + 1))
    body = [frame.axes(title, x_label, y_label, _ticks(min(xs), max(xs)))]
    for i, (name, pts) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in pts)
        body.append(f'<polyline class="series" data-name="{_esc(name)}" fill="none" stroke="{color}" stroke-width="2" '
                    f'points="{coords}"/>')  # fmt: skip
        body += [] if len(pts) > 60 else [f'<circle cx="{frame.x(x):.1f}" cy="{frame.y(y):.1f}" r="2.5" fill="{color}">'
                 f'<title>{_esc(name)}, {_esc(x_label)} {_fmt(x)}: {y:.3f}</title></circle>' for x, y in pts]  # fmt: skip
    body.append(_legend(list(series)))
    return _svg(id_, "".join(body), title)


def bar_chart(id_: str, title: str, groups: Sequence[str], series: dict[str, Sequence[float | None]], y_label: str,
              y_range: tuple[float, float] = (0.0, 1.0)) -> str:  # fmt: skip
    """Grouped bars: one group per entry of `groups`, one bar per series in each (a missing value draws no bar)."""
    frame = _Frame((0, 1), y_range)
    body = [frame.axes(title, "", y_label, None)]
    slot = frame.pw / max(1, len(groups))
    bar = slot * 0.8 / max(1, len(series))
    for g, group in enumerate(groups):
        body.append(f'<text class="tick" x="{LEFT + slot * (g + 0.5):.1f}" y="{TOP + frame.ph + 16}" '
                    f'text-anchor="middle">{_esc(group)}</text>')  # fmt: skip
        for i, (name, values) in enumerate(series.items()):
            v = values[g]
            if v is None:
                continue
            x, top = LEFT + slot * (g + 0.1) + bar * i, frame.y(max(y_range[0], min(v, y_range[1])))
            body.append(f'<rect class="bar" data-name="{_esc(name)}" data-group="{_esc(group)}" data-value="{v:.6g}" '
                        f'x="{x:.1f}" y="{top:.1f}" width="{max(bar - 1, 1):.1f}" height="{TOP + frame.ph - top:.1f}" '
                        f'fill="{PALETTE[i % len(PALETTE)]}"><title>{_esc(name)}, {_esc(group)}: {v:.3f}</title></rect>'
                        f'<text class="value" x="{x + bar / 2:.1f}" y="{top - 3:.1f}" text-anchor="middle">{v:.2f}</text>')  # fmt: skip
    body.append(_legend(list(series)))
    return _svg(id_, "".join(body), title)
