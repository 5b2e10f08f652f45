"""A provider's search as its verdict: stages, tiers, mechanisms, link, cost, SLO, runners-up.

Read off the chosen candidate and its replay (pure). Per stage, the storage is stated from the
mechanisms the replay ran (docs/advisor.md, "Storage per stage from mechanisms"): prefix loads
and new-KV writes on the nodes that prefill; on decode nodes the KV arriving over the link,
preemption swaps, decode-time offload and write-back of decode KV, each measured or said not to
run. A decode stage that needs no storage I/O gets none, and the verdict says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from kvadvisor.advice.plans import shape_of
from kvadvisor.advice.robust import step_busy
from kvadvisor.advice.search import MAX_CONFIGS, Config, ProviderSearch, Tried, cost_key
from kvadvisor.advice.sizing import Outcome, reached, shortfall
from kvadvisor.advice.slo import loosened, slo_text
from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.deploy import instance_cost, nic_bytes_per_s
from kvadvisor.deploy.access import Via
from kvadvisor.fleet import ReplayResult
from kvadvisor.fleet.engine import ReplayRun, StageRun
from kvadvisor.plan.model import Plan, StagePlan, TierPlan
from kvadvisor.plan.writer import plan_mapping
from kvadvisor.results.replay import ReplayTierDemand
from kvadvisor.results.verdict import (
    BurstFleet,
    CandidateSummary,
    ClosestMiss,
    LinkChoice,
    LossReason,
    Mechanism,
    Rate,
    Robustness,
    SloAttained,
    StageVerdict,
    TierChoice,
    Transport,
    Verdict,
    VerdictStatus,
)
from kvadvisor.units import S_PER_HOUR, Unit, format_value, plural
from kvadvisor.units.format import price
from kvadvisor.vocab import Stage, Topology

MAX_RUNNERS_UP = 6
TOKENS_PER_MILLION = 1e6


def slo_attained(outcome: Outcome) -> SloAttained:
    """The outcome's latencies against the targets."""
    return SloAttained(
        ttft_p90_s=outcome.ttft_s.get("p90"),
        ttft_p99_s=outcome.ttft_s.get("p99"),
        tpot_p90_s=outcome.tpot_s.get("p90"),
        tpot_p99_s=outcome.tpot_s.get("p99"),
        attainment=dict(outcome.attainment),
        met=dict(outcome.met),
    )


def _rate(r: object) -> Rate:
    return Rate(float(r.mean), float(r.p99), float(r.peak))  # type: ignore[attr-defined]


def _per_node(rate: Rate, scope: str, count: int) -> Rate:
    k = count if scope == "pooled" else 1
    return Rate(rate.mean / k, rate.p99 / k, rate.peak / k)


def _tier_choice(pick: TierPlan, demand: ReplayTierDemand | None, role: Stage) -> TierChoice:
    return TierChoice(
        name=pick.name,
        storage=pick.spec.name if pick.spec is not None else "host memory",
        category=pick.category,
        scope=pick.scope,
        capacity_bytes=pick.capacity_bytes,
        devices=pick.devices,
        read_bytes_per_s=0.0 if demand is None else demand.read_capability_bytes_per_s,
        write_bytes_per_s=0.0 if demand is None else demand.write_capability_bytes_per_s,
        usd_per_hour=pick.usd_per_hour,
        price_basis=pick.price_basis,
        hit_ratio=None if demand is None else demand.hit_ratio,
        read_p99_bytes_per_s=None if demand is None else demand.read_bytes_per_s.p99,
        write_p99_bytes_per_s=None if demand is None else demand.write_bytes_per_s.p99,
        utilization_p99=None if demand is None else demand.utilization.p99,
        why=pick.why,
        unconfirmed=pick.unconfirmed,
        read_utilization=None if demand is None else _rate(demand.read_utilization),
        write_utilization=None if demand is None else _rate(demand.write_utilization),
        read_demand=None if demand is None else _rate(demand.read_demand_bytes_per_s),
    )


def _stage_run(run: ReplayRun | None, role: Stage) -> StageRun | None:
    if run is None:
        return None
    return next((s for s in run.stages if s.role.value == role), None)


