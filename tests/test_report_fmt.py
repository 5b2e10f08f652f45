"""Renderers' number helpers: the one formatter, None as "not measured", values with no unit."""

from __future__ import annotations

from kvadvisor.report import fmt
from kvadvisor.report.charts import compact
from kvadvisor.report.deployments import money
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


def test_chart_ticks_read_through_the_formatter() -> None:
    """Tick labels: the formatter's digits with a decimal prefix, never an exponent."""
    assert compact(950) == "950"
    assert compact(1500) == "1.5k"
    assert compact(2e9) == "2G"
    assert compact(0.25) == "0.25"
    assert compact(1.234e12) == "1,234G"  # ':.3g' wrote 1.23e+03G


def test_money_reads_through_the_formatter() -> None:
    """Dollars through Unit.USD (to the cent), or why there are none."""
    assert money(193.48) == "$193.48/h" and money(1.25, "") == "$1.25" and money(None) == "unpriced"
