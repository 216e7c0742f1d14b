"""Line charts as server-rendered SVG for the dashboard (pure geometry; `templates/dashboard/_chart.html`
draws it). No script and no `style` attribute (the admin CSP): colours and strokes come from classes in
static/dashboard.css.

`line_chart` places points on a fixed viewBox (CHART_WIDTH x CHART_HEIGHT): a y axis from 0 to a round
maximum (100 for percentages) with TICKS_Y labelled gridlines and its unit above it, a time axis labelled
HH:MM (UTC), and per series polylines through consecutive values. A None value is a gap: the line
breaks there (a value standing alone is drawn as a dot).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

CHART_WIDTH = 640
CHART_HEIGHT = 200
PLOT_LEFT = 56
PLOT_RIGHT = CHART_WIDTH - 12
PLOT_TOP = 22
PLOT_BOTTOM = CHART_HEIGHT - 28
TICKS_Y = 4
"""Gridlines above the zero line."""
TICKS_X = 6
"""Time labels (at most) along the bottom."""
MAX_SERIES = 6
"""Series one chart draws (each has its colour class `s0`..`s5`)."""


@dataclass(frozen=True)
class Tick:
    """A labelled position on an axis (`position` in viewBox units)."""

    position: float
    label: str


@dataclass(frozen=True)
class Line:
    """One series: `segments` are polyline `points` strings (runs without gaps), `dots` the values that
    stand alone between gaps, `css` its colour class, `latest` its last value as text (or `–`)."""

    name: str
    css: str
    segments: list[str]
    dots: list[tuple[float, float]]
    latest: str


@dataclass(frozen=True)
class Chart:
    """A chart ready to draw: its `key` (the element id is `chart-<key>`), title, unit, axes and lines;
    `empty` when no series has a value (the template says so instead of drawing flat nothing)."""

    key: str
    title: str
    unit: str
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    lines: list[Line]
    empty: bool
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    left: int = PLOT_LEFT
    right: int = PLOT_RIGHT
    top: int = PLOT_TOP
    bottom: int = PLOT_BOTTOM


def nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is >= `value` (1 for nothing above 0)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value * (1 - 1e-9):
            return float(step * power)
    return float(10 * power)


def format_value(value: float | None, unit: str = "") -> str:
    """`value` as a short label: `–` for None, thousands as `k`, up to 2 decimals below 10, 1 below 100;
    with ` <unit>` after it (`%` sticks to the number)."""
    if value is None:
        return "–"
    if abs(value) >= 10_000:
        text = f"{value / 1000:.0f}k"
    elif abs(value) >= 1000:
        text = f"{value / 1000:.1f}".rstrip("0").rstrip(".") + "k"
    elif value == int(value):
        text = str(int(value))
    elif abs(value) < 10:
        text = f"{value:.2f}".rstrip("0").rstrip(".")
    elif abs(value) < 100:
        text = f"{value:.1f}"
    else:
        text = f"{value:.0f}"
    if not unit:
        return text
    return f"{text}%" if unit == "%" else f"{text} {unit}"


def _x(index: int, count: int) -> float:
    if count <= 1:
        return float(PLOT_LEFT)
    return PLOT_LEFT + (PLOT_RIGHT - PLOT_LEFT) * index / (count - 1)


def _y(value: float, top: float) -> float:
    return PLOT_BOTTOM - (PLOT_BOTTOM - PLOT_TOP) * min(value, top) / top


def line_chart(key: str, title: str, unit: str, starts_s: Sequence[int],
               series: Sequence[tuple[str, Sequence[float | None]]], *, percent: bool = False) -> Chart:
    """A Chart of `series` ([(name, one value or None per point)], at most MAX_SERIES) over the points
    starting at `starts_s` (epoch seconds, oldest first), values in `unit`; `percent` fixes the y axis
    at 0..100. Raises ValueError when a series' length differs from the points'."""
    count = len(starts_s)
    for name, values in series:
        if len(values) != count:
            raise ValueError(f"series {name!r} has {len(values)} values for {count} points")
    present = [v for _, values in series[:MAX_SERIES] for v in values if v is not None]
    top = 100.0 if percent else nice_max(max(present, default=0.0))
    tick_unit = "%" if unit == "%" else ""  # other units are written once, above the axis
    y_ticks = [Tick(_y(top * i / TICKS_Y, top), format_value(top * i / TICKS_Y, tick_unit))
               for i in range(TICKS_Y + 1)]
    every = max(1, math.ceil((count - 1) / (TICKS_X - 1))) if count > 1 else 1
    x_ticks = [Tick(_x(i, count), datetime.fromtimestamp(starts_s[i], UTC).strftime("%H:%M"))
               for i in range(0, count, every)]
    lines = []
    for index, (name, values) in enumerate(series[:MAX_SERIES]):
        segments: list[str] = []
        dots: list[tuple[float, float]] = []
        run: list[tuple[float, float]] = []
        for i, value in enumerate([*values, None]):
            if value is not None:
                run.append((round(_x(i, count), 1), round(_y(max(value, 0.0), top), 1)))
                continue
            if len(run) == 1:
                dots.append(run[0])
            elif run:
                segments.append(" ".join(f"{x},{y}" for x, y in run))
            run = []
        latest = next((v for v in reversed(values) if v is not None), None)
        lines.append(Line(name=name, css=f"s{index}", segments=segments, dots=dots, latest=format_value(latest, unit)))
    return Chart(key=key, title=title, unit=unit, y_ticks=y_ticks, x_ticks=x_ticks, lines=lines, empty=not present)
