"""Quantities as a plan file states them: exact text the plan loader reads back, not display.

Display rounds to three significant digits (:mod:`kvadvisor.units.format`); a plan must not.
A size is rounded up to a millionth of a GiB, so what is read back is never short of what was
sized (and engine sizes, rounded down from it, stay within it); a rate keeps nine significant
digits of GB/s and a time nine of seconds (rounded by at most 5e-9 of the value).
"""

from __future__ import annotations

import math

from kvadvisor.units.constants import BYTES_PER_GB, BYTES_PER_GIB

MILLIONTHS = 1e6
NOISE = 1e-12  # relative: a few float roundings of a product


def _gib(nbytes: float) -> float:
    """GiB rounded up to a millionth (the nearest float to that decimal)."""
    millionths = nbytes / BYTES_PER_GIB * MILLIONTHS
    whole = round(millionths)
    # A size read back from its text is a whole number of millionths up to float noise:
    # written again, it stays the same (ceil alone would add a millionth each time).
    if abs(millionths - whole) > NOISE * max(1.0, millionths):
        whole = math.ceil(millionths)
    return whole / MILLIONTHS


def _nine(value: float) -> float:
    """``value`` to nine significant digits (the float the nine-digit decimal reads as)."""
    return float(f"{value:.8e}")  # exact: rounding to significant digits, not display


def written_size(nbytes: float) -> str:
    """Bytes as GiB to a millionth, rounded up, trailing zeros dropped ("1600 GiB")."""
    return f"{_gib(nbytes):.6f}".rstrip("0").rstrip(".") + " GiB"


def written_rate(bytes_per_s: float) -> str:
    """Bytes per second as GB/s to nine significant digits ("63.0153846 GB/s")."""
    return f"{bytes_per_s / BYTES_PER_GB:.9g} GB/s"


def written_time(seconds: float) -> str:
    """Seconds to nine significant digits ("2 s")."""
    return f"{seconds:.9g} s"


# The value each text reads back as (``parse_quantity`` of it), without writing it: a plan
# built in memory holds these, so it replays as its written plan does, to the last bit.


def size_as_written(nbytes: float) -> float:
    """The bytes :func:`written_size` reads back as."""
    return _gib(nbytes) * BYTES_PER_GIB


def rate_as_written(bytes_per_s: float) -> float:
    """The bytes per second :func:`written_rate` reads back as."""
    return _nine(bytes_per_s / BYTES_PER_GB) * BYTES_PER_GB


def time_as_written(seconds: float) -> float:
    """The seconds :func:`written_time` reads back as."""
    return _nine(seconds)
