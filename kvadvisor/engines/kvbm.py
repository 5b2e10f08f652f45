"""Dynamo KVBM environment and the dynamo.vllm workers that load it.

KVBM sizes each tier per engine instance (its leader sums the block bytes of the TP workers),
in decimal GB. Host DRAM is G2 (``DYN_KVBM_CPU_CACHE_GB``); a disk of the node, or a shared file
system, is G3 (``DYN_KVBM_DISK_CACHE_GB`` in ``DYN_KVBM_DISK_CACHE_DIR``), private to each
engine instance, so a shared file system is split over every replica of the stage. KVBM runs on
prefill workers; decode workers take the prompt's KV over NIXL (kvbm-guide.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvadvisor.emit import sources
from kvadvisor.emit.context import EmitContext, floor_gb
from kvadvisor.emit.contextlen import context_flags
from kvadvisor.emit.deployment import (
    TierKind,
    role_words,
    storage_tier,
    tier_kind,
    tier_label,
    tier_of,
    tier_words,
)
from kvadvisor.emit.kvcache import kv_dtype_flag
from kvadvisor.emit.sizing import SizingScope
from kvadvisor.emit.text import Setting, env_file, json_compact, placeholder, shell_script
from kvadvisor.emit.transport import nixl_connector
from kvadvisor.engines import router
from kvadvisor.engines.registry import Engine, packaged_settings, register, setting_fact
from kvadvisor.engines.vllm import (
    NIXL_PORT,
    VLLM_BLOCK_TOKENS,
    block_flag,
    kv_connectors,
    launch_lines,
    model_flag,
    nixl_reason,
    scheduler_flags,
)
from kvadvisor.engines.vllm import PREEMPTION as VLLM_PREEMPTION
from kvadvisor.errors import ConfigError
from kvadvisor.plan.model import StagePlan, TierPlan
from kvadvisor.quoting import comment
from kvadvisor.units import BYTES_PER_GB, Unit, format_value, plural
from kvadvisor.units.format import as_written
from kvadvisor.vocab import Stage

if TYPE_CHECKING:  # the review passes them in (importing it here would load the replay)
    from kvadvisor.plan.model import TierPlan
    from kvadvisor.planreview.scope import FactSet
    from kvadvisor.planreview.settings import EngineSettings

REPLICA_UNIT = "decimal GB per engine instance (one TP group)"
# vLLM's KVEventsConfig (vllm/config/kv_events.py: publisher zmq, default endpoint tcp://*:5557),
# one port per replica of a node, as JSON in double quotes so the shell fills in the port.
KV_EVENTS = (
    '"{\\"enable_kv_cache_events\\":true,\\"publisher\\":\\"zmq\\",'
    '\\"endpoint\\":\\"tcp://*:$((5557 + r))\\"}"'
)


def kvbm_env(ctx: EmitContext, stage: StagePlan) -> tuple[list[Setting], list[str]]:
    """The stage's DYN_KVBM_* variables, and notes for tiers KVBM is not given."""
    out: list[Setting] = []
    notes: list[str] = []
    host = tier_of(stage, TierKind.HOST)
    cpu_gb = 0
    if host is not None and host.capacity_bytes:
        sh = ctx.share(stage, host, SizingScope.REPLICA)
        cpu_gb = floor_gb(sh.bytes)
        why = ctx.tier_reason(stage, sh, REPLICA_UNIT) + f" ({sources.KVBM_SCOPE})"
        device = ctx.stage_facts(stage).pool_tokens_per_replica
        if device is not None:
            device_bytes = device * ctx.facts.kv_bytes_per_rank_per_token * stage.tp
            if cpu_gb * BYTES_PER_GB < device_bytes:
                raise ConfigError(
                    f"KVBM would churn on {stage.instance}: the host tier gives each engine "
                    f"instance {cpu_gb} GB ({format_value(cpu_gb * BYTES_PER_GB, Unit.BYTES)}), "
                    f"less than its GPU KV pool of {format_value(device_bytes, Unit.BYTES)}, and "
                    "KVBM needs at least the "
                    f"device pool ({sources.KVBM_GUIDE}); choose more host memory per GPU"
                )
            why += (
                "; at least the instance's GPU KV pool of "
                f"{format_value(device_bytes, Unit.BYTES)} "
                f"as {sources.KVBM_GUIDE} asks"
            )
        out.append(Setting("DYN_KVBM_CPU_CACHE_GB", str(cpu_gb), why))
    t = storage_tier(stage)
    if (
        t is not None
        and tier_kind(t) in (TierKind.LOCAL_DISK, TierKind.SHARED_FS)
        and t.capacity_bytes
    ):
        sh = ctx.share(stage, t, SizingScope.REPLICA)
        disk_gb = floor_gb(sh.bytes)
        if disk_gb < cpu_gb:
            notes.append(
                f"note: the {role_words(t)} ({tier_label(t)}) gives each engine instance "
                f"{disk_gb} GB, "
                f"less than its {cpu_gb} GB host tier; KVBM's write-through disk tier would add no "
                "hits (DISK >= CPU), so it is not written"
            )
            return out, notes
        shared = tier_kind(t) == TierKind.SHARED_FS
        mount = "/absolute/shared-fs/mount" if shared else "/absolute/local-disk/mount"
        out += [
            Setting(
                "DYN_KVBM_DISK_CACHE_GB",
                str(disk_gb),
                ctx.tier_reason(stage, sh, REPLICA_UNIT)
                + (
                    "; the tier is shared but KVBM's disk cache is private to each engine "
                    "instance, so the file system is split over all of them"
                    if shared
                    else ""
                )
                + f"; at least DYN_KVBM_CPU_CACHE_GB ({sources.KVBM_GUIDE}: DISK >= CPU)",
            ),
            Setting(
                "DYN_KVBM_DISK_CACHE_DIR",
                f"{placeholder(mount)}/kvbm",
                f"a directory on {tier_label(t)} (the default is /tmp); the launch file gives each "
                f"replica its own sub-directory ({sources.KVBM_DIR})",
            ),
        ]
        if shared:
            out.append(
                Setting(
                    "DYN_KVBM_DISK_ZEROFILL_FALLBACK",
                    "true",
                    "network and parallel file systems such as Lustre lack fallocate(); KVBM "
                    f"then zero-fills its disk files ({sources.KVBM_GUIDE}, troubleshooting)",
                )
            )
    elif t is not None:
        notes.append(
            f"note: the advisor's {tier_words(t)} has no KVBM tier "
            "written here (KVBM's object tier is experimental)"
        )
    return out, notes


