"""LMCache YAML per stage, and the vLLM launch that loads it (LMCacheConnectorV1).

Tiers map to LMCache backends by kind: host DRAM to ``local_cpu``/``max_local_cpu_size``, a
disk of the node to ``local_disk``/``max_local_disk_size`` (both per worker process), a shared
file system to the FS remote connector (``remote_url: fs://...``), a Mooncake Store pool to
``mooncakestore://``. Disaggregated, vLLM moves the prompt's KV with NixlConnector beside
LMCacheConnectorV1 (LMCache's own PD mode forbids a remote backend: configurations.rst).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvadvisor.emit import sources
from kvadvisor.emit.context import EmitContext, floor_gib
from kvadvisor.emit.deployment import (
    TierKind,
    role_words,
    storage_tier,
    tier_kind,
    tier_label,
    tier_of,
    tier_words,
)
from kvadvisor.emit.sizing import SizingScope
from kvadvisor.emit.text import Setting, json_compact, placeholder, shell_script, yaml_file
from kvadvisor.emit.transport import nixl_connector, transfer_plan
from kvadvisor.engines import router
from kvadvisor.engines.registry import Engine, packaged_settings, register, setting_fact
from kvadvisor.engines.sglang import mooncake_client_json
from kvadvisor.engines.vllm import (
    NIXL_PORT,
    batched_tokens,
    engine_flags,
    kv_transfer,
    launch_lines,
    nixl_reason,
)
from kvadvisor.engines.vllm import PREEMPTION as VLLM_PREEMPTION
from kvadvisor.plan.model import KvLoadPlan, StagePlan, TierPlan
from kvadvisor.quoting import comment
from kvadvisor.units import BYTES_PER_GIB, Unit, format_value, plural
from kvadvisor.units.format import as_written
from kvadvisor.vocab import Stage

if TYPE_CHECKING:  # the review passes them in (importing it here would load the replay)
    from kvadvisor.plan.model import TierPlan
    from kvadvisor.planreview.scope import FactSet
    from kvadvisor.planreview.settings import EngineSettings

LMCACHE = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
RANK_UNIT = "GiB per worker process (one TP rank)"


def _chunk(ctx: EmitContext, stage: StagePlan) -> Setting:
    kvb = ctx.facts.kv_bytes_per_rank_per_token
    chunk = stage.io_chunk_tokens()[0]  # the advisor's: every plan emit renders states it
    return Setting(
        "chunk_size",
        str(chunk),
        f"{chunk} tokens, the advisor's chunk ({sources.LMCACHE_CHUNK}) x "
        f"{format_value(kvb, Unit.BYTES_PER_TOKEN)} of KV on one rank = "
        f"{format_value(chunk * kvb, Unit.BYTES)} per chunk I/O per rank; a multiple "
        "of vLLM's 16-token block",
    )


def lmcache_settings(ctx: EmitContext, stage: StagePlan) -> tuple[list[Setting], list[str]]:
    """The stage's LMCache keys, and notes for tiers LMCache is not given."""
    out = [_chunk(ctx, stage)]
    notes: list[str] = []
    host = tier_of(stage, TierKind.HOST)
    if host is None or not host.capacity_bytes:
        out.append(Setting("local_cpu", "false", f"no host tier recommended for {stage.stage}"))
    else:
        sh = ctx.share(stage, host, SizingScope.RANK)
        out += [
            Setting("local_cpu", "true", f"the {stage.stage} host DRAM tier ({tier_label(host)})"),
            Setting(
                "max_local_cpu_size",
                f"{floor_gib(sh.bytes):g}",  # exact: LMCache's config value, in GiB
                ctx.tier_reason(stage, sh, RANK_UNIT) + f" ({sources.LMCACHE_CPU})",
            ),
        ]
    t = storage_tier(stage)
    if t is not None and tier_kind(t) == TierKind.LOCAL_DISK and t.capacity_bytes:
        sh = ctx.share(stage, t, SizingScope.RANK)
        out += [
            Setting(
                "local_disk",
                f'"file://{placeholder("/absolute/local-disk/mount")}/lmcache/"',
                f"the {stage.stage} {role_words(t)} is a disk of the node ({tier_label(t)}, "
                f"{t.devices} "
                "device(s)): a directory on it; LMCache keeps one sub-directory per GPU "
                f"(local_disk_path_sharding by_gpu, {sources.LMCACHE_KEYS})",
            ),
            Setting(
                "max_local_disk_size",
                f"{floor_gib(sh.bytes):g}",  # exact: LMCache's config value, in GiB
                ctx.tier_reason(stage, sh, RANK_UNIT) + f" ({sources.LMCACHE_DISK})",
            ),
        ]
    elif t is not None and tier_kind(t) == TierKind.SHARED_FS:
        cap = "unbounded" if not t.capacity_bytes else format_value(t.capacity_bytes, Unit.BYTES)
        out += [
            Setting(
                "remote_url",
                f'"fs://localhost:0{placeholder("/absolute/shared-fs/mount")}/lmcache/"',
                f"the {stage.stage} {role_words(t)} is a file system every node mounts "
                f"({tier_label(t)}, "
                f"{cap} for the whole stage): LMCache's FS remote connector, so every "
                "instance reads what any instance wrote; the file system's own size bounds it "
                f"({sources.LMCACHE_FS})",
            ),
            Setting("remote_serde", '"naive"', "raw KV bytes, no GPU codec (the default)"),
        ]
    elif t is not None and tier_kind(t) == TierKind.POOL and "mooncake" in tier_label(t):
        out.append(
            Setting(
                "remote_url",
                f'"mooncakestore://{placeholder("mooncake-master-host")}:50051/"',
                f"the {stage.stage} {role_words(t)} is a Mooncake Store pool ({tier_label(t)}) "
                "shared by "
                f"the stage; 50051 is mooncake_master's RPC port ({sources.LMCACHE_MOONCAKE})",
            )
        )
        transport = ctx.stage_facts(stage).transport
        plan = transfer_plan(transport)
        out.append(
            Setting(
                "extra_config",
                json_compact(mooncake_client_json("LMCache", transport)),
                "the Mooncake Store client LMCache starts: its master, metadata server and this "
                f"node's address, and the transfer protocol {plan.protocol} (LMCache's default "
                f"would be tcp: {plan.why}); global_segment_size 0: the pool's memory comes "
                f"from the store nodes ({sources.LMCACHE_MOONCAKE_CONFIG})",
            )
        )
    elif t is not None:
        notes.append(
            f"note: the advisor's {tier_words(t)} has no LMCache backend "
            "written here; only host DRAM is configured"
        )
    if stage.stage == Stage.DECODE and (host is not None or t is not None):
        out.append(
            Setting(
                "save_decode_cache",
                "true",
                "decode keeps its tiers for the KV a turn generates, so the next turn's "
                f"prefix can be loaded (off by default, {sources.LMCACHE_KEYS})",
            )
        )
    return out, notes


