"""The one formatter and the quantity parser: every unit's rendering, worked out by hand."""

from __future__ import annotations

import pytest

from kvadvisor.units import (
    NOT_MEASURED,
    Quantity,
    QuantityError,
    Unit,
    format_value,
    parse_quantity,
)
from kvadvisor.units.format import apart, as_written, number, price, usd


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (0.553, Unit.RATIO, "55.3%"),
        (1.0, Unit.RATIO, "100.0%"),
        (7.46, Unit.MULTIPLE, "7.46×"),
        (327_680, Unit.BYTES, "320 KiB"),  # 327,680 / 1,024
        (83_886_080, Unit.BYTES, "80 MiB"),  # 80 x 1,024^2
        (1.5 * 2**30, Unit.BYTES, "1.5 GiB"),  # binary: not "1.61 GB"
        (3 * 2**40, Unit.BYTES, "3 TiB"),
        (512, Unit.BYTES, "512 B"),
        (3072, Unit.GIB, "3 TiB"),  # 3,072 GiB / 1,024
        (1536, Unit.GIB, "1.5 TiB"),
        (327_680, Unit.BYTES_PER_TOKEN, "320 KiB/token"),
        (4.5e9, Unit.BYTES_PER_S, "4.5 GB/s"),  # decimal: 10^9
        (8e8, Unit.BYTES_PER_S, "800 MB/s"),
        (1.25e9, Unit.BYTES_PER_S, "1.25 GB/s"),
        (4.8, Unit.GBPS, "4.8 GB/s"),
        (12_035.1, Unit.TOKENS, "12,035 tokens"),
        (16_777_216, Unit.TOKENS, "16.8M tokens"),
        (12_031, Unit.REQUESTS, "12,031 requests"),
        (2.6, Unit.COUNT, "2.6"),  # a mean of counts keeps its fraction
        (3.4015, Unit.PER_S, "3.4/s"),
        (2500, Unit.IOPS, "2,500 IOPS"),
        (0.0123, Unit.SECONDS, "12.3 ms"),
        (1.0, Unit.SECONDS, "1 s"),
        (119.0, Unit.SECONDS, "119 s"),
        (600, Unit.SECONDS, "10 min"),  # 600 / 60
        (4656, Unit.SECONDS, "77.6 min"),
        (10_800, Unit.SECONDS, "3 h"),  # not "10,800 s"
        (86_400, Unit.SECONDS, "24 h"),
        (85.0, Unit.US, "85 µs"),
        (989.4, Unit.TFLOPS, "989 TFLOPS"),
        (0.55, Unit.DWPD, "0.55 drive writes per day"),
        (True, Unit.BOOL, "yes"),
        (0, Unit.BOOL, "no"),
        (12.5, Unit.USD, "$12.50"),  # money to the cent
        (1234.5, Unit.USD, "$1,234.50"),
        (None, Unit.BYTES, NOT_MEASURED),
        (float("nan"), Unit.RATIO, "n/a"),
    ],
)
def test_each_unit_reads_as_a_person_reads_it(value, unit: Unit, text: str) -> None:
    """One rendering per unit: binary sizes, decimal bandwidths, ms/s/min/h durations."""
    assert format_value(value, unit) == text
    assert str(Quantity(value, unit)) == text


def test_every_unit_has_a_rendering() -> None:
    """No unit falls through the formatter (a new Unit member needs its case)."""
    for unit in Unit:
        assert format_value(1.0, unit)


def test_number_significant_digits() -> None:
    """Three significant digits, thousands separators, no exponent, no trailing zeros."""
    assert number(1234567.0) == "1,234,567"
    assert number(0.000123456) == "0.000123"
    assert number(6.0) == "6"
    assert number(-2.5) == "-2.5"


