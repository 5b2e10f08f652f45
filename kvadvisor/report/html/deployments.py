"""The deployment verdicts section: every provider, the primary verdict, the cost-TTFT chart."""

from __future__ import annotations

from kvadvisor.report import chartspecs, deployments, fmt, tiervalue
from kvadvisor.report.html.chartviews import chart
from kvadvisor.report.html.view import Chart, Section, Table
from kvadvisor.results.report import AdviceReport

SECTION = ("deployments", "Deployments searched on the replay")


def answer_chart(report: AdviceReport) -> Chart | None:
    """The cost/latency chart (chartspecs.answer_spec) under a caption that reads it."""
    spec = chartspecs.answer_spec(report)
    if spec is None:
        return None
    caption = (
        "Every priced deployment the search replayed (the sample's figures), at the "
        "target's percentile: left of the dashed line meets the TTFT target."
    )
    for label in spec.point_labels:
        caption += f" Ringed: the {label.text.partition(':')[0]}."
    if any(line.label == chartspecs.ANOTHER_PICK for line in spec.lines):
        caption += " Stars: what each other provider would pick."
    caption += " Unpriced candidates have no cost to plot; the tables list them."
    return chart(spec, caption)


def _provider_table(vs: deployments.VerdictSet) -> Table:
    """One row per provider; a column no provider fills is left out.

    So a verdict with no deployment shows its closest miss's figures beside its sentence, not
    empty price columns.
    """
    headers, rows = deployments.provider_rows(vs)
    if len(rows) > 1 and all(r[1:] == rows[0][1:] for r in rows):
        # Every provider gave the same answer (no arrival times): say it once.
        rows = [[f"all ({', '.join(r[0] for r in rows)})", *rows[0][1:]]]
    keep = [i for i in range(len(headers)) if i < 3 or any(r[i] for r in rows)]
    return Table(
        "Verdict per provider",
        tuple(headers[i] for i in keep),
        tuple(tuple(r[i] or "—" for i in keep) for r in rows),
        note="—: no deployment of that provider, so nothing to price per token"
        if any(not r[i] for r in rows for i in keep)
        else "",
    )


def chart_missing(report: AdviceReport) -> str:
    """Why the page has no cost/latency chart, said where the chart would be."""
    vs = deployments.verdict_set(report)
    if vs is None:
        why = report.unavailable.get("recommendation") or "the advisor searched no deployments"
        return f"No cost against latency chart: no deployment was searched ({why})."
    return (
        "No cost against latency chart: no priced deployment was replayed, so there is no "
        "cost to plot against a latency (the verdict says why)."
    )


def deployments_section(report: AdviceReport) -> Section | None:
    """The verdicts and the runners-up; the chosen deployment in full under a closed heading.

    None when no search ran.
    """
    vs = deployments.verdict_set(report)
    if vs is None:
        return None
    targets = ", ".join(
        f"{deployments.target_name(k)} {fmt.duration(v)}" for k, v in vs.slo.targets.items()
    )
    lead = f"Every provider's answer to the SLO ({targets}), and what else the search weighed."
    notes = tuple(n for n in (deployments.sample_line(vs), *vs.notes) if n)
    tables = [_provider_table(vs)]
    more: list[Table] = []
    v = vs.primary_verdict
    if v is not None and v.chosen:
        if v.runners_up:
            tables.append(
                Table(
                    f"{v.provider}: runners-up, and why each lost",
                    *_pair(deployments.runner_rows(v)),
                    note=deployments.link_text(v),
                )
            )
        for s in v.stages:
            more.append(
                Table(
                    f"{v.provider}: {s.role}",
                    ("", ""),
                    tuple(deployments.stage_rows(s)),
                )
            )
            if worth := tiervalue.stage_rows(s):
                more.append(
                    Table(
                        f"{v.provider}: {s.role}, what each tier is worth", ("", ""), tuple(worth)
                    )
                )
        notes += tuple(deployments.verdict_notes(v))
    return Section(
        *SECTION,
        lead,
        tables=tuple(tables),
        more_title="The chosen deployment in full: its stages, tiers and KV mechanisms, what "
        "each tier is worth, how the search ran, where the targets come from"
        if more
        else "How the search ran and where the targets come from",
        more_tables=tuple(more),
        more_notes=(deployments.slo_line(vs), *notes),
    )


def _pair(
    headers_rows: tuple[list[str], list[list[str]]],
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    headers, rows = headers_rows
    return tuple(headers), tuple(tuple(r) for r in rows)
