"""The facts of a reviewed plan, by scope: per plan, per stage, per tier and per engine.

`kvadvisor review` computes them (:mod:`kvadvisor.planreview.facts`) from the plan, the trace's
replayed arrays and the plan's closed-loop replay; the review's rules (scopes plan, stage, tier
and engine) read them. Engine settings are facts of their stage, named after the engine and
the setting (``lmcache_chunk_tokens``), sizes in bytes whatever the engine's own unit.
"""

from __future__ import annotations

from kvadvisor.rules.model import FactSpec, RuleScope
from kvadvisor.units import Unit

_PLAN, _STAGE, _TIER, _ENGINE = (
    "review (the plan and its closed-loop replay)",
    "review (the plan's stage)",
    "review (the tier replayed against the trace)",
    "review (the engine's settings on the stage)",
)


def _p(name: str, unit: Unit, text: str) -> FactSpec:
    return FactSpec(name, unit, text, _PLAN, RuleScope.PLAN)


def _s(name: str, unit: Unit, text: str, source: str = _STAGE) -> FactSpec:
    return FactSpec(name, unit, text, source, RuleScope.STAGE)


def _t(name: str, unit: Unit, text: str) -> FactSpec:
    return FactSpec(name, unit, text, _TIER, RuleScope.TIER)


def _e(name: str, unit: Unit, text: str) -> FactSpec:
    return FactSpec(name, unit, text, _ENGINE, RuleScope.ENGINE)


B, BPS, R, C, BOOL, TEXT = (
    Unit.BYTES,
    Unit.BYTES_PER_S,
    Unit.RATIO,
    Unit.COUNT,
    Unit.BOOL,
    Unit.TEXT,
)

PLAN_FACT_SPECS: tuple[FactSpec, ...] = (
    _p("plan_name", TEXT, "The plan's name."),
    _p("plan_tp", C, "The plan's model.tp: tensor parallelism its per-rank sizes assume."),
    _p("plan_disaggregated", BOOL, "Whether the plan has both a prefill and a decode stage."),
    _p("plan_ttft_p99_slo_s", Unit.SECONDS, "The plan's TTFT p99 SLO (absent when none)."),
    _p("plan_tpot_p99_slo_s", Unit.SECONDS, "The plan's TPOT p99 SLO (absent when none)."),
    _p(
        "plan_replayed",
        BOOL,
        "Whether the plan was replayed closed loop (`kvadvisor docs replay`).",
    ),
    _p(
        "fleet_slo_targets_missed",
        C,
        "SLO targets (TTFT p99, TPOT p99) the closed-loop replay missed: fewer than 99% of "
        "requests within the target (an unfinished request misses).",
    ),
    _p(
        "fleet_overloaded",
        BOOL,
        "Whether the replayed fleet is overloaded "
        "(R11, `kvadvisor docs replay#the-mechanisms-each-as-a-rule`).",
    ),
    _p(
        "fleet_ttft_p99_attainment",
        R,
        "Share of requests whose replayed TTFT is within the plan's TTFT p99 SLO.",
    ),
    _p(
        "fleet_tpot_p99_attainment",
        R,
        "Share of requests whose replayed TPOT is within the plan's TPOT p99 SLO.",
    ),
    _p("fleet_slo_summary", TEXT, "Each SLO target met or missed, and the overload's reason."),
    _p(
        "plan_prefill_storage_utilization_mean",
        R,
        "The prefill stage's busiest storage tier direction (DRAM and CXL left out), by mean "
        "demand / capability.",
    ),
    _p(
        "plan_prefill_storage_utilization_p99",
        R,
        "p99 demand / capability of that tier direction.",
    ),
    _p(
        "plan_decode_storage_utilization_mean",
        R,
        "The decode stage's busiest storage tier direction (DRAM and CXL left out), by mean.",
    ),
    _p("plan_decode_storage_utilization_p99", R, "p99 demand / capability of that direction."),
    _p(
        "plan_stages_share_storage_spec",
        BOOL,
        "Whether a storage tier (not DRAM or CXL) of the prefill stage and one of the decode stage "
        "have the same specification: the same catalog entry (or the same inline figures) and "
        "the same devices and capacity per unit.",
    ),
    _p(
        "plan_shared_storage_spec",
        TEXT,
        "That specification, as the plan names it.",
    ),
    _p(
        "plan_prefill_storage_demand_bytes_per_s_p99",
        BPS,
        "The prefill stage's p99 storage demand per unit (write or read, whichever is larger) on "
        "its busiest storage tier (DRAM and CXL left out).",
    ),
    _p(
        "plan_decode_storage_demand_bytes_per_s_p99",
        BPS,
        "The decode stage's p99 storage demand per unit on its busiest storage tier.",
    ),
    _p(
        "plan_prefill_deployment",
        TEXT,
        "The prefill stage's catalog instance and where it runs (its cloud provider, or your own "
        "servers); absent when the stage names no catalog instance.",
    ),
    _p("plan_decode_deployment", TEXT, "The same for the decode stage."),
    _p(
        "plan_same_deployment",
        BOOL,
        "Whether a disaggregated plan's prefill and decode instances run in one deployment (one "
        "cloud provider, or both on your own servers): the advisor's deploy.same_deployment rule. "
        "Absent when a stage names no catalog instance.",
    ),
    _p("plan_deployment_reason", TEXT, "Why they do or do not (deploy.same_deployment's words)."),
)