def test_as_written_keeps_every_digit_a_file_holds() -> None:
    """A quoted threshold or setting is the file's number: no rounding, no exponent added."""
    assert as_written(1048576) == "1048576"  # ':g' gave 1.04858e+06
    assert as_written(2_000_000_000.0) == "2000000000"  # an integral float: no ".0"
    assert as_written(0.3) == "0.3"
    assert as_written(5.5) == "5.5"
    assert as_written(1234567.89) == "1234567.89"  # ':g' gave 1.23457e+06


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (440.32, "$440.32"),
        (0.5, "$0.50"),  # cents kept under a dollar
        (0.085, "$0.085"),  # three significant digits: a price per GB-month
        (0.000137, "$0.000137"),  # per GiB-hour: a hundredth of a cent and less
        (0.0, "$0.00"),
        (12_000, "$12,000.00"),
        (-3.5, "-$3.50"),
    ],
)
def test_usd_to_the_cent_and_three_digits_below_a_dollar(value: float, text: str) -> None:
    """Money reads to the cent; a fraction of a cent keeps three significant digits."""
    assert usd(value) == text
    assert format_value(value, Unit.USD) == text


def test_price_names_what_it_is_per() -> None:
    """A price is dollars per something: an hour, a GB-month, a million tokens."""
    assert price(55.04, "h") == "$55.04/h"
    assert price(0.08, "GB-month") == "$0.08/GB-month"
    assert price(0.52, "M tokens") == "$0.52/M tokens"


@pytest.mark.parametrize(
    ("value", "other", "unit", "texts"),
    [
        # 3 digits read them apart: nothing more is added
        (0.109, 0.1, Unit.SECONDS, ("109 ms", "100 ms")),
        # 100.04 ms and 100 ms both read "100 ms" at 3 digits; 4 digits: "100" stays "100"
        # (trailing zeros go), 5 give 100.04
        (0.10004, 0.1, Unit.SECONDS, ("100.04 ms", "100 ms")),
        (0.98951, 0.99, Unit.RATIO, ("98.95%", "99.00%")),  # 98.951% vs 99%: 2 decimals
        (2.0, 2.0, Unit.SECONDS, ("2 s", "2 s")),  # equal values stay equal texts
        (1.0 + 1e-9, 1.0, Unit.SECONDS, ("1 s", "1 s")),  # alike past 6 digits: left alike
    ],
)
def test_apart_adds_digits_until_two_values_read_differently(
    value: float, other: float, unit: Unit, texts: tuple[str, str]
) -> None:
    """A comparison in a sentence reads true: "100.04 ms over 100 ms", not "100 ms over 100 ms"."""
    assert apart(value, other, unit) == texts


def test_format_value_digits() -> None:
    """More significant digits on request, in the same unit."""
    assert format_value(0.0989123, Unit.SECONDS, digits=5) == "98.912 ms"
    assert format_value(0.98951, Unit.RATIO, digits=4) == "98.95%"
    assert format_value(1.5 * 2**30 + 2**20, Unit.BYTES, digits=5) == "1.501 GiB"


def test_unit_prints_as_its_spelling() -> None:
    """A Unit in an f-string or JSON is its spelling (``ratio``), not ``Unit.RATIO``."""
    assert f"{Unit.RATIO}" == "ratio" and str(Unit.GIB) == "gib"


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("2 TB", "size", 2e12),
        ("1.5 GiB", "size", 1.5 * 2**30),
        ("5 GB/s", "rate", 5e9),
        ("250 ms", "time", 0.25),
    ],
)
def test_parse_quantity(text: str, kind: str, value: float) -> None:
    """Decimal and binary prefixes are both read and never confused."""
    assert parse_quantity(text, kind) == pytest.approx(value)


def test_parse_quantity_refuses_a_bare_number_and_a_wrong_kind() -> None:
    """The unit is the point; a rate where a size belongs says so."""
    with pytest.raises(QuantityError, match="needs a unit"):
        parse_quantity(2000, "size")
    with pytest.raises(QuantityError, match="'TB/s' is a rate unit"):
        parse_quantity("7 TB/s", "size")
