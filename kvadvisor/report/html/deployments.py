"""The deployment verdicts section: every provider, the primary verdict, the cost-TTFT chart."""

from __future__ import annotations

from markupsafe import Markup

from kvadvisor.report import deployments, tiervalue
from kvadvisor.report.charts import ChartSpec, Line, render_svg
from kvadvisor.report.html.view import Chart, Section, Table
from kvadvisor.results.report import AdviceReport

SECTION = ("deployments", "Deployments searched on the replay")


def _chart(points: list[deployments.ChartPoint]) -> Chart | None:
    """$/h against TTFT p90 of every priced candidate replayed, one colour per provider."""
    if not points:
        return None
    lines = []
    for provider in dict.fromkeys(p.provider for p in points):
        mine = sorted((p for p in points if p.provider == provider), key=lambda p: p.usd_per_hour)
        lines.append(
            Line(
                provider,
                tuple(p.ttft_p90_s for p in mine),
                tuple(p.usd_per_hour for p in mine),
                "points",
            )
        )
    chosen = [p for p in points if p.chosen]
    if chosen:
        lines.append(
            Line(
                "chosen",
                tuple(p.ttft_p90_s for p in chosen),
                tuple(p.usd_per_hour for p in chosen),
                "star",
            )
        )
    spec = ChartSpec(
        key="deployments-cost-ttft",
        title="Candidates replayed: cost against TTFT p90",
        x_title="TTFT p90 (s)",
        y_title="on-demand cost ($/h)",
        lines=tuple(lines),
    )
    caption = (
        "Every priced deployment the search replayed (the sample's figures); the stars are "
        "the chosen ones. Unpriced candidates have no cost to plot and are listed in the tables."
    )
    return Chart(spec.key, caption, Markup(render_svg(spec)))


def deployments_section(report: AdviceReport) -> Section | None:
    """The verdicts, or None when no search ran."""
    vs = deployments.verdict_set(report)
    if vs is None:
        return None
    lead = deployments.slo_line(vs)
    notes = tuple(n for n in (deployments.sample_line(vs), *vs.notes) if n)
    tables = [Table("Verdict per provider", *_pair(deployments.provider_rows(vs)))]
    v = vs.primary_verdict
    if v is not None and v.chosen:
        for s in v.stages:
            tables.append(
                Table(
                    f"{v.provider}: {s.role}",
                    ("", ""),
                    tuple(deployments.stage_rows(s)),
                )
            )
            if worth := tiervalue.stage_rows(s):
                tables.append(
                    Table(
                        f"{v.provider}: {s.role}, what each tier is worth", ("", ""), tuple(worth)
                    )
                )
        if v.runners_up:
            tables.append(
                Table(
                    f"{v.provider}: runners-up, and why each lost",
                    *_pair(deployments.runner_rows(v)),
                    note=deployments.link_text(v),
                )
            )
        notes += tuple(deployments.verdict_notes(v))
    chart = _chart(deployments.chart_points(vs))
    return Section(
        *SECTION,
        lead,
        charts=() if chart is None else (chart,),
        tables=tuple(tables),
        notes=notes,
    )


def _pair(
    headers_rows: tuple[list[str], list[list[str]]],
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    headers, rows = headers_rows
    return tuple(headers), tuple(tuple(r) for r in rows)