def _mechanisms(
    stage: StagePlan,
    tiers: Sequence[TierChoice],
    demands: Sequence[ReplayTierDemand],
    run: StageRun | None,
    result: ReplayResult,
) -> tuple[tuple[Mechanism, ...], str]:
    """The stage's KV mechanisms per node, and the storage statement."""
    out: list[Mechanism] = []
    loads = stage.stage in (Stage.SERVING, Stage.PREFILL)
    decodes = stage.stage in (Stage.SERVING, Stage.DECODE)
    if loads:
        out += _load_mechanisms(tiers, demands, stage.count)
    statement = ""
    if decodes:
        preempt = int(run.counters.get("preemptions", 0)) if run is not None else 0
        swaps = int(run.counters.get("swaps", 0)) if run is not None else 0
        out += _decode_mechanisms(stage.stage, preempt, swaps, result)
        if stage.stage == Stage.DECODE:
            statement = (
                "decode needs no storage I/O: the prompt's KV arrives over the P-to-D link, "
                f"preemptions recompute ({format_value(preempt, Unit.COUNT)}), no decode-time "
                "offload and no write-back; no storage is bought for it"
            )
    if loads:
        statement = _tier_statement(stage, tiers)
    return tuple(out), statement


def _load_mechanisms(
    tiers: Sequence[TierChoice], demands: Sequence[ReplayTierDemand], count: int
) -> list[Mechanism]:
    """Prefix loads from the tiers and new-KV writes to them, per node (none without a tier)."""
    out: list[Mechanism] = []
    if demands:
        reads = [_per_node(_rate(d.read_bytes_per_s), d.scope, count) for d in demands]
        total = Rate(
            sum(r.mean for r in reads), sum(r.p99 for r in reads), sum(r.peak for r in reads)
        )
        out.append(
            Mechanism(
                "prefix_loads",
                total,
                ", ".join(t.name for t in tiers),
                "prefix hits below the GPU pool, loaded before prefill (p99 and peak summed "
                "over the tiers, an upper bound)",
            )
        )
        first = demands[0]
        writes = _per_node(_rate(first.write_bytes_per_s), first.scope, count)
        out.append(
            Mechanism(
                "new_kv_writes",
                writes,
                ", ".join(t.name for t in tiers),
                "KV of prompt tokens that missed every cache, written through to each tier "
                "when prefill completes",
            )
        )
    else:
        out.append(
            Mechanism(
                "prefix_loads",
                None,
                None,
                "none below the GPU pool: hits are served from GPU memory, misses recomputed",
            )
        )
        out.append(
            Mechanism(
                "new_kv_writes",
                None,
                None,
                "new KV stays in the GPU pool: no tier below it to write to",
            )
        )
    return out


def _decode_mechanisms(
    role: Stage, preempt: int, swaps: int, result: ReplayResult
) -> list[Mechanism]:
    """The KV a decode node moves: the P-to-D transfer in, preemptions, offload, write-back."""
    out: list[Mechanism] = []
    if role == Stage.DECODE:
        link = result.link
        out.append(
            Mechanism(
                "kv_transfer_in",
                None if link is None else _rate(link.bytes_per_s),
                "p-to-d link",
                "each prompt's KV arrives from a prefill node over the link: a network "
                "transfer to size, not a storage read",
            )
        )
    out.append(
        Mechanism(
            "preemption_swaps",
            None,
            None,
            f"preemption recomputes (vLLM's default): {plural(preempt, 'preemption')}, "
            f"{plural(swaps, 'swap')} to host memory",
        )
    )
    out.append(
        Mechanism(
            "decode_offload_reads",
            None,
            None,
            "not configured: the running batch's KV is held in the GPU pool"
            + ("" if preempt == 0 else f" (it overflowed {plural(preempt, 'time')}, recomputed)"),
        )
    )
    out.append(
        Mechanism(
            "decode_writeback",
            None,
            None,
            "decode KV is not kept: the next turn's prefill looks up its prompt's blocks, "
            "which the prefill nodes stored",
        )
    )
    return out


