"""The replay's terminal summary: the figures a reader checks first, one line each.

One unit per quantity, named once on its line, so figures side by side compare at a glance
("TTFT (s): p50 0.81, p90 1.2, p99 3.4", not "812 ms ... 3.4 s"): latencies to the first token
and queueing in seconds, TPOT in milliseconds, GPU time in GPU-hours (a GPU busy for an
hour; the JSON keeps GPU-seconds), tier and link rates in GB/s (10^9 B/s).
"""

from __future__ import annotations

from kvadvisor.report import fmt
from kvadvisor.results.replay import Percentiles, ReplayReport

MS_PER_S = 1e3
S_PER_H = 3600.0
BYTES_PER_GB = 1e9


def _in(value: float | None, per: float) -> str:
    """``value`` divided by ``per`` (the unit the line names), three significant digits."""
    return "-" if value is None else fmt.number(value / per)


def _p(p: Percentiles | None, per: float = 1.0) -> str:
    """p50, p90 and p99 in the one unit the line names (``per``: the unit in base units)."""
    if p is None:
        return "-"
    return f"p50 {_in(p.p50, per)}, p90 {_in(p.p90, per)}, p99 {_in(p.p99, per)}"


def _gbps(value: float | None) -> str:
    return _in(value, BYTES_PER_GB)


class ReplayTextRenderer:
    """Plain text for a terminal (what `kvadvisor replay` prints)."""

    name = "text"
    file_extension = ".txt"

    def render(self, report: ReplayReport) -> str:
        """Return the summary, one fact per line."""
        res = report.replay
        r, s = res.requests, res.stage_split
        lines = [
            f"replay of {report.trace.path or 'arrays'} through {res.deployment.name} "
            f"({res.deployment.topology})",
        ]
        for st in res.stages:
            lines.append(
                f"  {st.role.value}: {st.instances} x {st.instance or st.gpu}, {st.replicas} "
                f"replicas of {st.gpus_per_replica} GPU(s), router {st.router}, busy "
                f"{fmt.percent(st.busy_fraction)} (executing steps), occupied "
                f"{fmt.percent(st.occupancy_fraction)} (holding requests)"
            )
        lines += [
            f"  requests: {fmt.count(r.completed)} of {fmt.count(r.count)} finished",
            f"  TTFT (s): {_p(r.ttft_s)}",
            f"  TPOT (ms): {_p(r.tpot_s, 1 / MS_PER_S)}",
            f"  queueing (s): {_p(r.queue_s)}",
            f"  GPU time (GPU-hours): prefill {_in(s.prefill_gpu_s, S_PER_H)}, decode "
            f"{_in(s.decode_gpu_s, S_PER_H)} (prefill share {fmt.percent(s.prefill_share)})",
        ]
        if res.hit_ratio is not None:
            lines.append(f"  prompt tokens from a cache: {fmt.percent(res.hit_ratio)}")
        for t in res.tiers:
            lines.append(
                f"  tier {t.stage.value}/{t.name} (GB/s per device): read mean "
                f"{_gbps(t.read_bytes_per_s.mean)}, p99 {_gbps(t.read_bytes_per_s.p99)}; write "
                f"mean {_gbps(t.write_bytes_per_s.mean)}, p99 {_gbps(t.write_bytes_per_s.p99)}; "
                f"utilization p99 {fmt.percent(t.utilization.p99)}"
            )
        if res.link is not None:
            lines.append(
                f"  P-to-D link (GB/s per decode instance): mean "
                f"{_gbps(res.link.bytes_per_s.mean)}, p99 {_gbps(res.link.bytes_per_s.p99)} "
                f"({fmt.percent(res.link.utilization.p99)} of the link at p99)"
            )
        c = res.counts
        lines.append(
            f"  preemptions {fmt.count(c.preemptions)}, loads recomputed "
            f"{fmt.count(c.recomputed_loads)}, writes blocked {fmt.count(c.blocked_writes)}, "
            f"dropped {fmt.count(c.dropped_writes)}"
        )
        for name, target in res.slo.targets.items():
            # In the unit of the quantity's own line: TPOT in ms, TTFT in s.
            metric, _, pct = name.removesuffix("_s").partition("_")
            per, unit = (1 / MS_PER_S, "ms") if metric == "tpot" else (1.0, "s")
            lines.append(
                f"  SLO {metric.upper()} {pct} ≤ {_in(target, per)} {unit}: "
                f"{'met' if res.slo.met.get(name) else 'missed'} "
                f"({fmt.percent(res.slo.attainment.get(name))} of requests within)"
            )
        verdict = "OVERLOADED: " if res.overload.overloaded else ""
        lines.append(f"  {verdict}{res.overload.reason}")
        return "\n".join(lines) + "\n"
