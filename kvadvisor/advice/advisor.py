"""The advisor (pure): the deployment verdicts, the recommendation read off them, the rules run.

1. The search (:mod:`kvadvisor.advice.recommend`) replays candidate deployments per provider and
   keeps the cheapest that meets the SLO; each provider's verdict is in
   ``recommendation.verdict``.
2. ``recommendation.prefill``/``decode`` describe the primary verdict's stages (an aggregated
   fleet's serving stage fills both): instance, count, TP, replicas, the tiers on the nodes
   that read them, the replayed demand and utilization, the runners-up.
3. The configuration facts (instance, tiers, utilization) come from that verdict and its
   replay, so the rules judge the deployment the verdict chose, and run over every fact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvadvisor.advice.inputs import AdvisorInputs
from kvadvisor.advice.recommend import (
    RecommendInputs,
    TraceView,
    abstain_all,
    providers_in,
    recommend,
)
from kvadvisor.advice.slo import slo_targets
from kvadvisor.advice.tiers import CAPACITY_TIER, HOST_TIER
from kvadvisor.advice.verdicts import burst_text
from kvadvisor.catalog.instances import InstanceSpec, find_instance
from kvadvisor.catalog.models import ModelSpec
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.catalog.storage import StorageSpec, find_storage
from kvadvisor.checker import did_you_mean, with_hint
from kvadvisor.deploy import access, host_tier_name, reach
from kvadvisor.errors import CatalogError, ConfigError
from kvadvisor.execute import SERIAL, Executor
from kvadvisor.facts.registry import collect
from kvadvisor.facts.storage import TARGET_TIER_UTILIZATION, devices_for, devices_for_capacity
from kvadvisor.facts.workload import div, hit_ratio_at, report_facts
from kvadvisor.results.common import Utilization
from kvadvisor.results.report import (
    AdviceReport,
    Alternative,
    Evidence,
    Finding,
    ModelDeployment,
    PrefixCache,
    Recommendation,
    Requirement,
    RuleOutcome,
    StageRecommendation,
    Tier,
)
from kvadvisor.results.verdict import StageVerdict, TierChoice, Verdict, VerdictSet
from kvadvisor.rules import Evaluation, FactValue, Rule, evaluate, workload_rules
from kvadvisor.rules.engine import matches, resolve_where
from kvadvisor.units import BYTES_PER_GIB, S_PER_DAY
from kvadvisor.vocab import Stage, TierRole

# Share of GPU memory usable by weights + KV (engines keep the rest for activations; vLLM's
# default gpu_memory_utilization is 0.9).
GPU_MEMORY_USABLE = 0.9
MAX_ALTERNATIVES = 5
STAGES = (Stage.PREFILL, Stage.DECODE)
# Storage whose drives the KV writes wear (ST08's drive writes per day): the node's own NVMe.
WORN_CATEGORIES = ("local_nvme", "ephemeral")
PROVIDER_CHOICES = ("aws", "gcp", "azure", "alibaba", "onprem")


@dataclass(frozen=True)
class AdvisorOptions:
    """Advisor knobs: chunk size, pinned storage or instances, providers, the SLO."""

    chunk_tokens: int = 256
    storage: str | None = None
    instance: Mapping[Stage, str] = field(default_factory=dict)  # stage (or both) -> name
    providers: tuple[str, ...] = ()  # () = every provider in the catalog
    slo: str | None = None  # --slo text; None = the MLPerf default for the model
    headroom: float = 0.0  # a target is met only within (1 - headroom) x it
    spare: bool = False  # N+1: one instance per stage beyond the fewest that meet the SLO
    price_kind: str = "on_demand"  # --price-kind: the rates the primary verdict compares
    engine: str = "vllm"  # the serving engine the verdicts replay (its KV page)
    search: bool = True  # False: no deployment search (--no-search); every verdict abstains


@dataclass(frozen=True)
class Advice:
    """What the advisor returns: the recommendation, the findings and all facts used."""

    recommendation: Recommendation
    findings: tuple[Finding, ...]
    facts: dict[str, FactValue]
    evaluation: Evaluation


def _v(facts: Mapping[str, FactValue], name: str) -> float | None:
    f = facts.get(name)
    return None if f is None else float(f.value)


def _capacity_tier(sv: StageVerdict) -> TierChoice | None:
    return next((t for t in sv.tiers if t.name == CAPACITY_TIER), None)


def _host(sv: StageVerdict) -> TierChoice | None:
    return next((t for t in sv.tiers if t.name == HOST_TIER), None)


def _load_tier(sv: StageVerdict) -> TierChoice | None:
    """The tier cached KV is really loaded from: the lowest whose replayed loads read it.

    Tiers are listed fastest first below the GPU pool; a hit is loaded from the fastest tier
    holding it, so the lowest tier that is read at all is the one whose IOPS, latency and
    GPUDirect path bound the loads. None when no tier is read (hits served from GPU memory).
    """
    read = [t for t in sv.tiers if t.read_demand is not None and t.read_demand.mean > 0]
    return read[-1] if read else None


def _load_facts(
    sv: StageVerdict,
    inst: InstanceSpec,
    storage: Mapping[str, StorageSpec],
    io_size: float | None,
) -> list[tuple[str, Any]]:
    """Facts of the tier the loading stage reads cached KV from, per loading node.

    ``sv`` is the stage that loads prefix hits before prefill (the prefill stage, or the
    serving stage of an aggregated fleet). Demand is the replay's (loads asked of the tier,
    per window), a pool's divided among the stage's nodes; the tier's read IOPS are what one
    node reaches on it (:func:`kvadvisor.deploy.reach`), its latency and GPUDirect Storage
    path the catalog's.
    """
    tier = _load_tier(sv)
    if tier is None or tier.read_demand is None:
        return []
    name = host_tier_name(inst) if tier.name == HOST_TIER else tier.storage
    spec = storage.get(name)
    nodes = sv.instances if tier.scope == "pooled" else 1
    mean, p99 = tier.read_demand.mean / nodes, tier.read_demand.p99 / nodes
    iops = latency = gds = None
    if spec is not None:
        devices = max(1, tier.devices)
        device_gib = (
            None if tier.capacity_bytes is None else tier.capacity_bytes / devices / BYTES_PER_GIB
        )
        iops = reach(inst, spec, devices, device_gib, sv.instances).read_iops
        latency, gds = spec.effective_read_latency_us, spec.gds_support
    return [
        ("load_tier_storage", name),
        ("load_tier_read_iops", iops),
        ("load_tier_read_latency_us", latency),
        ("load_tier_gds", gds),
        ("load_read_bytes_per_s_mean", mean),
        ("load_read_bytes_per_s_p99", p99),
        ("load_read_iops_p99", div(p99, io_size)),
    ]


def _tiers(sv: StageVerdict, inst: InstanceSpec) -> tuple[Tier, ...]:
    """The stage's tiers as the report lists them (capacity per instance, or per pool)."""
    out = []
    for t in sv.tiers:
        role = TierRole.HOST_POOL if t.name == HOST_TIER else TierRole.CAPACITY
        out.append(
            Tier(
                host_tier_name(inst) if t.name == HOST_TIER else t.storage,
                t.category,
                role,
                None if t.capacity_bytes is None else t.capacity_bytes / BYTES_PER_GIB,
                t.devices,
                t.scope == "pooled",
            )
        )
    return tuple(out)


