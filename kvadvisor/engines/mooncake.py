"""Mooncake Store: the master, a store service per node, the engine's client, vLLM's connectors.

The pool's memory is each serving node's host DRAM tier, given by one store service per node
(``mooncake_client --global_segment_size``, bytes for this node); a disk of the node becomes
that service's SSD offload, bounded in bytes. vLLM reaches the pool with MooncakeStoreConnector
through a client that gives it no memory (``global_segment_size: 0``); disaggregated, the
prompt's KV moves with MooncakeConnector beside it (vllm-mooncakestoreconnector.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvadvisor.emit import sources
from kvadvisor.emit.context import EmitContext
from kvadvisor.emit.deployment import (
    TierKind,
    storage_tier,
    tier_kind,
    tier_label,
    tier_of,
    tier_words,
)
from kvadvisor.emit.sizing import SizingScope
from kvadvisor.emit.text import Setting, json_compact, json_text, placeholder, shell_script
from kvadvisor.emit.transport import mooncake_connector, mooncake_store_settings, transfer_plan
from kvadvisor.engines import router
from kvadvisor.engines.registry import Engine, packaged_settings, register, setting_fact
from kvadvisor.engines.sglang import (
    MOONCAKE_LOCAL_BUFFER_BYTES,
    mooncake_client_json,
    mooncake_notes,
)
from kvadvisor.engines.vllm import PREEMPTION as VLLM_PREEMPTION
from kvadvisor.engines.vllm import batched_tokens, engine_flags, kv_transfer, launch_lines
from kvadvisor.errors import ConfigError
from kvadvisor.plan.model import StagePlan, TierPlan
from kvadvisor.quoting import comment
from kvadvisor.units import Unit, format_value
from kvadvisor.units.format import count
from kvadvisor.vocab import Stage

if TYPE_CHECKING:  # the review passes them in (importing it here would load the replay)
    from kvadvisor.plan.model import TierPlan
    from kvadvisor.planreview.scope import FactSet
    from kvadvisor.planreview.settings import EngineSettings

MOONCAKE_DEFAULT_EVICTION_RATIO = 0.05  # master.cpp DEFAULT_EVICTION_RATIO (types.h)
MOONCAKE_MAX_EVICTION_RATIO = 0.5
MASTER_RPC_PORT = 50051  # mooncake_master's RPC port in Mooncake's deployment guides
METADATA_HTTP_PORT = 8080  # --http_metadata_server_port default (master.cpp)
CLIENT_JSON = "mooncake-client.json"
MASTER_SH = "mooncake-master.sh"
MOONCAKE_BOOTSTRAP_BASE_PORT = (
    50052  # VLLM_MOONCAKE_BOOTSTRAP_PORT in vllm-mooncakestoreconnector.md
)


def _master(ctx: EmitContext) -> list[Setting]:
    pool = 0.0
    for stage in ctx.plan.stages:
        host = tier_of(stage, TierKind.HOST)
        if host is not None and host.capacity_bytes:
            pool += ctx.share(stage, host, SizingScope.NODE).bytes * stage.count
    offload = any(
        (st := storage_tier(s)) is not None and tier_kind(st) == TierKind.LOCAL_DISK
        for s in ctx.plan.stages
    )
    out = [
        Setting(
            "rpc_port",
            str(MASTER_RPC_PORT),
            f"the clients' master_server_address port ({sources.MOONCAKE_MASTER})",
        ),
        Setting(
            "enable_http_metadata_server",
            "true",
            "the master also serves the transfer engine's metadata, so no separate metadata "
            f"service is needed ({sources.MOONCAKE_MASTER})",
        ),
        Setting(
            "http_metadata_server_port",
            str(METADATA_HTTP_PORT),
            "the clients' metadata_server port",
        ),
        Setting(
            "enable_offload",
            "true" if offload else "false",
            (
                "store services persist objects to their node's SSD and read them back on a "
                f"miss; never with --root_fs_dir ({sources.MOONCAKE_SSD})"
            )
            if offload
            else "no disk tier on the serving nodes: the pool is DRAM only",
        ),
    ]
    io = ctx.report.io
    if io is not None and io.write.peak_bytes_per_s is not None and io.window_s and pool:
        burst = io.write.peak_bytes_per_s * io.window_s
        ratio = min(MOONCAKE_MAX_EVICTION_RATIO, max(MOONCAKE_DEFAULT_EVICTION_RATIO, burst / pool))
        out.append(
            Setting(
                "eviction_ratio",
                f"{ratio:.3f}",  # exact: Mooncake master's config value
                "one eviction makes room for the peak write burst: "
                f"{format_value(burst, Unit.BYTES)} in a {format_value(io.window_s, Unit.SECONDS)} "
                f"window over the fleet's {format_value(pool, Unit.BYTES)} pool (floor: the "
                f"default {MOONCAKE_DEFAULT_EVICTION_RATIO}, {sources.MOONCAKE_MASTER})",
            )
        )
    return out


def store_settings(ctx: EmitContext, stage: StagePlan) -> tuple[list[Setting], list[Setting]]:
    """(SSD-offload environment, mooncake_client flags) of one node of ``stage``."""
    host = tier_of(stage, TierKind.HOST)
    if host is None or not host.capacity_bytes:
        raise ConfigError(f"no Mooncake Store pool to write for {stage.stage}: no host tier")
    sh = ctx.share(stage, host, SizingScope.NODE)
    master = placeholder("mooncake-master-host")
    segment = int(sh.bytes)
    buffers = stage.ranks_per_instance * MOONCAKE_LOCAL_BUFFER_BYTES
    flags = [
        Setting(
            "master_server_address", f"{master}:{MASTER_RPC_PORT}", "mooncake_master's RPC address"
        ),
        Setting(
            "metadata_server",
            f"http://{master}:{METADATA_HTTP_PORT}/metadata",
            "the metadata service the master runs",
        ),
        Setting("host", placeholder("this-node-ip"), "this node's address as the others reach it"),
        *mooncake_store_settings(ctx.stage_facts(stage).transport),
        Setting(
            "global_segment_size",
            str(segment),
            ctx.tier_reason(stage, sh, "bytes this node gives the pool")
            + f"; the node keeps {format_value(buffers, Unit.BYTES)} for the "
            f"{stage.ranks_per_instance} ranks' client buffers ({sources.MOONCAKE_STORE})",
        ),
    ]
    env: list[Setting] = []
    t = storage_tier(stage)
    if t is not None and tier_kind(t) == TierKind.LOCAL_DISK and t.capacity_bytes:
        disk = ctx.share(stage, t, SizingScope.NODE)
        flags.append(
            Setting("enable_offload", "true", f"this node's {tier_label(t)} holds what DRAM evicts")
        )
        env += [
            Setting(
                "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH",
                f"{placeholder('/absolute/local-disk/mount')}/mooncake",
                f"a directory on {tier_label(t)} ({sources.MOONCAKE_SSD})",
            ),
            Setting(
                "MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR",
                "bucket_storage_backend",
                "the recommended backend: buckets of objects, FIFO/LRU eviction "
                f"({sources.MOONCAKE_SSD})",
            ),
            Setting(
                "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES",
                str(int(disk.bytes)),
                ctx.tier_reason(stage, disk, "bytes on this node's disk")
                + "; the bound keeps the offload from filling the disk (Mooncake #924)",
            ),
        ]
    return env, flags


def emit_mooncake(ctx: EmitContext) -> dict[str, str]:
    """Master, per-stage store services, the engine client JSON and vLLM launch files."""
    files: dict[str, str] = {}
    files[MASTER_SH] = shell_script(
        ctx.head("Mooncake master, one for the fleet"),
        [],
        "MOONCAKE_MASTER_ARGS",
        _master(ctx),
        ['mooncake_master "${MOONCAKE_MASTER_ARGS[@]}"'],
        gflags=True,
    )
    for stage in ctx.plan.stages:
        env, flags = store_settings(ctx, stage)
        notes = []
        t = storage_tier(stage)
        if t is not None and tier_kind(t) != TierKind.LOCAL_DISK:
            notes.append(
                comment(
                    f"note: the advisor's {tier_words(t)} is not a disk "
                    "of the node; Mooncake's SSD offload is per node, so it is not written here"
                )
            )
        files[f"mooncake-store-{stage.stage}.sh"] = shell_script(
            ctx.head(f"Mooncake store service, one per {stage.stage} node ({stage.instance})")
            + notes,
            env,
            "MOONCAKE_CLIENT_ARGS",
            flags,
            ['mooncake_client "${MOONCAKE_CLIENT_ARGS[@]}"'],
            gflags=True,
        )
        role = {Stage.PREFILL: "kv_producer", Stage.DECODE: "kv_consumer"}.get(
            stage.stage, "kv_both"
        )
        store = {"kv_connector": "MooncakeStoreConnector", "kv_role": role}
        transport = ctx.stage_facts(stage).transport
        connectors = [mooncake_connector(role, transport), store] if ctx.disaggregated else [store]
        transfer = kv_transfer(connectors)
        if ctx.disaggregated:
            transfer["kv_role"] = role
        why = (
            "MooncakeConnector moves the prompt's KV from prefill to decode (protocol "
            f"{transfer_plan(transport).protocol}: {transfer_plan(transport).why}); "
            "MooncakeStoreConnector shares the pool"
            if ctx.disaggregated
            else "MooncakeStoreConnector keeps KV in the pool"
        ) + f" ({sources.MOONCAKE_VLLM})"
        flags = engine_flags(ctx, stage) + [
            Setting("kv-transfer-config", json_compact(transfer), why)
        ]
        files[f"vllm-mooncake-{stage.stage}.sh"] = shell_script(
            ctx.head(f"vLLM {stage.stage} replicas on the Mooncake Store pool"),
            [],
            "VLLM_ARGS",
            flags,
            launch_lines(
                stage,
                'vllm serve --port $((8000 + r)) "${VLLM_ARGS[@]}"',
                [f'export MOONCAKE_CONFIG_PATH="$HERE/{CLIENT_JSON}"'],
                ("VLLM_MOONCAKE_BOOTSTRAP_PORT", MOONCAKE_BOOTSTRAP_BASE_PORT)
                if ctx.disaggregated
                else None,
            ),
        )
    # One client file for every node: the decode stage's fabric (P/D pairs share a network).
    last = ctx.plan.stages[-1] if ctx.plan.stages else None
    transport = None if last is None else ctx.stage_facts(last).transport
    notes = mooncake_notes(CLIENT_JSON, None if last is None else transfer_plan(transport))
    files[CLIENT_JSON] = json_text(mooncake_client_json(CLIENT_JSON, transport))
    files["mooncake-client.notes.txt"] = "\n".join(ctx.head(CLIENT_JSON) + notes) + "\n"
    files.update(router.http_router(ctx, "vllm", "vllm-mooncake-router.sh"))
    return files


# -- the review: facts of a stage's settings, what they take of the instance ---------------
MOONCAKE_DEFAULT_SEGMENT_BYTES = 3355443200  # mooncake_config.py DEFAULT_GLOBAL_SEGMENT_SIZE
MOONCAKE_DEFAULT_BUFFER_BYTES = 1 << 30  # mooncake_config.py DEFAULT_LOCAL_BUFFER_SIZE
MOONCAKE_CLIENT_REQUIRED = ("local_hostname", "metadata_server", "master_server_address")
FACT_SPECS = (
    setting_fact("mooncake_configured", Unit.BOOL, "Whether the stage configures Mooncake."),
    setting_fact("mooncake_root_fs_dir_set", Unit.BOOL, "Whether root_fs_dir is set."),
    setting_fact("mooncake_offload_enabled", Unit.BOOL, "Whether enable_offload is on."),
    setting_fact(
        "mooncake_store_service", Unit.BOOL, "Whether a store service is configured (host)."
    ),
    setting_fact("mooncake_client_set", Unit.BOOL, "Whether a client configuration is given."),
    setting_fact(
        "mooncake_client_missing_count",
        Unit.COUNT,
        "Required client keys (local_hostname, metadata_server, master_server_address) missing.",
    ),
    setting_fact("mooncake_client_missing", Unit.TEXT, "Those keys."),
    setting_fact(
        "mooncake_offload_unset_count",
        Unit.COUNT,
        "Of MOONCAKE_OFFLOAD_FILE_STORAGE_PATH and MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES, how "
        "many are unset.",
    ),
    setting_fact("mooncake_offload_unset", Unit.TEXT, "Those settings."),
    setting_fact("mooncake_eviction_ratio", Unit.RATIO, "Mooncake master eviction_ratio."),
)


def _mooncake_facts(f: FactSet, s: EngineSettings) -> None:
    e = "mooncake"
    f.add("mooncake_configured", e in s.stage.engines)
    if e not in s.stage.engines:
        return
    g = s.get
    master = g(e, "master") or {}
    f.add("mooncake_root_fs_dir_set", bool(g(e, "root_fs_dir") or master.get("root_fs_dir")))
    f.add(
        "mooncake_offload_enabled",
        bool(g(e, "enable_offload", False) or master.get("enable_offload")),
    )
    f.add("mooncake_store_service", s.has(e, "host"))
    client = g(e, "client")
    f.add("mooncake_client_set", isinstance(client, dict))
    if isinstance(client, dict):
        missing = [k for k in MOONCAKE_CLIENT_REQUIRED if not str(client.get(k, "")).strip()]
        f.add("mooncake_client_missing_count", len(missing))
        f.add("mooncake_client_missing", ", ".join(missing) or "none")
    unset = [
        k
        for k in ("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES")
        if not s.has(e, k)
    ]
    f.add("mooncake_offload_unset_count", len(unset))
    f.add("mooncake_offload_unset", ", ".join(unset) or "none")
    ratio = g(e, "eviction_ratio", master.get("eviction_ratio"))
    if ratio is not None:
        f.add("mooncake_eviction_ratio", float(ratio))


def _host_demand(s: EngineSettings) -> tuple[float, str] | None:
    """Host bytes: a store service's segment per node, and each client's segment and buffer."""
    g, engine = s.get, "mooncake"
    if not (s.has(engine, "global_segment_size") or s.has(engine, "client")):
        return None
    store = float(g(engine, "global_segment_size", 0) if s.has(engine, "host") else 0)
    client = g(engine, "client", {}) or {}
    seg = client.get("global_segment_size", MOONCAKE_DEFAULT_SEGMENT_BYTES)
    buf = client.get("local_buffer_size", MOONCAKE_DEFAULT_BUFFER_BYTES)
    per = (seg if isinstance(seg, int) else 0) + (buf if isinstance(buf, int) else 0)
    return store + per * s.ranks, (
        f"store segment {format_value(store, Unit.BYTES)} + {s.ranks} client processes x "
        f"{format_value(per, Unit.BYTES)} (segment + buffer)"
    )


def _disk_demand(s: EngineSettings) -> tuple[float, TierPlan | None, str] | None:
    """Disk bytes: MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES per node."""
    engine = "mooncake"
    if not s.has(engine, "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"):
        return None
    limit = float(s.get(engine, "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"))
    return (
        limit,
        s.local_disk(),
        f"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES {count(limit)} per node",
    )


def _tier_keys(ctx: EmitContext, stage: StagePlan) -> set[str]:
    env, flags = store_settings(ctx, stage)
    return {s.name for s in env + flags}


ENGINE = register(
    Engine(
        preemption=VLLM_PREEMPTION,  # its serving processes are vLLM's
        name="mooncake",
        **packaged_settings("mooncake"),
        label="Mooncake",
        # a client JSON is read under `client`; the master's flags stay apart from a store's
        files={".json": "client", "MOONCAKE_MASTER_ARGS": "master", "MOONCAKE_CLIENT_ARGS": ""},
        facts=_mooncake_facts,
        fact_specs=FACT_SPECS,
        host_demand=_host_demand,
        disk_demand=_disk_demand,
        # one store object per block hash (vllm-mooncakestoreconnector.md)
        layout=lambda s: (False, "Mooncake store objects: one per block per rank, every layer"),
        emit=emit_mooncake,
        tier_keys=_tier_keys,
        host_keys=frozenset({"global_segment_size"}),
        storage_keys=frozenset({"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"}),
        # it launches `vllm serve` with the emitted --max-num-batched-tokens
        step_tokens=lambda ctx, stage: batched_tokens(ctx, stage)[0],
        # one master, one client configuration and one router for every stage
        shared_files=(MASTER_SH, CLIENT_JSON, "vllm-mooncake-router.sh"),
        # decode_saves: no; its decode connector is a kv_consumer (it loads, never stores)
    )
)