def _tier_statement(stage: StagePlan, tiers: Sequence[TierChoice]) -> str:
    """Which tiers the prefilling nodes hold and the share of prompt tokens each serves."""
    if tiers:
        return (
            "the nodes that prefill hold the tiers: "
            + "; ".join(
                f"{t.name} ({t.storage}) serves "
                + (
                    "an unknown share"
                    if t.hit_ratio is None
                    else format_value(t.hit_ratio, Unit.RATIO)
                )
                + " of prompt tokens"
                for t in tiers
            )
            + (
                "; decode on the same nodes reads only the GPU pool"
                if stage.stage == Stage.SERVING
                else ""
            )
        )
    return stage.tier_note or "no storage tier"


def stage_verdicts(
    candidate: Plan, outcome: Outcome, result: ReplayResult
) -> tuple[StageVerdict, ...]:
    """Each stage of the chosen candidate with its tiers, mechanisms and price."""
    dep_stages = {s.role.value: s for s in (outcome.run.deployment.stages if outcome.run else ())}
    out = []
    for pick in candidate.stages:
        demands = [t for t in result.tiers if t.stage.value == pick.stage]
        by_name = {d.name: d for d in demands}
        tiers = tuple(_tier_choice(t, by_name.get(t.name), pick.stage) for t in pick.tiers)
        mechanisms, statement = _mechanisms(
            pick,
            tiers,
            [by_name[t.name] for t in pick.tiers if t.name in by_name],
            _stage_run(outcome.run, pick.stage),
            result,
        )
        dep = dep_stages.get(pick.stage)
        summary = next((s for s in result.stages if s.role.value == pick.stage), None)
        shape = shape_of(pick)
        inst = shape.instance
        price = pick.usd_per_hour
        # The rate as the catalog knows it: "on demand" only when no note qualifies it (a
        # DWS calendar-mode or listed rate is not called on demand), "(unconfirmed)" when
        # no source read confirmed it.
        cost = instance_cost(inst)
        basis = (
            f"{pick.count} x {cost.basis}" + (" (unconfirmed)" if cost.unconfirmed else "")
            if shape.price is not None
            else f"{inst.name}: no on-demand price in the catalog"
            + (f" ({inst.price.note})" if inst.price is not None and inst.price.note else "")
        )
        out.append(
            StageVerdict(
                role=pick.stage,
                instance=inst.name,
                gpu=inst.gpu,
                instances=pick.count,
                gpus_per_instance=inst.gpu_count,
                tp=shape.tp,
                replicas_per_instance=shape.replicas_per_instance,
                gpu_kv_pool_tokens_per_replica=dep.pool_tokens if dep else shape.pool_tokens,
                gpu_memory_gib=inst.gpu_memory_gib,
                host_memory_gib=inst.host_memory_gib,
                router=pick.router,
                max_batched_tokens=shape.max_batched_tokens,
                max_seqs=shape.max_seqs,
                page_tokens=dep.scheduler.page_tokens if dep else 16,
                tiers=tiers,
                mechanisms=mechanisms,
                storage_statement=statement,
                usd_per_hour=price,
                price_basis=basis,
                busy_fraction=None if summary is None else summary.busy_fraction,
                step_busy_fraction=None
                if outcome.run is None
                else step_busy(outcome.run, pick.stage),
                transport=transport_of(inst),
                gpu_architecture=shape.gpu.architecture,
            )
        )
    return tuple(out)


# A P-to-D link busier than this at p99 leaves a burst no room: the verdict warns (the same
# 80% the review's tier facts size against, tier_utilization_p99 / 0.8).
LINK_BUSY_WARNING = 0.8


