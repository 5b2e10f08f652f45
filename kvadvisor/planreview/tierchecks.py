"""The checks a plan's tiers and stages get once replayed: RV01-RV06, RV08, RV09, RV11, EL08."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kvadvisor.deploy import same_deployment
from kvadvisor.plan.model import DISK_KINDS, Plan, StagePlan
from kvadvisor.planreview.checks import capacity, check, q
from kvadvisor.planreview.demand import TierCalc, io_rate, stage_chunk_tokens
from kvadvisor.planreview.perf import PlanPerf, StagePerf
from kvadvisor.results.review import ReviewCheck, StageReview
from kvadvisor.units import Unit

BW = Unit.BYTES_PER_S

# Thresholds, each with the reason it has this value.
# Thresholds, each with the reason it has this value.
MIN_TIER_HIT_SHARE = 0.01  # a tier serving under 1% of prompt tokens is not worth its cost
UNDERUSED_MEAN_UTILIZATION = 0.10  # DESIGN.md cause 1: sized for the peak, run at the average
SATURATED_P99_UTILIZATION = 0.70  # a stage this busy at p99 has little headroom
BELOW_BREAK_EVEN_RISK_SHARE = 0.5  # most loads from the tier lose to recomputing them


def _iops_check(
    stage: StagePlan, c: TierCalc, times_s: np.ndarray, span_s: float, window_s: float
) -> ReviewCheck:
    """RV08: chunk I/Os per second (each request's tokens in whole chunks) against IOPS."""
    chunk, why = stage_chunk_tokens(stage)
    t, st = c.plan, stage.stage
    # IOPS of every device, through the instance's IOPS cap for block volumes (deploy rules).
    directions = [("write", c.written_tokens, c.reach.write_iops)]
    if c.served_tokens is not None:
        directions.append(("read", c.served_tokens, c.reach.read_iops))
    ev: dict[str, Any] = {"chunk_tokens": chunk, "chunk_from": why}
    worst, parts = "pass", []
    for direction, tokens, cap in directions:
        if cap is None:
            continue
        rate = io_rate(times_s, np.ceil(tokens / chunk) / c.fleet, window_s, span_s)
        ev.update(
            {
                f"{direction}_iops_p99": rate.p99_bytes_per_s,
                f"{direction}_iops_peak": rate.peak_bytes_per_s,
                f"{direction}_iops_capability": cap,
            }
        )
        parts.append(
            f"{direction} p99 {q(rate.p99_bytes_per_s, Unit.IOPS)} / peak "
            f"{q(rate.peak_bytes_per_s, Unit.IOPS)} against {q(cap, Unit.IOPS)}"
        )
        level = (
            "error"
            if rate.p99_bytes_per_s > cap
            else "warning"
            if rate.peak_bytes_per_s > cap
            else "pass"
        )
        if level == "error" or (level == "warning" and worst == "pass"):
            worst = level
    if not parts:
        return check(
            "RV08",
            "tier.iops",
            st,
            "error",
            "skip",
            f"the tier's IOPS are not known (chunks of {chunk} tokens, {why})",
            "design",
            t.name,
        )
    text = f"'{t.name}' at {chunk}-token chunks ({why}): " + "; ".join(parts)
    if worst == "pass":
        return check("RV08", "tier.iops", st, "error", "pass", text, "design", t.name, **ev)
    return check(
        "RV08",
        "tier.iops",
        st,
        worst,
        "fail",
        text
        + (
            ": the tier runs out of I/O operations"
            if worst == "error"
            else ": bursts exceed the tier's IOPS"
        ),
        "design",
        t.name,
        **ev,
    )


def tier_checks(
    stage: StagePlan,
    calcs: Sequence[TierCalc],
    perf: PlanPerf,
    times_s: np.ndarray,
    span_s: float,
    window_s: float,
) -> list[ReviewCheck]:
    """RV01-RV04, RV06, RV08 and EL08 on each replayed tier of one stage."""
    out: list[ReviewCheck] = []
    st = stage.stage
    for c in calcs:
        r, t = c.review, c.plan
        subj = t.name
        # RV01: does the tier serve hits at all?
        if stage.prefills:
            if r.hit_ratio_steady is None:
                out.append(
                    check(
                        "RV01",
                        "tier.hit_share",
                        st,
                        "warning",
                        "skip",
                        "prefix reuse unknown: the trace has no block hashes",
                        "design",
                        subj,
                    )
                )
            else:
                ok = r.hit_ratio_steady >= MIN_TIER_HIT_SHARE
                out.append(
                    check(
                        "RV01",
                        "tier.hit_share",
                        st,
                        "warning",
                        "pass" if ok else "fail",
                        f"tier '{t.name}' ({capacity(t.capacity_bytes)} per "
                        f"{'pool' if t.shared else 'instance'}) serves "
                        f"{q(r.hit_ratio_steady, Unit.RATIO)} of prompt tokens in steady state "
                        f"(cumulative {q(r.cumulative_hit_ratio_steady, Unit.RATIO)})"
                        + (
                            ""
                            if ok
                            else "; smaller than or shadowed by a faster tier, it adds "
                            "almost nothing"
                        ),
                        "design",
                        subj,
                        hit_ratio_steady=r.hit_ratio_steady,
                        cumulative_hit_ratio_steady=r.cumulative_hit_ratio_steady,
                        capacity_tokens=r.capacity_tokens,
                    )
                )
        # RV02 / RV03: bandwidth against demand at p99 and peak.
        for code, direction, rate, cap, u in (
            ("RV02", "write", r.write, r.write_capability_bytes_per_s, r.write_utilization),
            ("RV03", "read", r.read, r.read_capability_bytes_per_s, r.read_utilization),
        ):
            name = f"tier.{direction}_bandwidth"
            if rate is None or cap is None or u.p99 is None or u.peak is None:
                why = (
                    f"the tier's {direction} bandwidth is not known"
                    if rate is not None
                    else "decode tiers are written, not read, in this model (KV reaches decode "
                    "from prefill over the network)"
                    if st == "decode"
                    else "read demand is unknown: the trace has no block hashes"
                )
                out.append(check(code, name, st, "error", "skip", why, "design", subj))
                continue
            ev = dict(
                mean_bytes_per_s=rate.mean_bytes_per_s,
                p99_bytes_per_s=rate.p99_bytes_per_s,
                peak_bytes_per_s=rate.peak_bytes_per_s,
                capability_bytes_per_s=cap,
                utilization_p99=u.p99,
                utilization_peak=u.peak,
            )
            text = (
                f"{direction} demand on '{t.name}' mean {q(rate.mean_bytes_per_s, BW)}, p99 "
                f"{q(rate.p99_bytes_per_s, BW)}, peak {q(rate.peak_bytes_per_s, BW)} against "
                f"{q(cap, BW)} ({q(u.p99, Unit.RATIO)} at p99, {q(u.peak, Unit.RATIO)} at peak)"
            )
            if u.p99 > 1:
                out.append(
                    check(
                        code,
                        name,
                        st,
                        "error",
                        "fail",
                        text + ": the tier cannot keep up 1% of the time or more",
                        "design",
                        subj,
                        **ev,
                    )
                )
            elif u.peak > 1:
                out.append(
                    check(
                        code,
                        name,
                        st,
                        "warning",
                        "fail",
                        text + ": bursts exceed the tier; they queue",
                        "design",
                        subj,
                        **ev,
                    )
                )
            else:
                out.append(check(code, name, st, "error", "pass", text, "design", subj, **ev))
        # RV04: underutilization (cause 1), for storage bought for its bandwidth: DRAM and CXL
        # bandwidth comes with the memory and is never the thing sized.
        if t.storage.kind in ("dram", "cxl"):
            busy = None
        else:
            busy = max(
                (u for u in (r.write_utilization, r.read_utilization) if u.mean is not None),
                key=lambda u: u.mean or 0.0,
                default=None,
            )
        if busy is None:
            why = (
                "memory bandwidth comes with the memory; it is not sized on its own"
                if t.storage.kind in ("dram", "cxl")
                else "bandwidth or demand unknown"
            )
            out.append(
                check("RV04", "tier.underutilized", st, "warning", "skip", why, "cause1", subj)
            )
        elif busy.mean is not None and busy.mean < UNDERUSED_MEAN_UTILIZATION:
            peak = busy.peak or 0.0
            why = (
                f"sized for the peak: the peak window uses {q(peak, Unit.RATIO)}, the mean "
                f"{q(busy.mean, Unit.RATIO)}"
                if peak >= 0.5
                else f"over-provisioned: even the peak window uses {q(peak, Unit.RATIO)}"
                f" (mean {q(busy.mean, Unit.RATIO)})"
            )
            out.append(
                check(
                    "RV04",
                    "tier.underutilized",
                    st,
                    "warning",
                    "fail",
                    f"tier '{t.name}' is underused, {why}",
                    "cause1",
                    subj,
                    utilization_mean=busy.mean,
                    utilization_peak=peak,
                )
            )
        else:
            out.append(
                check(
                    "RV04",
                    "tier.underutilized",
                    st,
                    "warning",
                    "pass",
                    f"tier '{t.name}' runs at {q(busy.mean, Unit.RATIO)} of its bandwidth "
                    "on average",
                    "cause1",
                    subj,
                    utilization_mean=busy.mean,
                )
            )
        # RV06: load vs recompute.
        recompute = perf.stages.get(st, StagePerf()).recompute_s
        if stage.prefills and (
            recompute is None or c.served_tokens is None or r.read_capability_bytes_per_s is None
        ):
            out.append(
                check(
                    "RV06",
                    "tier.load_vs_recompute",
                    st,
                    "warning",
                    "skip",
                    "needs the model and GPU (performance model), the tier's read "
                    "bandwidth and block hashes",
                    "loadrecompute",
                    subj,
                )
            )
        elif stage.prefills:
            p_star, share = r.break_even_tokens, r.below_break_even_share
            bad = share is not None and share > BELOW_BREAK_EVEN_RISK_SHARE
            pe = "never" if p_star is None or math.isinf(p_star) else q(p_star, Unit.TOKENS)
            share_text = "no hits" if share is None else f"{q(share, Unit.RATIO)} of its hit tokens"
            out.append(
                check(
                    "RV06",
                    "tier.load_vs_recompute",
                    st,
                    "warning",
                    "fail" if bad else "pass",
                    f"loading from '{t.name}' beats recomputing above {pe}; {share_text} come in "
                    "loads that recompute faster",
                    "loadrecompute",
                    subj,
                    break_even_tokens=p_star,
                    below_break_even_share=share,
                )
            )
        # RV08: I/O operations at the engine's chunk size against the tier's IOPS.
        out.append(_iops_check(stage, c, times_s, span_s, window_s))
        # EL08: a disk-like tier needs a bound.
        if t.storage.kind in DISK_KINDS:
            bounded = t.capacity_bytes is not None
            out.append(
                check(
                    "EL08",
                    "tier.ssd_unbounded",
                    st,
                    "error",
                    "pass" if bounded else "fail",
                    f"{t.storage.kind} tier '{t.name}' "
                    + (
                        f"is bounded at {capacity(t.capacity_bytes)}"
                        if bounded
                        else "has no capacity bound: it grows until the disk is full"
                    ),
                    "ssd_bound",
                    subj,
                    capacity_bytes=t.capacity_bytes,
                )
            )
    return out


def stage_balance(stages: Sequence[StageReview]) -> list[ReviewCheck]:
    """RV05: one stage idles while the other saturates (DESIGN.md cause 2)."""
    by = {s.stage: s for s in stages}
    if not ("prefill" in by and "decode" in by):
        return []
    p, d = by["prefill"].utilization, by["decode"].utilization
    if None in (p.mean, p.p99, d.mean, d.p99):
        return [
            check(
                "RV05",
                "stage.balance",
                "both",
                "warning",
                "skip",
                "both stages need tiers with known bandwidth",
                "cause2",
            )
        ]
    assert p.mean is not None and p.p99 is not None and d.mean is not None and d.p99 is not None
    idle, busy = (
        ("decode", "prefill")
        if d.mean < UNDERUSED_MEAN_UTILIZATION and p.p99 > SATURATED_P99_UTILIZATION
        else ("prefill", "decode")
        if p.mean < UNDERUSED_MEAN_UTILIZATION and d.p99 > SATURATED_P99_UTILIZATION
        else (None, None)
    )
    ev = dict(prefill_mean=p.mean, prefill_p99=p.p99, decode_mean=d.mean, decode_p99=d.p99)
    if idle is None:
        return [
            check(
                "RV05",
                "stage.balance",
                "both",
                "warning",
                "pass",
                f"prefill storage runs at {q(p.mean, Unit.RATIO)} mean / {q(p.p99, Unit.RATIO)} "
                f"p99, decode at {q(d.mean, Unit.RATIO)} / {q(d.p99, Unit.RATIO)}",
                "cause2",
                **ev,
            )
        ]
    return [
        check(
            "RV05",
            "stage.balance",
            "both",
            "warning",
            "fail",
            f"{idle} storage sits idle ({q(by[idle].utilization.mean, Unit.RATIO)} mean) while "
            f"{busy} saturates ({q(by[busy].utilization.p99, Unit.RATIO)} at p99): size each stage "
            "for its own demand",
            "cause2",
            **ev,
        )
    ]


def deployable_check(stage: StagePlan, c: TierCalc) -> ReviewCheck | None:
    """RV09: can the stage's instance have this tier's storage, in this number?

    Only for tiers naming a catalog storage option on a stage naming a catalog instance (an
    inline figure or a plan without an instance has nothing to check against). A pass still
    names the unconfirmed catalog figures the tier's verdicts rest on.
    """
    t, st = c.plan, stage.stage
    if t.spec is None or stage.instance_spec is None:
        return None
    problems, unsure = c.reach.problems, c.reach.unconfirmed
    if problems:
        return check(
            "RV09",
            "tier.deployable",
            st,
            "error",
            "fail",
            f"tier '{t.name}' cannot be deployed on {stage.instance}: " + "; ".join(problems),
            "deploy",
            t.name,
            storage=t.spec.name,
            instance=stage.instance,
        )
    text = f"{stage.instance} can have {t.devices} x {t.spec.name} (limit: {c.reach.limit})"
    if unsure:
        text += "; figures not confirmed: " + ", ".join(unsure)
    return check(
        "RV09",
        "tier.deployable",
        st,
        "error",
        "pass",
        text,
        "deploy",
        t.name,
        storage=t.spec.name,
        instance=stage.instance,
        unconfirmed=list(unsure),
    )


def same_deployment_check(plan: Plan) -> list[ReviewCheck]:
    """RV11: do a disaggregated plan's prefill and decode instances run in one deployment?

    Each request's KV cache moves from prefill to decode over one network, so both stages must
    run with one provider (or both on your own servers): the rule the advisor applies
    (``deploy.same_deployment``). Only for plans with both stages naming catalog instances.
    """
    prefill, decode = plan.stage("prefill"), plan.stage("decode")
    if prefill is None or decode is None:
        return []
    if prefill.instance_spec is None or decode.instance_spec is None:
        missing = [s.stage for s in (prefill, decode) if s.instance_spec is None]
        why = f"{' and '.join(missing)} names no catalog instance: the provider is not known"
        return [check("RV11", "stages.same_deployment", "both", "error", "skip", why, "deploy")]
    p, d = prefill.instance_spec, decode.instance_spec
    verdict = same_deployment(p, d)
    return [
        check(
            "RV11",
            "stages.same_deployment",
            "both",
            "error",
            "pass" if verdict.ok else "fail",
            f"{verdict.reason} ({p.name}, {d.name})" if verdict.ok else verdict.reason,
            "deploy",
            prefill_instance=p.name,
            prefill_provider=p.provider,
            decode_instance=d.name,
            decode_provider=d.provider,
        )
    ]
