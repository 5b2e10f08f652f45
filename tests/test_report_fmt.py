"""Renderers' number helpers: the one formatter, None as "not measured", values with no unit."""

from __future__ import annotations

from kvadvisor.report import fmt
from kvadvisor.units import Unit


def test_helpers_are_the_units_formatter() -> None:
    """Each helper is the formatter for its unit; None reads "not measured"."""
    assert fmt.bandwidth(1.25e9) == "1.25 GB/s"
    assert fmt.size(3 * 2**40) == "3 TiB"
    assert fmt.duration(0.0123) == "12.3 ms"
    assert fmt.percent(0.4234) == "42.3%"
    assert fmt.tokens(16_777_216) == "16.8M tokens"
    assert fmt.quantity(2500, Unit.IOPS) == "2,500 IOPS"
    for helper in (fmt.bandwidth, fmt.size, fmt.duration, fmt.percent, fmt.tokens):
        assert helper(None) == fmt.NOT_MEASURED


def test_a_fact_reads_in_its_own_unit() -> None:
    """A fact the advisor used ({value, unit}) is formatted by its unit, whatever its name."""
    assert fmt.fact({"value": 0.4234, "unit": "ratio"}) == "42.3%"
    assert fmt.fact({"value": 141, "unit": "gib"}) == "141 GiB"


def test_plain_values_carry_no_unit() -> None:
    """An option as given: numbers with separators, flags, lists and mappings as text."""
    assert fmt.plain(4096) == "4,096"
    assert fmt.plain(0.5) == "0.5"
    assert fmt.plain(True) == "yes"
    assert fmt.plain(("hbm=1M", "dram=16M")) == "hbm=1M, dram=16M"
    assert fmt.plain(None) == fmt.NOT_MEASURED