def link_choice(candidate: Plan, result: ReplayResult) -> LinkChoice | None:
    """The P-to-D link of a disaggregated candidate, with its replayed load."""
    if candidate.topology == Topology.AGGREGATED or result.link is None:
        return None
    dec = shape_of(candidate.stages[-1]).instance
    fabric = dec.fabric
    derated = (
        ""
        if fabric.rdma
        else f"; no RDMA: KV over TCP at {format_value(fabric.link_efficiency, Unit.RATIO)} "
        "of line rate (fabric catalog)"
    )
    network = (
        f"{dec.name} back-end network ({dec.backend_network or 'RDMA'}, {_nic(dec, Via.BACKEND)}"
        f"{derated})"
        if dec.backend_network_gbit
        else f"{dec.name} front-end network ({_nic(dec, Via.FRONTEND)}{derated})"
    )
    link = result.link
    return LinkChoice(
        bytes_per_s=link.capability_bytes_per_s,
        network=network,
        p99_bytes_per_s=link.bytes_per_s.p99,
        peak_bytes_per_s=link.bytes_per_s.peak,
        utilization_p99=link.utilization.p99,
        efficiency=fabric.link_efficiency,
    )


def link_notes(link: LinkChoice | None) -> tuple[str, ...]:
    """A warning when the P-to-D link runs above LINK_BUSY_WARNING of its rate at p99."""
    if link is None or link.utilization_p99 is None or link.utilization_p99 <= LINK_BUSY_WARNING:
        return ()
    return (
        f"warning: the P-to-D link runs at {format_value(link.utilization_p99, Unit.RATIO)} of "
        f"its {format_value(link.bytes_per_s, Unit.BYTES_PER_S)} at p99 (above "
        f"{format_value(LINK_BUSY_WARNING, Unit.RATIO)}): KV transfers queue in bursts; give "
        "the decode stage a faster network or more instances",
    )


def transport_of(instance: InstanceSpec) -> Transport:
    """The instance's network between instances and the transfer settings it takes."""
    f = instance.fabric
    return Transport(
        fabric=f.name,
        display_name=f.display_name,
        rdma=f.rdma,
        mooncake_protocol=f.mooncake_protocol,
        nixl_backend=f.nixl_backend,
        device_hint=f.device_hint,
        link_efficiency=f.link_efficiency,
        source="; ".join(f.source),
    )


def _nic(instance: InstanceSpec, via: Via) -> str:
    """A network's line rate (catalogs quote Gbit/s) as the bandwidth every report shows."""
    return format_value(nic_bytes_per_s(instance, via) or 0.0, Unit.BYTES_PER_S)


def token_prices(
    candidate: Plan,
    result: ReplayResult,
    input_tokens: float,
    output_tokens: float,
    span_s: float,
) -> tuple[float | None, float | None]:
    """$ per million input and output tokens at the replayed load.

    Disaggregated: the prefill stage's $/h over input tokens per hour, the decode stage's over
    output tokens. Aggregated: the fleet's $/h split by the replayed GPU-time share of each
    stage (prefill share to input tokens, the rest to output tokens).
    """
    if span_s <= 0 or input_tokens <= 0 or output_tokens <= 0:
        return None, None
    per_hour_in = input_tokens / span_s * S_PER_HOUR / TOKENS_PER_MILLION
    per_hour_out = output_tokens / span_s * S_PER_HOUR / TOKENS_PER_MILLION
    if candidate.topology == Topology.AGGREGATED:
        usd = candidate.usd_per_hour
        share = result.stage_split.prefill_share
        if usd is None or share is None:
            return None, None
        return usd * share / per_hour_in, usd * (1 - share) / per_hour_out
    pre, dec = candidate.stages[0].usd_per_hour, candidate.stages[1].usd_per_hour
    return (
        None if pre is None else pre / per_hour_in,
        None if dec is None else dec / per_hour_out,
    )


def summary_of(outcome: Outcome, lost: LossReason | None, why: str) -> CandidateSummary:
    """One replayed outcome for the runners-up and the chart."""
    c = outcome.plan
    return CandidateSummary(
        label=c.label(),
        topology=c.topology,
        gpus=c.gpus,
        usd_per_hour=c.usd_per_hour,
        ttft_p90_s=_finite(outcome.ttft_s.get("p90")),
        ttft_p99_s=_finite(outcome.ttft_s.get("p99")),
        tpot_p90_s=_finite(outcome.tpot_s.get("p90")),
        tpot_p99_s=_finite(outcome.tpot_s.get("p99")),
        meets_slo=outcome.meets,
        replayed=not outcome.error,
        lost=lost,
        why=why,
    )


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def _cost_text(c: Plan) -> str:
    usd = c.usd_per_hour
    return price(usd, "h") if usd is not None else f"{plural(c.gpus, 'GPU')}, unpriced"


