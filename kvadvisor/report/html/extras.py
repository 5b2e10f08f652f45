"""Fields a section has no dedicated display for, shown generically by unit suffix."""

from __future__ import annotations

import dataclasses
from typing import Any

from kvadvisor.report import fmt
from kvadvisor.report.html.chartviews import series_chart
from kvadvisor.report.html.view import Chart
from kvadvisor.results.series import Series

# Fields shown by a dedicated part of a section, not in its generic list of numbers.
_HANDLED = {
    "trace": {
        "path",
        "format",
        "columns",
        "dropped",
        "notes",
        "capabilities",
        "sha256",
        "requests",
        "duration_s",
        "block_tokens",
        "input_tokens_total",
        "output_tokens_total",
        "arrival_rate_per_s",
        "arrivals",
        "input_tokens_hist",
        "output_tokens_hist",
        "models",
        "input_tokens_stats",
        "output_tokens_stats",
    },
    "prefix_cache": {
        "hit_ratio",
        "mrc",
        "warmup_fraction",
        "status",
        "note",
        "block_tokens",
        "block_hit_ratio",
        "sampling",
        "curve",
        "tiers",
        "routing",
        "reuse",
        "block_sizes",
        "sharing",
        "conversations",
    },
    "io": {
        "write",
        "read",
        "window_s",
        "read_known",
        "chunk_tokens",
        "io_unit_bytes",
        "write_io",
        "read_io",
        "write_bytes_per_day",
        "drive_capacity_bytes",
        "drive_writes_per_day",
        "load_vs_recompute",
        "series",
        "notes",
    },
    "stage_split": {
        "source",
        "prefill_s",
        "decode_s",
        "prefill_share",
        "classification",
        "thresholds",
        "latency_prefill_s",
        "latency_decode_s",
        "latency_prefill_share",
        "latency_classification",
        "hits_source",
        "no_reuse_prefill_s",
        "no_reuse_prefill_share",
        "prefill_s_saved_by_reuse",
        "request_classes",
        "per_request",
        "mean_decode_batch",
        "measured_requests",
        "instances",
        "gpu_busy_fraction",
        "calibration",
        "notes",
    },
}


def extra_rows(section: Any, name: str) -> tuple[tuple[str, str], ...]:
    """Scalar fields of a section not shown elsewhere, formatted by their unit suffix."""
    rows = []
    for f in dataclasses.fields(section):
        val = getattr(section, f.name)
        if f.name in _HANDLED.get(name, set()) or val is None:
            continue
        if isinstance(val, (int, float, str, bool)):
            rows.append((fmt.label(f.name), fmt.value(f.name, val)))
    return tuple(rows)


def extra_charts(section: Any, name: str) -> tuple[Chart, ...]:
    """Every ``Series`` a section carries (single or in a tuple), drawn as it declares."""
    charts = []
    for f in dataclasses.fields(section):
        if f.name in _HANDLED.get(name, set()):
            continue
        val = getattr(section, f.name)
        items = val if isinstance(val, tuple) else (val,)
        for i, item in enumerate(items):
            if isinstance(item, Series) and item.x:
                charts.append(series_chart(item, f"{name}-{f.name}-{i}"))
    return tuple(charts)
