"""What a trace holds and what each later analysis can do with it (for ``kvadvisor info``; pure)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import pyarrow.compute as pc

from kvadvisor.trace.detect import FORMAT_TITLES, TraceFormat
from kvadvisor.trace.model import Trace
from kvadvisor.units import plural
from kvadvisor.units.format import count, duration, number


@dataclass(frozen=True)
class TraceDescription:
    """A trace's vital figures; derived values are filled by :func:`describe_trace`."""

    path: str
    file_format: str
    source_format: str
    requests: int
    duration_s: float
    arrival_rate_per_s: float | None
    arrivals_measured: bool
    columns: tuple[str, ...]
    block_tokens: int | None
    input_tokens_total: int
    output_tokens_total: int
    failed_requests: int
    dropped: Mapping[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()


def capabilities(trace: Trace) -> tuple[str, ...]:
    """One sentence per analysis: what the trace's columns let it measure, and what not."""
    return capabilities_of(
        tuple(c for c in trace.columns if trace.has(c)),
        trace.block_tokens,
        arrivals_measured=trace.arrivals_measured,
        failed_requests=trace.failed_requests,
    )


def capabilities_of(
    columns: Collection[str],
    block_tokens: int | None,
    *,
    arrivals_measured: bool,
    failed_requests: int,
) -> tuple[str, ...]:
    """:func:`capabilities` from the facts it needs, for traces not held in memory.

    ``columns`` are the canonical columns holding at least one value.
    """
    lines: list[str] = []
    has_hashes = "block_hashes" in columns and block_tokens is not None
    if has_hashes:
        lines.append(
            f"block hashes ({block_tokens} tokens per block): prefix reuse and the "
            "miss-ratio curve can be measured"
        )
    elif "block_hashes" in columns:
        lines.append(
            "block hashes without block_tokens: give --block-tokens to measure prefix reuse"
        )
    else:
        lines.append("no block hashes: prefix reuse cannot be measured")
    if "ttft_s" in columns:
        lines.append("TTFT present: stage times will be measured, not modeled")
        if "queue_s" in columns:
            lines.append("queue times present: prefill is measured as TTFT - queueing")
        else:
            lines.append("no queue times: measured prefill includes any queueing")
        if "e2e_s" in columns:
            lines.append("end-to-end latency present: decode is measured as e2e - TTFT")
    else:
        lines.append("no TTFT: stage times will be modeled from the model and the GPU")
    if arrivals_measured:
        lines.append(
            "arrival times present: arrival rate, burstiness, concurrency and I/O demand "
            "over time can be measured"
        )
    else:
        lines.append(
            "no arrival times: arrival rate, burstiness and concurrency cannot be measured"
        )
    if "cached_tokens" in columns:
        lines.append("engine-reported cached tokens: simulated prefix hits can be checked")
    if "session_id" in columns:
        lines.append("session ids present: reuse within and across sessions can be told apart")
    if failed_requests:
        lines.append(
            f"{plural(failed_requests, 'failed request')}: kept, and excluded where a metric "
            "needs a successful request"
        )
    return tuple(lines)


def describe_trace(trace: Trace, file_format: TraceFormat | str | None = None) -> TraceDescription:
    """Summarise ``trace``; ``file_format`` is the format the file was read as (if known)."""
    t = trace.table
    fmt = file_format.value if isinstance(file_format, TraceFormat) else file_format
    return TraceDescription(
        path=trace.source_path,
        file_format=fmt or trace.source_format,
        source_format=trace.source_format,
        requests=trace.requests,
        duration_s=trace.duration_s,
        arrival_rate_per_s=trace.arrival_rate_per_s,
        arrivals_measured=trace.arrivals_measured,
        columns=trace.columns,
        block_tokens=trace.block_tokens,
        input_tokens_total=int(pc.sum(t["input_tokens"]).as_py() or 0),
        output_tokens_total=int(pc.sum(t["output_tokens"]).as_py() or 0),
        failed_requests=trace.failed_requests,
        dropped=dict(trace.dropped),
        notes=trace.notes,
        capabilities=capabilities(trace),
    )


def _title(name: str) -> str:
    try:
        return FORMAT_TITLES[TraceFormat(name)]
    except ValueError:
        return name


def format_description(d: TraceDescription) -> str:
    """Plain text for ``kvadvisor info``: one fact per line, then notes and capabilities."""
    fmt = _title(d.file_format)
    if d.file_format != d.source_format:
        fmt += f" (converted from {_title(d.source_format)})"
    rate = (
        f"{number(d.arrival_rate_per_s)} requests/s"
        if d.arrival_rate_per_s is not None
        else "unknown (no arrival times)"
        if not d.arrivals_measured
        else "n/a (one instant)"
    )
    dropped = ", ".join(f"{count(n)} {why}" for why, n in d.dropped.items()) or "none"
    lines = [
        f"trace         {d.path}",
        f"format        {fmt}",
        f"requests      {count(d.requests)} ({count(d.failed_requests)} failed)",
        f"time span     {duration(d.duration_s)}"
        if d.arrivals_measured
        else "time span     unknown (no arrival times)",
        f"arrival rate  {rate}",
        f"tokens        {count(d.input_tokens_total)} input, {count(d.output_tokens_total)} output",
        f"block_tokens  {d.block_tokens if d.block_tokens is not None else 'none'}",
        f"columns       {', '.join(d.columns)}",
        f"dropped rows  {dropped}",
    ]
    lines += [f"note          {n}" for n in d.notes]
    lines += [f"can           {c}" for c in d.capabilities]
    return "\n".join(lines) + "\n"