def _lost_on_cost(loser: Plan, chosen: Plan) -> str:
    a, b = loser.usd_per_hour, chosen.usd_per_hour
    if a is not None and b is not None:
        if math.isclose(a, b) and loser.gpus == chosen.gpus:
            return (
                f"meets the SLO for the same {price(a, 'h')} and GPUs; the chosen one keeps the "
                "larger margin to the SLO"
            )
        return f"meets the SLO for {price(a, 'h')} against {price(b, 'h')}"
    if a is None and b is not None:
        return f"meets the SLO but is unpriced ({loser.gpus} GPUs); the chosen one is priced"
    return f"meets the SLO with {loser.gpus} GPUs against {chosen.gpus} (no prices to compare)"


def runners_up(
    found: ProviderSearch, chosen: Outcome, failed: Mapping[str, str]
) -> tuple[tuple[CandidateSummary, ...], tuple[CandidateSummary, ...]]:
    """The runners-up with why each lost, and every replayed candidate (for the chart).

    Figures are the sample's; a candidate that met the SLO there but not on the whole trace
    (``failed``) lost on the SLO.
    """
    every: list[CandidateSummary] = []
    ups: list[tuple[tuple, CandidateSummary]] = []
    chosen_doc = chosen.doc
    tried: list[Tried] = list(found.tried) + ([found.tier_outcome] if found.tier_outcome else [])
    for t in tried:
        for o in t.outcomes:
            if o.doc == chosen_doc:
                every.append(summary_of(o, None, "chosen"))
                continue
            if repr(o.doc) in failed:
                s = summary_of(
                    o,
                    LossReason.SLO,
                    f"met the SLO on the sample; the whole trace {failed[repr(o.doc)]}",
                )
            elif o.meets:
                s = summary_of(o, LossReason.COST, _lost_on_cost(o.plan, chosen.plan))
            elif o.error:
                s = summary_of(o, LossReason.CONSTRAINT, o.error)
            else:
                s = summary_of(o, LossReason.SLO, o.why_not())
            every.append(s)
        # Each configuration's best outcome (or its last miss) is a runner-up.
        rep = t.best if t.best is not None else (t.outcomes[-1] if t.outcomes else None)
        if rep is not None and rep.doc != chosen_doc:
            lost = (
                LossReason.COST
                if rep.meets
                else (LossReason.CONSTRAINT if rep.error else LossReason.SLO)
            )
            why = (
                _lost_on_cost(rep.plan, chosen.plan)
                if rep.meets
                else (rep.error or t.why or rep.why_not())
            )
            if repr(rep.doc) in failed:
                lost = LossReason.SLO
                why = f"met the SLO on the sample; the whole trace {failed[repr(rep.doc)]}"
            ups.append(((0 if rep.meets else 1, *cost_key(rep.plan)), summary_of(rep, lost, why)))
    # The chosen configuration with one instance fewer: why the count is not lower.
    below = [
        o
        for t in tried
        for o in t.outcomes
        if not o.meets and not o.error and _same_shape(o.plan, chosen.plan)
    ]
    if below:
        near = max(below, key=lambda o: o.plan.gpus)
        ups.append(((1, *cost_key(near.plan)), summary_of(near, LossReason.SLO, near.why_not())))
    for config in found.bound_pruned[:2]:
        ups.append(((2, *config.cost_bound, 0), _bound_summary(config, chosen.plan)))
    for config in found.capped[:2]:
        ups.append(((3, *config.cost_estimate, 0), _capped_summary(config)))
    if not any(s.lost is None for s in every):
        every.append(summary_of(chosen, None, "chosen (replayed on the whole trace)"))
    ups.sort(key=lambda kv: kv[0])
    seen: set[str] = set()
    out = []
    for _, s in ups:
        if s.label in seen:
            continue
        seen.add(s.label)
        out.append(s)
    return tuple(out[:MAX_RUNNERS_UP]), tuple(every)


