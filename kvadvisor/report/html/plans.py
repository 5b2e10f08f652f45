"""The plan section: each deployment plan (`analyze --plan`) replayed against the trace."""

from __future__ import annotations

from kvadvisor.report import fmt
from kvadvisor.report.html.view import Section, Table
from kvadvisor.results.report import AdviceReport
from kvadvisor.vocab import Severity, Stage


def plan_section(report: AdviceReport) -> Section:
    """Deployment plans against the workload (`analyze --plan`): verdict, findings, tiers."""
    reviews = report.plan_reviews
    rows: list[tuple[str, str]] = []
    tables: list[Table] = []
    for plan in reviews:
        errors = sum(c.severity is Severity.ERROR for c in plan.findings)
        warnings = sum(c.severity is Severity.WARNING for c in plan.findings)
        rows.append(
            (
                f"plan {plan.name}",
                f"{errors} error(s), {warnings} warning(s) in {len(plan.checks)} checks "
                f"(traffic ×{fmt.number(plan.traffic_scale)}; {plan.path})",
            )
        )
        if plan.findings:
            tables.append(
                Table(
                    f"{plan.name}: findings",
                    ("severity", "check", "stage", "finding"),
                    tuple(
                        (c.severity, f"{c.code} {c.name}", c.stage, c.message)
                        for c in plan.findings
                    ),
                )
            )
        tables.append(
            Table(
                f"{plan.name}: tiers replayed at the plan's capacities",
                (
                    "stage",
                    "tier",
                    "capacity",
                    "hit ratio (steady)",
                    "write mean / p99 / peak",
                    "read mean / p99 / peak",
                    "write util p99",
                    "read util p99",
                ),
                tuple(
                    (
                        t.stage,
                        f"{t.tier} ({t.kind})",
                        "unbounded" if t.capacity_bytes is None else fmt.size(t.capacity_bytes),
                        "n/a" if t.stage == Stage.DECODE else fmt.percent(t.hit_ratio_steady),
                        " / ".join(
                            fmt.bandwidth(v)
                            for v in (
                                t.write.mean_bytes_per_s,
                                t.write.p99_bytes_per_s,
                                t.write.peak_bytes_per_s,
                            )
                        ),
                        "n/a"
                        if t.read is None
                        else " / ".join(
                            fmt.bandwidth(v)
                            for v in (
                                t.read.mean_bytes_per_s,
                                t.read.p99_bytes_per_s,
                                t.read.peak_bytes_per_s,
                            )
                        ),
                        fmt.percent(t.write_utilization.p99),
                        "n/a" if t.read is None else fmt.percent(t.read_utilization.p99),
                    )
                    for s in plan.stages
                    for t in s.tiers
                ),
                whole=(1,),
            )
        )
    lead = (
        "Each plan replayed against this trace: the hit ratio each tier serves at the plan's "
        "capacities, the write and read demand on it against its bandwidth, and engine lint "
        "(see kvadvisor docs review)."
    )
    return Section("plans", "Plan against the workload", lead, tuple(rows), (), tuple(tables))
