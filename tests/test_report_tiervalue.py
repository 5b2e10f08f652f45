"""The tier-value line every renderer leads with: each case's wording, written out by hand."""

from __future__ import annotations

from dataclasses import replace

from kvadvisor.report.tiervalue import line, rows
from kvadvisor.results.verdict import TierValue

SAVES = TierValue(
    tier="host",
    storage="host-dram-ddr5",
    without="no tier below the GPU pool",
    instances=1,
    with_instances=1,
    with_usd_per_hour=7.999,
    without_instances=2,
    max_instances=64,
    without_why="",
    usd_per_hour=7.999,
    without_usd_per_hour=15.998,
    usd_per_hour_saved=7.999,
    gpus=8,
    gpus_saved=8,
    ttft_p50_s=0.5,
    ttft_p99_s=3.25,
    without_ttft_p50_s=1.25,
    without_ttft_p99_s=8.76,
    without_meets_at_same_count=False,
    hit_tokens=1_500_000.0,
    prompt_tokens=6_000_000.0,
    break_even_prompt_tokens=1.0,
    break_even_basis="one load alone",
    basis="replayed on the search's sample, with the same targets",
)


def test_a_tier_that_saves_an_instance_says_dollars_gpus_and_ttft() -> None:
    """The issue's sentence, short: saves $X/h (N fewer GPUs); TTFT p99 A → B."""
    assert line("serving", SAVES) == (
        "host-dram-ddr5: saves $8.00/h (8 fewer GPUs); TTFT p99 8.76 s → 3.25 s (sample)"
    )
    assert len(line("serving", SAVES)) <= 80
    assert line("prefill", SAVES).startswith("prefill host-dram-ddr5: saves")
    reuse = replace(SAVES, tier="prefix_cache", storage="prefix caching in GPU memory")
    assert line("serving", reuse).startswith("prefix caching: saves $8.00/h")


def test_a_tier_no_fleet_does_without_says_so() -> None:
    """No count meets the SLO without it: the line says so instead of a saving."""
    needed = replace(
        SAVES,
        without_instances=None,
        without_usd_per_hour=None,
        usd_per_hour_saved=None,
        gpus_saved=None,
        without_why="misses TTFT p99 9 s > 5 s at 64 instances",
    )
    assert line("prefill", needed) == (
        "prefill host-dram-ddr5: is needed (without it no fleet of up to 64 instances meets "
        "the SLO); TTFT p99 8.76 s → 3.25 s (sample)"
    )
    assert (
        "host: sized without it",
        "no count up to 64 meets the SLO (misses TTFT p99 9 s > 5 s at 64 instances)",
    ) in rows(needed)


def test_no_saving_a_dearer_tier_and_a_slower_one_read_as_such() -> None:
    """Zero saved: "no fewer GPUs"; negative: "costs ... more"; slower: the arrow rises."""
    same = replace(SAVES, without_instances=1, usd_per_hour_saved=0.0, gpus_saved=0)
    assert line("serving", same).startswith("host-dram-ddr5: saves $0.00/h (no fewer GPUs)")
    dearer = replace(
        SAVES, usd_per_hour_saved=-2.5, gpus_saved=0, ttft_p99_s=9.0, without_ttft_p99_s=8.76
    )
    assert line("serving", dearer) == (
        "host-dram-ddr5: costs $2.50/h more (no fewer GPUs); TTFT p99 8.76 s → 9 s (sample)"
    )


def test_the_rows_give_the_figures_behind_the_line() -> None:
    """Re-sized fleet, same-count latencies, hits and the break-even, each in its unit."""
    got = dict(rows(SAVES))
    assert got["host: sized without it"] == (
        "2 instances, $16.00/h, against 1 instance, $8.00/h with it"
    )
    assert got["host: same count without it"] == (
        "TTFT p50 1.25 s → 500 ms, p99 8.76 s → 3.25 s (without → with); without it the SLO "
        "is missed"
    )
    assert got["host: hits it served"] == "1,500,000 of 6,000,000 prompt tokens (25.0%)"
    assert got["host: load vs recompute"] == "loading wins at every prompt length (one load alone)"


def test_a_verdict_grown_on_the_whole_trace_is_compared_as_the_sample_sized_it() -> None:
    """Both fleets sized on the sample; the verdict's larger count is named, not compared."""
    grown = replace(SAVES, instances=2, usd_per_hour=15.998)
    assert dict(rows(grown))["host: sized without it"] == (
        "2 instances, $16.00/h, against 1 instance, $8.00/h (the verdict has 2: the whole "
        "trace needed them) with it"
    )
    assert line("serving", grown).startswith("host-dram-ddr5: saves $8.00/h (8 fewer GPUs)")


def test_unpriced_fleets_are_compared_by_gpus() -> None:
    """No $/h to compare: what the tier saves or costs in GPUs, said to be unpriced."""
    unpriced = replace(SAVES, usd_per_hour_saved=None, with_usd_per_hour=None)
    assert line("serving", unpriced).startswith("host-dram-ddr5: saves 8 GPUs (unpriced); ")
    dearer = replace(unpriced, gpus_saved=-64)
    assert line("serving", dearer).startswith("host-dram-ddr5: costs 64 GPUs more (unpriced); ")