def _tier_names(c: Plan) -> tuple[tuple[str, ...], ...]:
    """Each stage's tiers by name and storage option (what a tier note speaks about)."""
    return tuple(
        tuple(f"{t.name}:{t.spec.name if t.spec else ''}" for t in s.tiers) for s in c.stages
    )


def _same_shape(a: Plan, b: Plan) -> bool:
    return a.topology == b.topology and all(
        shape_of(x).instance.name == shape_of(y).instance.name and shape_of(x).tp == shape_of(y).tp
        for x, y in zip(a.stages, b.stages, strict=False)
    )


def _bound_summary(config: Config, chosen: Plan) -> CandidateSummary:
    priced, value = config.cost_bound
    gpus = sum(n * s.instance.gpu_count for _, s, n, _ in config.shapes)
    if priced == 1 and chosen.usd_per_hour is not None:
        why = (
            "not replayed: an instance of it has no on-demand price, so it cannot be compared "
            "on cost with the priced deployments"
        )
    else:
        bound = price(value, "h") if priced == 0 else plural(value, "GPU")
        why = (
            f"not replayed: even at its busy-time bound it costs {bound}, no less than the "
            f"chosen {_cost_text(chosen)}"
        )
    return _unreplayed(config, gpus, priced, value, why)


def _capped_summary(config: Config) -> CandidateSummary:
    priced, value = config.cost_estimate
    gpus = sum(e * s.instance.gpu_count for _, s, _, e in config.shapes)
    est = price(value, "h") if priced == 0 else plural(value, "GPU")
    why = (
        f"not replayed: its estimated cost ({est}) ranks it after the {MAX_CONFIGS} "
        "configurations replayed per provider"
    )
    return _unreplayed(config, gpus, priced, value, why)


def _unreplayed(config: Config, gpus: int, priced: int, value: float, why: str) -> CandidateSummary:
    """A configuration left out on cost before any replay: no latencies to show."""
    return CandidateSummary(
        label=config.label(),
        topology=config.topology,
        gpus=gpus,
        usd_per_hour=value if priced == 0 else None,
        ttft_p90_s=None,
        ttft_p99_s=None,
        tpot_p90_s=None,
        tpot_p99_s=None,
        meets_slo=False,
        replayed=False,
        lost=LossReason.COST,
        why=why,
    )


def _tier_notes(found: ProviderSearch, cand: Plan) -> tuple[str, ...]:
    """Why the chosen fleet has the tiers it has.

    The search's note when it was about this fleet's shape, else the stages' own (the whole
    trace may have chosen another shape than the sample). A fleet without the tier
    ``--storage`` asked for says so, whichever shape won.
    """
    chosen = found.chosen.plan if found.chosen is not None else None
    if (
        chosen is not None
        and _same_shape(chosen, cand)
        and _tier_names(chosen) == _tier_names(cand)
        and found.tier_note
    ):
        notes: tuple[str, ...] = (found.tier_note,)
    else:
        notes = tuple(dict.fromkeys(s.tier_note for s in cand.stages if s.tier_note))
    asked = found.forced_storage
    bought = any(t.spec is not None and t.spec.name == asked for s in cand.stages for t in s.tiers)
    if not asked or bought or any(f"--storage {asked}" in n for n in notes):
        return notes
    why = "; ".join(notes) or "the chosen fleet has no capacity tier"
    return (f"--storage {asked} was not bought: {why}",)


