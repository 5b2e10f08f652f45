"""Summarise a replay: per-request latencies, the stage split, per-tier and link demand, SLOs.

Definitions (docs/replay.md, "Outputs"): TTFT is first token minus arrival; TPOT is
(completion - first token) / (output tokens - 1) for requests with more than one output token;
queueing is the time from reaching a stage to being admitted by its scheduler (summed over
stages); a load runs from its start to the prefix being in GPU memory. Demand is per device
(one replica's, instance's or pool's unit of a tier; one decode instance's NIC) over windows
covering the whole replay, idle windows included: the mean over devices of each device's mean,
the largest device p99 and the largest window.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import numpy as np

from kvadvisor.errors import ConfigError
from kvadvisor.fleet.engine import ReplayRun, StageRun
from kvadvisor.fleet.steps import busiest_minute
from kvadvisor.results.replay import (
    Counts,
    DeploymentSummary,
    LinkDemand,
    Overload,
    Percentiles,
    ReplayResult,
    ReplaySeries,
    ReplaySeriesKey,
    ReplayStageSplit,
    ReplayTierDemand,
    RequestStats,
    SloAttainment,
    StageSummary,
    WindowRate,
)
from kvadvisor.units import QuantityError, Unit, format_value, parse_quantity, plural
from kvadvisor.units.format import number
from kvadvisor.vocab import Stage, Topology

# Chart lines keep at most this many points (windows are merged to get there).
CHART_POINTS = 400
CDF_POINTS = 101
SLO_METRICS = ("ttft", "tpot", "e2e", "queue")
_SLO_NAME = re.compile(r"^(ttft|tpot|e2e|queue)_p(\d{1,2}(?:\.\d+)?)_s$")
# A share of requests this close under a target's percentile still meets it (float sums).
SLO_TOLERANCE = 1e-12


def _rank(n: int, pct: float) -> int:
    """The fewest of ``n`` values that make a share of at least ``pct`` percent (at least 1).

    The same test as the SLO check (``count / n >= pct / 100 - SLO_TOLERANCE``), so the value
    of this rank is within a target exactly when the target is met.
    """
    q = pct / 100.0 - SLO_TOLERANCE
    need = min(n, max(1, math.ceil(q * n)))
    while need > 1 and (need - 1) / n >= q:  # q * n rounded up past an integer
        need -= 1
    while need < n and need / n < q:
        need += 1
    return need


def slo_percentiles(values: np.ndarray, pcts: tuple[float, ...]) -> tuple[float, ...]:
    """The pNN of ``values`` as an SLO reads it: the least value with NN% at or below it.

    A target is met (at least NN% of requests within it) exactly when this pNN is within it;
    a linearly interpolated percentile can fall under the target while fewer than NN% of
    requests are within it (a p99 of 98.9 ms shown against a missed 100 ms target). nan for
    no values; an infinite value (a request that never finished) counts as the largest.
    """
    v = np.sort(np.asarray(values, dtype=np.float64))
    if v.size == 0:
        return tuple(math.nan for _ in pcts)
    return tuple(float(v[_rank(v.size, p) - 1]) for p in pcts)


def percentiles(values: np.ndarray) -> Percentiles | None:
    """Mean, p50, p90, p99 (:func:`slo_percentiles`) and max of the finite values, or None."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None
    p50, p90, p99 = slo_percentiles(v, (50, 90, 99))
    return Percentiles(float(v.mean()), p50, p90, p99, float(v.max()), v.size)


