"""What the advisor does differently per stage, in one object per stage instead of forks.

Prefill is compute-bound and writes the KV of missed prompt tokens; decode is memory-bandwidth
bound and reads the KV of prefix hits (DESIGN.md). Each :class:`StageRole` holds its stage's
bottleneck, I/O direction, tier role and the literal names of the facts it reads and makes, so
``grep`` finds where every fact is produced.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.catalog.storage import SSD_CATEGORIES, StorageSpec
from kvadvisor.facts.workload import div, hit_ratio_at
from kvadvisor.results.report import PrefixCache, Requirement
from kvadvisor.results.vocab import Stage, TierRole
from kvadvisor.rules import FactValue
from kvadvisor.units import BYTES_PER_GIB, BYTES_PER_MB, S_PER_DAY

Pairs = list[tuple[str, Any]]


class Directional(Protocol):
    """Anything with read and write figures (a tier fit, what an instance reaches)."""

    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    read_iops: float | None
    write_iops: float | None


def fact_value(facts: Mapping[str, FactValue], name: str) -> float | None:
    """A fact's value as a float, None when the fact is absent."""
    f = facts.get(name)
    return None if f is None else float(f.value)


@dataclass(frozen=True)
class TierChoice:
    """The stage's tier as chosen, with the numbers its configuration facts need."""

    spec: StorageSpec
    capacity_gib: float | None  # None when no tier was fitted (host memory only)
    bandwidth_bytes_per_s: float | None  # the stage's direction, per instance
    iops: float | None


@dataclass(frozen=True)
class StageContext:
    """What a stage's own configuration facts are computed from."""

    instance: InstanceSpec
    tier: TierChoice
    instances: int  # the stage's instance count (1 when unknown)
    demand: Mapping[str, float | None]  # mean, p99, peak bytes/s per instance
    iops_p99: float | None  # per instance
    gpu_pool_gib: float | None
    host_pool_gib: float | None
    facts: Mapping[str, FactValue]
    prefix_cache: PrefixCache | None
    breakeven: Mapping[str, tuple[float | None, float | None]]


@dataclass(frozen=True)
class StageRole:
    """One stage as the advisor sees it (subclasses add what only that stage computes)."""

    stage: Stage
    direction: str  # the KV I/O the stage puts on its tier: "write" or "read"
    tier_role: TierRole
    bottleneck: str  # the per-GPU figure instances are ranked by, in words
    bottleneck_short: str
    split_gpu_fact: str  # that figure of the GPU the stage split was modeled on
    gpu_s_fact: str  # the stage's GPU time
    demand_facts: Mapping[str, str]  # "mean" | "p99" | "peak" -> the demand fact
    iops_fact: str  # I/O operations per second at the chunk size, p99
    instance_count_fact: str
    gpu_tflops_fact: str
    gpu_bandwidth_fact: str
    demand_words: str  # what the demand counts, for the derivation
    skipped_categories: tuple[str, ...] = ()  # storage the stage never uses as its tier

    def gpu_metric(self, inst: InstanceSpec) -> float | None:
        """Per-GPU strength at the stage's bottleneck."""
        raise NotImplementedError

    def bandwidth(self, x: Directional) -> float | None:
        """``x``'s bandwidth in the stage's direction."""
        return x.write_bytes_per_s if self.direction == "write" else x.read_bytes_per_s

    def iops(self, x: Directional) -> float | None:
        """``x``'s I/O operations per second in the stage's direction."""
        return x.write_iops if self.direction == "write" else x.read_iops

    def tier_facts(self, ctx: StageContext) -> Pairs:
        """The configuration facts of the stage's chosen tier."""
        raise NotImplementedError

    def stage_facts(self, ctx: StageContext) -> Pairs:
        """The configuration facts only this stage has."""
        raise NotImplementedError

    def rank_key(self, spec: StorageSpec, cap: float | None, closeness: float) -> tuple[Any, ...]:
        """The part of a tier's ranking key after feasibility and built-in drives."""
        raise NotImplementedError

    def requirement(
        self,
        demand_p99: float | None,
        iops_p99: float | None,
        capacity_gib: float | None,
        derivation: tuple[str, ...],
    ) -> Requirement:
        """What the stage's tier must sustain per instance, in the stage's direction."""
        write = self.direction == "write"
        return Requirement(
            write_bytes_per_s=demand_p99 if write else None,
            read_bytes_per_s=None if write else demand_p99,
            write_iops=iops_p99 if write else None,
            read_iops=None if write else iops_p99,
            capacity_gib=capacity_gib,
            derivation=derivation,
        )