STAGE_FACT_SPECS: tuple[FactSpec, ...] = (
    _s("stage_name", TEXT, "The stage: prefill, decode or serving (aggregated)."),
    _s("stage_prefills", BOOL, "Whether the stage runs prefill (prefill or serving)."),
    _s("stage_instance", TEXT, "The stage's instance type (absent when the plan names none)."),
    _s("stage_count", C, "Instances in the stage."),
    _s("stage_gpus_per_instance", C, "GPUs per instance (the plan's, else the catalog's)."),
    _s(
        "stage_tp",
        C,
        "The stage's tensor parallelism: its gpus_per_replica, else the plan's model.tp.",
    ),
    _s(
        "stage_ranks",
        C,
        "Engine ranks (GPU worker processes) per instance: gpus_per_instance, else model.tp.",
    ),
    _s("stage_host_memory_bytes", B, "Host memory of one instance (the plan's, else catalog)."),
    _s(
        "stage_device_pool_bytes",
        B,
        "GPU KV pool of one instance: the plan's gpu_kv_pool, else the performance model's.",
    ),
    _s("stage_device_pool_bytes_per_rank", B, "stage_device_pool_bytes / stage_ranks."),
    _s(
        "stage_load_time_p99_s",
        Unit.SECONDS,
        "p99 over requests of the time to load their cached prefix from the stage's tiers: in "
        "the closed-loop replay (loads sharing each tier), else latency + bytes / read "
        "bandwidth per tier, alone.",
    ),
    _s(
        "stage_load_time_basis",
        TEXT,
        "How stage_load_time_p99_s was found: 'in the closed-loop replay' or 'alone'.",
    ),
    _s(
        "stage_kv_page_tokens",
        Unit.TOKENS,
        "Tokens per KV page the stage's engine moves to its tiers: the plan's chunk_tokens, else "
        "LMCache chunk_size, SGLang --page-size, vLLM --block-size, else 256 "
        "(StagePlan.io_chunk_tokens).",
    ),
    _s("stage_kv_page_from", TEXT, "Where stage_kv_page_tokens comes from."),
    _s(
        "stage_kv_layer_first",
        BOOL,
        "Whether the engine moves a page to storage layer by layer (one I/O per layer per "
        "rank): LMCache with use_layerwise, vLLM's native offloading alone (its KV cache is one "
        "tensor per layer); false for LMCache chunks, SGLang HiCache pages (its storage "
        "backends take a page across every layer), KVBM's fully contiguous blocks and "
        "Mooncake store objects.",
    ),
    _s("stage_kv_layout", TEXT, "The layout behind stage_kv_layer_first, in words."),
    _s(
        "stage_kv_shard_ranks",
        C,
        "Ranks a token's KV is split over when it is stored: the replica's TP for GQA/MHA "
        "(each rank stores its KV heads), 1 for MLA (the latent is not sharded).",
    ),
    _s("stage_model_layers", C, "Layers of the served model (catalog)."),
)

