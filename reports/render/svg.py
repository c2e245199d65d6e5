"""Tiny, dependency-free SVG plotting for the static reports: scales, axes, line and step series,
shaded bands (fault windows), rectangles (timeline lanes) and horizontal bar charts.

Everything returns SVG text meant to sit inline in an HTML page (no scripts, no external fetches).
Every string that comes from data goes through `esc`, so a hostile message id or error text
cannot open a tag. Hover text uses SVG ``<title>`` children, which browsers show without JS.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

#: series colours (colour-blind-friendly, Okabe-Ito), assigned in order
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000")
BAND_FILL = "#d32f2f"


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: float) -> str:
    """A short number for a tick or a label: 0.25, 12, 1.5k, 3M."""
    if value == 0:
        return "0"
    magnitude = abs(value)
    for limit, unit, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if magnitude >= limit:
            return f"{value / unit:.3g}{suffix}"
    if magnitude >= 100:  # 4839.8 -> "4840", never "4.84e+03"
        return f"{value:.0f}"
    return f"{value:.3g}"


def _n(value: float) -> str:
    """A coordinate with one decimal: enough on screen, and keeps big charts small."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


class Scale:
    """Maps a data domain onto a pixel range, linearly or on a log10 axis (log needs d0 > 0)."""

    def __init__(self, d0: float, d1: float, r0: float, r1: float, *, log: bool = False) -> None:
        if log:
            d0, d1 = max(d0, 1e-9), max(d1, 1e-9)
        if d1 <= d0:  # a flat series still needs a visible axis
            d1 = d0 * 10 if log else d0 + 1
        self.d0, self.d1, self.r0, self.r1, self.log = d0, d1, r0, r1, log

    def _t(self, v: float) -> float:
        return math.log10(max(v, 1e-9)) if self.log else v

    def __call__(self, v: float) -> float:
        a, b = self._t(self.d0), self._t(self.d1)
        frac = (self._t(v) - a) / (b - a)
        return self.r0 + min(max(frac, -0.02), 1.02) * (self.r1 - self.r0)

    def ticks(self, count: int = 5) -> list[float]:
        if self.log:
            low, high = math.floor(math.log10(self.d0)), math.ceil(math.log10(self.d1))
            decades = [10.0 ** e for e in range(low, high + 1)]
            ticks = decades if len(decades) >= 3 else [d * m for d in decades for m in (1, 2, 5)]
            return [t for t in ticks if self.d0 <= t <= self.d1]
        span = self.d1 - self.d0
        raw = span / max(count, 1)
        step = 10 ** math.floor(math.log10(raw))
        for m in (1, 2, 5, 10):
            if raw <= step * m:
                step *= m
                break
        first = math.ceil(self.d0 / step) * step
        return [first + i * step for i in range(int((self.d1 - first) / step + 1e-9) + 1)]


@dataclass
class Band:
    """A shaded x interval across the plot (a fault window), labelled at its top."""
    start: float
    end: float
    label: str
    colour: str = BAND_FILL


