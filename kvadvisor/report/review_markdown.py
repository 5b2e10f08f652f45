"""Markdown (a pull-request comment) and terminal text for a plan review; plans side by side."""

from __future__ import annotations

import html
from collections.abc import Iterable

from kvadvisor.report import fmt
from kvadvisor.report.markdown import code_span
from kvadvisor.results.common import IoRate, Utilization
from kvadvisor.results.review import PlanReview, ReviewReport, StageReview, TierReview
from kvadvisor.units import Unit
from kvadvisor.vocab import CheckStatus, Severity, Stage

ICON = {Severity.ERROR: "❌", Severity.WARNING: "⚠️", Severity.INFO: "ℹ️"}


def _size(nbytes: float | None) -> str:
    return "unbounded" if nbytes is None else fmt.size(nbytes)


def _rate(rate: float | None) -> str:
    return "–" if rate is None else fmt.bandwidth(rate)


def _pct(value: float | None) -> str:
    return "–" if value is None else fmt.percent(value)


def _triple(rate: IoRate | None) -> str:
    if rate is None:
        return "–"
    return " / ".join(
        _rate(v) for v in (rate.mean_bytes_per_s, rate.p99_bytes_per_s, rate.peak_bytes_per_s)
    )


def _util(u: Utilization) -> str:
    return " / ".join(_pct(v) for v in (u.mean, u.p99, u.peak))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _text(text: str) -> str:
    """Prose from plan files and checks: HTML shown as text (raw HTML renders in a comment)."""
    return _cell(html.escape(text, quote=False))


def verdict(plan: PlanReview) -> str:
    """One word and counts: 'fails' (errors), 'passes with warnings' or 'passes'."""
    errors = sum(c.severity is Severity.ERROR for c in plan.findings)
    warnings = sum(c.severity is Severity.WARNING for c in plan.findings)
    if errors:
        return f"fails: {errors} error(s), {warnings} warning(s)"
    if warnings:
        return f"passes with {warnings} warning(s)"
    return "passes"


def _stage(plan: PlanReview, stage: Stage) -> StageReview | None:
    return next((s for s in plan.stages if s.stage == stage), None)


def _prefill_hit(plan: PlanReview) -> float | None:
    stage = _stage(plan, Stage.PREFILL)
    if stage is None or not stage.tiers:
        return None
    return stage.tiers[-1].cumulative_hit_ratio_steady


def _stage_util(plan: PlanReview, which: Stage) -> Utilization | None:
    stage = _stage(plan, which)
    return None if stage is None else stage.utilization


def _tier_rows(tiers: Iterable[TierReview]) -> list[str]:
    rows = []
    for t in tiers:
        rows.append(
            f"| {t.stage} | {_text(t.tier)} ({t.kind}{', shared' if t.shared else ''}) | "
            f"{_size(t.capacity_bytes)} | {_pct(t.hit_ratio_steady)} | {_triple(t.write)} | "
            f"{_triple(t.read)} | {_rate(t.write_capability_bytes_per_s)} / "
            f"{_rate(t.read_capability_bytes_per_s)} | {_util(t.write_utilization)} | "
            f"{_util(t.read_utilization)} |"
        )
    return rows


class ReviewMarkdownRenderer:
    """Render a ReviewReport as Markdown fit for a pull-request comment."""

    name = "markdown"
    file_extension = ".md"

    def render(self, review: ReviewReport) -> str:
        """Return the Markdown text."""
        t = review.trace
        out = [
            "## kvadvisor review",
            "",
            f"Trace {code_span(t.path)}: {fmt.count(t.requests)} requests over "
            f"{fmt.duration(t.duration_s)}; demand in {fmt.duration(review.window_s)} windows; "
            f"steady state after the first {fmt.percent(review.warmup_fraction)} of requests.",
            "",
            "| | " + " | ".join(code_span(p.name) for p in review.plans) + " |",
            "|---|" + "---|" * len(review.plans),
            "| verdict | " + " | ".join(verdict(p) for p in review.plans) + " |",
            "| traffic scale | "
            + " | ".join(fmt.quantity(p.traffic_scale, Unit.MULTIPLE) for p in review.plans)
            + " |",
            "| prefix hit ratio, all tiers (steady) | "
            + " | ".join(_pct(_prefill_hit(p)) for p in review.plans)
            + " |",
        ]
        for stage in (Stage.PREFILL, Stage.DECODE):
            cells = [_stage_util(p, stage) for p in review.plans]
            if any(c is not None for c in cells):
                out.append(
                    f"| {stage} storage utilization (mean / p99 / peak) | "
                    + " | ".join("–" if c is None else _util(c) for c in cells)
                    + " |"
                )
        for note in review.notes:
            out += ["", f"> {_text(note)}"]
        for plan in review.plans:
            out += [
                "",
                f"### {code_span(plan.name)}: {verdict(plan)}",
                "",
                f"Plan file {code_span(plan.path)}.",
            ]
            own = [n for n in plan.notes if n not in review.notes]
            out += [f"- {_text(n)}" for n in own]
            if plan.findings:
                out += ["", "| | check | stage | finding |", "|---|---|---|---|"]
                out += [
                    f"| {ICON[c.severity]} {c.severity} | {c.code} {code_span(c.name)} | "
                    f"{c.stage} | {_text(c.message)} |"
                    for c in plan.findings
                ]
            tiers = [tr for s in plan.stages for tr in s.tiers]
            if tiers:
                out += [
                    "",
                    "| stage | tier | capacity | hit ratio (steady) | write mean / p99 / "
                    "peak | read mean / p99 / peak | capability W / R | write util | "
                    "read util |",
                    "|---|---|---|---|---|---|---|---|---|",
                ]
                out += _tier_rows(tiers)
            passed = [c for c in plan.checks if c.status is not CheckStatus.FAIL]
            if passed:
                out += ["", f"<details><summary>{len(passed)} other check(s)</summary>", ""]
                out += [
                    f"- {c.status}: {c.code} {code_span(c.name)} ({c.stage}): {_text(c.message)}"
                    for c in passed
                ]
                out += ["", "</details>"]
        return "\n".join(out) + "\n"


class ReviewTextRenderer:
    """A short terminal summary of a ReviewReport: the verdict and findings of each plan."""

    name = "text"
    file_extension = ".txt"

    def render(self, review: ReviewReport) -> str:
        """Return the plain text."""
        lines = [
            f"kvadvisor review of {review.trace.path} ({fmt.count(review.trace.requests)} requests)"
        ]
        for plan in review.plans:
            ran = sum(c.status is not CheckStatus.SKIP for c in plan.checks)
            lines.append(
                f"plan {plan.name}: {verdict(plan)} ({ran} checks run, "
                f"{len(plan.checks) - ran} skipped)"
            )
            lines += [f"  {c.severity:<7} {c.code} {c.stage:<7} {c.message}" for c in plan.findings]
        return "\n".join(lines) + "\n"