def emit_lmcache(ctx: EmitContext) -> dict[str, str]:
    """lmcache-<stage>.yaml and vllm-lmcache-<stage>.sh for every stage."""
    files = {}
    for stage in ctx.plan.stages:
        settings, notes = lmcache_settings(ctx, stage)
        yaml_name = f"lmcache-{stage.stage}.yaml"
        head = ctx.head(
            f"LMCache configuration for the {stage.stage} replicas (LMCACHE_CONFIG_FILE)"
        )
        files[yaml_name] = yaml_file(head + [comment(n) for n in notes], settings)
        connectors = (
            [nixl_connector(ctx.stage_facts(stage).transport), LMCACHE]
            if ctx.disaggregated
            else [LMCACHE]
        )
        why = "LMCacheConnectorV1 loads and stores KV through LMCache"
        if ctx.disaggregated:
            why = nixl_reason(ctx, stage) + "; " + why
        flags = engine_flags(ctx, stage) + [
            Setting("kv-transfer-config", json_compact(kv_transfer(connectors)), why)
        ]
        run = 'vllm serve --port $((8000 + r)) "${VLLM_ARGS[@]}"'
        files[f"vllm-lmcache-{stage.stage}.sh"] = shell_script(
            ctx.head(f"vLLM {stage.stage} replicas with LMCache"),
            [],
            "VLLM_ARGS",
            flags,
            launch_lines(
                stage,
                run,
                [f'export LMCACHE_CONFIG_FILE="$HERE/{yaml_name}"'],
                port_env=NIXL_PORT if ctx.disaggregated else None,
            ),
        )
    files.update(router.http_router(ctx, "vllm", "vllm-lmcache-router.sh"))
    return files


