"""Renderers' number helpers: the one formatter (kvadvisor.units) with None as "not measured".

A renderer says which unit a number is in by the helper it calls (or by the unit a fact or a
piece of evidence carries); nothing here reads a unit from a field's name.
"""

from __future__ import annotations

from typing import Any

from kvadvisor.units import NOT_MEASURED, Unit, format_value
from kvadvisor.units.format import count, number

__all__ = [
    "NOT_MEASURED",
    "bandwidth",
    "count",
    "duration",
    "fact",
    "number",
    "percent",
    "plain",
    "quantity",
    "size",
    "tokens",
    "yes_no",
]


def quantity(value: float | int | bool | None, unit: Unit) -> str:
    """``value`` in ``unit``, or "not measured"."""
    return format_value(value, unit)


def percent(fraction: float | None) -> str:
    """A share in [0, 1] as a percentage with one decimal."""
    return format_value(fraction, Unit.RATIO)


def bandwidth(bytes_per_s: float | None) -> str:
    """Bytes per second in decimal units (GB/s = 10^9 B/s, as storage vendors quote it)."""
    return format_value(bytes_per_s, Unit.BYTES_PER_S)


def size(nbytes: float | None) -> str:
    """Bytes in binary units (GiB = 2^30 B, as memory and capacities are quoted)."""
    return format_value(nbytes, Unit.BYTES)


def duration(seconds: float | None) -> str:
    """Seconds as ms, s, min or h."""
    return format_value(seconds, Unit.SECONDS)


def tokens(value: float | None) -> str:
    """A token count, in millions from a million up."""
    return format_value(value, Unit.TOKENS)


def yes_no(flag: object) -> str:
    """A flag as "yes" or "no"."""
    return "yes" if flag else "no"


def fact(item: dict[str, Any]) -> str:
    """A fact the advisor used ({value, unit}) in its unit."""
    return format_value(item["value"], Unit(item["unit"]))


def plain(value: Any) -> str:
    """A value with no unit (an option as given): numbers, flags, lists and mappings as text."""
    if value is None:
        return NOT_MEASURED
    if isinstance(value, bool):
        return yes_no(value)
    if isinstance(value, int):
        return count(value)
    if isinstance(value, float):
        return number(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(plain(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k} {plain(v)}" for k, v in value.items())
    return str(value)
