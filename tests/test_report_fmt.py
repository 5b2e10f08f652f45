"""Number formatting by unit suffix: the same number reads the same in every renderer."""

from __future__ import annotations

import pytest

from kvadvisor.report import fmt


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("write_mean_bytes_per_s", 1.25e9, "1.25 GB/s"),
        ("read_peak_bytes_per_s", 8e8, "800 MB/s"),
        ("kv_bytes_per_token", 327_680, "320 KiB/token"),
        ("capacity_bytes", 3 * 2**40, "3 TiB"),
        ("hit_ratio", 0.4234, "42.3%"),
        ("prefill_share", 1.0, "100.0%"),
        ("window_s", 1.0, "1 s"),
        ("ttft_s", 0.0123, "12.3 ms"),
        ("duration_s", 86_400.0, "24 h"),
        ("capacity_tokens", 16_777_216, "16.8M tokens"),
        ("read_iops", 1_500_000, "1,500,000 IOPS"),
        ("arrival_rate_per_s", 3.4015, "3.4/s"),
        ("hbm_gib", 141, "141 GiB"),
        ("requests", 12_031, "12,031"),
        ("instance", "p5e.48xlarge", "p5e.48xlarge"),
        ("storage", None, "not measured"),
        ("gds", True, "yes"),
    ],
)
def test_value_by_suffix(name: str, value, expected: str) -> None:
    """Each unit suffix picks its unit and scale."""
    assert fmt.value(name, value) == expected


def test_label_drops_the_unit_suffix() -> None:
    """Labels read as words; token and block counts keep their noun."""
    assert fmt.label("write_mean_bytes_per_s") == "write mean"
    assert fmt.label("window_s") == "window"
    assert fmt.label("capacity_tokens") == "capacity tokens"


def test_number_significant_digits() -> None:
    """Three significant digits, thousands separators, no exponent, no trailing zeros."""
    assert fmt.number(1234567.0) == "1,234,567"
    assert fmt.number(0.000123456) == "0.000123"
    assert fmt.number(6.0) == "6"
    assert fmt.number(-2.5) == "-2.5"


@pytest.mark.parametrize(
    ("fact_unit", "field", "value", "expected"),
    [
        ("ratio", "hit_ratio", 0.4234, "42.3%"),
        ("bytes_per_s", "write_mean_bytes_per_s", 1.25e9, "1.25 GB/s"),
        ("s", "ttft_s", 0.0123, "12.3 ms"),
        ("per_s", "arrival_rate_per_s", 3.4015, "3.4/s"),
        ("gib", "hbm_gib", 141, "141 GiB"),
        ("tokens", "capacity_tokens", 16_777_216, "16.8M tokens"),
    ],
)
def test_a_fact_reads_like_the_field_of_the_same_unit(
    fact_unit: str, field: str, value: float, expected: str
) -> None:
    """Facts and fields share one unit table; the fact spellings are aliases of the field kinds."""
    assert fmt.fact_value(value, fact_unit) == expected
    assert fmt.value(field, value) == expected


def test_a_count_fact_keeps_its_fraction_where_a_block_count_rounds() -> None:
    """A "count" fact may be a mean (busy_gpus_mean); `_blocks` fields are whole counts."""
    assert fmt.fact_value(2.6, "count") == "2.6"
    assert fmt.value("cached_blocks", 2.6) == "3"
    assert fmt.fact_value(12_031, "requests") == "12,031 requests"
    assert fmt.fact_value(3, "widgets") == "3 widgets"  # no formatter: the unit follows as is


def test_every_fact_unit_has_a_formatter() -> None:
    """Every unit a fact declares is in the table (else it would print as "1.5 <unit>")."""
    from kvadvisor.facts.registry import FACT_SPECS

    known = set(fmt._UNITS) | set(fmt._FACT_UNIT_ALIASES)  # private: the table is the contract
    assert {spec.unit for spec in FACT_SPECS} <= known