TIER_FACT_SPECS: tuple[FactSpec, ...] = (
    _t("tier_name", TEXT, "The tier's name in the plan."),
    _t("tier_kind", TEXT, "Its kind: dram, cxl, ssd, block, filesystem, pool or object."),
    _t("tier_storage", TEXT, "Its catalog entry, or 'inline' for figures given in the plan."),
    _t(
        "tier_disk_like",
        BOOL,
        "Whether the tier is a disk (ssd, block or filesystem): it fills unless bounded.",
    ),
    _t("tier_bounded", BOOL, "Whether the plan gives the tier a capacity."),
    _t("tier_capacity_bytes", B, "Capacity per unit (instance, replica or pool)."),
    _t("tier_devices", C, "Drives or volumes per unit."),
    _t(
        "tier_bandwidth_sized",
        BOOL,
        "Whether the tier is storage bought for its bandwidth (not DRAM or CXL, whose "
        "bandwidth comes with the memory).",
    ),
    _t(
        "tier_hit_ratio_steady",
        R,
        "Prompt tokens this tier serves (not a faster one) / prompt tokens, steady state.",
    ),
    _t(
        "tier_cumulative_hit_ratio_steady",
        R,
        "Prompt tokens served by this tier or a faster one / prompt tokens, steady state.",
    ),
    _t("tier_write_bytes_per_s_mean", BPS, "Write demand per unit, mean over windows."),
    _t("tier_write_bytes_per_s_p99", BPS, "Write demand per unit, p99 over windows."),
    _t("tier_write_bytes_per_s_peak", BPS, "Write demand per unit, busiest window."),
    _t("tier_read_bytes_per_s_mean", BPS, "Read demand per unit, mean over windows."),
    _t("tier_read_bytes_per_s_p99", BPS, "Read demand per unit, p99 over windows."),
    _t("tier_read_bytes_per_s_peak", BPS, "Read demand per unit, busiest window."),
    _t(
        "tier_write_capability_bytes_per_s",
        BPS,
        "Write bandwidth per unit through the instance's caps (kvadvisor.deploy).",
    ),
    _t("tier_read_capability_bytes_per_s", BPS, "Read bandwidth per unit through the caps."),
    _t("tier_write_utilization_mean", R, "tier_write_bytes_per_s_mean / write capability."),
    _t("tier_write_utilization_p99", R, "tier_write_bytes_per_s_p99 / write capability."),
    _t("tier_write_utilization_peak", R, "tier_write_bytes_per_s_peak / write capability."),
    _t("tier_read_utilization_mean", R, "tier_read_bytes_per_s_mean / read capability."),
    _t("tier_read_utilization_p99", R, "tier_read_bytes_per_s_p99 / read capability."),
    _t("tier_read_utilization_peak", R, "tier_read_bytes_per_s_peak / read capability."),
    _t(
        "tier_utilization_mean",
        R,
        "The busier direction's mean utilization, of a tier bought for its bandwidth (absent "
        "for DRAM and CXL).",
    ),
    _t("tier_utilization_p99", R, "The larger of the two directions' p99 utilization."),
    _t("tier_utilization_peak", R, "The larger of the two directions' busiest-window utilization."),
    _t(
        "tier_devices_for_p99",
        C,
        "Devices that carry the p99 demand at the advisor's target of 80%: ceil(devices x "
        "tier_utilization_p99 / 0.8), at least 1.",
    ),
    _t(
        "tier_devices_for_peak",
        C,
        "Devices that carry the busiest window: ceil(devices x tier_utilization_peak), at least 1.",
    ),
    _t(
        "tier_devices_for_capacity",
        C,
        "Devices that hold the tier's capacity: ceil(capacity / the largest size the catalog "
        "sells per device); the tier's own devices when the catalog gives no size.",
    ),
    _t(
        "tier_devices_needed",
        C,
        "The larger of tier_devices_for_p99 and tier_devices_for_capacity.",
    ),
    _t(
        "tier_break_even_tokens",
        Unit.TOKENS,
        "Prefix length above which loading from this tier beats recomputing (absent when "
        "loading never pays).",
    ),
    _t(
        "tier_load_pays_above",
        TEXT,
        "tier_break_even_tokens in words ('never' when it never pays).",
    ),
    _t(
        "tier_below_break_even_share",
        R,
        "Share of the tier's served tokens that come in loads recomputing would beat.",
    ),
    _t("tier_chunk_tokens", Unit.TOKENS, "Tokens per I/O on the tier (stage_kv_page_tokens)."),
    _t("tier_chunk_from", TEXT, "Where tier_chunk_tokens comes from."),
    _t("tier_write_iops_p99", Unit.IOPS, "Chunk writes per second per unit, p99 over windows."),
    _t("tier_write_iops_peak", Unit.IOPS, "Chunk writes per second per unit, busiest window."),
    _t("tier_write_iops_capability", Unit.IOPS, "Write IOPS per unit through the caps."),
    _t("tier_read_iops_p99", Unit.IOPS, "Chunk reads per second per unit, p99."),
    _t("tier_read_iops_peak", Unit.IOPS, "Chunk reads per second per unit, busiest window."),
    _t("tier_read_iops_capability", Unit.IOPS, "Read IOPS per unit through the caps."),
    _t(
        "tier_iops_utilization_p99",
        R,
        "The larger of write and read chunk I/Os per second at p99 / the tier's IOPS "
        "(directions with a known IOPS figure).",
    ),
    _t("tier_iops_utilization_peak", R, "The same at the busiest window."),
    _t("tier_iops_summary", TEXT, "Each direction's p99 and peak I/O rate against its IOPS."),
    _t(
        "tier_catalog_checked",
        BOOL,
        "Whether the tier names a catalog storage option on a stage naming a catalog instance, "
        "so its deployability can be checked.",
    ),
    _t("tier_deployable", BOOL, "Whether the stage's instance can have this tier as written."),
    _t("tier_deploy_problems", TEXT, "Why it cannot (the catalogs' deployment rules)."),
    _t("tier_deploy_limit", TEXT, "What bounds the tier on this instance."),
    _t("tier_unconfirmed", TEXT, "Catalog figures the tier's checks rest on that are unconfirmed."),
    _t(
        "tier_io_bytes",
        B,
        "Bytes per I/O the engine really issues to this tier: stage_kv_page_tokens x KV bytes "
        "per token / stage_kv_shard_ranks, / stage_model_layers when stage_kv_layer_first.",
    ),
    _t(
        "tier_efficient_io_bytes",
        B,
        "The smallest I/O at which the tier reaches its write bandwidth: write bandwidth / "
        "write IOPS (its IOPS are counted at the catalog's io_unit_bytes); below it the tier is "
        "IOPS-bound.",
    ),
    _t(
        "tier_io_bandwidth_share",
        R,
        "Share of the tier's write bandwidth reachable at tier_io_bytes: min(1, write IOPS x "
        "max(tier_io_bytes, io unit) / write bandwidth), the device's own figures.",
    ),
    _t("tier_io_unit_bytes", B, "The tier's I/O unit (page, block or stripe; catalog)."),
    _t(
        "tier_write_amplification",
        Unit.MULTIPLE,
        "Bytes the device writes per KV byte at tier_io_bytes: ceil(io / unit) x unit / io.",
    ),
)

