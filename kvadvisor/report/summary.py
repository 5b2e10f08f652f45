"""What every renderer says first: the verdict per stage, the key numbers, the findings.

Built once from the advice model as plain rows of formatted text, so the terminal, Markdown
and HTML reports agree word for word on the numbers they share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvadvisor.report import deployments, fmt, margin, tiervalue
from kvadvisor.results.report import AdviceReport, Finding, Requirement, StageRecommendation
from kvadvisor.results.verdict import VerdictSet
from kvadvisor.units import Unit, plural
from kvadvisor.vocab import TIER_ROLE_WORDS, Severity, Stage, Topology

STAGES = (Stage.PREFILL, Stage.DECODE)
# Severity order for display, most severe first (0: error).
SEVERITY_RANK = {s: len(Severity) - 1 - s.rank for s in Severity}


@dataclass(frozen=True)
class StageSummary:
    """One stage's recommended configuration as (label, formatted value) pairs."""

    stage: Stage
    items: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class KeyNumber:
    """One headline number: what it is, its formatted value, and a short qualifier."""

    name: str
    value: str
    note: str = ""


@dataclass(frozen=True)
class HeadlineNumber:
    """The one number a reader sees first, and the sentence it belongs to."""

    value: str
    text: str


BASIS_WORDS = {
    "session": "by the trace's session ids",
    "continuation": "conversations inferred from prompts that extend an earlier one",
}


def why_missing(report: AdviceReport, section: str) -> str:
    """'not measured: <reason>' for a section the analysis left empty."""
    reason = report.unavailable.get(section, f"this analysis did not produce the {section}")
    return f"{fmt.NOT_MEASURED}: {reason}"


def _tier_text(tier: Any) -> str:
    # The capacity is the tier's total for one instance (all its devices together), or the
    # whole pool's when shared: say which, and never as "× devices", which reads per device.
    capacity = fmt.quantity(tier.capacity_gib, Unit.GIB)
    where = "shared by all instances" if tier.shared else "per instance"
    devices = f" on {plural(tier.devices, 'device')}" if tier.devices and tier.devices > 1 else ""
    return f"{tier.name} ({TIER_ROLE_WORDS[tier.role]}; {capacity} {where}{devices})"


def _required_text(req: Requirement) -> str:
    parts = [
        f"{what} {fmt.quantity(val, unit)}"
        for what, val, unit in (
            ("write", req.write_bytes_per_s, Unit.BYTES_PER_S),
            ("read", req.read_bytes_per_s, Unit.BYTES_PER_S),
            ("write", req.write_iops, Unit.IOPS),
            ("read", req.read_iops, Unit.IOPS),
            ("capacity", req.capacity_gib, Unit.GIB),
        )
        if val is not None
    ]
    return ", ".join(parts) or fmt.NOT_MEASURED + " (see notes)"


def _utilization_text(u: Any) -> str:
    if u.mean is None and u.p99 is None and u.peak is None:
        return f"{fmt.NOT_MEASURED} ({u.basis})" if u.basis else fmt.NOT_MEASURED
    text = f"mean {fmt.percent(u.mean)}, p99 {fmt.percent(u.p99)}, peak {fmt.percent(u.peak)}"
    return f"{text} ({u.basis})" if u.basis else text


# Fields of a stage recommendation in the verdict, with their wording (alternatives and notes
# have sections of their own).
_STAGE_FIELDS = {
    "instance": ("instance", lambda v: v or "none chosen"),
    "storage": ("storage", lambda v: v or "none"),
    "tiers": ("KV tiers", lambda v: "; ".join(_tier_text(t) for t in v)),
    "required": ("must sustain per instance", _required_text),
    "utilization": ("utilization", _utilization_text),
    "retention_s": ("retention", lambda v: fmt.duration(v)),
    "chunk_tokens": ("chunk size", lambda v: fmt.tokens(v)),
    "instance_count": ("instances", fmt.count),
    "gpu": ("GPU", str),
}


def stage_items(rec: StageRecommendation) -> tuple[tuple[str, str], ...]:
    """A stage recommendation as (label, text) pairs; empty optional fields are left out."""
    items = []
    for f in dataclasses.fields(rec):
        if f.name not in _STAGE_FIELDS:
            continue
        val = getattr(rec, f.name)
        if val is None and f.name not in ("instance", "storage"):
            continue
        if isinstance(val, (list, tuple, dict)) and not val:
            continue
        name, text = _STAGE_FIELDS[f.name]
        items.append((name, text(val)))
    return tuple(items)