def request_columns(run: ReplayRun) -> dict[str, np.ndarray]:
    """One value per trace request (trace order): the rows of ``--requests-out``."""
    a = run.arrays
    n = a.requests
    first = run.stages[0]
    cols: dict[str, np.ndarray] = {
        "request": np.arange(n, dtype=np.int64),
        "arrival_s": a.arrival_s,
        "input_tokens": a.input_tokens,
        "output_tokens": a.output_tokens,
    }

    def scatter(stage: StageRun, values: np.ndarray, fill: float = np.nan) -> np.ndarray:
        out = np.full(n, fill, dtype=np.float64)
        out[stage.rows] = values
        return out

    cols["replica"] = scatter(first, first.replica.astype(np.float64), -1).astype(np.int64)
    cols["hit_tokens"] = scatter(first, first.hit_tokens, 0).astype(np.int64)
    cols["loaded_tokens"] = scatter(first, first.loaded_tokens, 0).astype(np.int64)
    cols["recomputed_tokens"] = scatter(first, first.recomputed_tokens, 0).astype(np.int64)
    queue = scatter(first, first.admit_s - first.arrival_s)
    start = first.admit_s if first.spec.load_mode.value == "async" else first.arrival_s
    loaded = first.loaded_tokens > 0
    cols["load_s"] = scatter(first, np.where(loaded, first.ready_s - start, np.nan))
    first_token = scatter(first, first.first_s)
    done = scatter(first, first.done_s)
    preempt = scatter(first, first.preemptions, 0)
    pf_gpu = scatter(first, first.prefill_gpu_s * first.spec.gpus_per_replica, 0)
    dec_gpu = scatter(first, first.decode_gpu_s * first.spec.gpus_per_replica, 0)
    if run.deployment.topology is Topology.DISAGGREGATED and len(run.stages) > 1:
        d = run.stages[1]
        cols["decode_replica"] = scatter(d, d.replica.astype(np.float64), -1).astype(np.int64)
        queue = queue + scatter(d, d.admit_s - d.arrival_s)
        first_token = scatter(d, d.first_s)
        done = scatter(d, d.done_s)
        preempt = preempt + scatter(d, d.preemptions, 0)
        pf_gpu = pf_gpu + scatter(d, d.prefill_gpu_s * d.spec.gpus_per_replica, 0)
        dec_gpu = dec_gpu + scatter(d, d.decode_gpu_s * d.spec.gpus_per_replica, 0)
    out_tok = a.output_tokens.astype(np.float64)
    cols["queue_s"] = queue
    cols["ttft_s"] = first_token - a.arrival_s
    steps = np.maximum(out_tok - 1, 1)
    cols["tpot_s"] = np.where(out_tok > 1, (done - first_token) / steps, np.nan)
    cols["e2e_s"] = done - a.arrival_s
    cols["preemptions"] = preempt.astype(np.int64)
    cols["prefill_gpu_s"] = pf_gpu
    cols["decode_gpu_s"] = dec_gpu
    return cols


def parse_slo(text: str) -> dict[str, float]:
    """``ttft_p90=2s,tpot_p90=50ms`` as targets in seconds keyed ``ttft_p90_s`` (ConfigError)."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        key = f"{name.strip()}_s"
        if not sep or not _SLO_NAME.match(key):
            raise ConfigError(
                f"--slo '{part}': give METRIC_pNN=TIME with METRIC one of "
                f"{', '.join(SLO_METRICS)}, e.g. ttft_p90=2s,tpot_p90=50ms"
            )
        try:
            out[key] = parse_quantity(value.strip(), "time")
        except QuantityError as exc:
            raise ConfigError(f"--slo '{part}': {exc}") from None
        if out[key] <= 0:
            # No request is served in 0 s: every run would fail the target, by definition.
            raise ConfigError(f"--slo '{part}': a latency target must be above 0 s, e.g. 2s")
    return out


def _slo(targets: Mapping[str, float], cols: Mapping[str, np.ndarray]) -> SloAttainment:
    attain: dict[str, float] = {}
    met: dict[str, bool] = {}
    for key, target in targets.items():
        match = _SLO_NAME.match(key)
        if match is None:
            raise ConfigError(f"SLO target '{key}': expected e.g. ttft_p90_s")
        metric, pct = match.group(1), float(match.group(2))
        values = cols[f"{metric}_s"]
        if metric == "tpot":
            values = values[cols["output_tokens"] > 1]
        # a request that never finished misses every target
        v = np.where(np.isfinite(values), values, np.inf)
        attain[key] = float(np.mean(v <= target)) if v.size else 1.0
        # the pNN is within the target when at least NN% of the requests are
        met[key] = bool(attain[key] >= pct / 100.0 - SLO_TOLERANCE)
    return SloAttainment(dict(targets), attain, met)


def _rate_stats(series: np.ndarray, end_w: int, window_s: float) -> tuple[WindowRate, list[float]]:
    """Per-device rates (rows) over windows [0, end_w): combined stats and each device's mean."""
    if series.shape[0] == 0:
        return WindowRate(0.0, 0.0, 0.0), []
    per = series[:, :end_w] / window_s
    means = per.mean(axis=1)
    p99 = np.percentile(per, 99, axis=1)
    return WindowRate(float(means.mean()), float(p99.max()), float(per.max())), list(means)


