"""One node's routed share of the trace, and the serving figures a run of it is judged by.

The fleet replay routes every request to a replica (the plan's router: prefix-aware, round
robin...); one serving node of the plan takes only the requests routed to its replicas, at the
plan's arrival times. The serving benchmark replays that share, so the engine under test sees
what one node of the replayed deployment saw. :func:`serving_figures` is the one definition of
the figures compared between the replay and a benchmark, and between two benchmark runs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kvadvisor.verifyjobs.model import RoutedShare
from kvadvisor.vocab import Stage

# The replay's per-request columns serving_figures takes, in its argument order.
COLUMNS = ("arrival_s", "ttft_s", "tpot_s", "e2e_s", "output_tokens")
# Gate metrics (``verify --results A B --gate``): the figure's key and whether lower is better.
METRICS: Mapping[str, tuple[str, bool]] = {
    "ttft_p50": ("ttft_p50_s", True),
    "ttft_p99": ("ttft_p99_s", True),
    "tpot_p50": ("tpot_p50_s", True),
    "tpot_p99": ("tpot_p99_s", True),
    "e2e_p99": ("e2e_p99_s", True),
    "throughput": ("output_tokens_per_s", False),
    "request_throughput": ("requests_per_s", False),
}


def _pct(values: np.ndarray, q: float) -> float | None:
    values = values[np.isfinite(values)]
    return float(np.percentile(values, q)) if values.size else None


def serving_figures(
    arrival_s: np.ndarray,
    ttft_s: np.ndarray,
    tpot_s: np.ndarray,
    e2e_s: np.ndarray,
    output_tokens: np.ndarray,
    span_s: float | None = None,
) -> dict[str, float | None]:
    """Latency percentiles of completed requests, and throughput over the run's span.

    Throughput: output tokens of completed requests over the seconds from the first arrival to
    the last completion (``arrival + e2e``), or over ``span_s`` when given (a benchmark that
    records no arrivals, timed by its own clock over the same interval); requests per second
    likewise.
    """
    arrival = np.asarray(arrival_s, dtype=np.float64)
    e2e = np.asarray(e2e_s, dtype=np.float64)
    done = np.isfinite(e2e)
    span = float((arrival[done] + e2e[done]).max() - arrival.min()) if done.any() else 0.0
    if span_s is not None:
        span = span_s
    tokens = float(np.asarray(output_tokens, dtype=np.float64)[done].sum())
    return {
        "ttft_p50_s": _pct(np.asarray(ttft_s, dtype=np.float64), 50),
        "ttft_p99_s": _pct(np.asarray(ttft_s, dtype=np.float64), 99),
        "tpot_p50_s": _pct(np.asarray(tpot_s, dtype=np.float64), 50),
        "tpot_p99_s": _pct(np.asarray(tpot_s, dtype=np.float64), 99),
        "e2e_p99_s": _pct(e2e, 99),
        "output_tokens_per_s": tokens / span if span > 0 else None,
        "requests_per_s": float(done.sum()) / span if span > 0 else None,
    }


def routed_share(
    stage: Stage,
    router: str,
    replica: np.ndarray,
    replicas_per_instance: int,
    instances: int,
    rows: np.ndarray,
    columns: Mapping[str, np.ndarray],
    requests: int | None,
) -> RoutedShare:
    """The instance that served the most requests (the lowest on a tie), and its figures.

    ``replica`` and ``rows`` are the stage's, in its arrival order (``instances`` in all, an
    idle one counted too); ``columns`` the replay's
    per-request columns over every trace row (``arrival_s``, ``ttft_s``, ``tpot_s``, ``e2e_s``,
    ``output_tokens``). ``requests`` keeps the share's first N (``--bench-requests``); the
    replayed figures are over the requests kept.
    """
    instance_of = np.asarray(replica, dtype=np.int64) // max(replicas_per_instance, 1)
    valid = instance_of >= 0
    counts = np.bincount(instance_of[valid], minlength=max(instances, 1))
    chosen = int(np.argmax(counts))
    mine = np.asarray(rows, dtype=np.int64)[valid & (instance_of == chosen)]
    mine = np.sort(mine)
    kept = mine if requests is None else mine[:requests]
    replayed = serving_figures(*(columns[k][kept] for k in COLUMNS))
    return RoutedShare(
        stage=stage,
        router=router,
        instance=chosen,
        instances=int(counts.size),
        share_requests=int(mine.size),
        rows=kept,
        replayed=replayed,
    )