def stage_notes(rec: StageRecommendation) -> tuple[str, ...]:
    """How a stage's figures were derived and what was assumed (the advisor's own words)."""
    derivation = rec.required.derivation if rec.required is not None else ()
    return tuple(derivation) + tuple(rec.notes)


def verdicts(report: AdviceReport) -> tuple[StageSummary, ...]:
    """The verdict per stage, prefill first (empty when there is no recommendation)."""
    rec = report.recommendation
    if rec is None or (rec.verdict is not None and nothing_recommended(rec.verdict)):
        return ()  # nothing recommended: the headline says why, the deployments what is closest
    return tuple(
        StageSummary(stage, stage_items(report.recommendation.stage(stage))) for stage in STAGES
    )


def verdict_table(verdicts: Sequence[StageSummary]) -> tuple[list[str], list[list[str]]]:
    """The stages side by side: headers ("", stage...) and one row per label any stage has."""
    names: list[str] = []
    for v in verdicts:
        names += [label for label, _ in v.items if label not in names]
    rows = [[n, *(dict(v.items).get(n, "") for v in verdicts)] for n in names]
    return ["", *(v.stage for v in verdicts)], rows


def stage_needs(report: AdviceReport, stage: Stage) -> tuple[tuple[str, str], ...]:
    """What the traffic demands of one stage, measured: its GPU-time share and its KV I/O.

    Prefill writes the KV of prompt tokens that missed the cache and reads the KV of prefix
    hits back before it starts (DESIGN.md's write and read demand): both are prefill's. Decode
    reads the KV of its running requests from GPU memory, so it asks nothing of storage.
    """
    s, io, pc = report.stage_split, report.io, report.prefix_cache
    share = None
    if s is not None:
        share = s.prefill_share if stage == Stage.PREFILL else 1.0 - s.prefill_share
    rows = [("share of GPU time", fmt.percent(share) + (f" ({s.source})" if s else ""))]
    if stage == Stage.DECODE:
        rows.append(("KV storage I/O", "none: each step reads its KV from GPU memory"))
        return tuple(rows)
    rows.append(("prefix hit ratio", fmt.percent(pc.hit_ratio.all) if pc else fmt.NOT_MEASURED))
    for rate, what in (
        (io.write if io else None, "KV writes (misses)"),
        (io.read if io else None, "KV reads (prefix hits)"),
    ):
        if rate is None:
            rows.append((what, fmt.NOT_MEASURED))
        else:
            rows.append(
                (
                    what,
                    f"mean {fmt.bandwidth(rate.mean_bytes_per_s)}, "
                    f"p99 {fmt.bandwidth(rate.p99_bytes_per_s)}, "
                    f"peak {fmt.bandwidth(rate.peak_bytes_per_s)}",
                )
            )
    return tuple(rows)


def nothing_recommended(vs: VerdictSet) -> bool:
    """Whether the search ran and no provider's primary verdict chose a deployment."""
    return not any(v.chosen and v.provider == vs.primary for v in vs.verdicts)


def _kv_tiers(storage: str | None) -> str:
    """A stage's KV tiers in the headline, the GPU pool first: it is the first tier."""
    if storage:
        return f" with KV in GPU memory and {storage}"
    return " with KV in GPU memory only (no host or disk tier)"


def headline(report: AdviceReport) -> str:
    """One sentence a reader gets the recommendation from."""
    rec = report.recommendation
    if rec is None:
        return f"No recommendation: {report.unavailable.get('recommendation', 'none was made')}."
    vs = rec.verdict
    if vs is not None and nothing_recommended(vs):
        # The search ran and nothing met the targets: say that, not "no instance chosen" twice.
        targets = ", ".join(
            f"{k.split('_')[0].upper()} {k.split('_')[1]} {fmt.quantity(v, Unit.SECONDS)}"
            for k, v in vs.slo.targets.items()
        )
        near = vs.verdict(vs.closest) if vs.closest else None
        if near is not None and near.closest is not None:
            what = deployments.closest_text(near.closest).removeprefix("closest: ")
            return (
                f"No deployment meets the SLO ({targets}): {vs.primary_why}. Nearest: "
                f"{near.provider} {what}."
            )
        if not any(v.closest for v in vs.verdicts):
            # Nothing was replayed (no arrival times, no catalog model): looser targets or
            # more instance types cannot help; the reason says what would.
            return f"No deployment recommended: {vs.primary_why}."
        return (
            f"No deployment recommended: {vs.primary_why} ({targets}). The deployments below "
            "give each provider's closest and what it reaches: give more instance types, or "
            "targets at least as loose as they reach."
        )
    # Without a verdict (no search ran), or a verdict that still left both stages empty.
    stages: list[StageRecommendation] = [rec.stage(stage) for stage in STAGES]
    if not any(r.instance for r in stages):
        # "Recommended prefill: no instance chosen with no KV storage tier; ..." recommended
        # nothing in many words: say so, with the advisor's reason.
        why = next(
            (
                n.split(": ", 1)[1]
                for r in stages
                for n in r.notes
                if n.startswith("no deployment: ")
            ),
            "no instance met the constraints (see the notes)",
        )
        return f"No deployment recommended: {why}."
    if all(r.topology is Topology.AGGREGATED for r in stages):
        # One fleet serves both stages: "prefill: 4 × X; decode: 4 × X" read as eight instances.
        r = stages[0]
        count = f"{r.instance_count} × " if r.instance_count and r.instance_count > 1 else ""
        storage = _kv_tiers(r.storage)
        return (
            "Recommended (aggregated, prefill and decode on the same instances): "
            f"{count}{r.instance}{storage}."
        )
    parts = []
    for stage in STAGES:
        r: StageRecommendation = rec.stage(stage)
        instance = r.instance or "no instance chosen"
        count = r.instance_count
        if r.instance and count and count > 1:
            instance = f"{count} × {instance}"
        storage = _kv_tiers(r.storage)
        parts.append(f"{stage}: {instance}{storage}")
    return "Recommended " + "; ".join(parts) + "."


