"""Charts as inline SVG, drawn offline with matplotlib's SVG backend, byte-for-byte deterministic.

The HTML view describes each chart as a :class:`ChartSpec` (data already computed); this module
only draws. No pyplot: a bare ``Figure`` with the SVG canvas touches no global backend state.
"""

from __future__ import annotations

import functools
import io
import math
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kvadvisor.firstuse import FONT_CACHE, announce
from kvadvisor.units.format import number

if TYPE_CHECKING:  # matplotlib loads only when a chart is drawn
    from matplotlib.figure import Figure

# Colour-blind-safe palette (Okabe & Ito, "Color Universal Design", 2008), dark enough to print.
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000")
FIG_SIZE_IN = (7.0, 3.2)
HALF_FIG_SIZE_IN = (4.2, 3.2)
FONT_SIZE_PT = 10
# A point label wraps at this many characters: under half a full-width chart.
LABEL_WIDTH_CHARS = 44


@dataclass(frozen=True)
class Line:
    """One data line or bar set: x and y of equal length.

    ``kind`` is line, step, bar, area (a step line with the area under it shaded, drawn
    lighter: an envelope behind the lines drawn after it), points (markers, no line), or
    star (large star markers: the points a chart highlights).
    """

    label: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    kind: str = "line"
    # Bar widths in x units (bars only); None draws bars as wide as the gap to the next x.
    widths: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Mark:
    """A reference line across the chart (x = vertical, y = horizontal) with its label."""

    axis: str
    at: float
    label: str


@dataclass(frozen=True)
class PointLabel:
    """Text beside one data point (the chosen deployment, the closest miss), with a ring on it."""

    x: float
    y: float
    text: str


@dataclass(frozen=True)
class ChartSpec:
    """Everything needed to draw one chart; titles carry units ("time (s)")."""

    key: str
    title: str
    x_title: str
    y_title: str
    lines: tuple[Line, ...]
    marks: tuple[Mark, ...] = ()
    log_x: bool = False
    log_y: bool = False
    y_percent: bool = False
    y_integer: bool = False  # counts: no fractional ticks
    categories: tuple[str, ...] = field(default=())  # bar charts over named categories
    # Explicit x ticks and their labels (e.g. cache capacities); empty = matplotlib's choice.
    x_ticks: tuple[float, ...] = ()
    x_tick_labels: tuple[str, ...] = ()
    size_in: tuple[float, float] = FIG_SIZE_IN
    point_labels: tuple[PointLabel, ...] = ()


_RC = {
    "svg.fonttype": "none",  # text stays text: searchable, crisp in print, no glyph paths
    "text.parse_math": False,  # labels come from data; "$" must never start mathtext
    "font.size": FONT_SIZE_PT,
    "font.family": "DejaVu Sans",
    "axes.titlesize": FONT_SIZE_PT + 1,
    "axes.titleweight": "bold",
    "axes.grid": True,
    "grid.color": "#d0d0d0",
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": FONT_SIZE_PT - 1,
    "legend.frameon": False,
}


def _label_points(ax, labels: tuple[PointLabel, ...]) -> None:  # type: ignore[no-untyped-def]
    """Ring each labelled point and write its text beside it, inside the plot.

    The text goes to the side with more room (left of a point in the right half) and the
    second label below the first, so two labels near one another do not overlap.
    """
    if not labels:
        return
    ax.plot(
        [p.x for p in labels],
        [p.y for p in labels],
        linestyle="none",
        marker="o",
        markersize=12,
        markerfacecolor="none",
        markeredgecolor="#000000",
        markeredgewidth=1.4,
        zorder=4,
    )
    ax.get_xlim(), ax.get_ylim()  # settle the autoscaled limits before placing text by them
    for i, p in enumerate(labels):
        fx, fy = ax.transLimits.transform(ax.transScale.transform((p.x, p.y)))
        right = fx > 0.5
        above = (fy <= 0.6) != (i % 2 == 1)  # the second label on the other side of its point
        # Wrapped, and left out of the layout: a long deployment name must neither run off
        # the figure nor make constrained layout shrink the axes to nothing.
        ann = ax.annotate(
            textwrap.fill(p.text, LABEL_WIDTH_CHARS),
            (p.x, p.y),
            xytext=(-10 if right else 10, 14 if above else -14),
            textcoords="offset points",
            ha="right" if right else "left",
            va="center",
            fontsize=FONT_SIZE_PT - 1,
            bbox={
                "boxstyle": "round,pad=0.2",
                "facecolor": "#ffffff",
                "edgecolor": "#888888",
                "linewidth": 0.6,
                "alpha": 0.9,
            },
            zorder=5,
        )
        ann.set_in_layout(False)