def verdict_of(
    found: ProviderSearch,
    outcome: Outcome,
    result: ReplayResult,
    plan: Plan,
    input_tokens: float,
    output_tokens: float,
    span_s: float,
    notes: Sequence[str] = (),
    failed: Mapping[str, str] | None = None,
) -> Verdict:
    """The chosen verdict of one provider.

    ``failed`` maps the plan documents (as ``repr``) of candidates that met the SLO on the
    sample but not on the whole trace to why.
    """
    cand = outcome.plan
    stages = stage_verdicts(cand, outcome, result)
    usd_in, usd_out = token_prices(cand, result, input_tokens, output_tokens, span_s)
    ups, every = runners_up(found, outcome, failed or {})
    usd = cand.usd_per_hour
    unpriced = [s.instance for s in stages if s.usd_per_hour is None]
    chosen_by = (
        "the lowest $/h (on-demand prices) among the deployments that meet the SLO"
        if usd is not None
        else "the fewest GPUs among the deployments that meet the SLO: "
        + ", ".join(dict.fromkeys(unpriced))
        + " has no price in the catalog, so no deployment is called cheapest"
    )
    unconfirmed: list[str] = []
    for pick in cand.stages:
        inst = shape_of(pick).instance
        if inst.price is not None and inst.price.unconfirmed:
            unconfirmed.append(f"{inst.name} price")
        unconfirmed += [f"{inst.name}.{f}" for f in inst.unconfirmed]
        for t in pick.tiers:
            unconfirmed += list(t.unconfirmed)
    costs = [instance_cost(shape_of(p).instance) for p in cand.stages]
    kinds = {c.kind for c in costs if c.usd_per_hour is not None}
    kind = "" if usd is None else (kinds.pop() if len(kinds) == 1 else "mixed")
    if kind and kind != "on_demand":
        chosen_by = chosen_by.replace("(on-demand prices)", f"({kind_text(kind)} rates)")
    if unconfirmed and usd is not None:
        chosen_by += "; some figures it rests on are unconfirmed (listed)"
    link = link_choice(cand, result)
    return Verdict(
        provider=found.provider,
        status=VerdictStatus.CHOSEN,
        reason=f"{cand.label()} meets the SLO on the replay",
        topology=cand.topology,
        stages=stages,
        link=link,
        usd_per_hour=usd,
        usd_per_m_input_tokens=usd_in,
        usd_per_m_output_tokens=usd_out,
        chosen_by=chosen_by,
        slo=slo_attained(outcome),
        runners_up=ups,
        candidates=every,
        pruned=tuple(found.pruned),
        unconfirmed=tuple(dict.fromkeys(unconfirmed)),
        notes=tuple(notes) + _tier_notes(found, cand) + link_notes(link),
        plan=plan_mapping(plan),
        replayed_plan=plan,
        price_kind=kind,
        price_unconfirmed=usd is not None and any(c.unconfirmed for c in costs),
    )


def robust_notes(robust: Robustness | None) -> tuple[str, ...]:
    """What the verdict says of its stresses and of GPUs idling between bursts."""
    if robust is None:
        return ()
    out = [f"{s.statement} (replayed)" for s in robust.stresses if not s.holds]
    busy, floor, burst = robust.step_busy_fraction, robust.step_busy_floor, robust.burst_fleet
    if robust.sized_for_bursts and busy is not None and floor is not None:
        ratio = robust.arrival_peak_to_mean
        peak = (
            ""
            if ratio is None
            else f"arrivals peak at {format_value(ratio, Unit.MULTIPLE)} the mean minute; "
        )
        cheaper = (
            "no fewer instances meet the targets at p90"
            if burst is None
            else f"{burst_text(burst)} meets the targets at p90 and queues the bursts"
        )
        out.append(
            f"sized for bursts: the GPUs execute steps {format_value(busy, Unit.RATIO)} of the "
            f"replay (under {format_value(floor, Unit.RATIO)}); {peak}{cheaper}"
        )
    return tuple(out)


def burst_text(b: BurstFleet) -> str:
    """The p90 fleet, its cost and its TTFT p99 (what queueing the bursts costs the tail)."""
    cost = price(b.usd_per_hour, "h") if b.usd_per_hour is not None else plural(b.gpus, "GPU")
    tail = "" if b.ttft_p99_s is None else f"; TTFT p99 {format_value(b.ttft_p99_s, Unit.SECONDS)}"
    return f"{b.label} ({cost}{tail})"


def kind_text(kind: str) -> str:
    """A price kind in words: "on-demand", "DWS calendar-mode", "mixed (on-demand and other)"."""
    return KIND_WORDS.get(kind, kind.replace("_", " "))