def targets_line(report: AdviceReport) -> str:
    """The targets the verdict is held to, which default applied, and any assumed model."""
    rec = report.recommendation
    vs = rec.verdict if rec is not None else None
    if vs is None:
        return ""
    targets = ", ".join(
        f"{deployments.target_name(k)} {fmt.quantity(v, Unit.SECONDS)}"
        for k, v in vs.slo.targets.items()
    )
    why = vs.slo.rule or vs.slo.source
    m = report.model
    model = f"; model {m.display_name or m.name} assumed (no --model)" if m and m.assumed else ""
    return f"targets: {targets} ({why}){model}"


def verdict_lines(report: AdviceReport) -> tuple[str, ...]:
    """The verdict block under the headline: what each KV tier is worth, margin, targets.

    The answer first: the tiers' worth in dollars and the margin on each target come before
    which default set the targets (the README's run shows all three in its first ten lines).
    """
    lines = (
        *tiervalue.lines(report),
        margin.margin_line(report),
        margin.idle_line(report),
        targets_line(report),
    )
    return tuple(line for line in lines if line)


def span_text(t: Any) -> str:
    """The span of the arrivals ("over 58.9 min"), or why there is none ("over 0 s" misleads).

    A benchmark result without start times has every request of a run at the run's start.
    """
    if t.duration_s and t.duration_s > 0:
        return f"over {fmt.duration(t.duration_s)}"
    return "arrival times unknown" if t.requests > 1 else "a single arrival"


def requests_text(t: Any) -> str:
    """The requests and their span: "12,031 requests over 58.9 min", "1 request"."""
    if t.requests == 1:
        return "1 request"
    span = span_text(t)
    return f"{plural(t.requests, 'request')}{' ' if span.startswith('over') else ', '}{span}"


def headline_number(report: AdviceReport) -> HeadlineNumber:
    """The reusable share of prompt tokens when it was measured, else the prefill share."""
    t = report.trace
    pc = report.prefix_cache
    over = requests_text(t)
    if pc is not None and pc.hit_ratio.all is not None:
        return HeadlineNumber(
            fmt.percent(pc.hit_ratio.all),
            "of prompt tokens repeat a prefix an earlier request sent: loaded from a KV cache "
            f"instead of recomputed, given room for it ({over})",
        )
    s = report.stage_split
    if s is not None:
        return HeadlineNumber(
            fmt.percent(s.prefill_share), f"of GPU time goes to prefill ({s.source}; {over})"
        )
    number, _, rest = requests_text(t).partition(" ")
    return HeadlineNumber(number, rest)


def length_text(stats: Any) -> tuple[str, str]:
    """(mean, "p50 …, p90 …, p99 …, max … tokens") of a length summary."""
    if stats is None or stats.mean_tokens is None:
        return fmt.NOT_MEASURED, ""
    return (
        f"mean {fmt.count(stats.mean_tokens)}",
        f"p50 {fmt.count(stats.p50_tokens)}, p90 {fmt.count(stats.p90_tokens)}, "
        f"p99 {fmt.count(stats.p99_tokens)}, max {fmt.count(stats.max_tokens)} tokens",
    )


