"""What each KV tier of the chosen fleet is worth, as text every renderer shares.

One short line per tier for the verdict ("serving: host memory saves $X/h (N fewer GPUs) and
cuts TTFT p99 from A to B at 3 instances"), and the figures behind it as (label, text) rows for
the deployment's stage tables. Read from the primary verdict's ``tier_values`` only
(docs/advisor.md, "What a tier is worth").
"""

from __future__ import annotations

from kvadvisor.report import fmt
from kvadvisor.report.deployments import money, verdict_set
from kvadvisor.results.report import AdviceReport
from kvadvisor.results.verdict import REUSE_TIER, StageVerdict, TierValue
from kvadvisor.units.format import plural


def _saving(v: TierValue) -> str:
    """What the fleet without the tier costs more: "saves $8.00/h (8 fewer GPUs)"."""
    if v.without_instances is None:
        return (
            f"is needed (without it no fleet of up to {plural(v.max_instances, 'instance')} "
            "meets the SLO)"
        )
    if v.with_instances is None:
        return "was not sized: no count meets the SLO with it on the sample"
    gpus = v.gpus_saved or 0
    usd = v.usd_per_hour_saved
    if usd is None:  # unpriced: GPUs are what it saves or costs
        if gpus < 0:
            return f"costs {plural(-gpus, 'GPU')} more (unpriced)"
        return f"saves {plural(gpus, 'GPU')} (unpriced)"
    fewer = (
        plural(gpus, "fewer GPU")
        if gpus > 0
        else ("no fewer GPUs" if gpus == 0 else plural(-gpus, "more GPU"))
    )
    if usd < 0:
        return f"costs {money(-usd)} more ({fewer})"
    return f"saves {money(usd)} ({fewer})"


def _ttft(v: TierValue) -> str:
    """The TTFT p99 change at the chosen count: "TTFT p99 8.76 s → 3.25 s" (without → with)."""
    a, b = v.without_ttft_p99_s, v.ttft_p99_s
    if a is None or b is None:
        return "TTFT p99 not replayed"
    if a == b:
        return f"TTFT p99 unchanged at {fmt.duration(b)}"
    return f"TTFT p99 {fmt.duration(a)} → {fmt.duration(b)}"


def line(role: str, v: TierValue) -> str:
    """The one line a reader wants first for a tier (its details follow the stage's table).

    "host-dram-ddr5: saves $8.00/h (8 fewer GPUs); TTFT p99 8.76 s → 3.25 s (sample)": what
    the fleet without it costs more, and TTFT p99 without it → with it at the chosen count,
    both replayed on the search's sample. About one line at 80 columns, so the verdict block
    keeps the tiers' worth and the margin in the terminal's first ten lines. A
    serving stage (aggregated) needs no role before it; prefix reuse as a whole reads
    "prefix caching", the tiers under it by their storage.
    """
    what = "prefix caching" if v.tier == REUSE_TIER else v.storage
    who = "" if role == "serving" else f"{role} "
    return f"{who}{what}: {_saving(v)}; {_ttft(v)} (sample)"


def lines(report: AdviceReport) -> tuple[str, ...]:
    """One line per tier of the primary verdict's stages (empty when none was valued)."""
    vs = verdict_set(report)
    v = None if vs is None else vs.primary_verdict
    if v is None or not v.chosen:
        return ()
    return tuple(line(s.role, t) for s in v.stages for t in s.tier_values)


def _break_even(v: TierValue) -> str:
    be = v.break_even_prompt_tokens
    if be is None:
        return f"recomputing wins at every prompt length ({v.break_even_basis})"
    if be <= 1:
        return f"loading wins at every prompt length ({v.break_even_basis})"
    return (
        f"prefixes of {fmt.tokens(be)} and more load faster than recomputed ({v.break_even_basis})"
    )


def _with(v: TierValue) -> str:
    """The chosen configuration sized on the sample, and the verdict's count when it differs."""
    if v.with_instances is None:
        return "no count meeting the SLO on the sample"
    text = f"{plural(v.with_instances, 'instance')}, {money(v.with_usd_per_hour)}"
    if v.with_instances != v.instances:
        text += f" (the verdict has {fmt.count(v.instances)}: the whole trace needed them)"
    return text


def rows(v: TierValue) -> list[tuple[str, str]]:
    """The figures behind a tier's line, as (label, text) pairs."""
    resized = (
        f"{plural(v.without_instances, 'instance')}, {money(v.without_usd_per_hour)}, against "
        f"{_with(v)} with it"
        if v.without_instances is not None
        else f"no count up to {fmt.count(v.max_instances)} meets the SLO ({v.without_why})"
    )
    same = (
        f"TTFT p50 {fmt.duration(v.without_ttft_p50_s)} → {fmt.duration(v.ttft_p50_s)}, "
        f"p99 {fmt.duration(v.without_ttft_p99_s)} → {fmt.duration(v.ttft_p99_s)} (without → "
        f"with); without it the SLO is {'met' if v.without_meets_at_same_count else 'missed'}"
    )
    share = fmt.percent(v.hit_ratio)
    served = f"{fmt.count(v.hit_tokens)} of {fmt.count(v.prompt_tokens)} prompt tokens ({share})"
    return [
        (f"{v.tier}: without it", f"{v.without}; {v.basis}"),
        (f"{v.tier}: sized without it", resized),
        (f"{v.tier}: same count without it", same),
        (f"{v.tier}: hits it served", served),
        (f"{v.tier}: load vs recompute", _break_even(v)),
    ]


def stage_rows(s: StageVerdict) -> list[tuple[str, str]]:
    """Every tier value of a stage as rows (empty when it has none)."""
    return [r for v in s.tier_values for r in rows(v)]