# -- the review: facts of a stage's settings, what they take of the instance ---------------
LMCACHE_DEFAULT_CPU_GIB = 5.0  # lmcache/v1/config.py max_local_cpu_size default
FACT_SPECS = (
    setting_fact("lmcache_configured", Unit.BOOL, "Whether the stage configures LMCache."),
    setting_fact("lmcache_chunk_tokens", Unit.TOKENS, "LMCache chunk_size (default 256)."),
    setting_fact(
        "engine_block_tokens",
        Unit.TOKENS,
        "The serving engine's KV block: vLLM --block-size (default 16), or SGLang --page-size "
        "when SGLang serves.",
    ),
    setting_fact("engine_block_from", Unit.TEXT, "Which setting engine_block_tokens comes from."),
    setting_fact(
        "lmcache_chunk_aligned",
        Unit.BOOL,
        "Whether lmcache_chunk_tokens is a multiple of engine_block_tokens.",
    ),
    setting_fact("lmcache_fs_native", Unit.BOOL, "Whether LMCache's L2 adapter is fs_native."),
    setting_fact("lmcache_l2_capped", Unit.BOOL, "Whether the L2 adapter sets max_capacity_gb."),
    setting_fact(
        "lmcache_l2_eviction_set", Unit.BOOL, "Whether the L2 adapter has an eviction block."
    ),
    setting_fact("lmcache_local_disk_set", Unit.BOOL, "Whether LMCache local_disk is set."),
    setting_fact(
        "lmcache_disk_size_set", Unit.BOOL, "Whether max_local_disk_size is set (non-zero)."
    ),
    setting_fact("lmcache_enable_pd", Unit.BOOL, "Whether LMCache enable_pd is on."),
    setting_fact("lmcache_remote_url_set", Unit.BOOL, "Whether LMCache remote_url is set."),
    setting_fact("lmcache_remote_url", Unit.TEXT, "LMCache remote_url."),
    setting_fact(
        "lmcache_remote_url_has_scheme",
        Unit.BOOL,
        "Whether remote_url reads protocol://host:port/path.",
    ),
    setting_fact(
        "lmcache_save_decode_cache", Unit.BOOL, "Whether LMCache save_decode_cache is on."
    ),
)


def _lmcache_facts(f: FactSet, s: EngineSettings) -> None:
    e = "lmcache"
    f.add("lmcache_configured", e in s.stage.engines)
    if e not in s.stage.engines:
        return
    chunk = int(s.get(e, "chunk_size", 256))
    if "sglang-hicache" in s.stage.engines:
        block, by = int(s.get("sglang-hicache", "page-size", 1)), "SGLang --page-size"
    else:
        block, by = int(s.get("vllm", "block-size", 16)), "vLLM --block-size"
    f.add("lmcache_chunk_tokens", chunk)
    f.add("engine_block_tokens", block)
    f.add("engine_block_from", by)
    f.add("lmcache_chunk_aligned", chunk % block == 0)
    l2 = s.get(e, "l2-adapter")
    fs_native = isinstance(l2, dict) and l2.get("type") == "fs_native"
    f.add("lmcache_fs_native", fs_native)
    if fs_native:
        f.add("lmcache_l2_capped", "max_capacity_gb" in l2)
        f.add("lmcache_l2_eviction_set", bool(l2.get("eviction")))
    f.add("lmcache_local_disk_set", bool(s.get(e, "local_disk")))
    f.add("lmcache_disk_size_set", bool(s.get(e, "max_local_disk_size")))
    f.add("lmcache_enable_pd", bool(s.get(e, "enable_pd")))
    url = s.get(e, "remote_url")
    f.add("lmcache_remote_url_set", url is not None)
    if url is not None:
        f.add("lmcache_remote_url", str(url))
        f.add("lmcache_remote_url_has_scheme", isinstance(url, str) and "://" in url)
    f.add("lmcache_save_decode_cache", bool(s.get(e, "save_decode_cache")))