def key_numbers(report: AdviceReport) -> tuple[KeyNumber, ...]:
    """The numbers a reviewer needs beside the verdict (missing ones say why)."""
    t = report.trace

    def not_measured(name: str, section: str) -> KeyNumber:
        return KeyNumber(name, fmt.NOT_MEASURED, report.unavailable.get(section, ""))

    rows = [
        KeyNumber(
            "requests",
            fmt.count(t.requests),
            span_text(t)
            + (f", {fmt.number(t.arrival_rate_per_s)}/s" if t.arrival_rate_per_s else ""),
        ),
        KeyNumber(
            "tokens, whole trace",
            f"{fmt.tokens(t.input_tokens_total)} in",
            f"{fmt.tokens(t.output_tokens_total)} out",
        ),
    ]
    for name, stats in (
        ("prompt length", t.input_tokens_stats),
        ("output length", t.output_tokens_stats),
    ):
        if stats is not None:
            rows.append(KeyNumber(name, *length_text(stats)))
    m = report.model
    rows.append(
        KeyNumber(
            "KV per token",
            fmt.size(m.kv_bytes_per_token),
            # A default the user did not choose must be visible where the number is.
            f"{m.name} (assumed: no --model)" if m.assumed else m.name,
        )
        if m
        else not_measured("KV per token", "model")
    )
    s = report.stage_split
    rows.append(
        KeyNumber(
            "prefill share of GPU time",
            fmt.percent(s.prefill_share),
            f"{s.source}; GPU time over the trace: prefill {fmt.duration(s.prefill_s)}, decode "
            f"{fmt.duration(s.decode_s)}",
        )
        if s
        else not_measured("stage split", "stage_split")
    )
    pc = report.prefix_cache
    if pc is not None and pc.hit_ratio.all is None and pc.note:
        # No block hashes: the section is there to say why ("steady state not measured;
        # unbounded cache" read as if a cache had been simulated).
        rows.append(KeyNumber("prefix hit ratio", fmt.NOT_MEASURED, pc.note))
    else:
        rows.append(
            KeyNumber(
                "prefix hit ratio",
                fmt.percent(pc.hit_ratio.all),
                f"steady state {fmt.percent(pc.hit_ratio.steady)}; unbounded cache",
            )
            if pc
            else not_measured("prefix hit ratio", "prefix_cache")
        )
    conv = pc.conversations if pc else None
    if conv is not None:
        rows.append(
            KeyNumber(
                "reuse within conversations",
                fmt.percent(conv.within_share_all),
                f"across conversations {fmt.percent(conv.across_share_all)} of prompt tokens; "
                f"{BASIS_WORDS.get(conv.basis, conv.basis)}",
            )
        )
    sharing = pc.sharing if pc else None
    if sharing is not None and sharing.top_by_volume:
        top = sharing.top_by_volume[0]
        rows.append(
            KeyNumber(
                "most reused prefix",
                f"{fmt.tokens(top.prefix_tokens)}, {fmt.count(top.requests)} requests",
                f"{fmt.percent(top.reusable_share)} of prompt tokens; "
                f"{fmt.count(sharing.groups)} shared prefixes in all",
            )
        )
    io = report.io
    if io:
        # The io section places each request's KV at its arrival plus a modelled TTFT, with no
        # fleet to bound it (docs/stage-profiler.md); the replayed rates per node are the
        # verdict's. Say so beside the figure, so no one sizes storage from it.
        fleet = "; the replayed rates per node are in the verdict" if report.replay else ""
        for what, rate in (("KV write demand", io.write), ("KV read demand", io.read)):
            rows.append(
                KeyNumber(
                    f"{what}, open loop",
                    f"mean {fmt.bandwidth(rate.mean_bytes_per_s)}",
                    f"p99 {fmt.bandwidth(rate.p99_bytes_per_s)}, "
                    f"peak {fmt.bandwidth(rate.peak_bytes_per_s)} ({fmt.duration(io.window_s)} "
                    f"windows; not bounded by a fleet{fleet})",
                )
            )
    else:
        rows.append(not_measured("KV I/O demand", "io"))
    return tuple(rows)


def sorted_findings(report: AdviceReport) -> tuple[Finding, ...]:
    """Findings, most severe first, then by stage and code (stable for golden files)."""
    return tuple(
        sorted(
            report.findings,
            key=lambda f: (SEVERITY_RANK.get(f.severity, 9), f.stage, f.code),
        )
    )


def evidence_items(finding: Finding) -> tuple[tuple[str, str], ...]:
    """A finding's evidence as (fact, formatted value) pairs, in the order given."""
    return tuple((k, v.text) for k, v in finding.evidence.items())
