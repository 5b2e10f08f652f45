"""Quantities written with units ("2 TB", "5 GB/s", "250 ms"): to base units, or why not."""

from __future__ import annotations

import re

from kvadvisor.units.constants import (
    BYTES_PER_GB,
    BYTES_PER_GIB,
    BYTES_PER_KB,
    BYTES_PER_KIB,
    BYTES_PER_MB,
    BYTES_PER_MIB,
    BYTES_PER_TB,
    BYTES_PER_TIB,
    MS_PER_S,
    US_PER_S,
)

# Decimal (GB) and binary (GiB) prefixes are both accepted and never confused: "GB" is 10^9.
SIZE_UNITS: dict[str, float] = {
    "B": 1,
    "KB": BYTES_PER_KB,
    "MB": BYTES_PER_MB,
    "GB": BYTES_PER_GB,
    "TB": BYTES_PER_TB,
    "KiB": BYTES_PER_KIB,
    "MiB": BYTES_PER_MIB,
    "GiB": BYTES_PER_GIB,
    "TiB": BYTES_PER_TIB,
}
RATE_UNITS: dict[str, float] = {f"{u}/s": f for u, f in SIZE_UNITS.items()}
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1.0 / MS_PER_S, "us": 1.0 / US_PER_S}

# The largest quantity of each kind that makes physical sense: an exabyte, a petabyte per
# second, 31.7 years. Anything above is a typo or an attack, and would overflow sums of them.
MAX_VALUE: dict[str, tuple[float, str]] = {
    "size": (1e18, "1 EB"),
    "rate": (1e15, "1 PB/s"),
    "time": (1e9, "1e9 s"),
}

KINDS: dict[str, tuple[dict[str, float], str]] = {
    "size": (SIZE_UNITS, "2 TB"),
    "rate": (RATE_UNITS, "5 GB/s"),
    "time": (TIME_UNITS, "250 ms"),
}

_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/]+)\s*$")


class QuantityError(ValueError):
    """A value that is not a quantity of the expected kind; the message says how to write one."""


def parse_quantity(value: object, kind: str) -> float:
    """Parse "<number> <unit>" of ``kind`` (size, rate or time) into bytes, bytes/s or seconds.

    A bare number is refused (the unit is the point: "2000" could be GB or GiB); so is a unit of
    another kind ("2 TB/s" where a size is expected). Negative values are refused here too.
    """
    units, example = KINDS[kind]
    if isinstance(value, bool) or isinstance(value, (int, float)):
        raise QuantityError(f"needs a unit, e.g. '{example}' (got the bare number {value!r})")
    if not isinstance(value, str):
        raise QuantityError(f"expected a {kind} such as '{example}', got {value!r}")
    match = _QUANTITY.match(value)
    if not match:
        raise QuantityError(f"expected a {kind} such as '{example}', got {value!r}")
    number, unit = float(match.group(1)), match.group(2)
    if unit not in units:
        other = next((k for k, (u, _) in KINDS.items() if unit in u), None)
        what = f"'{unit}' is a {other} unit" if other else f"unknown unit '{unit}'"
        raise QuantityError(f"{what}; a {kind} takes one of {', '.join(units)} (e.g. '{example}')")
    if number < 0:
        raise QuantityError(f"must not be negative, got {value!r}")
    if number == 0 and kind == "rate":
        raise QuantityError(f"a rate of 0 moves nothing, got {value!r}; give more than 0")
    result = number * units[unit]
    limit, shown = MAX_VALUE[kind]
    if not result <= limit:  # also NaN and inf ("1e400 GB")
        raise QuantityError(f"{value!r} is more than {shown}, the largest {kind} accepted")
    return result