def _alternatives(verdict: Verdict) -> tuple[Alternative, ...]:
    return tuple(
        Alternative(
            "deployment",
            c.label,
            i + 1,
            f"{c.lost.value if c.lost else 'chosen'}: {c.why}",
            c.meets_slo,
        )
        for i, c in enumerate(verdict.runners_up[:MAX_ALTERNATIVES])
    )


def _stage_rec(
    stage: Stage, verdict: Verdict, sv: StageVerdict, inst: InstanceSpec, chunk: int, facts: Any
) -> StageRecommendation:
    """One stage's recommendation read off the verdict (decode of an aggregated fleet too)."""
    loads = stage == Stage.PREFILL
    cap = _capacity_tier(sv) if loads else None
    host = _host(sv) if loads else None
    tier = cap or host
    loads_m = next((m for m in sv.mechanisms if m.name == "prefix_loads"), None)
    writes_m = next((m for m in sv.mechanisms if m.name == "new_kv_writes"), None)
    util = None
    if tier is not None and tier.write_utilization is not None:
        w = tier.write_utilization
        util = Utilization(
            w.mean, w.p99, w.peak, f"replayed new-KV writes / {tier.storage} write bandwidth"
        )
    derivation: list[str] = []
    if loads:
        derivation.append(
            "replayed: new KV written through to every tier when prefill completes; prefix "
            "hits below the GPU pool loaded before prefill (per node, p99 of 1 s windows)"
        )
        if tier is not None:
            derivation.append(f"{tier.name}: {tier.why}")
    else:
        derivation.append(
            sv.storage_statement
            if sv.role == Stage.DECODE
            else ("decode reads KV from the GPU pool only: no storage I/O is bought for it")
        )
    notes = [sv.storage_statement] if sv.storage_statement else []
    notes.append(f"{inst.name}: {sv.price_basis}")
    if verdict.topology == "aggregated":
        notes.append("aggregated: prefill and decode share these instances and replicas")
    return StageRecommendation(
        instance=inst.name,
        storage=(
            tier.storage
            if tier is not None and tier.name == CAPACITY_TIER
            else (host_tier_name(inst) if tier is not None else None)
        ),
        instance_count=sv.instances,
        gpu=inst.gpu,
        tiers=_tiers(sv, inst) if loads else (),
        required=Requirement(
            write_bytes_per_s=None
            if not loads or writes_m is None or writes_m.bytes_per_s is None
            else writes_m.bytes_per_s.p99,
            read_bytes_per_s=None
            if not loads or loads_m is None or loads_m.bytes_per_s is None
            else loads_m.bytes_per_s.p99,
            capacity_gib=None
            if tier is None or tier.capacity_bytes is None
            else tier.capacity_bytes / BYTES_PER_GIB,
            derivation=tuple(derivation),
        ),
        chunk_tokens=chunk,
        retention_s=_v(facts, "retention_ttl_s") if loads else None,
        utilization=util,
        alternatives=_alternatives(verdict),
        notes=tuple(notes),
        gpus_per_instance=inst.gpu_count,
        gpu_memory_gib=inst.gpu_memory_gib,
        host_memory_gib=inst.host_memory_gib,
        tp=sv.tp,
        replicas_per_instance=sv.replicas_per_instance,
        topology=verdict.topology,
    )