def _latency_bucket(spec: StorageSpec) -> int:
    lat = spec.effective_read_latency_us
    if lat is None:
        return 3
    return 0 if lat < 100 else 1 if lat < 1000 else 2


class PrefillRole(StageRole):
    """Prefill: compute-bound; writes the KV of missed prompt tokens to its capacity tier."""

    def gpu_metric(self, inst: InstanceSpec) -> float | None:
        """Dense BF16 TFLOPS per GPU."""
        return inst.gpu_bf16_tflops

    def rank_key(self, spec: StorageSpec, cap: float | None, closeness: float) -> tuple[Any, ...]:
        """A tier with a write figure first, then p99 utilization closest to the target."""
        return (cap is None, closeness)

    def tier_facts(self, ctx: StageContext) -> Pairs:
        """Write bandwidth and its utilization, the device's I/O unit, GPUDirect."""
        cap, demand, spec = ctx.tier.bandwidth_bytes_per_s, ctx.demand, ctx.tier.spec
        return [
            ("prefill_storage_write_bytes_per_s", cap),
            ("prefill_storage_write_utilization_mean", div(demand["mean"], cap)),
            ("prefill_storage_write_utilization_p99", div(demand["p99"], cap)),
            ("prefill_storage_write_utilization_peak", div(demand["peak"], cap)),
            ("prefill_storage_io_unit_bytes", spec.io_unit_bytes),
            ("prefill_storage_gds", spec.gds_support),
        ]

    def stage_facts(self, ctx: StageContext) -> Pairs:
        """GPU and host pools, write amplification, the disk cap, drive writes per day, hits."""
        inst, spec, demand, facts = ctx.instance, ctx.tier.spec, ctx.demand, ctx.facts
        io_size, unit = fact_value(facts, "io_size_bytes"), spec.io_unit_bytes
        disk_cap = (
            inst.disk_cap_mbps * BYTES_PER_MB
            if inst.disk_cap_mbps and spec.category == "block"
            else None
        )
        dwpd = None
        if ctx.tier.capacity_gib and spec.category in SSD_CATEGORIES and demand["mean"] is not None:
            dwpd = demand["mean"] * S_PER_DAY / (ctx.tier.capacity_gib * BYTES_PER_GIB)
        pairs: Pairs = [
            ("gpu_memory_total_gib", inst.gpu_memory_total_gib),
            ("gpu_kv_pool_gib", ctx.gpu_pool_gib),
            ("host_memory_gib", inst.host_memory_gib),
            ("host_kv_pool_gib", ctx.host_pool_gib),
            ("prefill_write_bytes_per_s_p99_per_instance", demand["p99"]),
            (
                "write_amplification_ratio",
                None if not io_size or not unit else math.ceil(io_size / unit) * unit / io_size,
            ),
            ("prefill_disk_cap_bytes_per_s", disk_cap),
            ("prefill_disk_cap_utilization_p99", div(demand["p99"], disk_cap)),
            ("ssd_drive_writes_per_day", dwpd),
        ]
        kv = fact_value(facts, "kv_bytes_per_token")
        gpu_pool, host_pool = ctx.gpu_pool_gib, ctx.host_pool_gib
        if kv and ctx.prefix_cache is not None and gpu_pool is not None:
            gpu_tokens = gpu_pool * BYTES_PER_GIB / kv * ctx.instances
            pairs.append(
                ("prefix_hit_ratio_at_gpu_pool", hit_ratio_at(ctx.prefix_cache, gpu_tokens))
            )
            if host_pool is not None:
                host_tokens = max(gpu_pool, host_pool) * BYTES_PER_GIB / kv * ctx.instances
                pairs.append(
                    ("prefix_hit_ratio_at_host_pool", hit_ratio_at(ctx.prefix_cache, host_tokens))
                )
        return pairs