@dataclass
class Plot:
    """One chart: data coordinates in, SVG out. Add bands first so series draw over them."""

    x: Scale
    y: Scale
    width: int
    height: int
    left: int
    top: int
    parts: list[str] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def make(cls, x_domain: tuple[float, float], y_domain: tuple[float, float], *, width: int = 900,
             height: int = 240, margin: tuple[int, int, int, int] = (8, 16, 40, 56), log_y: bool = False,
             bands: Sequence[Band] = ()) -> "Plot":
        """``margin`` is (top, right, bottom, left) in pixels; ``height`` is the plot area's
        height plus the margins, and grows by a row for each row of band labels above it."""
        top, right, bottom, left = margin
        top += 11 * (max(_label_rows(bands)[1], default=-1) + 1)
        height += top - margin[0]
        x = Scale(*x_domain, left, width - right)
        y = Scale(*y_domain, height - bottom, top, log=log_y)
        return cls(x, y, width, height, left, top)

    @property
    def bottom(self) -> float:
        return self.y.r0

    @property
    def right(self) -> float:
        return self.x.r1

    def band(self, band: Band, *, label_row: int = 0) -> None:
        """Shade ``band`` across the plot, dashed at its edges (so it still shows where series
        cover it), with its label in the top margin, row ``label_row`` counted upwards."""
        x0, x1 = self.x(band.start), self.x(band.end)
        top, bottom = _n(self.top), _n(self.bottom)
        self.parts.append(
            f'<rect class="band" x="{_n(x0)}" y="{top}" width="{_n(max(x1 - x0, 1))}" '
            f'height="{_n(self.bottom - self.top)}" fill="{band.colour}" fill-opacity="0.13">'
            f"<title>{esc(band.label)}</title></rect>"
            f'<path d="M{_n(x0)} {top}V{bottom}M{_n(x1)} {top}V{bottom}" stroke="{band.colour}" '
            'stroke-opacity="0.6" stroke-dasharray="3 3"/>')
        if band.label:
            self.parts.append(f'<text x="{_n(x0 + 2)}" y="{_n(self.top - 4 - 11 * label_row)}" font-size="10" '
                              f'fill="{band.colour}">{esc(band.label)}</text>')

    def bands(self, bands: Iterable[Band]) -> None:
        for band, row in zip(*_label_rows(bands)):
            self.band(band, label_row=row)

    def line(self, points: Sequence[tuple[float, float | None]], colour: str, label: str | None = None, *,
             step: bool = False, dash: str | None = None, width: float = 1.5) -> None:
        """A polyline; a ``None`` y breaks it (no data in that bin). ``step`` holds each value
        until the next x, for rates counted per bin."""
        runs: list[list[str]] = [[]]
        previous_y: float | None = None
        for x, y in points:
            if y is None:
                if runs[-1]:
                    runs.append([])
                previous_y = None
                continue
            px, py = self.x(x), self.y(y)
            if step and previous_y is not None:
                runs[-1].append(f"{_n(px)},{_n(previous_y)}")
            runs[-1].append(f"{_n(px)},{_n(py)}")
            previous_y = py
        style = f' stroke-dasharray="{dash}"' if dash else ""
        for run in runs:
            if len(run) == 1:  # a lone point still shows
                x, y = run[0].split(",")
                self.parts.append(f'<circle cx="{x}" cy="{y}" r="1.8" fill="{colour}"/>')
            elif run:
                self.parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="{width}"{style} '
                                  f'points="{" ".join(run)}"/>')
        if label:
            self.legend.append((label, colour))

    def rect(self, x0: float, x1: float, y0: float, y1: float, colour: str, title: str | None = None,
             min_width: float = 0.6) -> None:
        px0, px1 = self.x(x0), self.x(x1)
        py0, py1 = sorted((self.y(y0), self.y(y1)))
        tip = f"<title>{esc(title)}</title></rect>" if title else "</rect>"
        self.parts.append(f'<rect x="{_n(px0)}" y="{_n(py0)}" width="{_n(max(px1 - px0, min_width))}" '
                          f'height="{_n(max(py1 - py0, 1))}" fill="{colour}">{tip}')

    def text(self, x: float, y: float, content: str, *, anchor: str = "start", size: int = 10,
             colour: str = "#333", pixel: bool = False) -> None:
        px, py = (x, y) if pixel else (self.x(x), self.y(y))
        self.parts.append(f'<text x="{_n(px)}" y="{_n(py)}" font-size="{size}" text-anchor="{anchor}" '
                          f'fill="{colour}">{esc(content)}</text>')

    def axes(self, x_label: str = "", y_label: str = "", *, x_fmt: Callable[[float], str] = fmt,
             y_fmt: Callable[[float], str] = fmt, y_ticks: bool = True) -> None:
        p = self.parts
        p.append(f'<line x1="{_n(self.left)}" y1="{_n(self.bottom)}" x2="{_n(self.right)}" y2="{_n(self.bottom)}" '
                 'stroke="#555"/>')
        p.append(f'<line x1="{_n(self.left)}" y1="{_n(self.top)}" x2="{_n(self.left)}" y2="{_n(self.bottom)}" '
                 'stroke="#555"/>')
        for t in self.x.ticks(8):
            px = self.x(t)
            p.append(f'<line x1="{_n(px)}" y1="{_n(self.bottom)}" x2="{_n(px)}" y2="{_n(self.bottom + 4)}" stroke="#555"/>'
                     f'<text x="{_n(px)}" y="{_n(self.bottom + 15)}" font-size="10" text-anchor="middle">'
                     f"{esc(x_fmt(t))}</text>")
        if y_ticks:
            for t in self.y.ticks(4):
                py = self.y(t)
                p.append(f'<line x1="{_n(self.left)}" y1="{_n(py)}" x2="{_n(self.right)}" y2="{_n(py)}" stroke="#eee"/>'
                         f'<text x="{_n(self.left - 4)}" y="{_n(py + 3)}" font-size="10" text-anchor="end">'
                         f"{esc(y_fmt(t))}</text>")
        if x_label:
            self.text(self.right, self.height - 6, x_label, anchor="end", pixel=True)
        if y_label:
            self.parts.append(f'<text transform="translate(12,{_n((self.top + self.bottom) / 2)}) rotate(-90)" '
                              f'font-size="10" text-anchor="middle">{esc(y_label)}</text>')

    def svg(self, title: str = "") -> str:
        # The legend sits bottom left, under the axis (the top margin holds the band labels).
        legend = []
        x, y = self.left, self.height - 6
        for label, colour in self.legend:
            legend.append(f'<rect x="{_n(x)}" y="{_n(y - 9)}" width="10" height="10" fill="{colour}"/>'
                          f'<text x="{_n(x + 13)}" y="{_n(y)}" font-size="10">{esc(label)}</text>')
            x += 13 + 6 * len(label) + 14
        head = f"<title>{esc(title)}</title>" if title else ""
        return (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}" font-family="system-ui,sans-serif">{head}'
                + "".join(self.parts) + "".join(legend) + "</svg>")


