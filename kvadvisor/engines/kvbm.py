"""Dynamo KVBM environment and the dynamo.vllm workers that load it.

KVBM sizes each tier per engine instance (its leader sums the block bytes of the TP workers),
in decimal GB. Host DRAM is G2 (``DYN_KVBM_CPU_CACHE_GB``); a disk of the node, or a shared file
system, is G3 (``DYN_KVBM_DISK_CACHE_GB`` in ``DYN_KVBM_DISK_CACHE_DIR``), private to each
engine instance, so a shared file system is split over every replica of the stage. KVBM runs on
prefill workers; decode workers take the prompt's KV over NIXL (kvbm-guide.md).
"""

from __future__ import annotations

from kvadvisor.emit import sources
from kvadvisor.emit.context import EmitContext, floor_gb
from kvadvisor.emit.deployment import StageView, TierKind
from kvadvisor.emit.sizing import Scope
from kvadvisor.emit.text import Setting, env_file, placeholder, shell_script
from kvadvisor.engines.registry import Engine, packaged_settings, register
from kvadvisor.engines.vllm import NIXL_PORT, VLLM_BLOCK_TOKENS, launch_lines
from kvadvisor.errors import ConfigError
from kvadvisor.quoting import comment
from kvadvisor.units import BYTES_PER_GB, Unit, format_value
from kvadvisor.vocab import Stage

REPLICA_UNIT = "decimal GB per engine instance (one TP group)"


def kvbm_env(ctx: EmitContext, stage: StageView) -> tuple[list[Setting], list[str]]:
    """The stage's DYN_KVBM_* variables, and notes for tiers KVBM is not given."""
    out: list[Setting] = []
    notes: list[str] = []
    host = stage.tier(TierKind.HOST)
    cpu_gb = 0
    if host is not None and host.capacity_bytes:
        sh = ctx.share(stage, host, Scope.REPLICA)
        cpu_gb = floor_gb(sh.bytes)
        why = ctx.tier_reason(stage, sh, REPLICA_UNIT) + f" ({sources.KVBM_SCOPE})"
        device = stage.device_pool_tokens_per_replica
        if device is not None:
            device_bytes = device * ctx.dep.kv_bytes_per_rank_per_token * stage.tp
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
    t = stage.storage_tier
    if t is not None and t.kind in (TierKind.LOCAL_DISK, TierKind.SHARED_FS) and t.capacity_bytes:
        sh = ctx.share(stage, t, Scope.REPLICA)
        disk_gb = floor_gb(sh.bytes)
        if disk_gb < cpu_gb:
            notes.append(
                f"note: the {t.role_words} ({t.name}) gives each engine instance {disk_gb} GB, "
                f"less than its {cpu_gb} GB host tier; KVBM's write-through disk tier would add no "
                "hits (DISK >= CPU), so it is not written"
            )
            return out, notes
        shared = t.kind == TierKind.SHARED_FS
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
                f"a directory on {t.name} (the default is /tmp); the launch file gives each "
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
            f"note: the advisor's {t.role_words} ({t.name}, {t.kind.value}) has no KVBM tier "
            "written here (KVBM's object tier is experimental)"
        )
    return out, notes


def emit_kvbm(ctx: EmitContext) -> dict[str, str]:
    """kvbm-<stage>.env for stages that run KVBM, dynamo-<stage>.sh for every stage."""
    files: dict[str, str] = {}
    for stage in ctx.dep.stages:
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
        connector = (
            ["kvbm", "nixl"]
            if ctx.disaggregated and kvbm_here
            else ["nixl"]
            if ctx.disaggregated
            else ["kvbm"]
            if kvbm_here
            else []
        )
        flags = [
            Setting(
                "tensor-parallel-size",
                str(stage.tp),
                f"TP {stage.tp} from the deployment; {stage.replicas_per_instance} worker(s) per "
                f"{stage.instance}",
            ),
            Setting(
                "block-size",
                str(VLLM_BLOCK_TOKENS),
                "vLLM's default block; KVBM moves the engine's blocks",
            ),
        ]
        if ctx.disaggregated and stage.stage == Stage.PREFILL:
            flags.append(
                Setting(
                    "disaggregation-mode",
                    "prefill",
                    "this worker prefills and hands the KV to decode workers "
                    f"({sources.KVBM_LAUNCH})",
                )
            )
        if connector:
            flags.append(
                Setting(
                    "connector",
                    tuple(connector),
                    {
                        ("kvbm", "nixl"): "KVBM offloads and onboards KV; NIXL sends it to decode",
                        ("nixl",): "NIXL receives the prompt's KV from prefill workers",
                        ("kvbm",): "KVBM offloads and onboards KV",
                    }[tuple(connector)]
                    + f" ({sources.KVBM_LAUNCH})",
                )
            )
        run = (
            "DYN_KVBM_DISK_CACHE_DIR="
            '"${DYN_KVBM_DISK_CACHE_DIR:+$DYN_KVBM_DISK_CACHE_DIR/replica-$r}" '
            'python3 -m dynamo.vllm --model "$MODEL" "${DYNAMO_ARGS[@]}"'
        )
        lines = launch_lines(stage, run, env_lines, NIXL_PORT if ctx.disaggregated else None)
        lines.insert(
            0,
            "# one frontend serves the fleet; start it once, elsewhere: python -m dynamo.frontend",
        )
        files[f"dynamo-{stage.stage}.sh"] = shell_script(
            ctx.head(f"Dynamo vLLM {stage.stage} workers") + [comment(n) for n in notes],
            [],
            "DYNAMO_ARGS",
            flags,
            lines,
        )
    return files


def _tier_keys(ctx: EmitContext, stage: StageView) -> set[str]:
    # KVBM runs on prefill (and aggregated) workers; decode takes the KV over NIXL.
    return set() if stage.stage == Stage.DECODE else {s.name for s in kvbm_env(ctx, stage)[0]}


ENGINE = register(
    Engine(
        name="dynamo-kvbm",
        **packaged_settings("kvbm"),
        label="Dynamo KVBM",
        files={".env": "", "DYNAMO_ARGS": ""},
        emit=emit_kvbm,
        tier_keys=_tier_keys,
        host_keys=frozenset({"DYN_KVBM_CPU_CACHE_GB"}),
        storage_keys=frozenset({"DYN_KVBM_DISK_CACHE_GB"}),
    )
)
