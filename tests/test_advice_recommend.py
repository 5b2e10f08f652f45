"""The advisor's verdict texts: a configuration that met the SLO on the sample but not whole."""

from __future__ import annotations

from kvadvisor.advice.recommend import unverified_reason


def test_each_whole_trace_miss_is_said_once_with_whose_it_is() -> None:
    """Four contenders missed: each miss names its configuration; alike misses share a clause.

    The reason used to list "(misses TTFT p99 5.16 s (...); misses TTFT p99 5.15 s (...); ...)"
    after one configuration's name: the same text again and again with nobody's name on it.
    """
    a, b, c, d = (
        "prefill 6 x H200 + decode 1 x A100",
        "prefill 6 x H200 + decode 2 x A100",
        "aggregated 9 x H200",
        "aggregated 9 x H100",
    )
    miss_c = "misses TTFT p99 4.52 s > 4 s (98.8% of requests within it)"
    reason = unverified_reason(
        a,
        {
            a: "misses TTFT p99 5.17 s > 4 s (98.3% of requests within it)",
            b: "misses TTFT p99 5.16 s > 4 s (98.3% of requests within it)",
            c: miss_c,
            d: miss_c,
        },
    )
    assert reason.startswith(f"{a} meets the SLO on the sample, but on the whole trace ")
    assert reason.endswith(
        f": {a} misses TTFT p99 5.17 s > 4 s (98.3% of requests within it); "
        f"{b} misses TTFT p99 5.16 s > 4 s (98.3% of requests within it); "
        f"{c} and {d} miss TTFT p99 4.52 s > 4 s (98.8% of requests within it)"
    )
    assert reason.count("4.52 s") == 1
