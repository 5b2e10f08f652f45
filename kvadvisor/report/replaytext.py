"""The replay's terminal summary: the figures a reader checks first, one line each."""

from __future__ import annotations

from kvadvisor.report import fmt
from kvadvisor.results.replay import Percentiles, ReplayReport


def _p(p: Percentiles | None) -> str:
    if p is None:
        return "-"
    return f"p50 {fmt.duration(p.p50)}, p90 {fmt.duration(p.p90)}, p99 {fmt.duration(p.p99)}"


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
            f"  TTFT: {_p(r.ttft_s)}",
            f"  TPOT: {_p(r.tpot_s)}",
            f"  queueing: {_p(r.queue_s)}",
            f"  GPU time: prefill {fmt.duration(s.prefill_gpu_s)}, decode "
            f"{fmt.duration(s.decode_gpu_s)} (GPU-seconds; prefill share "
            f"{fmt.percent(s.prefill_share)})",
        ]
        if res.hit_ratio is not None:
            lines.append(f"  prompt tokens from a cache: {fmt.percent(res.hit_ratio)}")
        for t in res.tiers:
            lines.append(
                f"  tier {t.stage.value}/{t.name}: read {fmt.bandwidth(t.read_bytes_per_s.mean)} "
                f"mean, {fmt.bandwidth(t.read_bytes_per_s.p99)} p99; write "
                f"{fmt.bandwidth(t.write_bytes_per_s.mean)} mean, "
                f"{fmt.bandwidth(t.write_bytes_per_s.p99)} p99 per device; utilization p99 "
                f"{fmt.percent(t.utilization.p99)}"
            )
        if res.link is not None:
            lines.append(
                f"  P-to-D link: {fmt.bandwidth(res.link.bytes_per_s.mean)} mean, "
                f"{fmt.bandwidth(res.link.bytes_per_s.p99)} p99 per decode instance "
                f"({fmt.percent(res.link.utilization.p99)} at p99)"
            )
        c = res.counts
        lines.append(
            f"  preemptions {fmt.count(c.preemptions)}, loads recomputed "
            f"{fmt.count(c.recomputed_loads)}, writes blocked {fmt.count(c.blocked_writes)}, "
            f"dropped {fmt.count(c.dropped_writes)}"
        )
        for name, target in res.slo.targets.items():
            lines.append(
                f"  SLO {name} {fmt.duration(target)}: "
                f"{'met' if res.slo.met.get(name) else 'missed'} "
                f"({fmt.percent(res.slo.attainment.get(name))} of requests within)"
            )
        verdict = "OVERLOADED: " if res.overload.overloaded else ""
        lines.append(f"  {verdict}{res.overload.reason}")
        return "\n".join(lines) + "\n"
