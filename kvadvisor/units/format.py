"""The one number formatter: every message, evidence line, renderer, review and comment uses it.

Each unit has one rendering: sizes in binary units (GiB = 2^30 bytes, as memory and capacities
are quoted), bandwidths in decimal units (GB/s = 10^9 bytes per second, as storage vendors
quote them), durations in ms, s, min or h, shares as percentages, and every number with three
significant digits and thousands separators.
"""

from __future__ import annotations

import math

from kvadvisor.units.constants import (
    BYTES_PER_GB,
    BYTES_PER_GIB,
    BYTES_PER_KB,
    BYTES_PER_KIB,
    BYTES_PER_MB,
    MS_PER_S,
    S_PER_HOUR,
    S_PER_MIN,
)
from kvadvisor.units.unit import Unit

NOT_MEASURED = "not measured"
TOKENS_PER_MILLION = 1_000_000
# Durations below this many seconds are shown in seconds, below the next in minutes.
SECONDS_UP_TO_S = 120.0
MINUTES_UP_TO_S = 2 * S_PER_HOUR


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
    """A whole count with thousands separators."""
    return f"{int(round(value)):,}"


def as_written(value: float) -> str:
    """A number quoted from a user's file (a threshold, an engine setting), every digit kept.

    Quoting a file back needs the value it holds, not three significant digits
    (``1048576``, not ``1.05M``); an integral float drops its ``.0``, as YAML's ``2`` and ``2.0``
    are the same number.
    """
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return str(value)


def percent(fraction: float, decimals: int = 1) -> str:
    """A share in [0, 1] as a percentage with ``decimals`` decimals (one unless told)."""
    return f"{fraction * 100:.{decimals}f}%"


def size(nbytes: float, digits: int = 3) -> str:
    """A size in binary units: B, KiB, MiB, GiB, TiB."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < BYTES_PER_KIB or unit == "TiB":
            return f"{number(value, digits)} {unit}" if unit != "B" else f"{count(value)} B"
        value /= BYTES_PER_KIB
    raise AssertionError("unreachable")  # pragma: no cover


def bandwidth(bytes_per_s: float, digits: int = 3) -> str:
    """A bandwidth in decimal units: B/s, kB/s, MB/s, GB/s."""
    for unit, scale in (("GB/s", BYTES_PER_GB), ("MB/s", BYTES_PER_MB), ("kB/s", BYTES_PER_KB)):
        if abs(bytes_per_s) >= scale:
            return f"{number(bytes_per_s / scale, digits)} {unit}"
    return f"{number(bytes_per_s, digits)} B/s"


def duration(seconds: float, digits: int = 3) -> str:
    """A duration: ms below one second, s below two minutes, min below two hours, else h."""
    magnitude = abs(seconds)
    if 0 < magnitude < 1:
        return f"{number(seconds * MS_PER_S, digits)} ms"
    if magnitude < SECONDS_UP_TO_S:
        return f"{number(seconds, digits)} s"
    if magnitude < MINUTES_UP_TO_S:
        return f"{number(seconds / S_PER_MIN, digits)} min"
    return f"{number(seconds / S_PER_HOUR, digits)} h"


def usd(value: float) -> str:
    """US dollars: to the cent from a dollar up ("$1,234.56"), three significant digits below.

    Prices per GB-month or per GiB-hour are fractions of a cent; a price under a dollar keeps
    at least the cents ("$0.50", "$0.085", "$0.000137").
    """
    if not math.isfinite(value):
        return "n/a"
    sign, magnitude = ("-", -value) if value < 0 else ("", value)
    if magnitude >= 1:
        return f"{sign}${magnitude:,.2f}"
    text = number(magnitude)
    whole, _, cents = text.partition(".")
    return f"{sign}${whole}.{cents.ljust(2, '0')}"


def price(value: float, per: str) -> str:
    """A price per ``per`` ("h", "GB-month", "GiB-hour", "M tokens"): "$55.04/h"."""
    return f"{usd(value)}/{per}"


def plural(n: float, noun: str, many: str | None = None) -> str:
    """``n`` and ``noun``, the noun plural unless ``n`` is exactly 1 ("1 token", "2 tokens").

    ``many`` is the plural when adding "s" does not make it (``plural(2, "entry", "entries")``).
    """
    return f"{count(n)} {noun if n == 1 else (many or noun + 's')}"


def tokens(value: float) -> str:
    """A token count, in millions from a million up ("1 token", "512 tokens", "1.5M tokens")."""
    if abs(value) >= TOKENS_PER_MILLION:
        return f"{number(value / TOKENS_PER_MILLION)}M tokens"
    return plural(value, "token")


def format_value(value: float | int | bool | str | None, unit: Unit, digits: int = 3) -> str:
    """``value`` in ``unit`` as every report shows it; None is "not measured".

    ``digits`` significant digits (three unless told; see :func:`apart`); a share keeps one
    decimal of a percent at three.
    """
    if value is None:
        return NOT_MEASURED
    if unit is Unit.TEXT or isinstance(value, str):
        return str(value)
    if unit is Unit.BOOL or isinstance(value, bool):
        return "yes" if value else "no"
    v = float(value)
    if not math.isfinite(v):
        return "n/a"
    match unit:
        case Unit.RATIO:
            return percent(v, max(0, digits - 2))
        case Unit.MULTIPLE:
            return f"{number(v, digits)}×"
        case Unit.BYTES:
            return size(v, digits)
        case Unit.GIB:
            return size(v * BYTES_PER_GIB, digits)
        case Unit.BYTES_PER_TOKEN:
            return f"{size(v, digits)}/token"
        case Unit.BYTES_PER_S:
            return bandwidth(v, digits)
        case Unit.GBPS:
            return bandwidth(v * BYTES_PER_GB, digits)
        case Unit.TOKENS:
            return tokens(v)
        case Unit.REQUESTS:
            return f"{count(v)} requests"
        case Unit.COUNT:
            return number(v, digits)
        case Unit.PER_S:
            return f"{number(v, digits)}/s"
        case Unit.IOPS:
            return f"{number(v, digits)} IOPS"
        case Unit.SECONDS:
            return duration(v, digits)
        case Unit.US:
            return f"{number(v, digits)} µs"
        case Unit.TFLOPS:
            return f"{number(v, digits)} TFLOPS"
        case Unit.DWPD:
            return f"{number(v, digits)} drive writes per day"
        case Unit.USD:
            return usd(v)
    raise AssertionError(f"no rendering for {unit!r}")  # every Unit has a case above


# Significant digits apart() goes up to: past a millionth, two figures that still read alike
# are alike for every purpose a report has.
MAX_DIGITS = 6


def apart(value: float, other: float, unit: Unit) -> tuple[str, str]:
    """``value`` and ``other`` in ``unit``, with just enough digits to read differently.

    Three significant digits unless that shows two different values as the same text (a
    latency of 100.04 ms against a 100 ms target), then more, up to :data:`MAX_DIGITS`: a
    comparison a sentence states ("101 ms over the 100 ms target") must read true.
    """
    digits = 3
    a, b = format_value(value, unit), format_value(other, unit)
    while a == b and value != other and digits < MAX_DIGITS:
        digits += 1
        a, b = format_value(value, unit, digits), format_value(other, unit, digits)
    return a, b
