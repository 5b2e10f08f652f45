"""Chart data: one series a producer attaches to its section and a renderer draws."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Series:
    """One chart-ready series (x and y of equal length) with axis labels and units.

    Producers attach these to their sections; renderers draw them and never compute them.
    ``kind`` is "line", "step" or "bar". When each point merges several consecutive windows
    (a long series kept small), ``y`` is their mean and ``y_max`` their largest value, so a
    chart can show the peaks the merge would hide; ``y_max`` is empty when each point is one
    window.
    """

    name: str
    x_label: str
    x_unit: str
    y_label: str
    y_unit: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    kind: str = "line"
    y_max: tuple[float, ...] = ()