def _downsample(x: np.ndarray, y: np.ndarray, points: int = CHART_POINTS) -> tuple[tuple, tuple]:
    """Merge neighbouring windows (means) so a chart line has at most ``points`` points."""
    if y.size <= points:
        return tuple(float(v) for v in x), tuple(float(v) for v in y)
    k = int(math.ceil(y.size / points))
    cut = (y.size // k) * k
    xs = x[:cut].reshape(-1, k).mean(axis=1)
    ys = y[:cut].reshape(-1, k).mean(axis=1)
    return tuple(float(v) for v in xs), tuple(float(v) for v in ys)


def _busiest_minute(run: ReplayRun) -> list[ReplaySeries]:
    """The busiest replica-minute's steps (docs/replay.md, "Outputs"); none without a step log."""
    found = busiest_minute(run)
    if found is None:
        return []
    role, replica, _, rows = found
    name = f"{role} replica {replica}"
    x = tuple(float(v) for v in rows["start_s"])
    return [
        ReplaySeries(
            ReplaySeriesKey.STEP_TIME, name, x, tuple(float(v) for v in rows["duration_s"])
        ),
        ReplaySeries(
            ReplaySeriesKey.STEP_PREFILL, name, x, tuple(float(v) for v in rows["prefill_tokens"])
        ),
        ReplaySeries(
            ReplaySeriesKey.STEP_DECODE,
            name,
            x,
            tuple(float(v) for v in rows["decode_sequences"]),
        ),
    ]


def _cdf(kind: ReplaySeriesKey, values: np.ndarray) -> ReplaySeries | None:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return None
    q = np.linspace(0.0, 1.0, CDF_POINTS)
    return ReplaySeries(kind, kind.value, tuple(float(x) for x in np.quantile(v, q)), tuple(q))


def _tiers(run: ReplayRun, end_w: int, input_total: float) -> list[ReplayTierDemand]:
    out: list[ReplayTierDemand] = []
    w = run.window_s
    for st in run.stages:
        for k, tier in enumerate(st.spec.tiers):
            rows = [i for i, r in enumerate(st.resources) if r.kind == "tier" and r.tier == k]
            res = st.resources[rows[0]]
            read, _ = _rate_stats(st.read_bytes[rows], end_w, w)
            write, _ = _rate_stats(st.write_bytes[rows], end_w, w)
            read_demand, _ = _rate_stats(st.read_demand_bytes[rows], end_w, w)
            write_demand, _ = _rate_stats(st.write_demand_bytes[rows], end_w, w)
            iops, _ = _rate_stats(st.read_ios[rows], end_w, w)
            r_util = st.read_bytes[rows, :end_w] / w / res.read_bytes_per_s
            w_util = st.write_bytes[rows, :end_w] / w / tier.write_bytes_per_s
            u_read, _ = _rate_stats(r_util * w, end_w, w)
            u_write, _ = _rate_stats(w_util * w, end_w, w)
            u_both, _ = _rate_stats(np.maximum(r_util, w_util) * w, end_w, w)
            served = float(st.tier_hit_tokens[k].sum()) if st.tier_hit_tokens.size else 0.0
            out.append(
                ReplayTierDemand(
                    name=tier.name,
                    stage=st.role,
                    kind=tier.kind,
                    scope=tier.scope.value,
                    devices=len(rows),
                    capacity_bytes=None
                    if tier.capacity_tokens is None
                    else tier.capacity_tokens * run.deployment.kv.bytes_per_token,
                    read_capability_bytes_per_s=res.read_bytes_per_s,
                    write_capability_bytes_per_s=tier.write_bytes_per_s,
                    hit_ratio=served / input_total
                    if st.role is not Stage.DECODE and input_total > 0
                    else None,
                    read_bytes_per_s=read,
                    write_bytes_per_s=write,
                    read_demand_bytes_per_s=read_demand,
                    write_demand_bytes_per_s=write_demand,
                    read_iops=iops,
                    read_utilization=u_read,
                    write_utilization=u_write,
                    utilization=u_both,
                )
            )
    return out


def _link(run: ReplayRun, end_w: int) -> LinkDemand | None:
    for st in run.stages:
        rows = [i for i, r in enumerate(st.resources) if r.kind == "link"]
        if not rows:
            continue
        cap = st.resources[rows[0]].read_bytes_per_s
        rate, _ = _rate_stats(st.read_bytes[rows], end_w, run.window_s)
        util, _ = _rate_stats(st.read_bytes[rows] / cap, end_w, run.window_s)
        return LinkDemand(len(rows), cap, rate, util)
    return None


def _overload(run: ReplayRun, unfinished: int, cols: Mapping[str, np.ndarray]) -> Overload:
    """Did the fleet keep up? Three signs it did not (docs/replay.md, "Overload").

    Requests left at the drain cap; a queue that grows over the arrivals (its mean over the
    last quarter of the arrival span above twice that of the second quarter and above one per
    replica); or a saturated fleet, where the median request waits longer for admission than it
    then takes to its first token while at least one request per replica waits on average.
    """
    w = run.window_s
    span = float(run.arrays.arrival_s[-1]) if run.arrays.requests else 0.0
    waiting = sum(st.waiting for st in run.stages) / w
    replicas = sum(st.spec.replicas for st in run.stages)

    def mean_between(a: float, b: float) -> float:
        lo, hi = int(a / w), max(int(b / w), int(a / w) + 1)
        return float(waiting[lo:hi].mean()) if hi > lo else 0.0

    q2 = mean_between(0.25 * span, 0.5 * span)
    q4 = mean_between(0.75 * span, span)
    if unfinished:
        reason = (
            f"{plural(unfinished, 'request')} had not finished "
            f"{format_value(run.drain_cap_s, Unit.SECONDS)} after the last "
            "arrival (the drain cap): the fleet cannot keep up with this traffic"
        )
        return Overload(True, reason, q2, q4, unfinished)
    if q4 > 2.0 * q2 and q4 > replicas:
        reason = (
            f"the queue grows: {format_value(q4, Unit.COUNT)} requests waiting on average over "
            f"the last quarter of the arrivals against {format_value(q2, Unit.COUNT)} over the "
            "second quarter"
        )
        return Overload(True, reason, q2, q4, 0)
    queue = cols["queue_s"][np.isfinite(cols["queue_s"])]
    served = (cols["ttft_s"] - cols["queue_s"])[np.isfinite(cols["ttft_s"])]
    wait50 = float(np.median(queue)) if queue.size else 0.0
    serve50 = float(np.median(served)) if served.size else 0.0
    if wait50 > serve50 and mean_between(0.0, span) >= replicas:
        # Both in seconds: "1.31 s ... longer than the 748 ms" read as the smaller wait.
        reason = (
            f"the fleet is saturated: the median request waits {number(wait50)} s for "
            f"admission, longer than the {number(serve50)} s it then takes to its first token"
        )
        return Overload(True, reason, q2, q4, 0)
    return Overload(False, "the queue does not grow over the arrivals", q2, q4, 0)


def summarize(run: ReplayRun, slo_targets: Mapping[str, float] | None = None) -> ReplayResult:
    """The replay model of a run (pure)."""
    a = run.arrays
    cols = request_columns(run)
    done = np.isfinite(cols["e2e_s"])
    unfinished = int(a.requests - done.sum())
    end_w = max(int(run.end_s / run.window_s) + 1, 1)
    requests = RequestStats(
        count=a.requests,
        completed=int(done.sum()),
        unfinished=unfinished,
        ttft_s=percentiles(cols["ttft_s"]),
        tpot_s=percentiles(cols["tpot_s"]),
        e2e_s=percentiles(cols["e2e_s"]),
        queue_s=percentiles(cols["queue_s"]),
        load_s=percentiles(cols["load_s"]),
    )
    pf = float(cols["prefill_gpu_s"].sum())
    dec = float(cols["decode_gpu_s"].sum())
    split = ReplayStageSplit(pf, dec, pf / (pf + dec) if pf + dec > 0 else None)
    first = run.stages[0]
    input_total = float(a.input_tokens.sum())
    hit_ratio = (
        float(first.hit_tokens.sum()) / input_total if a.has_hashes and input_total > 0 else None
    )
    stages = tuple(
        StageSummary(
            role=st.role,
            instance=st.spec.instance,
            gpu=st.spec.gpu,
            instances=st.spec.instances,
            replicas=st.spec.replicas,
            gpus_per_replica=st.spec.gpus_per_replica,
            router=st.spec.router.value,
            step_model=st.spec.step.source,
            pool_tokens_per_replica=st.spec.pool_tokens,
            max_batched_tokens=st.spec.scheduler.max_batched_tokens,
            max_seqs=st.spec.scheduler.max_seqs,
            page_tokens=st.spec.scheduler.page_tokens,
            busy_fraction=float(st.busy_s.mean() / run.end_s) if run.end_s > 0 else None,
            steps=int(st.counters.get("steps", 0)),
            occupancy_fraction=(float(st.occupied_s.mean() / run.end_s) if run.end_s > 0 else None),
        )
        for st in run.stages
    )

    def total(name: str) -> float:
        return float(sum(st.counters.get(name, 0.0) for st in run.stages))

    counts = Counts(
        preemptions=int(total("preemptions")),
        recomputed_loads=int(total("recomputed_loads")),
        recomputed_tokens=total("recomputed_tokens"),
        blocked_writes=int(total("blocked_writes")),
        dropped_writes=int(total("dropped_writes")),
        dropped_write_bytes=total("dropped_write_bytes"),
        swaps=int(total("swaps")),
        steps=int(total("steps")),
        unfinished=unfinished,
    )
    w = run.window_s
    times = (np.arange(end_w) + 0.5) * w
    series: list[ReplaySeries] = []
    for kind, key in ((ReplaySeriesKey.TTFT_CDF, "ttft_s"), (ReplaySeriesKey.TPOT_CDF, "tpot_s")):
        cdf = _cdf(kind, cols[key])
        if cdf is not None:
            series.append(cdf)
    waiting = sum(st.waiting for st in run.stages)[:end_w] / w
    running = sum(st.running for st in run.stages)[:end_w] / w
    series.append(ReplaySeries(ReplaySeriesKey.QUEUE, "waiting", *_downsample(times, waiting)))
    series.append(ReplaySeries(ReplaySeriesKey.RUNNING, "running", *_downsample(times, running)))
    for st in run.stages:
        for k, tier in enumerate(st.spec.tiers):
            rows = [i for i, r in enumerate(st.resources) if r.kind == "tier" and r.tier == k]
            label = f"{st.role.value}/{tier.name}"
            rd = st.read_bytes[rows, :end_w].sum(axis=0) / w
            wr = st.write_bytes[rows, :end_w].sum(axis=0) / w
            series.append(ReplaySeries(ReplaySeriesKey.TIER_READ, label, *_downsample(times, rd)))
            series.append(ReplaySeries(ReplaySeriesKey.TIER_WRITE, label, *_downsample(times, wr)))
        links = [i for i, r in enumerate(st.resources) if r.kind == "link"]
        if links:
            lk = st.read_bytes[links, :end_w].sum(axis=0) / w
            series.append(ReplaySeries(ReplaySeriesKey.LINK, "p-to-d", *_downsample(times, lk)))
    series += _busiest_minute(run)
    dep = run.deployment
    return ReplayResult(
        step_model={st.role.value: st.spec.step.source for st in run.stages},
        deployment=DeploymentSummary(
            dep.name, dep.topology, None if dep.link is None else dep.link.bytes_per_s
        ),
        stages=stages,
        requests=requests,
        stage_split=split,
        hit_ratio=hit_ratio,
        tiers=tuple(_tiers(run, end_w, input_total)),
        link=_link(run, end_w),
        counts=counts,
        slo=_slo(slo_targets or {}, cols),
        overload=_overload(run, unfinished, cols),
        window_s=w,
        drain_cap_s=run.drain_cap_s,
        span_s=run.end_s,
        series=tuple(series),
        notes=run.notes,
    )