# KVBM's vLLM connector (Dynamo args.py _connector_to_kv_transfer_json: what `--connector kvbm`
# stood for before --connector was rejected for the vLLM backend).
DYNAMO_CONNECTOR = {
    "kv_connector": "DynamoConnector",
    "kv_connector_module_path": "kvbm.vllm_integration.connector",
    "kv_role": "kv_both",
}


def kvbm_transfer(ctx: EmitContext, stage: StagePlan, kvbm_here: bool) -> Setting | None:
    """--kv-transfer-config: KVBM's connector and, disaggregated, NIXL on the stage's fabric."""
    connectors: list[dict[str, Any]] = [dict(DYNAMO_CONNECTOR)] if kvbm_here else []
    if ctx.disaggregated:
        connectors.append(nixl_connector(ctx.stage_facts(stage).transport))
    if not connectors:
        return None
    if len(connectors) == 1:
        config = connectors[0]
    else:
        config = {
            "kv_connector": "PdConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"connectors": connectors},
            "kv_connector_module_path": DYNAMO_CONNECTOR["kv_connector_module_path"],
        }
    what = {
        (True, True): "KVBM offloads and onboards KV (DynamoConnector); NIXL sends it to decode",
        (False, True): "NIXL receives the prompt's KV from prefill workers",
        (True, False): "KVBM offloads and onboards KV (DynamoConnector)",
    }[(kvbm_here, ctx.disaggregated)]
    if ctx.disaggregated:
        what += f"; {nixl_reason(ctx, stage)}"
    return Setting(
        "kv-transfer-config", json_compact(config), f"{what} ({sources.KVBM_CONNECTORS})"
    )


def worker_role(stage: StagePlan) -> Setting:
    """--disaggregation-mode for a disaggregated stage's dynamo.vllm workers."""
    if stage.stage == Stage.PREFILL:
        what = "this worker prefills and hands the KV to decode workers"
    else:
        what = "this worker decodes on KV the prefill workers send; it publishes no KV events"
    return Setting(
        "disaggregation-mode", stage.stage.value, f"{what} ({sources.DYNAMO_WORKER_ROLE})"
    )


