"""The replay page: a ReplayReport turned into formatted sections and charts (no arithmetic left).

Also the replay section of the analyze report's page (:func:`replay_sections`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from kvadvisor.report import chartspecs, fmt
from kvadvisor.report.charts import HALF_FIG_SIZE_IN, ChartSpec, Line, render_svg
from kvadvisor.report.html.view import Chart, Section, Table
from kvadvisor.results.replay import (
    Percentiles,
    ReplayReport,
    ReplayResult,
    ReplaySeriesKey,
    WindowRate,
)
from kvadvisor.vocab import Stage

_ENV = Environment(
    loader=PackageLoader("kvadvisor", "report/templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)

_ROLE_LABEL = {
    Stage.SERVING: "serving (prefill and decode)",
    Stage.PREFILL: "prefill",
    Stage.DECODE: "decode",
}
_METRICS = (
    ("ttft_s", "time to first token"),
    ("tpot_s", "time per output token"),
    ("e2e_s", "end to end"),
    ("queue_s", "waiting for admission"),
    ("load_s", "prefix load (requests that loaded)"),
)


@dataclass(frozen=True)
class ReplayView:
    """Everything the replay page shows, formatted."""

    title: str
    version: str
    generated_at: str
    headline: str
    inputs: tuple[tuple[str, str], ...]
    key_numbers: tuple[tuple[str, str], ...]
    sections: tuple[Section, ...]
    notes: tuple[str, ...]


def _rate(rate: WindowRate, show: object = fmt.bandwidth) -> str:
    f = show if callable(show) else fmt.bandwidth
    return f"{f(rate.mean)} · {f(rate.p99)} · {f(rate.peak)}"


def _pct_rate(rate: WindowRate) -> str:
    return f"{fmt.percent(rate.mean)} · {fmt.percent(rate.p99)} · {fmt.percent(rate.peak)}"


def _iops(value: float) -> str:
    return f"{fmt.number(value)}/s"


def _chart(key: str, caption: str, spec: ChartSpec) -> Chart:
    return Chart(key, caption, Markup(render_svg(spec)), half=spec.size_in == HALF_FIG_SIZE_IN)


def _latency_section(res: ReplayResult, prefix: str, targets: Mapping[str, float]) -> Section:
    rows = []
    for key, name in _METRICS:
        p: Percentiles | None = getattr(res.requests, key)
        if p is None:
            rows.append((name, "-", "-", "-", "-", "-", "0"))
            continue
        rows.append(
            (
                name,
                *(fmt.duration(v) for v in (p.mean, p.p50, p.p90, p.p99, p.max)),
                fmt.count(p.count),
            )
        )
    charts = []
    for kind, name, _, _ in chartspecs.LATENCY_CDFS:
        spec = chartspecs.latency_spec(res, kind, prefix, targets)
        if spec is not None:
            charts.append(_chart(spec.key, f"{name}: distribution over requests.", spec))
    r = res.requests
    lead = (
        f"{fmt.count(r.completed)} of {fmt.count(r.count)} requests finished"
        + (
            f"; {fmt.count(r.unfinished)} were still in the fleet at the drain cap"
            if r.unfinished
            else ""
        )
        + "."
    )
    return Section(
        id=f"{prefix}latency",
        title="Latency per request",
        lead=lead,
        charts=tuple(charts),
        tables=(
            Table(
                "Per-request latencies (closed loop)",
                ("", "mean", "p50", "p90", "p99", "max", "requests"),
                tuple(rows),
            ),
        ),
    )


def _split_section(res: ReplayResult, prefix: str) -> Section:
    s = res.stage_split
    rows = (
        ("prefill GPU time", fmt.duration(s.prefill_gpu_s) + " GPU-s"),
        ("decode GPU time", fmt.duration(s.decode_gpu_s) + " GPU-s"),
        ("prefill share", fmt.percent(s.prefill_share)),
        ("prompt tokens served from a cache", fmt.percent(res.hit_ratio)),
    )
    fleet = Table(
        "The fleet as replayed",
        (
            "stage",
            "instance",
            "GPU",
            "instances",
            "replicas",
            "GPUs per replica",
            "router",
            "tokens per step",
            "max sequences",
            "page",
            "GPU KV pool per replica",
            "busy (executing steps)",
            "occupied (holding requests)",
            "steps",
        ),
        tuple(
            (
                _ROLE_LABEL[st.role],
                st.instance or "-",
                st.gpu or "-",
                fmt.count(st.instances),
                fmt.count(st.replicas),
                fmt.count(st.gpus_per_replica),
                st.router,
                fmt.count(st.max_batched_tokens),
                fmt.count(st.max_seqs),
                fmt.tokens(st.page_tokens),
                fmt.tokens(st.pool_tokens_per_replica),
                fmt.percent(st.busy_fraction),
                fmt.percent(st.occupancy_fraction),
                fmt.count(st.steps),
            )
            for st in res.stages
        ),
        note="Step times: " + "; ".join(f"{k}: {v}" for k, v in res.step_model.items()),
    )
    return Section(
        id=f"{prefix}split",
        title="GPU time per stage (closed loop)",
        lead=(
            "GPU time each stage used in the replay: every step's time is split between the "
            "prefill chunks and the decode tokens it ran (see kvadvisor docs replay)."
        ),
        rows=rows,
        tables=(fleet,),
    )


def _queue_section(res: ReplayResult, prefix: str) -> Section:
    lines = [
        Line(name, s.x, s.y, "line")
        for name, kind in (("waiting", ReplaySeriesKey.QUEUE), ("running", ReplaySeriesKey.RUNNING))
        for s in res.series
        if s.kind is kind
    ]
    spec = ChartSpec(
        key=f"{prefix}queue",
        title="Do requests queue for admission?",
        x_title="time (s)",
        y_title="requests",
        lines=tuple(lines),
    )
    o = res.overload
    return Section(
        id=f"{prefix}queue",
        title="Queue over time",
        lead=("Overloaded: " if o.overloaded else "The fleet keeps up: ") + o.reason + ".",
        charts=(
            _chart(spec.key, "Mean requests waiting for admission and running, per window.", spec),
        ),
    )


def _steps_section(res: ReplayResult, prefix: str) -> Section | None:
    """The busiest replica-minute step by step (present when the replay kept its step log)."""
    time = [s for s in res.series if s.kind is ReplaySeriesKey.STEP_TIME]
    if not time:
        return None
    name = time[0].name
    work = [
        Line(label, s.x, s.y, "points")
        for label, kind in (
            ("prefill tokens", ReplaySeriesKey.STEP_PREFILL),
            ("decode sequences", ReplaySeriesKey.STEP_DECODE),
        )
        for s in res.series
        if s.kind is kind
    ]
    durations = ChartSpec(
        key=f"{prefix}steps-time",
        title=f"Step times, {name}",
        x_title="time (s)",
        y_title="step time (ms)",
        lines=(Line("step time", time[0].x, tuple(1e3 * v for v in time[0].y), "points"),),
        size_in=HALF_FIG_SIZE_IN,
    )
    batch = ChartSpec(
        key=f"{prefix}steps-batch",
        title=f"What each step ran, {name}",
        x_title="time (s)",
        y_title="tokens or sequences per step",
        lines=tuple(work),
        log_y=True,
        size_in=HALF_FIG_SIZE_IN,
    )
    return Section(
        id=f"{prefix}steps",
        title="The busiest minute, step by step",
        lead=(
            f"The minute in which one replica spent the most time executing steps ({name}): "
            "each step's time, its prefill tokens and its decode sequences. Every step of "
            "every replica is in the step log (kvadvisor replay --steps-out)."
        ),
        charts=(
            _chart(durations.key, "Each step's time, at its start.", durations),
            _chart(batch.key, "Prefill tokens and decode sequences in each step.", batch),
        ),
    )


def _tier_section(res: ReplayResult, prefix: str) -> Section:
    if not res.tiers and res.link is None:
        return Section(
            id=f"{prefix}tiers",
            title="Tier and link demand",
            missing="The deployment has no KV tier below the GPU and no P-to-D link.",
        )
    table = Table(
        "Per device (a replica's, an instance's or the pool's unit): mean · p99 · peak window",
        (
            "tier",
            "stage",
            "scope",
            "devices",
            "capacity",
            "hit share",
            "read",
            "write",
            "read I/O",
            "utilization",
        ),
        tuple(
            (
                t.name,
                t.stage.value,
                t.scope,
                fmt.count(t.devices),
                fmt.size(t.capacity_bytes) if t.capacity_bytes is not None else "unbounded",
                fmt.percent(t.hit_ratio),
                _rate(t.read_bytes_per_s),
                _rate(t.write_bytes_per_s),
                _rate(t.read_iops, _iops),
                _pct_rate(t.utilization),
            )
            for t in res.tiers
        ),
        whole=(0,),
    )
    rows: tuple[tuple[str, str], ...] = ()
    if res.link is not None:
        lk = res.link
        rows = (
            ("P-to-D link per decode instance", fmt.bandwidth(lk.capability_bytes_per_s)),
            ("link traffic (mean · p99 · peak)", _rate(lk.bytes_per_s)),
            ("link utilization (mean · p99 · peak)", _pct_rate(lk.utilization)),
        )
    charts = []
    for kind, title in ((ReplaySeriesKey.TIER_READ, "read"), (ReplaySeriesKey.TIER_WRITE, "write")):
        lines = tuple(Line(s.name, s.x, s.y) for s in res.series if s.kind is kind)
        if lines:
            spec = ChartSpec(
                key=f"{prefix}tier-{title}",
                title=f"How much do the KV tiers {title}, fleet-wide?",
                x_title="time (s)",
                y_title="bytes per second",
                lines=lines,
            )
            charts.append(_chart(spec.key, f"KV {title} bytes per second, per tier.", spec))
    link = tuple(Line(s.name, s.x, s.y) for s in res.series if s.kind is ReplaySeriesKey.LINK)
    if link:
        spec = ChartSpec(
            key=f"{prefix}link",
            title="How much KV crosses the P-to-D link, fleet-wide?",
            x_title="time (s)",
            y_title="bytes per second",
            lines=link,
        )
        charts.append(_chart(spec.key, "Prompt KV crossing to decode, per second.", spec))
    return Section(
        id=f"{prefix}tiers",
        title="Tier and link demand (closed loop)",
        lead=(
            "What the KV tiers and the P-to-D link carried while the fleet ran: bounded by what "
            "the GPUs produced and the devices delivered."
        ),
        rows=rows,
        charts=tuple(charts),
        tables=(table,),
    )


def _counts_section(res: ReplayResult, prefix: str) -> Section:
    c = res.counts
    rows = (
        ("preemptions", fmt.count(c.preemptions)),
        ("of which swapped", fmt.count(c.swaps)),
        ("loads recomputed instead", fmt.count(c.recomputed_loads)),
        ("hit tokens recomputed instead of loaded", fmt.tokens(c.recomputed_tokens)),
        ("writes that blocked a step", fmt.count(c.blocked_writes)),
        ("writes dropped", fmt.count(c.dropped_writes)),
        ("bytes dropped", fmt.size(c.dropped_write_bytes)),
        ("engine steps", fmt.count(c.steps)),
        ("requests unfinished at the drain cap", fmt.count(c.unfinished)),
    )
    slo_rows = tuple(
        (
            name,
            fmt.duration(target),
            fmt.percent(res.slo.attainment.get(name)),
            "met" if res.slo.met.get(name) else "missed",
        )
        for name, target in res.slo.targets.items()
    )
    tables = (
        (
            Table(
                "Service-level objectives",
                ("target", "value", "requests meeting it", "verdict"),
                slo_rows,
            ),
        )
        if slo_rows
        else ()
    )
    return Section(
        id=f"{prefix}counts",
        title="Events and SLOs",
        rows=rows,
        tables=tables,
    )


def replay_sections(
    res: ReplayResult, prefix: str = "replay-", targets: Mapping[str, float] | None = None
) -> tuple[Section, ...]:
    """The replay's sections (ids prefixed, so they can sit in another page).

    ``targets``: the SLO its latency charts mark (None: the replay's own).
    """
    return (
        _split_section(res, prefix),
        _latency_section(res, prefix, res.slo.targets if targets is None else targets),
        _queue_section(res, prefix),
        *(s for s in (_steps_section(res, prefix),) if s is not None),
        _tier_section(res, prefix),
        _counts_section(res, prefix),
    )


def replay_section(
    res: ReplayResult | None, missing: str | None, targets: Mapping[str, float]
) -> Section:
    """The analyze page's one section for the replay of the recommended deployment.

    ``targets``: the SLO the verdict judged it by (chartspecs.slo_targets), marked on its charts.
    """
    if res is None:
        return Section(
            id="replay",
            title="Fleet replay (closed loop)",
            missing=f"Not replayed: {missing or 'no recommendation to replay'}.",
        )
    parts = replay_sections(res, "replay-", targets)
    r = res.requests
    rows = (
        (
            "deployment",
            f"{res.deployment.topology}: "
            + "; ".join(
                f"{st.role.value} {st.instances} x {st.instance or st.gpu}, {st.replicas} replicas"
                for st in res.stages
            ),
        ),
        ("p90 TTFT", fmt.duration(r.ttft_s.p90 if r.ttft_s else None)),
        ("p90 TPOT", fmt.duration(r.tpot_s.p90 if r.tpot_s else None)),
        ("prefill share of GPU time", fmt.percent(res.stage_split.prefill_share)),
        ("keeps up", "no: " + res.overload.reason if res.overload.overloaded else "yes"),
    )
    return Section(
        id="replay",
        title="Fleet replay of the recommended deployment (closed loop)",
        lead=(
            "The recommended deployment run through the trace: requests queue, batch, load and "
            "cross to decode as the engines do (see kvadvisor docs replay). Its GPU time per "
            "stage is the report's stage split; the open-loop figures are kept as a bound."
        ),
        rows=rows + tuple(row for p in parts for row in p.rows),
        charts=tuple(c for p in parts for c in p.charts),
        tables=tuple(t for p in parts for t in p.tables),
        notes=res.notes,
    )


def build_replay_view(report: ReplayReport) -> ReplayView:
    """The page's view of a replay document."""
    res = report.replay
    r = res.requests
    ttft = r.ttft_s.p90 if r.ttft_s else None
    tpot = r.tpot_s.p90 if r.tpot_s else None
    headline = (
        f"{res.deployment.name} ({res.deployment.topology}): p90 TTFT {fmt.duration(ttft)}, "
        f"p90 TPOT {fmt.duration(tpot)}, prefill {fmt.percent(res.stage_split.prefill_share)} "
        "of GPU time" + ("; the fleet is overloaded" if res.overload.overloaded else "") + "."
    )
    t = report.trace
    inputs = (
        ("trace", t.path or "(arrays)"),
        ("format", t.format),
        ("requests", fmt.count(t.requests)),
        ("duration", fmt.duration(t.duration_s)),
        ("block tokens", "-" if t.block_tokens is None else fmt.tokens(t.block_tokens)),
        ("demand window", fmt.duration(res.window_s)),
        ("drain cap", fmt.duration(res.drain_cap_s)),
        ("replayed span", fmt.duration(res.span_s)),
    )
    key = (
        ("p90 TTFT", fmt.duration(ttft)),
        ("p90 TPOT", fmt.duration(tpot)),
        ("prefill share of GPU time", fmt.percent(res.stage_split.prefill_share)),
        ("overloaded", "yes" if res.overload.overloaded else "no"),
    )
    return ReplayView(
        title=f"kvadvisor replay: {res.deployment.name}",
        version=report.kvadvisor_version,
        generated_at=report.generated_at,
        headline=headline,
        inputs=inputs,
        key_numbers=key,
        sections=replay_sections(res, ""),
        notes=res.notes,
    )


class ReplayHtmlRenderer:
    """Render a replay document as one self-contained HTML page."""

    name = "html"
    file_extension = ".html"

    def render(self, report: ReplayReport) -> str:
        """Return the page as one string."""
        return _ENV.get_template("replay.html.j2").render(view=build_replay_view(report))