def _host_demand(s: EngineSettings) -> tuple[float, str] | None:
    """Host bytes: max_local_cpu_size per worker process (one per rank)."""
    g, engine = s.get, "lmcache"
    if g(engine, "local_cpu", True) is not False and s.has(engine, "max_local_cpu_size"):
        gib = float(g(engine, "max_local_cpu_size", LMCACHE_DEFAULT_CPU_GIB))
        how = f"max_local_cpu_size {as_written(gib)} GiB x {plural(s.ranks, 'rank')}"
        return gib * BYTES_PER_GIB * s.ranks, how
    return None


def _disk_demand(s: EngineSettings) -> tuple[float, TierPlan | None, str] | None:
    """Disk bytes: max_local_disk_size per worker process, on the node's local disk."""
    g, engine = s.get, "lmcache"
    if not s.has(engine, "max_local_disk_size"):
        return None
    gib = float(g(engine, "max_local_disk_size"))
    return (
        gib * BYTES_PER_GIB * s.ranks,
        s.local_disk(),
        f"max_local_disk_size {as_written(gib)} GiB x {plural(s.ranks, 'rank')}",
    )


def _layout(s: EngineSettings) -> tuple[bool, str]:
    """One object per chunk per rank, all layers; per layer with ``use_layerwise``.

    LMCache configurations.rst.
    """
    if s.get("lmcache", "use_layerwise"):
        return True, "LMCache use_layerwise: one object per layer per rank"
    return False, "LMCache chunks: one object per chunk per rank, all layers"


# -- the plan and the replay: what its settings say of I/O, pages, loads and writes -----------
def _io_chunk(engines: Mapping[str, Any]) -> tuple[int, str]:
    return int(engines["lmcache"].get("chunk_size", 256)), "LMCache chunk_size"


def _kv_load(engines: Mapping[str, Any]) -> tuple[KvLoadPlan, str]:
    """LMCache loads at admission, and recomputes hits below ``min_retrieve_tokens``."""
    return KvLoadPlan(min_tokens=int(engines["lmcache"].get("min_retrieve_tokens", 0))), "LMCache"


def _io_shape(
    engines: Mapping[str, Any], chunk_from: str, layers: int | None
) -> tuple[str, int, str] | None:
    """One object per chunk per rank, all layers; per layer with use_layerwise."""
    if not (chunk_from.startswith("LMCache") or chunk_from.startswith("the plan")):
        return None
    if engines["lmcache"].get("use_layerwise"):
        if layers:
            return "layer_wise", layers, "LMCache use_layerwise: one object per layer"
        return (
            "contiguous",
            1,
            "LMCache use_layerwise, but the layer count is unknown (no catalog model): "
            "taken as one object per chunk",
        )
    return "contiguous", 1, "LMCache: one object per chunk per rank (all layers)"


def _tier_keys(ctx: EmitContext, stage: StagePlan) -> set[str]:
    return {s.name for s in lmcache_settings(ctx, stage)[0]}


ENGINE = register(
    Engine(
        preemption=VLLM_PREEMPTION,  # its serving processes are vLLM's
        name="lmcache",
        **packaged_settings("lmcache"),
        label="LMCache",
        files={".yaml": "", ".yml": ""},
        # the router file every stage sits behind (its placeholders are linted too)
        shared_files=("vllm-lmcache-router.sh",),
        facts=_lmcache_facts,
        fact_specs=FACT_SPECS,
        host_demand=_host_demand,
        disk_demand=_disk_demand,
        layout=_layout,
        io_chunk=_io_chunk,
        kv_load=_kv_load,
        # LocalDiskBackend reaches a file system as plain POSIX files, one client per instance
        local_disk_backend=lambda engines: (
            "LMCache local_disk" if engines["lmcache"].get("local_disk") else None
        ),
        saves_decode_kv=lambda engines: bool(engines["lmcache"].get("save_decode_cache", False)),
        io_shape=_io_shape,
        emit=emit_lmcache,
        tier_keys=_tier_keys,
        host_keys=frozenset({"max_local_cpu_size"}),
        storage_keys=frozenset({"max_local_disk_size", "remote_url"}),
        # it launches `vllm serve` with the emitted --max-num-batched-tokens
        step_tokens=lambda ctx, stage: batched_tokens(ctx, stage)[0],
        # LMCache's decode servers store what they generate with save_decode_cache.
        decode_saves=lambda ctx, stage: "save_decode_cache" in _tier_keys(ctx, stage),
    )
)
