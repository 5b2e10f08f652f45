"""What each KV tier of the chosen deployment is worth: the same fleet replayed without it.

For each tier of the stage that holds tiers (serving, or prefill), the chosen configuration is
replayed with that tier removed and the others kept (the capacity tier stays when host memory
goes; host memory alone stays when the capacity tier goes) on the search's sample replayer:

* re-sized: the stage's count searched again (:func:`kvadvisor.advice.sizing.min_count`, from
  the configuration's busy-time bound up) so that it meets the SLO if it can; its $/h and GPUs
  against the chosen fleet's, sized the same way on the sample, are what the tier saves;
* at the chosen count: its TTFT p50 and p99 against the chosen fleet's, the tier's latency
  effect alone.

The chosen fleet's own replay on the sample gives the prompt tokens the tier served, and the
replay's tier (its read bandwidth per unit and latency) the prompt length above which loading
from it beats recomputing (:func:`kvadvisor.perfmodel.break_even_tokens`). docs/advisor.md,
"What a tier is worth".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from kvadvisor.advice.plans import restaged, shape_of
from kvadvisor.advice.search import Config, SearchSpec
from kvadvisor.advice.sizing import MAX_INSTANCES, Outcome, Replayer, min_count
from kvadvisor.advice.tiers import CAPACITY_TIER
from kvadvisor.deploy import host_tier_name
from kvadvisor.fleet import TraceArrays, request_columns, slo_percentiles, summarize
from kvadvisor.fleet.build import StepModelInputs, roofline_for
from kvadvisor.fleet.engine import ReplayRun
from kvadvisor.perfmodel import break_even_tokens
from kvadvisor.perfmodel.transfer import KvSource
from kvadvisor.plan.model import Plan, StagePlan, TierPlan
from kvadvisor.results.verdict import REUSE_TIER, TierValue, Verdict
from kvadvisor.units import Unit, format_value
from kvadvisor.units.format import plural
from kvadvisor.vocab import Stage

BASIS = "replayed on the search's sample, with the same targets"


def capacity_tiers(c: Plan, forced: bool = False) -> frozenset[str]:
    """The tiers bought for capacity (RV04's floor applies); none when --storage forced one."""
    if forced:
        return frozenset()
    return frozenset(t.name for s in c.stages for t in s.tiers if t.name == CAPACITY_TIER)


def _rescaled(pick: TierPlan, count: int, n: int) -> TierPlan:
    """The tier at ``n`` instances: a node's own tier is bought per node, a pool once."""
    usd = pick.usd_per_hour
    if pick.scope == "pooled" or usd is None or count == n:
        return pick
    return replace(pick, usd_per_hour=usd * n / count)


def without_tier(c: Plan, role: Stage, name: str, n: int | None = None) -> Plan:
    """``c`` without tier ``name`` of stage ``role`` ("": none removed), at ``n`` instances."""
    stages = []
    for s in c.stages:
        if s.stage == role:
            count = s.count if n is None else n
            tiers = tuple(_rescaled(t, s.count, count) for t in s.tiers if t.name != name)
            s = restaged(s, count, tiers)
        stages.append(s)
    return replace(c, stages=tuple(stages))


def resized(
    chosen: Plan, name: str, replayer: Replayer, bound: int, forced: bool = False
) -> tuple[Outcome | None, str]:
    """The fewest instances of the tiered stage meeting the SLO on the sample without ``name``.

    ``name`` "" keeps every tier: the chosen fleet sized on the sample as the search sized it
    (fewer than the verdict's count when the whole trace needed more). None and the last miss
    when no count up to :data:`MAX_INSTANCES` meets it.
    """
    stage = chosen.stages[0]

    def evaluate(n: int) -> Outcome:
        c = without_tier(chosen, stage.stage, name, n)
        return replayer.outcome(c, capacity_tiers(c, forced))

    return _sized(evaluate, bound, stage.count)


def _sized(
    evaluate: Callable[[int], Outcome], bound: int, start: int
) -> tuple[Outcome | None, str]:
    """The fewest instances ``evaluate`` finds meeting the SLO, or None and the last miss."""
    best, tried = min_count(evaluate, max(1, bound), start)
    if best is not None or not tried:
        return best, ""
    last = tried[-1]
    return None, f"{last.why_not()} at {plural(last.plan.stages[0].count, 'instance')}"


def _value(
    chosen: Plan,
    with_out: Outcome,
    same: Outcome,
    sized: Outcome | None,
    resized_without: tuple[Outcome | None, str],
    **named: Any,
) -> TierValue:
    """A TierValue from the replays every valuation makes, and what names this one.

    ``with_out``: the chosen fleet on the sample; ``same``: the alternative at its count;
    ``sized``: the chosen configuration re-sized on the sample; ``resized_without``: the
    alternative re-sized, and why none met the SLO. ``named`` holds the tier, storage,
    without (words), hit tokens and the break-even.
    """
    best, why = resized_without
    stage = chosen.stages[0]
    assert with_out.run is not None, with_out.error  # tier_values checks it first
    base = None if sized is None else sized.plan
    rest = None if best is None else best.plan
    usd_with = None if base is None else base.usd_per_hour
    usd_without = None if rest is None else rest.usd_per_hour
    p50, p99 = _ttft(with_out.run)
    q50, q99 = _ttft(same.run)
    return TierValue(
        instances=stage.count,
        usd_per_hour=chosen.usd_per_hour,
        gpus=chosen.gpus,
        with_instances=None if base is None else base.stages[0].count,
        with_usd_per_hour=usd_with,
        without_instances=None if rest is None else rest.stages[0].count,
        max_instances=MAX_INSTANCES,
        without_why=why,
        without_usd_per_hour=usd_without,
        usd_per_hour_saved=(
            None if usd_with is None or usd_without is None else usd_without - usd_with
        ),
        gpus_saved=None if rest is None or base is None else rest.gpus - base.gpus,
        ttft_p50_s=p50,
        ttft_p99_s=p99,
        without_ttft_p50_s=q50,
        without_ttft_p99_s=q99,
        without_meets_at_same_count=same.meets,
        prompt_tokens=float(with_out.run.arrays.input_tokens.sum()),
        basis=BASIS,
        **named,
    )


def _ttft(run: ReplayRun | None) -> tuple[float | None, float | None]:
    """TTFT p50 and p99 as the SLO check reads them (an unfinished request is the largest)."""
    if run is None:
        return None, None
    v = request_columns(run)["ttft_s"]
    v = np.where(np.isfinite(v), v, np.inf)
    p50, p99 = slo_percentiles(v, (50.0, 99.0))
    return (None if math.isnan(p50) else p50), (None if math.isnan(p99) else p99)


def _served(run: ReplayRun, role: Stage, name: str) -> float:
    """Prompt tokens the tier ``name`` of stage ``role`` served in the replay."""
    st = next(s for s in run.stages if s.role.value == role)
    k = [t.name for t in st.spec.tiers].index(name)
    return float(st.tier_hit_tokens[k].sum()) if st.tier_hit_tokens.size else 0.0


def _break_even(
    run: ReplayRun, role: Stage, name: str, stage: StagePlan, spec: SearchSpec
) -> tuple[float | None, str]:
    """The prompt length above which loading from the tier beats recompute, and its basis.

    The tier as the replay loads from it: its unit's read bandwidth (IOPS-capped) and latency,
    one load alone; recompute is the replica's compute-bound prefill.
    """
    demand = next(t for t in summarize(run).tiers if t.stage.value == role and t.name == name)
    st = next(s for s in run.deployment.stages if s.role.value == role)
    latency_s = next(t for t in st.tiers if t.name == name).latency_s
    bw = demand.read_capability_bytes_per_s
    shape = shape_of(stage)
    pm, _ = roofline_for(
        spec.model,
        shape.gpu,
        shape.tp,
        spec.kv_dtype,
        spec.weight_dtype,
        StepModelInputs(spec.perf),
    )
    tokens = break_even_tokens(pm, KvSource(name, bw, latency_s, False, ""))
    basis = (
        f"one load alone at the tier's {format_value(bw, Unit.BYTES_PER_S)} per {demand.scope} "
        f"and {format_value(latency_s, Unit.SECONDS)} latency, against recomputing the prefix "
        f"on a {shape.gpu.name} TP {shape.tp} replica"
    )
    return tokens, basis


def _kept(stage: StagePlan, name: str) -> str:
    rest = [t.name for t in stage.tiers if t.name != name]
    return "no tier below the GPU pool" if not rest else " and ".join(rest) + " kept"


def tier_value(
    chosen: Plan,
    index: int,
    replayer: Replayer,
    spec: SearchSpec,
    bound: int,
    forced: bool = False,
) -> TierValue:
    """The worth of tier ``index`` of the chosen fleet's first stage (the one holding tiers)."""
    stage = chosen.stages[0]
    role, pick, inst = stage.stage, stage.tiers[index], shape_of(stage).instance
    with_out = replayer.outcome(chosen, capacity_tiers(chosen, forced))
    assert with_out.run is not None, with_out.error  # tier_values checks it first
    same = replayer.outcome(
        without_tier(chosen, role, pick.name), capacity_tiers(chosen, forced) - {pick.name}
    )
    sized, _ = resized(chosen, "", replayer, bound, forced)
    be, be_basis = _break_even(with_out.run, role, pick.name, stage, spec)
    return _value(
        chosen,
        with_out,
        same,
        sized,
        resized(chosen, pick.name, replayer, bound, forced),
        tier=pick.name,
        storage=pick.spec.name if pick.spec is not None else host_tier_name(inst),
        without=_kept(stage, pick.name),
        hit_tokens=_served(with_out.run, role, pick.name),
        break_even_prompt_tokens=be,
        break_even_basis=be_basis,
    )


# The first KV tier is the GPU pool itself: prefix reuse as a whole (served from GPU memory
# and from any tier below it) is valued against recomputing every prompt (REUSE_TIER).


def _reuse_storage(c: Plan) -> str:
    """What serves the reuse, in words: "prefix caching in GPU memory (and host-dram-ddr5)"."""
    below = [
        t.spec.name if t.spec is not None else host_tier_name(shape_of(c.stages[0]).instance)
        for t in c.stages[0].tiers
    ]
    return "prefix caching in GPU memory" + (f" (and {', '.join(below)})" if below else "")


def _bare(c: Plan, n: int | None = None) -> Plan:
    """``c`` with no tier below the GPU pool on any stage, its first stage at ``n`` instances."""
    stages = []
    for i, s in enumerate(c.stages):
        count = s.count if (n is None or i > 0) else n
        stages.append(restaged(s, count, ()))
    return replace(c, stages=tuple(stages))


def _no_hashes(a: TraceArrays) -> TraceArrays:
    """The same requests with their block hashes dropped: no prefix hit, every prompt recomputed."""
    return replace(a, arrays=replace(a.arrays, blocks=None), id_bound=0)


def reuse_value(chosen: Plan, replayer: Replayer, bound: int, forced: bool = False) -> TierValue:
    """The worth of prefix reuse as a whole, the GPU pool first: every prompt recomputed.

    The alternative is the same configuration with no prefix reuse at all (the sample's block
    hashes dropped, so no hit anywhere, and no tier below the GPU pool): what serving the reuse
    from GPU memory and the tiers below saves against recomputing it (the seed's "read less
    first", in dollars). Its hit tokens are every hit, in GPU memory or below.
    """
    stage = chosen.stages[0]
    with_out = replayer.outcome(chosen, capacity_tiers(chosen, forced))
    assert with_out.run is not None, with_out.error
    plain = replayer.like(_no_hashes(replayer.arrays))
    st = next(s for s in with_out.run.stages if s.role == stage.stage)
    return _value(
        chosen,
        with_out,
        plain.outcome(_bare(chosen)),
        resized(chosen, "", replayer, bound, forced)[0],
        _sized(lambda n: plain.outcome(_bare(chosen, n)), bound, stage.count),
        tier=REUSE_TIER,
        storage=_reuse_storage(chosen),
        without="no prefix reuse: every prompt recomputed",
        hit_tokens=float(st.hit_tokens.sum()),
        # A hit in GPU memory is used where it lies (each tier below has its own break-even).
        break_even_prompt_tokens=1.0,
        break_even_basis="a hit in GPU memory is used where it lies, with no load",
    )


def tier_values(
    chosen: Plan, replayer: Replayer, spec: SearchSpec, bound: int, forced: bool = False
) -> tuple[TierValue, ...]:
    """The worth of every KV tier of the chosen fleet's stage that holds them, fastest first.

    Prefix reuse as a whole first (GPU memory and the tiers below, against recomputing every
    prompt; when the sample has block hashes, so reuse is measured), then each tier below.
    Empty when the chosen fleet cannot be replayed on the sample (no figures to compare).
    """
    if not chosen.stages:
        return ()
    if replayer.outcome(chosen, capacity_tiers(chosen, forced)).run is None:
        return ()
    gpu = (reuse_value(chosen, replayer, bound, forced),) if replayer.arrays.has_hashes else ()
    return gpu + tuple(
        tier_value(chosen, k, replayer, spec, bound, forced)
        for k in range(len(chosen.stages[0].tiers))
    )


def with_tier_values(verdict: Verdict, values: tuple[TierValue, ...]) -> Verdict:
    """``verdict`` with ``values`` on its first stage (the one holding the tiers)."""
    if not values or not verdict.stages:
        return verdict
    first = replace(verdict.stages[0], tier_values=values)
    return replace(verdict, stages=(first, *verdict.stages[1:]))


def sizing_bound(config: Config | None, chosen: Plan) -> int:
    """The busy-time bound of the chosen stage's shape (1 when the search has none for it).

    Served every hit, no fewer instances keep up; without a tier there are fewer hits, so it
    bounds the re-sized count too.
    """
    stage = chosen.stages[0]
    for role, shape, bound, _ in () if config is None else config.shapes:
        chosen_shape = shape_of(stage)
        if role == stage.stage and shape.instance.name == chosen_shape.instance.name:
            if shape.tp == chosen_shape.tp:
                return bound
    return 1
