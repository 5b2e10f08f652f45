"""The deployment verdicts as rows of formatted text, shared by every renderer.

Per provider: the verdict in one row (deployment, $/h, $/M tokens, the SLO attained); for the
primary verdict: its stages, their tiers and mechanisms, the P-to-D link, the runners-up and
why each lost; and the points of the cost-against-TTFT chart. Built from the verdict model
only, so the terminal, Markdown and HTML reports say the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvadvisor.report import fmt
from kvadvisor.results.report import AdviceReport
from kvadvisor.results.verdict import (
    CandidateSummary,
    ClosestMiss,
    Mechanism,
    StageVerdict,
    TierChoice,
    Verdict,
    VerdictSet,
)
from kvadvisor.units import Unit, plural

STATUS_WORDS = {
    "chosen": "chosen",
    "no_deployment_meets_slo": "no deployment meets the SLO",
    "abstained": "abstains",
}


@dataclass(frozen=True)
class ChartPoint:
    """One replayed candidate on the cost-against-TTFT chart (TTFT at the target's percentile)."""

    provider: str
    label: str
    usd_per_hour: float
    ttft_s: float
    chosen: bool
    closest: bool = False  # the provider's closest miss, when nothing met the targets


def ttft_target(vs: VerdictSet) -> tuple[str, float | None]:
    """The TTFT percentile the chart plots ("p99") and its target (None: no TTFT target)."""
    for key, value in vs.slo.targets.items():
        if key.startswith("ttft_p"):
            return key.split("_")[1], value
    return "p90", None


def verdict_set(report: AdviceReport) -> VerdictSet | None:
    """The report's deployment verdicts (None when no search ran)."""
    rec = report.recommendation
    return None if rec is None else rec.verdict


def money(usd: float | None, per: str = "/h") -> str:
    """Dollars, or why there are none."""
    return "unpriced" if usd is None else fmt.quantity(usd, Unit.USD) + per


def _seconds(x: float | None) -> str:
    return fmt.quantity(x, Unit.SECONDS)


def slo_line(vs: VerdictSet) -> str:
    """The targets and where they come from."""
    targets = ", ".join(f"{k.removesuffix('_s')} {_seconds(v)}" for k, v in vs.slo.targets.items())
    return f"SLO: {targets} ({vs.slo.source})"


def sample_line(vs: VerdictSet) -> str:
    """What the search replayed, and the sample's error against the check set."""
    s = vs.sample
    if s is None:
        return ""
    text = (
        f"replayed: {s.how}, {fmt.count(s.requests)} of {fmt.count(s.trace_requests)} requests "
        f"({fmt.duration(s.span_s)} of arrivals); {plural(vs.replayed, 'replay')}, "
        f"{plural(vs.enumerated, 'configuration')} enumerated"
    )
    if s.error:
        # Signed: an error over the whole trace reads "+3.0%" or "-3.0%", never "3.0%".
        errs = ", ".join(
            f"{k.removesuffix('_s')} {'+' if v > 0 else ''}{fmt.percent(v)}"
            for k, v in s.error.items()
        )
        text += f"; sample error against {s.error_basis}: {errs}"
    return text


def target_name(key: str) -> str:
    """A target key as read: ``ttft_p99_s`` -> "TTFT p99"."""
    metric, _, rest = key.removesuffix("_s").partition("_")
    return f"{metric.upper()} {rest}"


def closest_text(c: ClosestMiss) -> str:
    """A closest miss in one sentence: what, its price, what it reaches, the --slo it meets."""
    cost = money(c.usd_per_hour) if c.usd_per_hour is not None else f"{c.gpus} GPUs, unpriced"
    if c.usd_per_hour is not None and c.price_kind not in ("", "on_demand"):
        cost += f" ({c.price_kind.replace('_', ' ')} rate)"
    figures = ", ".join(
        f"{target_name(k)} {_seconds(v) if v is not None else 'unbounded'}"
        for k, v in c.reached.items()
    )
    text = f"closest: {c.label}, {cost}, reaches {figures} on {c.basis}"
    if c.slo_text:
        kept = f" (keeping the {fmt.percent(c.headroom)} headroom)" if c.headroom > 0 else ""
        return f"{text}; --slo {c.slo_text} would accept it{kept}"
    return f"{text}; no looser target accepts it ({c.why_not})"


def deployment_text(v: Verdict) -> str:
    """The chosen fleet in one line, e.g. "aggregated: 4 × p6-b200.48xlarge (TP 8 × 1)"."""
    if not v.stages:
        return "none"
    parts = [
        f"{s.role} {s.instances} × {s.instance} (TP {s.tp} × {s.replicas_per_instance})"
        for s in v.stages
    ]
    return f"{v.topology}: " + " + ".join(parts)


def provider_rows(vs: VerdictSet) -> tuple[list[str], list[list[str]]]:
    """One row per provider: status, deployment, cost, SLO attained."""
    headers = [
        "provider",
        "verdict",
        "deployment",
        "$/h",
        "$/M in",
        "$/M out",
        "TTFT p90/p99",
        "TPOT p90/p99",
    ]
    rows = []
    for v in vs.verdicts:
        slo = v.slo
        c = v.closest
        if not v.chosen and c is not None:
            # No dead end: the closest deployment is priced, with the targets it would meet.
            rows.append(
                [
                    v.provider + (" (closest)" if v.provider == vs.closest else ""),
                    STATUS_WORDS.get(v.status.value, v.status.value),
                    f"{v.reason}; {closest_text(c)}",
                    money(c.usd_per_hour) if c.usd_per_hour is not None else "unpriced",
                    "",
                    "",
                    _reached(c, "ttft"),
                    _reached(c, "tpot"),
                ]
            )
            continue
        rows.append(
            [
                v.provider + (" (primary)" if v.provider == vs.primary else ""),
                STATUS_WORDS.get(v.status.value, v.status.value),
                deployment_text(v) if v.chosen else v.reason,
                money(v.usd_per_hour) if v.chosen else "",
                money(v.usd_per_m_input_tokens, "") if v.chosen else "",
                money(v.usd_per_m_output_tokens, "") if v.chosen else "",
                f"{_seconds(slo.ttft_p90_s)} / {_seconds(slo.ttft_p99_s)}" if slo else "",
                f"{_seconds(slo.tpot_p90_s)} / {_seconds(slo.tpot_p99_s)}" if slo else "",
            ]
        )
    return headers, rows


def _reached(c: ClosestMiss, metric: str) -> str:
    """The closest miss's figures of one metric ("2.32 s (p99)"), as the targets name them."""
    return ", ".join(
        f"{_seconds(v) if v is not None else 'unbounded'} ({k.split('_')[1]})"
        for k, v in c.reached.items()
        if k.startswith(metric + "_")
    )


def provider_pairs(vs: VerdictSet) -> list[list[str]]:
    """The provider rows as (provider, one sentence): for narrow layouts (the terminal)."""
    _, rows = provider_rows(vs)
    out = []
    for row in rows:
        # A reason that already says there is no deployment needs no status before it.
        parts = [row[2]] if row[2].startswith("no deployment") else [row[1], row[2]]
        if row[3] and not row[4]:
            pass  # a closest miss: its sentence names its price and figures already
        elif row[3]:
            parts += [
                row[3],
                f"{row[4]} per million input tokens, {row[5]} per million output tokens",
                f"TTFT p90/p99 {row[6]}, TPOT p90/p99 {row[7]}",
            ]
        out.append([row[0], "; ".join(parts)])
    return out


def runner_pairs(v: Verdict) -> list[list[str]]:
    """The runners-up as (candidate, one sentence): for narrow layouts (the terminal)."""
    _, rows = runner_rows(v)
    return [
        [row[0], f"{row[1]}; TTFT p90 {row[2]}, TPOT p90 {row[3]}; lost on {row[4]}: {row[5]}"]
        for row in rows
    ]


def _tier_text(t: TierChoice) -> str:
    cap = fmt.quantity(t.capacity_bytes, Unit.BYTES)
    per = "per pool" if t.scope == "pooled" else "per node"
    devices = f" on {t.devices} devices" if t.devices > 1 else ""
    served = "" if t.hit_ratio is None else f", serves {fmt.percent(t.hit_ratio)} of prompt tokens"
    util = "" if t.utilization_p99 is None else f", p99 use {fmt.percent(t.utilization_p99)}"
    return (
        f"{t.name}: {t.storage}, {cap} {per}{devices}, read {fmt.bandwidth(t.read_bytes_per_s)} / "
        f"write {fmt.bandwidth(t.write_bytes_per_s)}{served}{util}, {money(t.usd_per_hour)}"
    )


def _mechanism_text(m: Mechanism) -> str:
    if m.bytes_per_s is None:
        return f"{m.name.replace('_', ' ')}: {m.statement}"
    r = m.bytes_per_s
    return (
        f"{m.name.replace('_', ' ')}: mean {fmt.bandwidth(r.mean)}, p99 {fmt.bandwidth(r.p99)}, "
        f"peak {fmt.bandwidth(r.peak)} per node ({m.tier}); {m.statement}"
    )


def stage_rows(s: StageVerdict) -> list[tuple[str, str]]:
    """One stage of a verdict as (label, text) pairs."""
    rows = [
        ("instances", f"{s.instances} × {s.instance} ({s.gpus_per_instance} × {s.gpu})"),
        (
            "parallelism",
            f"TP {s.tp} × {plural(s.replicas_per_instance, 'replica')} per instance; GPU KV pool "
            f"{fmt.tokens(s.gpu_kv_pool_tokens_per_replica)} per replica",
        ),
        (
            "scheduler",
            f"{s.router.replace('_', ' ')} router; {fmt.tokens(s.max_batched_tokens)} per step, "
            f"{fmt.count(s.max_seqs)} sequences, {s.page_tokens}-token pages",
        ),
        ("cost", f"{money(s.usd_per_hour)} ({s.price_basis})"),
        ("busy", fmt.percent(s.busy_fraction) + " of the replay, mean over replicas"),
        ("KV storage", s.storage_statement or "none"),
    ]
    rows += [("tier", _tier_text(t)) for t in s.tiers]
    rows += [("KV mechanism", _mechanism_text(m)) for m in s.mechanisms]
    return rows


def link_text(v: Verdict) -> str:
    """The P-to-D link of a disaggregated verdict ("" when aggregated)."""
    link = v.link
    if link is None:
        return ""
    return (
        f"P-to-D link: {fmt.bandwidth(link.bytes_per_s)} per decode instance ({link.network}); "
        f"replayed p99 {fmt.bandwidth(link.p99_bytes_per_s)}, peak "
        f"{fmt.bandwidth(link.peak_bytes_per_s)} ({fmt.percent(link.utilization_p99)} at p99)"
    )


def runner_rows(v: Verdict) -> tuple[list[str], list[list[str]]]:
    """The runners-up: what each is, its cost and latency, and why it lost."""
    headers = ["candidate", "$/h", "TTFT p90", "TPOT p90", "lost on", "why"]
    rows = [
        [
            c.label,
            money(c.usd_per_hour) if c.usd_per_hour is not None else f"{c.gpus} GPUs",
            _seconds(c.ttft_p90_s) if c.replayed else "not replayed",
            _seconds(c.tpot_p90_s) if c.replayed else "not replayed",
            c.lost.value if c.lost else "",
            c.why,
        ]
        for c in v.runners_up
    ]
    return headers, rows


def chart_points(vs: VerdictSet) -> list[ChartPoint]:
    """Every priced candidate replayed, by provider, at the TTFT target's percentile.

    Unpriced ones have no cost to plot; a candidate that never finished some requests has no
    percentile to plot either.
    """
    pct, _ = ttft_target(vs)
    out = []
    for v in vs.verdicts:
        seen: set[str] = set()
        near = v.closest.label if v.closest is not None and not v.chosen else None
        for c in v.candidates:
            ttft = c.ttft_p99_s if pct == "p99" else c.ttft_p90_s
            if c.usd_per_hour is None or ttft is None or c.label in seen:
                continue
            seen.add(c.label)
            out.append(
                ChartPoint(
                    v.provider,
                    c.label,
                    c.usd_per_hour,
                    ttft,
                    v.chosen and _chosen(c),
                    c.label == near,
                )
            )
        c = v.closest
        ttft = None if c is None else c.reached.get(f"ttft_{pct}_s")
        if near is not None and near not in seen and c and c.usd_per_hour and ttft is not None:
            # The closest miss replayed on the whole trace, not among the search's candidates.
            out.append(ChartPoint(v.provider, c.label, c.usd_per_hour, ttft, False, True))
    return out


def _chosen(c: CandidateSummary) -> bool:
    return c.lost is None


def verdict_notes(v: Verdict) -> list[str]:
    """What the reader must know beside the figures: how it was chosen, notes, caveats."""
    out = []
    if v.chosen_by:
        out.append(f"chosen by {v.chosen_by}")
    out += list(v.notes)
    if v.unconfirmed:
        out.append("unconfirmed catalog figures it rests on: " + ", ".join(v.unconfirmed))
    if v.missing:
        out.append("missing: " + ", ".join(v.missing))
    return out