def compact(value: float) -> str:
    """Tick label without exponent notation: 950, 1.5k, 20k, 3M, 2G (decimal prefixes)."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{number(value / scale)}{suffix}"
    return number(value)


def _bar_widths(line: Line) -> list[float]:
    if line.widths is not None:
        return list(line.widths)
    xs = list(line.x)
    gaps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
    last = gaps[-1] if gaps else 1.0
    return [g * 0.9 for g in gaps] + [last * 0.9]


# Drawing is the slow part of rendering (~0.2 s a chart) and a spec fully determines its SVG,
# so a report written in several files, or rendered again, draws each chart once.
@functools.lru_cache(maxsize=64)
def render_svg(spec: ChartSpec) -> str:
    """Draw ``spec`` and return the ``<svg>`` element (no XML prolog), deterministic for a spec.

    The SVG's element ids are salted with the chart key, so several charts inline in one
    page never share an id.
    """
    import matplotlib

    with matplotlib.rc_context({**_RC, "svg.hashsalt": f"kvadvisor-{spec.key}"}):
        fig = draw(spec)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return _page_svg(buf.getvalue(), spec.key)


def draw(spec: ChartSpec) -> Figure:
    """Draw ``spec`` on a new bare Figure (no pyplot state), in the report's style.

    The report's charts are this Figure saved as SVG; ``Report.plot`` returns it as it is.
    """
    import matplotlib

    if not any(Path(matplotlib.get_cachedir()).glob("fontlist-v*.json")):
        # Importing the figure code below builds the font list on a fresh machine.
        announce(FONT_CACHE)
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=spec.size_in, layout="constrained")
        FigureCanvasSVG(fig)
        ax = fig.add_subplot()
        ax.set_title(spec.title, loc="left")
        ax.set_xlabel(spec.x_title)
        ax.set_ylabel(spec.y_title)
        if spec.categories:
            _draw_category_bars(ax, spec)
        else:
            for i, line in enumerate(spec.lines):
                _draw_line(ax, line, PALETTE[i % len(PALETTE)])
        _draw_marks(ax, spec.marks)
        _set_scales(ax, spec)
        _label_points(ax, spec.point_labels)
        if len(spec.lines) + len(spec.marks) > 1:
            _legend(fig, spec)
    return fig


def _draw_category_bars(ax, spec: ChartSpec) -> None:  # type: ignore[no-untyped-def]
    """One group of bars a category, one bar a line, side by side."""
    n = len(spec.lines)
    width = 0.8 / max(n, 1)
    for i, line in enumerate(spec.lines):
        pos = [c + (i - (n - 1) / 2) * width for c in range(len(spec.categories))]
        ax.bar(pos, line.y, width=width, label=line.label, color=PALETTE[i % len(PALETTE)])
    rotate = 45 if len(spec.categories) > 10 else 0
    ax.set_xticks(
        range(len(spec.categories)),
        spec.categories,
        rotation=rotate,
        ha="right" if rotate else "center",
    )
    ax.grid(axis="x", visible=False)


def _draw_line(ax, line: Line, color: str) -> None:  # type: ignore[no-untyped-def]
    """One series on a numeric x axis, drawn as its kind says (bar, area, points, step, line)."""
    if line.kind == "bar":
        ax.bar(
            line.x,
            line.y,
            width=_bar_widths(line),
            align="edge",
            label=line.label,
            color=color,
        )
    elif line.kind == "area":
        ax.fill_between(
            line.x,
            line.y,
            step="post",
            label=line.label,
            color=color,
            alpha=0.45,
            linewidth=0,
        )
    elif line.kind in ("points", "star"):
        star = line.kind == "star"
        ax.plot(
            line.x,
            line.y,
            label=line.label,
            color="#000000" if star else color,
            linestyle="none",
            marker="*" if star else "o",
            markersize=11 if star else 5,
            zorder=3 if star else 2,
        )
    elif line.kind == "step":
        ax.step(line.x, line.y, where="post", label=line.label, color=color, linewidth=1.2)
    else:
        ax.plot(
            line.x,
            line.y,
            label=line.label,
            color=color,
            linewidth=1.6,
            marker="o" if len(line.x) <= 12 else None,
            markersize=3,
        )


def _draw_marks(ax, marks: tuple[Mark, ...]) -> None:  # type: ignore[no-untyped-def]
    """Vertical or horizontal reference lines, each in its own dash pattern."""
    styles = ("--", ":", "-.", (0, (5, 1, 1, 1)))
    for j, mark in enumerate(marks):
        line_at = ax.axvline if mark.axis == "x" else ax.axhline
        line_at(
            mark.at,
            color="#444444",
            linestyle=styles[j % len(styles)],
            linewidth=1.0,
            label=mark.label,
        )


def _set_scales(ax, spec: ChartSpec) -> None:  # type: ignore[no-untyped-def]
    """Log or linear axes, their ticks and tick labels, and the y range."""
    from matplotlib.ticker import (
        FuncFormatter,
        LogLocator,
        MaxNLocator,
        NullLocator,
        PercentFormatter,
    )

    # parse_math is off, so log axes need a plain formatter (no "$10^{5}$" strings).
    if spec.log_x:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: compact(v)))
        ax.xaxis.set_minor_locator(NullLocator())
    if spec.log_y:
        ax.set_yscale("log")
        # 1-2-5 ticks: a range under two decades still gets several labelled ticks.
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: compact(v)))
        ax.yaxis.set_minor_locator(NullLocator())
    if spec.log_x and spec.log_y:
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    if spec.x_ticks:
        ax.set_xticks(spec.x_ticks, spec.x_tick_labels or None)
    if spec.y_integer:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if spec.y_percent:
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
        top = max([max(line.y, default=0.0) for line in spec.lines] + [0.0])
        # Room above the highest point, in whole tenths, never past 100%.
        ax.set_ylim(0, min(1.02, math.ceil((top + 0.05) * 10) / 10))
    elif not spec.log_y:
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: compact(v)))


def _legend(fig: Figure, spec: ChartSpec) -> None:
    """The legend below the plot, never over the data (constrained layout makes room for it)."""
    entries = len(spec.lines) + len(spec.marks)
    # As many columns as the longest entry lets fit across the figure: a legend wider
    # than the figure is cut off at its edges (about 5.2 pt a character at 9 pt).
    longest = max(len(x.label) for x in (*spec.lines, *spec.marks))
    fits = int(spec.size_in[0] * 72 / 5.2 // (longest + 5))
    fig.legend(loc="outside lower center", ncols=max(1, min(entries, 4, fits)))


def _page_svg(text: str, key: str) -> str:
    """Matplotlib's SVG as an element for a page holding several charts (ids prefixed)."""
    text = text[text.index("<svg") :]
    # The RDF metadata block only names the format; it adds bytes and nothing a reader sees.
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)
    # Several charts share one page: prefix every id (matplotlib numbers its groups figure_1,
    # axes_1, ... in each SVG) and every reference to one with the chart key.
    prefix = re.sub(r"[^A-Za-z0-9_-]", "-", key)
    text = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", text)
    text = re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', text)
    # Let CSS size the chart: keep the viewBox, drop the fixed point size.
    text = re.sub(r'<svg ([^>]*?)width="[^"]*" height="[^"]*"', r"<svg \1", text, count=1)
    return _compact_svg(text)


# A number in an attribute with more than two decimals. Only attribute values are touched:
# coordinates, never the text of a label (a "$0.085" price keeps its digits).
_ATTRIBUTE = re.compile(r'="([^"]*)"')
_LONG_DECIMAL = re.compile(r"(\d\.\d\d)\d+")


def _compact_svg(text: str) -> str:
    """The SVG in about half the bytes, drawn the same.

    Coordinates to 0.01 of a point (a chart is 504 points wide: 0.02 px on a 1,400 px
    screen), path commands on one line, no indentation between elements.
    """
    text = _ATTRIBUTE.sub(
        lambda m: '="' + _LONG_DECIMAL.sub(r"\1", m.group(1)).replace(" \n", " ") + '"', text
    )
    return re.sub(r">\s+<", "><", text)