class DecodeRole(StageRole):
    """Decode: memory-bandwidth-bound; reads the KV of prefix hits from its read tier."""

    def gpu_metric(self, inst: InstanceSpec) -> float | None:
        """GPU memory bandwidth (GB/s) per GPU."""
        return inst.gpu_memory_bandwidth_gbps

    def rank_key(self, spec: StorageSpec, cap: float | None, closeness: float) -> tuple[Any, ...]:
        """Lower read latency class first, then p99 utilization closest to the target."""
        return (_latency_bucket(spec), closeness)

    def tier_facts(self, ctx: StageContext) -> Pairs:
        """Read bandwidth, IOPS and latency, and utilization by the larger of the two shares."""
        bw, iops, demand, spec = (
            ctx.tier.bandwidth_bytes_per_s,
            ctx.tier.iops,
            ctx.demand,
            ctx.tier.spec,
        )

        def util(x: float | None, io: float | None) -> float | None:
            shares = [s for s in (div(x, bw), div(io, iops)) if s is not None]
            return max(shares) if shares else None

        scale = div(ctx.iops_p99, demand["p99"])  # I/Os per byte at the chunk size
        return [
            ("decode_storage_read_bytes_per_s", bw),
            ("decode_storage_read_iops", iops),
            ("decode_storage_read_latency_us", spec.effective_read_latency_us),
            (
                "decode_storage_read_utilization_mean",
                util(
                    demand["mean"],
                    None if scale is None or demand["mean"] is None else demand["mean"] * scale,
                ),
            ),
            ("decode_storage_read_utilization_p99", util(demand["p99"], ctx.iops_p99)),
            (
                "decode_storage_read_utilization_peak",
                util(
                    demand["peak"],
                    None if scale is None or demand["peak"] is None else demand["peak"] * scale,
                ),
            ),
            ("decode_storage_gds", spec.gds_support),
        ]

    def stage_facts(self, ctx: StageContext) -> Pairs:
        """I/O rate and in-flight KV per instance; break-even for the read tier's class."""
        inflight = fact_value(ctx.facts, "kv_inflight_gib_p99")
        pairs: Pairs = [
            ("decode_read_iops_p99_per_instance", ctx.iops_p99),
            (
                "kv_inflight_gib_p99_per_instance",
                None
                if inflight is None
                else inflight * (fact_value(ctx.facts, "split_instances") or 1) / ctx.instances,
            ),
        ]
        # Break-even belongs to the decode tier's class; without a reference tier of that class
        # it is unknown (None drops the profiler's figure) rather than borrowed from a faster one.
        ref_tier = reference_tier_for(ctx.tier.spec)
        tokens, share = ctx.breakeven.get(ref_tier, (None, None)) if ref_tier else (None, None)
        pairs += [
            ("breakeven_prefix_tokens", tokens),
            ("hit_tokens_below_breakeven_share", share),
        ]
        return pairs


def reference_tier_for(spec: StorageSpec) -> str | None:
    """The profiler's reference tier matching a storage class.

    The stage profiler's load-vs-recompute reference tier of the same class as ``spec``
    (host DRAM over PCIe, NVMe Gen4 x4, NVMe Gen5 x4); None for slower classes, whose
    break-even the reference tiers would understate.
    """
    if spec.category in ("memory", "cxl"):
        return "host-dram-pcie"
    if spec.category == "local_nvme":
        return "nvme-gen5-x4" if "5.0" in (spec.interface or "") else "nvme-gen4-x4"
    return None


PREFILL = PrefillRole(
    stage=Stage.PREFILL,
    direction="write",
    tier_role=TierRole.CAPACITY,
    bottleneck="dense BF16 TFLOPS",
    bottleneck_short="TFLOPS",
    split_gpu_fact="split_gpu_bf16_tflops",
    gpu_s_fact="prefill_gpu_s",
    demand_facts={
        "mean": "write_bytes_per_s_mean",
        "p99": "write_bytes_per_s_p99",
        "peak": "write_bytes_per_s_peak",
    },
    iops_fact="write_iops_p99",
    instance_count_fact="prefill_instance_count",
    gpu_tflops_fact="prefill_gpu_bf16_tflops",
    gpu_bandwidth_fact="prefill_gpu_memory_bandwidth_gbps",
    demand_words="bytes of prompt tokens that missed the cache (written when prefill completes)",
    # Object storage's latency and request costs make it no place for prefill's writes.
    skipped_categories=("object",),
)
DECODE = DecodeRole(
    stage=Stage.DECODE,
    direction="read",
    tier_role=TierRole.READ,
    bottleneck="GB/s of GPU memory bandwidth",
    bottleneck_short="memory bandwidth",
    split_gpu_fact="split_gpu_memory_bandwidth_gbps",
    gpu_s_fact="decode_gpu_s",
    demand_facts={
        "mean": "read_bytes_per_s_mean",
        "p99": "read_bytes_per_s_p99",
        "peak": "read_bytes_per_s_peak",
    },
    iops_fact="decode_read_iops_p99",
    instance_count_fact="decode_instance_count",
    gpu_tflops_fact="decode_gpu_bf16_tflops",
    gpu_bandwidth_fact="decode_gpu_memory_bandwidth_gbps",
    demand_words="bytes of hit tokens (loaded before prefill starts)",
)
STAGE_ROLES = (PREFILL, DECODE)
ROLES = {r.stage: r for r in STAGE_ROLES}
