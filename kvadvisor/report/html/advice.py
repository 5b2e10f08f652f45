"""The advice sections: every rule fired or quiet, and the alternatives ranked."""

from __future__ import annotations

from kvadvisor.report import fmt, summary
from kvadvisor.report.html.view import Section, Table
from kvadvisor.results.report import AdviceReport

RULES = ("rules", "Rules fired and rules quiet")
# How each kind of alternative is titled in its own table.
ALTERNATIVE_KINDS = {"instance": "GPU instances", "storage": "storage"}
ALTERNATIVES = ("alternatives", "Alternatives compared")


def _no_recommendation(report: AdviceReport, section: tuple[str, str]) -> Section:
    return Section(*section, missing=summary.why_missing(report, "recommendation"))


def rules_section(report: AdviceReport) -> Section:
    """Every rule evaluated: those that fired, those that stayed quiet, and why."""
    rec = report.recommendation
    if rec is None:
        return _no_recommendation(report, RULES)
    fired = [r for r in rec.rules if r.fired]
    quiet = [r for r in rec.rules if not r.fired]
    unevaluated = [r for r in quiet if r.reason.startswith("not evaluated")]
    lead = (
        f"{len(rec.rules)} rules evaluated: {len(fired)} fired, {len(quiet)} stayed quiet"
        + (
            f" ({len(unevaluated)} of them because a fact they need was not measured)"
            if unevaluated
            else ""
        )
        + "."
    )
    tables = [
        Table(title, ("code", "rule", "why"), tuple((r.code, r.name, r.reason) for r in rows))
        for title, rows in (("Fired", fired), ("Quiet", quiet))
        if rows
    ]
    if rec.facts:
        facts = tuple((name, fmt.fact(fact)) for name, fact in sorted(rec.facts.items()))
        tables.append(Table("Facts the rules saw", ("fact", "value"), facts))
    return Section(*RULES, lead, tables=tuple(tables))


def alternatives_section(report: AdviceReport) -> Section:
    """The ranked alternatives per stage, with the reason for each rank."""
    rec = report.recommendation
    if rec is None:
        return _no_recommendation(report, ALTERNATIVES)
    tables = []
    for stage in summary.STAGES:
        alts = rec.stage(stage).alternatives
        # One table per kind of choice: instances ranked against instances, storage against
        # storage (a shared rank column across kinds read as one ranking).
        for kind in sorted({a.kind for a in alts}, key=lambda k: (k != "instance", k)):
            ranked = sorted((a for a in alts if a.kind == kind), key=lambda a: a.rank)
            tables.append(
                Table(
                    f"{stage.capitalize()}: {ALTERNATIVE_KINDS.get(kind, kind)}",
                    ("rank", "option", "feasible", "reason"),
                    tuple((str(a.rank), a.name, fmt.yes_no(a.feasible), a.reason) for a in ranked),
                )
            )
    if not tables:
        return Section(
            *ALTERNATIVES,
            missing=f"{fmt.NOT_MEASURED}: the advisor ranked no alternatives for this traffic",
        )
    lead = (
        "The options the advisor ranked for each stage; the first is the recommendation. "
        + ("One storage specification was given for both stages." if rec.shared_storage else "")
    ).strip()
    return Section(*ALTERNATIVES, lead, tables=tuple(tables))
