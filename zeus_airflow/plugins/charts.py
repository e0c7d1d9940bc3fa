"""A small SVG plotter: the UI's charts are drawn on the server, so they need no script and
no CDN, and take their colours from the page's CSS (classes ``axis``, ``grid``, ``s0``..``s5``
and friends, light and dark alike).

Coordinates are in data units; :class:`Plot` maps them into its plot area. Every mark can
carry a tooltip (an SVG ``<title>``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

Point = tuple[float, float]
MARGIN = (12, 16, 40, 64)
"""Top, right, bottom, left space around the plot area, in px."""
LABEL_PX, LABEL_CHAR_PX = 11.0, 6.5
"""A label's height and (at most) its characters' width, in the viewBox's px (11 px font)."""


@dataclass(frozen=True)
class Axis:
    """One axis: its label, range and ticks (at data values, labelled by ``fmt``)."""

    label: str
    lo: float
    hi: float
    ticks: tuple[float, ...]
    fmt: Callable[[float], str] = lambda v: f"{v:g}"
    log2: bool = False

    def scale(self, start: float, length: float) -> Callable[[float], float]:
        """Maps a data value to px: lo to ``start``, hi to ``start + length`` (a negative
        length runs upwards). The SVG writes px to 0.1."""
        lo, hi = (math.log2(self.lo), math.log2(self.hi)) if self.log2 else (self.lo, self.hi)
        k = length / (hi - lo) if hi != lo else 0.0
        if self.log2:
            return lambda v: start + (math.log2(v) - lo) * k
        return lambda v: start + (v - lo) * k


def linear_axis(
    label: str,
    values: Sequence[float],
    fmt: Callable[[float], str] | None = None,
    zero: bool = True,
    count: int = 5,
    integer: bool = False,
) -> Axis:
    """An axis spanning ``values`` (and 0 when ``zero``) with about ``count`` round ticks;
    ``integer`` (counts, run numbers) keeps the ticks on whole numbers."""
    lo = min([*values, 0.0] if zero else values, default=0.0)
    hi = max(values, default=1.0)
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    step = nice_step((hi - lo) / count)
    if integer:
        step = max(step, 1.0)  # run 1.2 does not exist
    first, last = math.floor(lo / step) * step, math.ceil(hi / step) * step
    ticks = tuple(first + i * step for i in range(round((last - first) / step) + 1))
    return Axis(label, first, last, ticks, fmt or (lambda v: f"{v:g}"))


def log2_axis(label: str, values: Sequence[float]) -> Axis:
    """An axis over powers of two (batch sizes), a tick at each value given."""
    ticks = tuple(sorted(set(values)))
    lo, hi = ticks[0], ticks[-1]
    if lo == hi:
        lo, hi = lo / 2, hi * 2
    return Axis(label, lo / 1.4, hi * 1.4, ticks, lambda v: f"{v:g}", log2=True)


def nice_step(raw: float) -> float:
    """The 1, 2 or 5 times a power of ten nearest above ``raw``."""
    if raw <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


class Plot:
    """One chart. Add marks, then take :meth:`svg`."""

    def __init__(self, title: str, x: Axis, y: Axis, width: int = 560, height: int = 240) -> None:
        self.title, self.x, self.y = title, x, y
        self.width, self.height = width, height
        top, right, bottom, left = MARGIN
        self.area = (left, top, width - left - right, height - top - bottom)
        w, h = self.area[2], self.area[3]
        self.px = x.scale(left, w)
        self.py = y.scale(top + h, -h)
        self.parts: list[str] = []
        self.legend_items: list[tuple[str, str]] = []

    def line(self, points: Sequence[Point], cls: str, dashed: bool = False) -> None:
        if len(points) < 2:
            return
        px, py = self.px, self.py
        d = "M" + "L".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        self.parts.append(f'<path class="line {cls}" d="{d}"{dash}/>')

    def dots(
        self, points: Sequence[Point], cls: str, tips: Sequence[str] | None = None, r: float = 3.0
    ) -> None:
        px, py, head = self.px, self.py, f'<circle class="dot {cls}" r="{r}"'
        for i, (x, y) in enumerate(points):
            tip = f"<title>{escape(tips[i])}</title>" if tips else ""
            self.parts.append(f'{head} cx="{px(x):.1f}" cy="{py(y):.1f}">{tip}</circle>')

    def error_bar(self, x: float, lo: float, hi: float, cls: str, tip: str) -> None:
        cx, y0, y1 = self.px(x), self.py(lo), self.py(hi)
        self.parts.append(
            f'<path class="bar {cls}" d="M{cx - 5:.1f},{y0:.1f}H{cx + 5:.1f}'
            f'M{cx:.1f},{y0:.1f}V{y1:.1f}M{cx - 5:.1f},{y1:.1f}H{cx + 5:.1f}">'
            f"<title>{escape(tip)}</title></path>"
        )

    def label(self, x: float, y: float, text: str, dy: float = -8) -> None:
        """``text`` centred above (x, y), moved inside the chart where it would be clipped:
        a point at the top of the axis or at either end of it (the arms' "n=" labels)."""
        baseline = max(self.py(y) + dy, LABEL_PX)
        self.parts.append(
            f'<text class="note" x="{self._inside(self.px(x), text):.1f}" y="{baseline:.1f}" '
            f'text-anchor="middle">{escape(text)}</text>'
        )

    def _inside(self, cx: float, text: str) -> float:
        """The x at which ``text``, centred there, stays inside the chart's width."""
        half_w = LABEL_CHAR_PX * len(text) / 2
        return min(max(cx, half_w), self.width - half_w)

    def legend(self, text: str, cls: str) -> None:
        """A series' key; the page draws the keys under the chart (HTML wraps, SVG does not)."""
        self.legend_items.append((text, cls))

    def svg(self) -> Markup:
        left, top, w, h = self.area
        out = [
            f'<svg class="chart" viewBox="0 0 {self.width} {self.height}" role="img" '
            f'aria-label="{escape(self.title)}"><title>{escape(self.title)}</title>'
        ]
        for t in self.y.ticks:
            y = round(self.py(t), 1)
            out.append(
                f'<path class="grid" d="M{left},{y}H{left + w}"/>'
                f'<text class="tick" x="{left - 6}" y="{y + 4}" text-anchor="end">'
                f"{escape(self.y.fmt(t))}</text>"
            )
        for t in self.x.ticks:
            text = self.x.fmt(t)
            x = round(self._inside(self.px(t), text), 1)
            out.append(
                f'<text class="tick" x="{x}" y="{top + h + 16}" text-anchor="middle">'
                f"{escape(text)}</text>"
            )
        out.append(f'<path class="axis" d="M{left},{top}V{top + h}H{left + w}"/>')
        out.append(
            f'<text class="axis-label" x="{left + w / 2}" y="{self.height - 4}" '
            f'text-anchor="middle">{escape(self.x.label)}</text>'
        )
        out.append(
            f'<text class="axis-label" transform="translate(14 {top + h / 2}) '
            f'rotate(-90)" text-anchor="middle">{escape(self.y.label)}</text>'
        )
        out.extend(self.parts)
        out.append("</svg>")
        return Markup("".join(out))