def emit_kvbm(ctx: EmitContext) -> dict[str, str]:
    """kvbm-<stage>.env for stages that run KVBM, dynamo-<stage>.sh for every stage."""
    files: dict[str, str] = {}
    for stage in ctx.plan.stages:
        kvbm_here = stage.stage != Stage.DECODE
        env_lines: list[str] = []
        notes: list[str] = []
        if kvbm_here:
            settings, notes = kvbm_env(ctx, stage)
        if kvbm_here and not settings:
            # A deployment that keeps KV in GPU memory only (no host or disk tier): no KVBM.
            kvbm_here = False
            notes = [
                f"note: no KVBM for {stage.stage}: the deployment keeps its KV in GPU memory "
                "only (no host or disk tier), so the workers run without the KVBM connector"
            ]
        if kvbm_here:
            name = f"kvbm-{stage.stage}.env"
            files[name] = env_file(
                ctx.head(f"Dynamo KVBM environment for the {stage.stage} workers")
                + [comment(n) for n in notes],
                settings,
            )
            env_lines = [
                "set -a",
                f'source "$HERE/{name}"',
                "set +a",
            ]
        elif stage.tiers:
            notes = [
                "note: the decode tiers the advisor recommends are not written: KVBM runs on "
                "prefill workers, decode workers take the prompt's KV over NIXL "
                f"({sources.KVBM_GUIDE})"
            ]
        flags = [
            model_flag(),
            Setting(
                "tensor-parallel-size",
                str(stage.tp),
                f"TP {stage.tp} from the deployment; {stage.replicas_per_instance} worker(s) per "
                f"{stage.instance}",
            ),
            block_flag(ctx, stage),
            kv_dtype_flag(ctx, "vllm"),
            # dynamo.vllm takes vLLM's engine arguments: the replayed scheduler and context
            *scheduler_flags(ctx, stage),
            *context_flags(ctx, "vllm"),
        ]
        if ctx.disaggregated:
            # Each disaggregated worker names its role: without it a decode worker runs as an
            # aggregated one (Dynamo's default, agg) and publishes KV events the router would
            # take for cached prefixes.
            flags.append(worker_role(stage))
        transfer = kvbm_transfer(ctx, stage, kvbm_here)
        if transfer is not None:
            flags.append(transfer)
        run = (
            "DYN_KVBM_DISK_CACHE_DIR="
            '"${DYN_KVBM_DISK_CACHE_DIR:+$DYN_KVBM_DISK_CACHE_DIR/replica-$r}" '
            'python3 -m dynamo.vllm "${DYNAMO_ARGS[@]}"'
        )
        if any(s.router != "round_robin" for s in ctx.plan.stages):
            # The KV router learns what each worker holds from its KV events; every replica on
            # a node publishes on a port of its own.
            run += " --kv-events-config " + KV_EVENTS

        lines = launch_lines(stage, run, env_lines, NIXL_PORT if ctx.disaggregated else None)
        lines.insert(
            0,
            "# one frontend serves the fleet and routes to these workers: dynamo-frontend.sh",
        )
        files[f"dynamo-{stage.stage}.sh"] = shell_script(
            ctx.head(f"Dynamo vLLM {stage.stage} workers") + [comment(n) for n in notes],
            [],
            "DYNAMO_ARGS",
            flags,
            lines,
        )
    files.update(router.dynamo_frontend(ctx, "dynamo-frontend.sh"))
    return files