ENGINE_FACT_SPECS: tuple[FactSpec, ...] = (
    _e("engine_name", TEXT, "The engine, as the plan names it (a registered engine)."),
    _e(
        "engine_host_bytes_needed",
        B,
        "Host memory the engine's settings take on one instance, in its own scope (LMCache per "
        "worker x ranks, vLLM and KVBM per engine instance x instances, Mooncake per node).",
    ),
    _e("engine_host_demand_how", TEXT, "How engine_host_bytes_needed adds up."),
    _e(
        "engine_disk_bytes_needed",
        B,
        "Disk the engine's settings take on one instance (or the shared file system).",
    ),
    _e("engine_disk_demand_how", TEXT, "How engine_disk_bytes_needed adds up."),
    _e("engine_disk_tier_name", TEXT, "The plan tier that holds that disk."),
    _e("engine_disk_tier_capacity_bytes", B, "That tier's capacity."),
    _e("engine_placeholder_count", C, "Values still holding a <FILL:...> marker."),
    _e("engine_placeholders", TEXT, "Their key paths."),
    _e("engine_kv_cache_dtype", TEXT, "The engine's --kv-cache-dtype (its default when unset)."),
    _e("plan_kv_dtype", TEXT, "The plan's model.kv_dtype, the dtype its pools were sized at."),
    _e(
        "engine_kv_dtype_differs",
        BOOL,
        "Whether the engine stores KV at another dtype than the plan (auto: the model's own).",
    ),
    _e(
        "engine_file_router",
        TEXT,
        "The plan router the engine's router file realises for the stage (its policy read "
        "back: cache_aware -> prefix_aware, power_of_two -> least_outstanding; Dynamo's mode).",
    ),
    _e("plan_router", TEXT, "The stage's router in the plan, the one its replay routed with."),
    _e(
        "engine_router_differs",
        BOOL,
        "Whether the router file routes the stage with another policy than the plan's router.",
    ),
    _e(
        "engine_tp",
        C,
        "The engine's tensor parallelism (vLLM --tensor-parallel-size, SGLang --tp-size).",
    ),
    _e("engine_gpus_used", C, "GPUs the engine uses per instance: TP (x SGLang --dp-size)."),
)

REVIEW_FACT_SPECS = PLAN_FACT_SPECS + STAGE_FACT_SPECS + TIER_FACT_SPECS + ENGINE_FACT_SPECS
