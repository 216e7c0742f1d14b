"""A bar or line chart of one aggregate over the groups of an aggregation, as server-rendered SVG for the
aggregate explorer (`templates/aggregates/_chart.html` draws it; pure geometry like `charts.py`, whose
axis scale and labels it shares). No script and no `style` attribute (the admin CSP): colours come
from classes in static/aggregates.css.

Groups are placed left to right in the order of the answer, one slot each: a bar from zero to the value
(`bar`), or a polyline through the values (`line`), a missing value (null) drawing nothing. Negative
values are drawn at zero (the axis starts there). At most MAX_GROUPS groups are drawn; a label is cut
to LABEL_CHARS and only every n-th is written when they would overlap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cms.admin_ui.charts import (
    CHART_HEIGHT,
    CHART_WIDTH,
    PLOT_BOTTOM,
    PLOT_LEFT,
    PLOT_RIGHT,
    PLOT_TOP,
    TICKS_Y,
    Tick,
    format_value,
    nice_max,
)

KINDS = ("bar", "line")
MAX_GROUPS = 100
"""Groups one chart draws (the explorer's page holds at most this many)."""
LABEL_CHARS = 14
MIN_LABEL_SPACING = 48.0
"""Least room (viewBox units) between two written labels."""


@dataclass(frozen=True)
class Bar:
    """One group's bar: its box, the label of its group and the value as text."""

    x: float
    y: float
    width: float
    height: float
    label: str
    value: str


@dataclass(frozen=True)
class GroupChart:
    """A chart ready to draw: `kind` (`bar` or `line`), axes, `bars` (the bars, or the points of the
    line at their tops), `points` (the line's polyline, empty for bars), `empty` without any value."""

    title: str
    kind: str
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    bars: list[Bar]
    points: str
    empty: bool
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    left: int = PLOT_LEFT
    right: int = PLOT_RIGHT
    top: int = PLOT_TOP
    bottom: int = PLOT_BOTTOM


def _short(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[:LABEL_CHARS - 1] + "…"


def group_chart(title: str, kind: str, labels: Sequence[str], values: Sequence[float | None]) -> GroupChart:
    """The chart of `values` (one per group, None for a null) over groups named `labels`, as `kind`.
    Raises ValueError for another kind or when the lengths differ."""
    if kind not in KINDS:
        raise ValueError(f"unknown chart kind {kind!r}")
    if len(labels) != len(values):
        raise ValueError(f"{len(labels)} labels for {len(values)} values")
    labels, values = list(labels)[:MAX_GROUPS], list(values)[:MAX_GROUPS]
    present = [v for v in values if v is not None and math.isfinite(v)]
    top = nice_max(max(present, default=0.0))
    span = PLOT_BOTTOM - PLOT_TOP
    y_ticks = [Tick(PLOT_BOTTOM - span * i / TICKS_Y, format_value(top * i / TICKS_Y)) for i in range(TICKS_Y + 1)]
    slot = (PLOT_RIGHT - PLOT_LEFT) / max(len(values), 1)
    every = max(1, math.ceil(MIN_LABEL_SPACING / slot))
    bars: list[Bar] = []
    x_ticks: list[Tick] = []
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        middle = PLOT_LEFT + slot * (i + 0.5)
        if i % every == 0:
            x_ticks.append(Tick(round(middle, 1), _short(label)))
        if value is None or not math.isfinite(value):
            continue
        height = span * min(max(value, 0.0), top) / top
        width = slot * 0.7
        bars.append(Bar(x=round(middle - width / 2, 1), y=round(PLOT_BOTTOM - height, 1), width=round(width, 1),
                        height=round(height, 1), label=label, value=format_value(value)))
    points = " ".join(f"{round(b.x + b.width / 2, 1)},{b.y}" for b in bars) if kind == "line" else ""
    return GroupChart(title=title, kind=kind, y_ticks=y_ticks, x_ticks=x_ticks, bars=bars, points=points,
                      empty=not present)