# -- the review: facts of a stage's settings, what they take of the instance ---------------
FACT_SPECS = (
    setting_fact(
        "kvbm_configured",
        Unit.BOOL,
        "Whether the stage's workers run Dynamo KVBM (not a decode worker's role and NIXL alone).",
    ),
    setting_fact(
        "kvbm_cpu_cache_bytes", Unit.BYTES, "DYN_KVBM_CPU_CACHE_GB x 10^9 (per engine instance)."
    ),
    setting_fact(
        "kvbm_disk_cache_bytes", Unit.BYTES, "DYN_KVBM_DISK_CACHE_GB x 10^9 (per engine instance)."
    ),
    setting_fact(
        "kvbm_device_pool_bytes",
        Unit.BYTES,
        "The GPU KV pool of one engine instance (KVBM's scope): stage_device_pool_bytes over the "
        "instance's TP groups.",
    ),
    setting_fact("stage_tp_groups", Unit.COUNT, "Engine instances (TP groups) per instance."),
    setting_fact("kvbm_disk_dir_set", Unit.BOOL, "Whether DYN_KVBM_DISK_CACHE_DIR is set."),
    setting_fact(
        "kvbm_disk_on_filesystem",
        Unit.BOOL,
        "Whether KVBM's disk cache sits on a filesystem tier (the stage has no local disk tier).",
    ),
    setting_fact(
        "kvbm_disk_tier_name", Unit.TEXT, "The filesystem tier holding KVBM's disk cache."
    ),
    setting_fact(
        "kvbm_zerofill_fallback",
        Unit.BOOL,
        "Whether DYN_KVBM_DISK_ZEROFILL_FALLBACK is set.",
    ),
    setting_fact("kvbm_disaggregation_mode", Unit.TEXT, "The KVBM worker's disaggregation-mode."),
    setting_fact(
        "kvbm_nixl_connector",
        Unit.BOOL,
        "Whether the worker's connectors (--kv-transfer-config, or --connector) include NIXL.",
    ),
    setting_fact("kvbm_connectors", Unit.TEXT, "The worker's connector list."),
)