def _config_facts(
    verdict: Verdict,
    instances: Mapping[str, InstanceSpec],
    storage: Mapping[str, StorageSpec],
    facts: Mapping[str, FactValue],
    prefix_cache: PrefixCache | None,
    breakeven: Mapping[str, tuple[float | None, float | None]],
) -> list[tuple[str, Any]]:
    """The configuration facts of the verdict's stages (names in facts/registry.py)."""
    pre = verdict.serves(Stage.PREFILL)
    dec = verdict.serves(Stage.DECODE)
    assert pre is not None and dec is not None
    pi, di = instances[pre.instance], instances[dec.instance]
    weights = _v(facts, "model_weights_gib")
    kv = _v(facts, "kv_bytes_per_token")
    gpu_pool = (
        GPU_MEMORY_USABLE * pi.gpu_memory_total_gib - weights if weights is not None else None
    )
    host = _host(pre)
    host_pool = (
        None if host is None or host.capacity_bytes is None else host.capacity_bytes / BYTES_PER_GIB
    )
    cap = _capacity_tier(pre)
    writes = next((m for m in pre.mechanisms if m.name == "new_kv_writes"), None)
    w_p99 = None if writes is None or writes.bytes_per_s is None else writes.bytes_per_s.p99
    w_mean = None if writes is None or writes.bytes_per_s is None else writes.bytes_per_s.mean
    spec = storage.get(cap.storage) if cap is not None else None
    out: list[tuple[str, Any]] = [
        ("prefill_instance_count", pre.instances),
        ("decode_instance_count", dec.instances),
        ("prefill_gpu_bf16_tflops", pi.gpu_bf16_tflops),
        ("decode_gpu_bf16_tflops", di.gpu_bf16_tflops),
        ("prefill_gpu_memory_bandwidth_gbps", pi.gpu_memory_bandwidth_gbps),
        ("decode_gpu_memory_bandwidth_gbps", di.gpu_memory_bandwidth_gbps),
        ("gpu_memory_total_gib", pi.gpu_memory_total_gib),
        ("gpu_kv_pool_gib", gpu_pool),
        ("host_memory_gib", pi.host_memory_gib),
        ("host_kv_pool_gib", host_pool),
        ("host_kv_pool_fleet_gib", None if host_pool is None else host_pool * pre.instances),
        ("prefill_write_bytes_per_s_p99_per_instance", w_p99),
    ]
    if cap is not None and spec is not None:
        wu = cap.write_utilization
        io_size, unit = _v(facts, "io_size_bytes"), spec.io_unit_bytes
        disk_cap = pi.disk_cap_mbps * 1e6 if pi.disk_cap_mbps and spec.category == "block" else None
        dwpd = None
        # Drive writes per day wear drives the user's writes reach: a cloud block volume is
        # carved from the provider's pool and sold with no endurance rating to spend (ST08).
        if spec.category in WORN_CATEGORIES and cap.capacity_bytes and w_mean is not None:
            dwpd = w_mean * S_PER_DAY / cap.capacity_bytes
        # The devices the search sizes the tier to (the p99 at 80%, its capacity) against
        # those its peak fills: UT01 judges "sized for the peak" as review's RV11 does.
        devices = max(1, cap.devices)
        for_p99 = devices_for(devices, None if wu is None else wu.p99, TARGET_TIER_UTILIZATION)
        for_cap = devices_for_capacity(cap.capacity_bytes, devices, spec.largest_device_bytes)
        for_peak = devices_for(devices, None if wu is None else wu.peak)
        out += [
            ("prefill_storage_write_bytes_per_s", cap.write_bytes_per_s),
            ("prefill_storage_write_utilization_mean", None if wu is None else wu.mean),
            ("prefill_storage_write_utilization_p99", None if wu is None else wu.p99),
            ("prefill_storage_write_utilization_peak", None if wu is None else wu.peak),
            ("prefill_storage_io_unit_bytes", spec.io_unit_bytes),
            ("prefill_storage_gds", spec.gds_support),
            (
                "write_amplification_ratio",
                None if not io_size or not unit else -(-io_size // unit) * unit / io_size,
            ),
            ("prefill_disk_cap_bytes_per_s", disk_cap),
            ("prefill_disk_cap_utilization_p99", div(w_p99, disk_cap)),
            ("ssd_drive_writes_per_day", dwpd),
            ("prefill_storage_devices_for_peak", for_peak),
            ("prefill_storage_devices_needed", None if for_p99 is None else max(for_p99, for_cap)),
        ]
    out += _load_facts(pre, pi, storage, _v(facts, "io_size_bytes"))
    if kv and prefix_cache is not None and gpu_pool is not None:
        n = pre.instances
        out.append(
            (
                "prefix_hit_ratio_at_gpu_pool",
                hit_ratio_at(prefix_cache, gpu_pool * BYTES_PER_GIB / kv * n),
            )
        )
        if host_pool is not None:
            host_tokens = max(gpu_pool, host_pool) * BYTES_PER_GIB / kv * n
            out.append(("prefix_hit_ratio_at_host_pool", hit_ratio_at(prefix_cache, host_tokens)))
    inflight = _v(facts, "kv_inflight_gib_p99")
    out.append(
        (
            "kv_inflight_gib_p99_per_instance",
            None
            if inflight is None
            else inflight * (_v(facts, "split_instances") or 1) / dec.instances,
        )
    )
    return out


def _idle_facts(verdict: Verdict) -> list[tuple[str, Any]]:
    """Whether the chosen fleet idles between bursts, and the cheaper fleet at p90 (UT03)."""
    r = verdict.robustness
    if r is None:
        return []
    b = r.burst_fleet
    if b is not None:
        burst: str | None = burst_text(b)
    elif r.sized_for_bursts:
        burst = "none: no fewer instances meet the targets at p90"
    else:
        burst = None  # one instance per stage: it cannot shrink, whatever its traffic
    return [
        ("fleet_step_busy_fraction", r.step_busy_fraction),
        ("fleet_occupancy_fraction", r.occupancy_fraction),
        ("arrival_peak_to_mean", r.arrival_peak_to_mean),
        ("fleet_gpus", sum(s.gpus for s in verdict.stages)),
        ("burst_fleet", burst),
        ("burst_fleet_gpus", None if b is None else b.gpus),
        ("burst_fleet_ttft_p99_s", None if b is None else b.ttft_p99_s),
    ]


# The profiler's load-against-recompute tier that is the verdict's host tier: host memory read
# over the GPUs' host link (kvadvisor/perfmodel/transfer.py).
HOST_BREAKEVEN_TIER = "host-dram-pcie"
BREAKEVEN_FACTS = ("breakeven_prefix_tokens", "hit_tokens_below_breakeven_share")


def _breakeven_table(report: AdviceReport) -> dict[str, tuple[float | None, float | None]]:
    """The profiler's load-against-recompute figures per reference tier."""
    return {
        t.tier: (t.break_even_tokens, t.hit_token_share_below)
        for t in (report.io.load_vs_recompute if report.io is not None else ())
    }


def _breakeven_of_the_verdict(
    facts: dict[str, FactValue],
    verdict: Verdict,
    breakeven: Mapping[str, tuple[float | None, float | None]],
) -> None:
    """The load-against-recompute facts of the tier the verdict loads prefixes from.

    The profiler's figures are for a reference NVMe tier; a verdict that loads from no tier
    below the GPU pool has no break-even (PF01 is then not evaluated, instead of advising on a
    tier that is not there), and one whose lowest tier is host memory takes the host link's.
    A capacity tier keeps the reference NVMe figures.
    """
    pre = verdict.serves(Stage.PREFILL)
    names = {t.name for t in pre.tiers} if pre is not None else set()
    if not names:
        for name in BREAKEVEN_FACTS:
            facts.pop(name, None)
    elif names == {HOST_TIER} and HOST_BREAKEVEN_TIER in breakeven:
        for name in BREAKEVEN_FACTS:
            facts.pop(name, None)
        facts.update(collect(zip(BREAKEVEN_FACTS, breakeven[HOST_BREAKEVEN_TIER], strict=True)))


def advise(
    workload: Mapping[str, FactValue],
    prefix_cache: PrefixCache | None,
    storage: Mapping[str, StorageSpec],
    instances: Mapping[str, InstanceSpec],
    rules: Sequence[Rule],
    verdicts: VerdictSet | None,
    breakeven: Mapping[str, tuple[float | None, float | None]] | None = None,
    chunk_tokens: int = 256,
    pinned: bool = False,
) -> Advice:
    """The recommendation read off the primary verdict, then the rules on every fact.

    Without a chosen primary verdict, each stage's recommendation names no instance and says
    why (the verdicts say what is missing); the rules then see the workload facts only.
    """
    facts: dict[str, FactValue] = dict(workload)
    primary = verdicts.primary_verdict if verdicts is not None else None
    stages: dict[str, StageRecommendation] = {}
    chosen: dict[str, InstanceSpec] = {}
    config: list[tuple[str, Any]] = []
    if primary is not None and primary.chosen:
        for stage in STAGES:
            sv = primary.serves(stage)
            assert sv is not None
            inst = instances[sv.instance]
            chosen[stage] = inst
            stages[stage] = _stage_rec(stage, primary, sv, inst, chunk_tokens, facts)
        config = _config_facts(primary, instances, storage, facts, prefix_cache, breakeven or {})
        config += _idle_facts(primary)
    else:
        why = (
            primary.reason
            if primary is not None
            else (verdicts.primary_why if verdicts is not None else "the search did not run")
        )
        for stage in STAGES:
            stages[stage] = StageRecommendation(None, None, notes=(f"no deployment: {why}",))
    config.append(("deployment_chosen", primary is not None and primary.chosen))
    if primary is not None and primary.chosen:
        config.append(("stage_gpus_searched", not pinned))
    facts.update(collect(config))
    if primary is not None and primary.chosen:
        _breakeven_of_the_verdict(facts, primary, breakeven or {})
    evaluation = evaluate(workload_rules(rules), facts)
    findings = tuple(
        _finding(f.rule, f.message, f.evidence, facts, storage, instances, chosen)
        for f in sorted(evaluation.fired, key=lambda f: (-f.rule.severity.rank, f.rule.code))
    )
    outcomes = tuple(
        sorted(
            [RuleOutcome(f.rule.code, f.rule.name, True, f.reason) for f in evaluation.fired]
            + [RuleOutcome(q.rule.code, q.rule.name, False, q.reason) for q in evaluation.quiet],
            key=lambda o: o.code,
        )
    )
    recommendation = Recommendation(
        prefill=stages[Stage.PREFILL],
        decode=stages[Stage.DECODE],
        shared_storage=False,
        rules=outcomes,
        facts={n: {"value": f.value, "unit": f.unit} for n, f in sorted(facts.items())},
        verdict=verdicts,
    )
    return Advice(recommendation, findings, facts, evaluation)


def _finding(
    rule: Rule,
    message: str,
    evidence: dict[str, Any],
    facts: Mapping[str, FactValue],
    storage: Mapping[str, StorageSpec],
    instances: Mapping[str, InstanceSpec],
    chosen: Mapping[str, InstanceSpec] | None = None,
) -> Finding:
    """A fired rule as a finding.

    Its storage candidates are options the chosen instance(s) of the rule's stage can have
    (never a drive a cloud VM cannot take).
    """
    candidates: tuple[str, ...] = ()
    rec = rule.recommend
    if rec is not None and rec.catalog is not None:
        query = resolve_where(rec.where, facts)
        if query is not None:
            on = [
                inst for stage, inst in (chosen or {}).items() if rule.stage in (stage, Stage.BOTH)
            ]
            rows = (
                [
                    s.as_row()
                    for s in storage.values()
                    if s.category != "memory" and all(access(i, s).ok for i in on)
                ]
                if rec.catalog == "storage"
                else [i.as_row() for i in instances.values()]
            )
            hits = [r for r in rows if matches(r, query)]
            if rec.rank_by:
                key = rec.rank_by.lstrip("-")
                hits = [r for r in hits if r.get(key) is not None]
                # Stable sort: equal keys keep catalog order (never alphabetical order).
                hits.sort(key=lambda r: r[key], reverse=rec.rank_by.startswith("-"))
            candidates = tuple(r["name"] for r in hits[:MAX_ALTERNATIVES])
    return Finding(
        code=rule.code,
        severity=rule.severity,
        stage=rule.stage,
        message=message,
        evidence={
            name: Evidence(item["value"], item["unit"], item["text"])
            for name, item in evidence.items()
        },
        name=rule.name,
        summary=rule.summary,
        action=rec.action if rec else "",
        candidates=candidates,
        references=rule.docs.references,
    )


# -- the report --------------------------------------------------------------------------------
def parse_instance_choice(values: Sequence[str]) -> dict[Stage, str]:
    """``--instance NAME`` for both stages, or ``prefill=NAME`` / ``decode=NAME``."""
    out: dict[Stage, str] = {}
    for value in values:
        given, sep, name = value.partition("=")
        stage = next((s for s in STAGES if s.value == given), None) if sep else Stage.BOTH
        name = name if sep else value
        if stage is None or not name:
            raise ConfigError(f"--instance {value!r}: expected NAME, prefill=NAME or decode=NAME")
        out[stage] = name
    return out


def parse_providers(values: Sequence[str]) -> tuple[str, ...]:
    """``--provider`` values, checked (ConfigError names the choices)."""
    out = []
    for value in values:
        for name in (v.strip().lower() for v in value.split(",")):
            if name not in PROVIDER_CHOICES:
                raise ConfigError(
                    with_hint(
                        f"--provider {name!r}: expected one of {', '.join(PROVIDER_CHOICES)}",
                        did_you_mean(name, PROVIDER_CHOICES),
                    )
                )
            if name not in out:
                out.append(name)
    return tuple(out)


def refresh_findings(
    report: AdviceReport,
    inputs: AdvisorInputs,
    options: AdvisorOptions,
    extra_facts: Mapping[str, Any] | None = None,
) -> AdviceReport:
    """The rules evaluated again on the report's sections as they now stand; same choice.

    After the recommended deployment is replayed, the stage split is the closed loop's; the
    facts drawn from the report (split, demand, cache) are recomputed, the advisor's own facts
    (tiers, configuration) kept, and the findings re-evaluated on them, so every finding quotes
    the figures the report shows. The recommendation itself is the one that was replayed.
    """
    rec = report.recommendation
    if rec is None:
        return report
    facts = collect((name, item["value"]) for name, item in rec.facts.items())
    facts.update(report_facts(report, chunk_tokens=options.chunk_tokens))
    facts.update(collect(_split_gpu_facts(report, inputs.perf).items()))
    facts.update(collect((extra_facts or {}).items()))
    primary = rec.verdict.primary_verdict if rec.verdict is not None else None
    if primary is not None and primary.chosen:
        _breakeven_of_the_verdict(facts, primary, _breakeven_table(report))
    chosen = {
        stage: inputs.instances[name]
        for stage in STAGES
        if (name := rec.stage(stage).instance) in inputs.instances
    }
    evaluation = evaluate(workload_rules(inputs.rules), facts)
    findings = tuple(
        _finding(f.rule, f.message, f.evidence, facts, inputs.storage, inputs.instances, chosen)
        for f in sorted(evaluation.fired, key=lambda f: (-f.rule.severity.rank, f.rule.code))
    )
    outcomes = tuple(
        sorted(
            [RuleOutcome(f.rule.code, f.rule.name, True, f.reason) for f in evaluation.fired]
            + [RuleOutcome(q.rule.code, q.rule.name, False, q.reason) for q in evaluation.quiet],
            key=lambda o: o.code,
        )
    )
    advised = {f.code for f in report.findings if f.code in {o.code for o in rec.rules}}
    others = tuple(f for f in report.findings if f.code not in advised)
    return replace(
        report,
        findings=others + findings,
        recommendation=replace(
            rec,
            rules=outcomes,
            facts={n: {"value": f.value, "unit": f.unit} for n, f in sorted(facts.items())},
        ),
    )


def _deployment(report: AdviceReport) -> ModelDeployment | None:
    return report.model.deployment if report.model is not None else None


def _split_gpu_facts(report: AdviceReport, gpus: PerfCatalogs) -> dict[str, float]:
    """Figures of the GPU the stage split was modeled on.

    TFLOPS and memory bandwidth of the GPU the stage split was modeled on, from the GPU
    catalog (``gpus``, with the user's files); empty when the split was measured on an unknown
    GPU.
    """
    deployment = _deployment(report)
    if report.stage_split is None or deployment is None or not deployment.gpu:
        return {}
    try:
        gpu = gpus.gpu(deployment.gpu)
    except CatalogError:
        return {}
    return {
        "split_gpu_bf16_tflops": gpu.bf16_dense_tflops,
        "split_gpu_memory_bandwidth_gbps": gpu.memory_bandwidth_gbps,
    }


def _catalog_model(report: AdviceReport, catalogs: PerfCatalogs) -> ModelSpec | None:
    """The report's model from the catalog (None for a model read from a config.json)."""
    if report.model is None or report.model.origin != "catalog":
        return None
    try:
        return catalogs.model(report.model.name)
    except CatalogError:
        return None


def _restricted(
    inputs: AdvisorInputs, options: AdvisorOptions
) -> tuple[Mapping[str, InstanceSpec], Mapping[str, StorageSpec]]:
    """The catalogs the search may use: pinned instances (--instance) and storage (--storage)."""
    instances: Mapping[str, InstanceSpec] = inputs.instances
    storage: Mapping[str, StorageSpec] = inputs.storage
    if options.instance:
        names = {find_instance(inputs.instances, n).name for n in options.instance.values()}
        instances = {k: v for k, v in inputs.instances.items() if k in names}
    if options.storage:
        fixed = find_storage(inputs.storage, options.storage)
        if options.instance:  # pinned: each must be able to have it
            for inst in instances.values():
                if not (acc := access(inst, fixed)).ok:
                    raise ConfigError(
                        f"--storage {fixed.name} cannot be used with {inst.name}: {acc.reason}"
                    )
        else:  # the search keeps the instances that can have it (its provider's, or on-prem)
            asked = set(options.providers or providers_in(instances))
            usable = {
                k: v for k, v in instances.items() if v.provider in asked and access(v, fixed).ok
            }
            if not usable:
                raise ConfigError(
                    f"--storage {fixed.name}: no instance of {', '.join(sorted(asked))} can "
                    f"have it ({fixed.name} is for {fixed.provider}); "
                    "pick storage with `kvadvisor catalog list storage`, or drop --provider"
                )
            instances = usable
        storage = {
            k: v for k, v in inputs.storage.items() if v.category == "memory" or k == fixed.name
        }
    return instances, storage


def _providers_of(
    options: AdvisorOptions, instances: Mapping[str, InstanceSpec]
) -> tuple[str, ...]:
    return options.providers or providers_in(instances)


# Why every verdict abstains when the search was not asked for (`analyze --no-search`).
SEARCH_LEFT_OUT = "the deployment search was left out (--no-search)"


def advise_report(
    report: AdviceReport,
    inputs: AdvisorInputs,
    options: AdvisorOptions,
    extra_facts: Mapping[str, Any] | None = None,
    view: TraceView | None = None,
    executor: Executor = SERIAL,
) -> AdviceReport:
    """The report with ``recommendation`` and ``findings`` filled from its own sections.

    ``view`` is the trace the search replays (None: no search; the verdicts abstain), on
    ``executor`` (docs/scale.md).
    ``extra_facts`` are facts a producer computed from results the report does not carry
    (registered names; None values are dropped); they take precedence.
    """
    workload = report_facts(report, chunk_tokens=options.chunk_tokens)
    workload.update(collect(_split_gpu_facts(report, inputs.perf).items()))
    workload.update(collect((extra_facts or {}).items()))
    breakeven = _breakeven_table(report)
    model = _catalog_model(report, inputs.perf)
    deployment = _deployment(report)
    stats = report.trace.input_tokens_stats
    slo = slo_targets(options.slo, model, None if stats is None else stats.p99_tokens)
    instances, storage = _restricted(inputs, options)
    if not options.search:
        verdicts = abstain_all(_providers_of(options, instances), slo, SEARCH_LEFT_OUT, ())
    elif view is None:
        verdicts = abstain_all(
            _providers_of(options, instances),
            slo,
            "the trace was analysed in batches and the per-request columns the deployment "
            "search reads do not fit the memory budget beside the cache curve; raise "
            "--memory-limit (the report says how much) or analyse a time window of it "
            "(kvadvisor convert, then analyze)",
            ("the trace in memory",),
        )
    else:
        ws, ret = _v(workload, "kv_working_set_gib"), _v(workload, "retention_capacity_gib")
        reuse = max((g for g in (ws, ret) if g is not None), default=None)
        verdicts = recommend(
            view,
            RecommendInputs(
                model=model,
                kv_dtype=deployment.kv_dtype if deployment is not None else "bf16",
                weight_dtype=deployment.weight_dtype if deployment is not None else "bf16",
                chunk_tokens=options.chunk_tokens,
                instances=instances,
                storage=storage,
                slo=slo,
                providers=options.providers,
                reuse_bytes=None if reuse is None else reuse * BYTES_PER_GIB,
                pinned=dict(options.instance),
                forced_storage=options.storage,
                perf=inputs.perf,
                headroom=options.headroom,
                spare=options.spare,
                # --gpu and --tp restrict the search as they set the profile (docs/advisor.md);
                # the profile's defaults (reported as assumed) restrict nothing.
                gpu=None if deployment is None or deployment.gpu_assumed else deployment.gpu,
                tp=None if deployment is None or deployment.tp_assumed else deployment.tp,
                price_kind=options.price_kind,
                executor=executor,
                engine=options.engine,
            ),
        )
    advice = advise(
        workload,
        report.prefix_cache,
        inputs.storage,
        inputs.instances,
        inputs.rules,
        verdicts,
        breakeven,
        options.chunk_tokens,
        pinned=bool(options.instance),
    )
    return replace(
        report,
        recommendation=advice.recommendation,
        findings=tuple(report.findings) + advice.findings,
    )
