"""LMCache YAML per stage, and the vLLM launch that loads it (LMCacheConnectorV1).

Tiers map to LMCache backends by kind: host DRAM to ``local_cpu``/``max_local_cpu_size``, a
disk of the node to ``local_disk``/``max_local_disk_size`` (both per worker process), a shared
file system to the FS remote connector (``remote_url: fs://...``), a Mooncake Store pool to
``mooncakestore://``. Disaggregated, vLLM moves the prompt's KV with NixlConnector beside
LMCacheConnectorV1 (LMCache's own PD mode forbids a remote backend: configurations.rst).
"""

from __future__ import annotations

from kvadvisor.emit import sources
from kvadvisor.emit.context import EmitContext, floor_gib
from kvadvisor.emit.deployment import StageView, TierKind
from kvadvisor.emit.sizing import Scope
from kvadvisor.emit.text import Setting, json_compact, placeholder, shell_script, yaml_file
from kvadvisor.emit.transport import nixl_connector
from kvadvisor.emit.vllm import (
    NIXL_PORT,
    engine_flags,
    kv_transfer,
    launch_lines,
    nixl_reason,
)
from kvadvisor.quoting import comment
from kvadvisor.units import Unit, format_value
from kvadvisor.vocab import Stage

LMCACHE = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
RANK_UNIT = "GiB per worker process (one TP rank)"


def _chunk(ctx: EmitContext, stage: StageView) -> Setting:
    kvb = ctx.dep.kv_bytes_per_rank_per_token
    return Setting(
        "chunk_size",
        str(stage.chunk_tokens),
        f"{stage.chunk_tokens} tokens, the advisor's chunk ({sources.LMCACHE_CHUNK}) x "
        f"{format_value(kvb, Unit.BYTES_PER_TOKEN)} of KV on one rank = "
        f"{format_value(stage.chunk_tokens * kvb, Unit.BYTES)} per chunk I/O per rank; a multiple "
        "of vLLM's 16-token block",
    )


def lmcache_settings(ctx: EmitContext, stage: StageView) -> tuple[list[Setting], list[str]]:
    """The stage's LMCache keys, and notes for tiers LMCache is not given."""
    out = [_chunk(ctx, stage)]
    notes: list[str] = []
    host = stage.tier(TierKind.HOST)
    if host is None or not host.capacity_bytes:
        out.append(Setting("local_cpu", "false", f"no host tier recommended for {stage.stage}"))
    else:
        sh = ctx.share(stage, host, Scope.RANK)
        out += [
            Setting("local_cpu", "true", f"the {stage.stage} host DRAM tier ({host.name})"),
            Setting(
                "max_local_cpu_size",
                f"{floor_gib(sh.bytes):g}",  # exact: LMCache's config value, in GiB
                ctx.tier_reason(stage, sh, RANK_UNIT) + f" ({sources.LMCACHE_CPU})",
            ),
        ]
    t = stage.storage_tier
    if t is not None and t.kind == TierKind.LOCAL_DISK and t.capacity_bytes:
        sh = ctx.share(stage, t, Scope.RANK)
        out += [
            Setting(
                "local_disk",
                f'"file://{placeholder("/absolute/local-disk/mount")}/lmcache/"',
                f"the {stage.stage} {t.role_words} is a disk of the node ({t.name}, {t.devices} "
                "device(s)): a directory on it; LMCache keeps one sub-directory per GPU "
                f"(local_disk_path_sharding by_gpu, {sources.LMCACHE_KEYS})",
            ),
            Setting(
                "max_local_disk_size",
                f"{floor_gib(sh.bytes):g}",  # exact: LMCache's config value, in GiB
                ctx.tier_reason(stage, sh, RANK_UNIT) + f" ({sources.LMCACHE_DISK})",
            ),
        ]
    elif t is not None and t.kind == TierKind.SHARED_FS:
        cap = "unbounded" if not t.capacity_bytes else format_value(t.capacity_bytes, Unit.BYTES)
        out += [
            Setting(
                "remote_url",
                f'"fs://localhost:0{placeholder("/absolute/shared-fs/mount")}/lmcache/"',
                f"the {stage.stage} {t.role_words} is a file system every node mounts ({t.name}, "
                f"{cap} for the whole stage): LMCache's FS remote connector, so every "
                "instance reads what any instance wrote; the file system's own size bounds it "
                f"({sources.LMCACHE_FS})",
            ),
            Setting("remote_serde", '"naive"', "raw KV bytes, no GPU codec (the default)"),
        ]
    elif t is not None and t.kind == TierKind.POOL and "mooncake" in t.name:
        out.append(
            Setting(
                "remote_url",
                f'"mooncakestore://{placeholder("mooncake-master-host")}:50051/"',
                f"the {stage.stage} {t.role_words} is a Mooncake Store pool ({t.name}) shared by "
                f"the stage; 50051 is mooncake_master's RPC port ({sources.LMCACHE_MOONCAKE})",
            )
        )
    elif t is not None:
        notes.append(
            f"note: the advisor's {t.role_words} ({t.name}, {t.kind.value}) has no LMCache backend "
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
    for stage in ctx.dep.stages:
        settings, notes = lmcache_settings(ctx, stage)
        yaml_name = f"lmcache-{stage.stage}.yaml"
        head = ctx.head(
            f"LMCache configuration for the {stage.stage} replicas (LMCACHE_CONFIG_FILE)"
        )
        files[yaml_name] = yaml_file(head + [comment(n) for n in notes], settings)
        connectors = [nixl_connector(stage), LMCACHE] if ctx.disaggregated else [LMCACHE]
        why = "LMCacheConnectorV1 loads and stores KV through LMCache"
        if ctx.disaggregated:
            why = nixl_reason(ctx, stage) + "; " + why
        flags = engine_flags(ctx, stage) + [
            Setting("kv-transfer-config", json_compact(kv_transfer(connectors)), why)
        ]
        run = 'vllm serve "$MODEL" --port $((8000 + r)) "${VLLM_ARGS[@]}"'
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
    return files