def _kvbm_facts(f: FactSet, s: EngineSettings) -> None:
    e = "dynamo-kvbm"
    f.add("kvbm_configured", _runs_kvbm(s))
    if e not in s.stage.engines:
        return
    cpu_gb, disk_gb = s.get(e, "DYN_KVBM_CPU_CACHE_GB"), s.get(e, "DYN_KVBM_DISK_CACHE_GB")
    f.add(
        "kvbm_cpu_cache_bytes",
        None if cpu_gb is None else float(cpu_gb) * BYTES_PER_GB,
        "DYN_KVBM_CPU_CACHE_GB is not set",
    )
    f.add(
        "kvbm_disk_cache_bytes",
        None if disk_gb is None else float(disk_gb) * BYTES_PER_GB,
        "no disk tier set (DYN_KVBM_DISK_CACHE_GB)",
    )
    # KVBM sizes per engine instance (its leader sums the TP workers' blocks): the device pool
    # it must cover is the instance's over its TP groups.
    tp = int(s.get("vllm", "tensor-parallel-size") or s.stage_tp)
    groups = max(1, s.ranks // tp)
    f.add("stage_tp_groups", groups)
    f.add(
        "kvbm_device_pool_bytes",
        None if s.pool is None else s.pool / groups,
        "the device KV pool is unknown (give gpu_kv_pool, or a catalog model and GPU)",
    )
    if disk_gb is not None:
        f.add("kvbm_disk_dir_set", bool(s.get(e, "DYN_KVBM_DISK_CACHE_DIR")))
        fs = s.shared_fs() if s.local_disk() is None else None
        f.add("kvbm_disk_on_filesystem", fs is not None)
        if fs is not None:
            f.add("kvbm_disk_tier_name", tier_label(fs))
            f.add("kvbm_zerofill_fallback", bool(s.get(e, "DYN_KVBM_DISK_ZEROFILL_FALLBACK")))
    mode = s.get(e, "disaggregation-mode")
    if mode is not None:
        conn = _connector_names(s.get(e, "connector"), s.get("vllm", "kv-transfer-config"))
        f.add("kvbm_disaggregation_mode", str(mode))
        f.add("kvbm_nixl_connector", "nixl" in conn)
        f.add("kvbm_connectors", " ".join(conn) or "none")


# The short names Dynamo's legacy --connector list used for vLLM's kv_connector classes.
_CONNECTOR_NAMES = {
    "DynamoConnector": "kvbm",
    "NixlConnector": "nixl",
    "LMCacheConnectorV1": "lmcache",
    "FlexKVConnectorV1": "flexkv",
}


def _runs_kvbm(s: EngineSettings) -> bool:
    """Whether the stage's workers run KVBM.

    A disaggregated worker's block may hold only its role (a decode worker's
    ``--disaggregation-mode decode`` beside a NIXL-only --kv-transfer-config): that worker runs
    no KVBM, so the KVBM sizing checks do not apply to it.
    """
    block = s.stage.engines.get("dynamo-kvbm")
    if block is None:
        return False
    if s.get("dynamo-kvbm", "disaggregation-mode") is None or any(
        str(k).startswith("DYN_KVBM_") for k in block
    ):
        return True
    conn = _connector_names(s.get("dynamo-kvbm", "connector"), s.get("vllm", "kv-transfer-config"))
    return "kvbm" in conn


def _connector_names(legacy: Any, transfer: Any) -> list[str]:
    """The worker's connectors: --connector (older Dynamo) or those --kv-transfer-config nests."""
    if legacy:
        return [str(c) for c in legacy]
    return [
        _CONNECTOR_NAMES.get(str(c.get("kv_connector")), str(c.get("kv_connector")))
        for c in kv_connectors(transfer)
        if c.get("kv_connector") not in ("PdConnector", "MultiConnector")
    ]


def _host_demand(s: EngineSettings) -> tuple[float, str] | None:
    """Host bytes: DYN_KVBM_CPU_CACHE_GB per engine instance."""
    engine = "dynamo-kvbm"
    if not s.has(engine, "DYN_KVBM_CPU_CACHE_GB"):
        return None
    n = s.replicas(engine)
    gb = float(s.get(engine, "DYN_KVBM_CPU_CACHE_GB"))
    how = f"DYN_KVBM_CPU_CACHE_GB {as_written(gb)} x {plural(n, 'instance')}"
    return gb * BYTES_PER_GB * n, how


def _disk_demand(s: EngineSettings) -> tuple[float, TierPlan | None, str] | None:
    """Disk bytes: DYN_KVBM_DISK_CACHE_GB per engine instance (on a shared file system, all)."""
    engine = "dynamo-kvbm"
    if not s.has(engine, "DYN_KVBM_DISK_CACHE_GB"):
        return None
    n = s.replicas(engine)
    gb = float(s.get(engine, "DYN_KVBM_DISK_CACHE_GB"))
    local = s.local_disk()
    if local is None and s.shared_fs() is not None:
        total = n * s.stage.count
        return (
            gb * BYTES_PER_GB * total,
            s.shared_fs(),
            f"DYN_KVBM_DISK_CACHE_GB {as_written(gb)} x {plural(total, 'instance')} sharing "
            "the file system",
        )
    how = f"DYN_KVBM_DISK_CACHE_GB {as_written(gb)} x {plural(n, 'instance')}"
    return gb * BYTES_PER_GB * n, local, how


# -- the plan and the replay: what its settings say of I/O, pages, loads and writes -----------
def _io_chunk(engines: Mapping[str, Any]) -> tuple[int, str]:
    # KVBM moves the serving engine's blocks: vLLM's (default 16 tokens).
    return int(engines.get("vllm", {}).get("block-size", VLLM_BLOCK_TOKENS)), "vLLM --block-size"


def _tier_keys(ctx: EmitContext, stage: StagePlan) -> set[str]:
    # KVBM runs on prefill (and aggregated) workers; decode takes the KV over NIXL.
    return set() if stage.stage == Stage.DECODE else {s.name for s in kvbm_env(ctx, stage)[0]}


ENGINE = register(
    Engine(
        preemption=VLLM_PREEMPTION,  # its serving processes are vLLM's
        name="dynamo-kvbm",
        **packaged_settings("kvbm"),
        label="Dynamo KVBM",
        files={".env": "", "DYNAMO_ARGS": "", "dynamo.frontend": "router"},
        # the router file every stage sits behind (its placeholders are linted too)
        shared_files=("dynamo-frontend.sh",),
        facts=_kvbm_facts,
        fact_specs=FACT_SPECS,
        host_demand=_host_demand,
        disk_demand=_disk_demand,
        # blocks in its fully contiguous host and disk layout
        layout=lambda s: (False, "KVBM fully contiguous blocks: a block holds every layer"),
        # Dynamo's workers are vLLM's: the TP is vLLM's flag
        tp_setting=("vllm", "tensor-parallel-size"),
        # decode_saves: no; KVBM runs no tier on decode workers (they take the KV over NIXL)
        io_chunk=_io_chunk,
        # its disk tier (G3) is a local directory: on a file system, plain POSIX files
        local_disk_backend=lambda engines: "KVBM disk tier",
        emit=emit_kvbm,
        tier_keys=_tier_keys,
        host_keys=frozenset({"DYN_KVBM_CPU_CACHE_GB"}),
        storage_keys=frozenset({"DYN_KVBM_DISK_CACHE_GB"}),
    )
)
