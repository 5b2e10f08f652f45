"""Number formatting shared by every renderer: the unit comes from the field name's suffix.

The advice model names every quantity with its unit (``_bytes_per_s``, ``_gib``, ``_s``, ...),
so a renderer can show any field, including ones added after this module was written, with
the right unit and label, and every renderer shows the same number the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kvadvisor.units import BYTES_PER_GB, BYTES_PER_KB, BYTES_PER_KIB, MS_PER_S

NOT_MEASURED = "not measured"

# Suffix -> (label text to drop, kind). Longest suffixes first, so `_bytes_per_s` wins over `_s`.
_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("_bytes_per_s", "bandwidth"),
    ("_bytes_per_token", "bytes_per_token"),
    ("_per_s", "rate"),
    ("_bytes", "bytes"),
    ("_gbps", "gbps"),
    ("_gib", "gib"),
    ("_tib", "tib"),
    ("_iops", "iops"),
    ("_tokens", "tokens"),
    ("_blocks", "count"),
    ("_ms", "ms"),
    ("_us", "us"),
    ("_s", "seconds"),
    ("_pct", "pct"),
    ("_usd", "usd"),
)
# Names (or name endings) whose value is a fraction in [0, 1], shown as a percentage.
_FRACTION_WORDS = ("share", "ratio", "fraction", "utilization", "hit_rate", "error")


def unit_kind(name: str) -> str:
    """The kind of quantity a field name denotes, from its suffix ("plain" when none)."""
    for suffix, kind in _SUFFIXES:
        if name.endswith(suffix):
            return kind
    if any(word in name for word in _FRACTION_WORDS):
        return "fraction"
    return "plain"


def label(name: str) -> str:
    """A readable label for a field name: unit suffix dropped, underscores to spaces."""
    for suffix, kind in _SUFFIXES:
        if name.endswith(suffix) and kind not in ("tokens", "count", "bytes_per_token"):
            name = name[: -len(suffix)]
            break
    return name.replace("_", " ").strip()


def number(value: float, digits: int = 3) -> str:
    """A number with ``digits`` significant digits and thousands separators, no exponent."""
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return "n/a"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{value:,.{decimals}f}"
    # 6.00 -> 6, 98.0 -> 98, 1.50 -> 1.5: trailing zeros add nothing a reader needs.
    return text.rstrip("0").rstrip(".") if "." in text else text


def count(value: float) -> str:
    """An integer count with thousands separators."""
    return f"{int(round(value)):,}"


def percent(fraction: float | None) -> str:
    """A fraction in [0, 1] as a percentage with one decimal."""
    if fraction is None:
        return NOT_MEASURED
    return f"{fraction * 100:.1f}%"


def bandwidth(bytes_per_s: float | None) -> str:
    """A bandwidth in decimal units (GB/s = 10^9 B/s, as storage vendors quote it)."""
    if bytes_per_s is None:
        return NOT_MEASURED
    for unit, scale in (("GB/s", BYTES_PER_GB), ("MB/s", BYTES_PER_KB**2), ("kB/s", BYTES_PER_KB)):
        if abs(bytes_per_s) >= scale:
            return f"{number(bytes_per_s / scale)} {unit}"
    return f"{number(bytes_per_s)} B/s"


def size(nbytes: float | None) -> str:
    """A size in binary units (GiB = 2^30 B, as memory and capacities are quoted)."""
    if nbytes is None:
        return NOT_MEASURED
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < BYTES_PER_KIB or unit == "TiB":
            return f"{number(value)} {unit}" if unit != "B" else f"{count(value)} B"
        value /= BYTES_PER_KIB
    raise AssertionError("unreachable")  # pragma: no cover


def duration(seconds: float | None) -> str:
    """A duration: ms below one second, seconds below an hour, hours above."""
    if seconds is None:
        return NOT_MEASURED
    if 0 < abs(seconds) < 1:
        return f"{number(seconds * MS_PER_S)} ms"
    if abs(seconds) >= 3600 * 10:
        return f"{number(seconds / 3600)} h"
    return f"{number(seconds)} s"


def yes_no(flag: object) -> str:
    """A flag as "yes" or "no"."""
    return "yes" if flag else "no"


def tokens(value: float | None) -> str:
    """A token count, abbreviated above a million."""
    if value is None:
        return NOT_MEASURED
    if abs(value) >= 1_000_000:
        return f"{number(value / 1_000_000)}M tokens"
    return f"{count(value)} tokens"


# Unit -> formatter: the one table for field names (by the kind their suffix gives, see
# unit_kind) and for facts (kvadvisor.facts, which carry their unit beside the value).
_UNITS: dict[str, Callable[[Any], str]] = {
    "fraction": percent,
    "bandwidth": bandwidth,
    "rate": lambda v: f"{number(v)}/s",
    "bytes": size,
    "bytes_per_token": lambda v: f"{size(v)}/token",
    "gbps": lambda v: f"{number(v)} GB/s",
    "gib": lambda v: f"{number(v)} GiB",
    "tib": lambda v: f"{number(v)} TiB",
    "iops": lambda v: f"{number(v)} IOPS",
    "tflops": lambda v: f"{number(v)} TFLOPS",
    "tokens": tokens,
    "count": count,
    "number": number,
    "requests": lambda v: f"{count(v)} requests",
    "seconds": duration,
    "ms": lambda v: f"{number(v)} ms",
    "us": lambda v: f"{number(v)} µs",
    "pct": lambda v: f"{number(v)}%",
    "usd": lambda v: f"${number(v)}",
    "x": lambda v: f"{number(v)}×",
    "dwpd": lambda v: f"{number(v)} drive writes/day",
    "bool": yes_no,
}
# Fact units spelled differently from the kinds above. A fact in "count" may be a mean
# (busy_gpus_mean), so it keeps its significant digits instead of rounding to a whole count.
_FACT_UNIT_ALIASES = {
    "ratio": "fraction",
    "bytes_per_s": "bandwidth",
    "per_s": "rate",
    "s": "seconds",
    "count": "number",
}


def fact_value(val: Any, unit: str) -> str:
    """A fact's value in its declared unit (facts carry the unit beside the value)."""
    if val is None:
        return NOT_MEASURED
    if isinstance(val, bool):
        return yes_no(val)
    if not isinstance(val, (int, float)):
        return str(val)
    formatter = _UNITS.get(_FACT_UNIT_ALIASES.get(unit, unit))
    if formatter is not None:
        return str(formatter(val))
    # A unit with no formatter is written after the number as it is.
    return f"{number(val)} {unit}".strip()


def value(name: str, val: Any) -> str:
    """Format ``val`` by the unit its field ``name`` declares (strings and others as they are)."""
    if val is None:
        return NOT_MEASURED
    if isinstance(val, bool):
        return yes_no(val)
    if isinstance(val, (list, tuple)):
        return ", ".join(value(name, v) for v in val)
    if isinstance(val, dict):
        if "value" in val and "unit" in val:  # a fact: {value, unit}
            return fact_value(val["value"], str(val["unit"]))
        return "; ".join(f"{label(k)} {value(k, v)}" for k, v in val.items())
    if not isinstance(val, (int, float)):
        return str(val)
    formatter = _UNITS.get(unit_kind(name))
    if formatter is not None:
        return str(formatter(float(val)))
    return count(val) if isinstance(val, int) else number(val)