KIND_WORDS = {
    "on_demand": "on-demand",
    "calendar": "calendar-mode (reserved 1 to 90 days)",
    "capacity_block": "capacity-block",
    "mixed": "mixed-kind",
}


def no_verdict(
    found: ProviderSearch,
    reason: str,
    status: VerdictStatus,
    closest: ClosestMiss | None = None,
) -> Verdict:
    """A provider where nothing meets the SLO (the closest shown, priced) or nothing can run."""
    every: list[CandidateSummary] = []
    nearest_first: list[tuple[float, CandidateSummary]] = []
    for t in found.tried:
        for o in t.outcomes:
            lost = LossReason.CONSTRAINT if o.error else LossReason.SLO
            s = summary_of(o, lost, o.error or o.why_not())
            every.append(s)
            miss = float(np.mean([1.0 - v for v in o.attainment.values()])) if o.attainment else 1.0
            nearest_first.append((miss, s))
    nearest_first.sort(key=lambda kv: kv[0])
    return Verdict(
        provider=found.provider,
        status=status,
        reason=reason,
        runners_up=tuple(s for _, s in nearest_first[:MAX_RUNNERS_UP]),
        candidates=tuple(every),
        pruned=tuple(found.pruned),
        closest=closest,
    )


def closest_miss(outcome: Outcome, basis: str) -> ClosestMiss:
    """A deployment that misses the SLO, priced, with the loosest targets it meets."""
    c = outcome.plan
    got = reached(outcome)
    # A tier that cannot keep up, or a queue that grows, is not cured by looser targets.
    fixable = not (outcome.error or outcome.tier_problem or outcome.overloaded)
    # With headroom the replay was held to the targets less it: the --slo to offer is the
    # one whose limits accept what it reached.
    keep = 1.0 - outcome.headroom
    asked = {k: v / keep for k, v in outcome.targets.items()}
    need = {k: v / keep for k, v in got.items()}
    loosest = loosened(asked, need) if fixable else None
    costs = [instance_cost(shape_of(s).instance) for s in c.stages]
    bases = [x.basis for x in costs if x.usd_per_hour is not None]
    kinds = {x.kind for x in costs if x.usd_per_hour is not None}
    kind = "" if c.usd_per_hour is None else (kinds.pop() if len(kinds) == 1 else "mixed")
    return ClosestMiss(
        label=c.label(),
        gpus=c.gpus,
        usd_per_hour=c.usd_per_hour,
        price_basis="; ".join(dict.fromkeys(bases)) if c.usd_per_hour is not None else "unpriced",
        reached={k: (v if math.isfinite(v) else None) for k, v in got.items()},
        loosest=loosest,
        slo_text="" if loosest is None else slo_text(loosest),
        basis=basis,
        why_not=outcome.why_not(),
        headroom=outcome.headroom,
        price_kind=kind,
        price_unconfirmed=c.usd_per_hour is not None and any(x.unconfirmed for x in costs),
    )


def loosening(miss: ClosestMiss, targets: Mapping[str, float]) -> float:
    """How much looser than ``targets`` a closest miss needs them (the largest ratio; inf: none)."""
    if miss.loosest is None:
        return math.inf
    got = miss.loosest
    return max((got.get(k, math.inf) / t for k, t in targets.items() if t > 0), default=1.0)


def nearest(outcomes: Sequence[Outcome]) -> Outcome | None:
    """The outcome nearest its targets: runnable, the least loosening, then the cheapest.

    Loosening is read on the offered (rounded-up) targets, so two deployments that one looser
    ``--slo`` accepts alike are ranked by cost, then by the requests they leave short.
    """
    # Whole deployments only: a prefill stage replayed alone answers TTFT, not the SLO.
    runnable = [o for o in outcomes if not o.error and o.attainment and o.whole]
    if not runnable:
        return None

    def key(o: Outcome) -> tuple:
        offer = None if o.tier_problem or o.overloaded else loosened(o.targets, reached(o))
        ratio = (
            math.inf
            if offer is None
            else max((offer[k] / t for k, t in o.targets.items() if t > 0), default=1.0)
        )
        return (ratio, *cost_key(o.plan), shortfall(o))

    return min(runnable, key=key)