def _label_rows(bands: Iterable[Band]) -> tuple[list[Band], list[int]]:
    """Bands by start, and the label row of each: a label moves up a row while it would run into
    the label of an earlier band (about 6 px a character at font size 10 on a 900 px chart is
    not known here, so rows are given by overlap of the bands themselves, and labels that would
    still collide are at least on distinct rows for overlapping bands)."""
    ordered = sorted(bands, key=lambda b: (b.start, b.end))
    ends: list[float] = []
    rows = []
    for band in ordered:
        row = next((i for i, end in enumerate(ends) if end <= band.start), len(ends))
        if row == len(ends):
            ends.append(band.end)
        else:
            ends[row] = band.end
        rows.append(row)
    return ordered, rows


def bar_chart(groups: Sequence[tuple[str, Sequence[tuple[str, float | None]]]], *, title: str = "",
              unit: str = "", width: int = 700, bar_height: int = 12, colours: dict[str, str] | None = None,
              label_width: int = 170) -> str:
    """Horizontal grouped bars: ``groups`` is [(group label, [(series, value), ...]), ...]. A None
    value draws no bar and says "n/a" (e.g. a client that never recovered, or a counter the broker
    did not report)."""
    series = list(dict.fromkeys(name for _, bars in groups for name, _ in bars))
    colours = colours or {}
    colour_of = {name: colours.get(name, PALETTE[i % len(PALETTE)]) for i, name in enumerate(series)}
    top = 22
    rows = sum(len(bars) for _, bars in groups)
    height = top + rows * (bar_height + 2) + len(groups) * 8 + 26
    biggest = max([v for _, bars in groups for _, v in bars if v is not None] or [1]) or 1
    x = Scale(0, biggest, label_width, width - 230)  # room for the value label right of the longest bar
    parts: list[str] = []
    y = top
    for group, bars in groups:
        parts.append(f'<text x="{label_width - 6}" y="{y + bar_height - 2}" font-size="11" text-anchor="end" '
                     f'font-weight="bold">{esc(group)}</text>')
        for name, value in bars:
            colour = colour_of[name]
            tip = f"{group} - {name}: " + ("n/a" if value is None else f"{value:g}{unit}")
            if value is not None:
                parts.append(f'<rect x="{label_width}" y="{y}" width="{_n(max(x(value) - label_width, 0.8))}" '
                             f'height="{bar_height}" fill="{colour}"><title>{esc(tip)}</title></rect>')
            end = x(value) if value is not None else label_width
            parts.append(f'<text x="{_n(end + 4)}" y="{y + bar_height - 2}" font-size="10">'
                         f"{esc(name)} {esc('n/a' if value is None else fmt(value) + unit)}</text>")
            y += bar_height + 2
        y += 8
    parts.append(f'<line x1="{label_width}" y1="{top - 4}" x2="{label_width}" y2="{y}" stroke="#555"/>')
    # Every bar is labelled with its series; a legend only helps when there are few series.
    legend, lx = [], label_width
    for name in series if len(series) <= 4 else []:
        legend.append(f'<rect x="{lx}" y="4" width="10" height="10" fill="{colour_of[name]}"/>'
                      f'<text x="{lx + 13}" y="13" font-size="10">{esc(name)}</text>')
        lx += 13 + 6 * len(name) + 16
    legend = "".join(legend)
    head = f"<title>{esc(title)}</title>" if title else ""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="system-ui,sans-serif">{head}{legend}'
            + "".join(parts) + "</svg>")
