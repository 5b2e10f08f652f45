"""The primary verdict's margin and robustness in words, for every renderer.

One short line under the headline ("margin: TTFT p99 39% (3.64 s of 6 s), TPOT p99 45% (109 ms
of 200 ms); holds at +15% step time and +20% traffic"), and the longer statements (a stress the
pick does not survive and the pick that would win then; GPUs idling between bursts) for the
verdict's details. docs/advisor.md, "Margin and robustness", defines every figure.
"""

from __future__ import annotations

from kvadvisor.report import fmt
from kvadvisor.results.report import AdviceReport
from kvadvisor.results.verdict import Robustness, Stress, TargetMargin, Verdict
from kvadvisor.units import Unit, format_value, plural
from kvadvisor.units.format import price


def primary(report: AdviceReport) -> Verdict | None:
    """The primary verdict when it chose a deployment and its robustness was replayed."""
    rec = report.recommendation
    vs = rec.verdict if rec is not None else None
    v = vs.primary_verdict if vs is not None else None
    return v if v is not None and v.chosen and v.robustness is not None else None


def _target(m: TargetMargin) -> str:
    """The target in words, e.g. TTFT p99 for ttft_p99_s."""
    metric, pct = m.target.removesuffix("_s").split("_", 1)
    return f"{metric.upper()} {pct}"


def margin_text(m: TargetMargin) -> str:
    """E.g. TTFT p99 39% (3.64 s of 6 s); for a target with no figure, the share within it."""
    if m.margin is None or m.replayed_s is None:
        within = "unknown" if m.attainment is None else fmt.percent(m.attainment)
        return f"{_target(m)}: {within} of requests within {fmt.duration(m.target_s)}"
    return (
        f"{_target(m)} {fmt.percent(m.margin)} ({fmt.duration(m.replayed_s)} of "
        f"{fmt.duration(m.target_s)})"
    )


def stress_words(s: Stress) -> str:
    """A stress in a few words: "+15% step time", "+20% traffic"."""
    more = format_value(s.factor - 1.0, Unit.RATIO, digits=2)
    return f"+{more} {'step time' if s.kind == 'step_time' else 'traffic'}"


def stresses_text(r: Robustness) -> str:
    """E.g. holds at +15% step time and +20% traffic; or which stress it does not survive."""
    held = [stress_words(s) for s in r.stresses if s.holds]
    lost = [s for s in r.stresses if not s.holds]
    parts = []
    if held:
        parts.append("holds at " + " and ".join(held))
    for s in lost:
        then = (
            f"{s.alternative} would win then"
            + (", and costs less: the search missed it" if s.undercuts else "")
            if s.alternative
            else "nothing the search enumerated meets the SLO then"
        )
        parts.append(f"misses at {stress_words(s)} ({then})")
    return "; ".join(parts)


def margin_line(report: AdviceReport) -> str | None:
    """The one margin line under the headline (None without a chosen, replayed verdict)."""
    v = primary(report)
    if v is None or v.robustness is None:
        return None
    return robustness_line(v.robustness, stresses_text(v.robustness))


def robustness_line(r: Robustness, stresses: str) -> str:
    """The margin line: each target's margin, the headroom and N+1 kept, then ``stresses``."""
    head = ", ".join(margin_text(m) for m in r.margins)
    extra = []
    if r.headroom > 0:
        extra.append(f"headroom {fmt.percent(r.headroom)}")
    if r.spare:
        extra.append("N+1")
    kept = f" ({', '.join(extra)})" if extra else ""
    return f"margin: {head}{kept}" + (f"; {stresses}" if stresses else "")


def idle_line(report: AdviceReport) -> str | None:
    """GPUs executing steps under the floor: the statement and the cheaper fleet (or None)."""
    v = primary(report)
    r = v.robustness if v is not None else None
    if r is None or r.step_busy_fraction is None or r.step_busy_floor is None:
        return None
    if r.step_busy_fraction >= r.step_busy_floor:
        return None
    ratio = (
        ""
        if r.arrival_peak_to_mean is None
        else f"; arrivals peak at {fmt.quantity(r.arrival_peak_to_mean, Unit.MULTIPLE)} the "
        "mean minute"
    )
    b = r.burst_fleet
    cheaper = (
        "no fewer instances meet the targets at p90"
        if b is None
        else f"{b.label} ({_cost(b.usd_per_hour, b.gpus)}) meets them at p90 and queues the bursts"
    )
    return (
        f"sized for bursts: GPUs execute steps {fmt.percent(r.step_busy_fraction)} of the "
        f"replay (under {fmt.percent(r.step_busy_floor)}){ratio}; {cheaper}"
    )


def _cost(usd: float | None, gpus: int) -> str:
    return price(usd, "h") if usd is not None else plural(gpus, "GPU")
