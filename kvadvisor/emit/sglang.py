"""SGLang launch files per stage: HiCache host pool per rank, the L3 backend, P/D flags.

One ``sglang.launch_server`` per instance drives all of its GPUs: ``--tp-size`` x
``--dp-size`` replicas. ``--hicache-size`` is decimal GB per TP rank process and must exceed
that rank's device pool. A disk of the node or a shared file system becomes the ``file`` L3
backend in a directory on it; a Mooncake Store pool the ``mooncake`` backend; a 3FS pool
``hf3fs``. With an L3 tier the best-practice settings apply: page-first host layout with the
kernel I/O backend, and a prefetch policy (hicache_best_practices.md).
"""

from __future__ import annotations

import math

from kvadvisor.emit import sources
from kvadvisor.emit.context import EmitContext, floor_gb
from kvadvisor.emit.contextlen import context_flags
from kvadvisor.emit.deployment import StageView, TierKind, TierView
from kvadvisor.emit.sizing import Scope, reuse_at
from kvadvisor.emit.text import Setting, json_text, placeholder, shell_script
from kvadvisor.emit.transport import mooncake_client_transport, sglang_transfer, transfer_plan
from kvadvisor.errors import ConfigError
from kvadvisor.quoting import comment
from kvadvisor.units import BYTES_PER_GB, Unit, format_value
from kvadvisor.vocab import Stage

HICACHE_PAGE_TOKENS = 64  # hicache_best_practices.md examples use --page-size 64
LOW_REUSE_HIT_RATIO = 0.20  # below this, writing every block through is mostly a write-only cost
MOONCAKE_LOCAL_BUFFER_BYTES = 1 << 30  # Mooncake DEFAULT_LOCAL_BUFFER_SIZE (mooncake_config.py)


def _backend(t: TierView) -> str | None:
    """The HiCache L3 backend for a tier kind (None: none written)."""
    if t.kind in (TierKind.LOCAL_DISK, TierKind.SHARED_FS):
        return "file"
    if t.kind == TierKind.POOL:
        return "hf3fs" if "3fs" in t.name else "mooncake"
    return None


def mooncake_client_json(what: str, stage: StageView | None = None) -> dict[str, object]:
    """A complete Mooncake client configuration whose process gives the pool no memory.

    Its protocol and NICs follow the stage's fabric (:mod:`kvadvisor.emit.transport`).
    """
    master = placeholder("mooncake-master-host")
    return {
        "local_hostname": placeholder("this-node-ip"),
        "metadata_server": f"http://{master}:8080/metadata",
        "master_server_address": f"{master}:50051",
        **mooncake_client_transport(stage),
        "global_segment_size": 0,
        "local_buffer_size": MOONCAKE_LOCAL_BUFFER_BYTES,
    }


def mooncake_notes(what: str, stage: StageView | None = None) -> list[str]:
    """Why each Mooncake client key has its value (JSON has no comments)."""
    plan = transfer_plan(stage) if stage is not None else None
    protocol = (
        [
            "# protocol: rdma for the pool's bandwidth; tcp works without RDMA NICs",
            "# device_name: the RDMA NICs to use (`ibv_devices` lists them)",
        ]
        if plan is None
        else [
            f"# protocol: {plan.protocol}: {plan.why}",
            "# device_name: "
            + ("the RDMA NICs to use (`ibv_devices` lists them)" if plan.devices else "none named"),
        ]
    )
    return [
        f"# {what}: the Mooncake client configuration ({sources.MOONCAKE_CONFIG})",
        "# local_hostname: this node's address as the other nodes reach it",
        "# metadata_server: the HTTP metadata service mooncake_master runs with "
        "--enable_http_metadata_server (port 8080)",
        "# master_server_address: mooncake_master's RPC address (port 50051)",
        *protocol,
        "# global_segment_size: 0 bytes: this process gives the pool no memory; the pool's "
        "memory comes from the store nodes",
        f"# local_buffer_size: {format_value(MOONCAKE_LOCAL_BUFFER_BYTES, Unit.BYTES)}, "
        "Mooncake's default "
        "staging buffer for this process's gets and puts",
    ]


def _host_size(ctx: EmitContext, stage: StageView) -> Setting | None:
    host = stage.tier(TierKind.HOST)
    if host is None or not host.capacity_bytes:
        return None
    sh = ctx.share(stage, host, Scope.RANK)
    gb = floor_gb(sh.bytes)
    device = stage.device_pool_tokens_per_replica
    why = (
        ctx.tier_reason(stage, sh, "whole GB per TP rank process")
        + f" ({sources.SGLANG_HOST_POOL})"
    )
    if device is not None:
        device_rank = device * ctx.dep.kv_bytes_per_rank_per_token
        if gb * BYTES_PER_GB <= device_rank:
            raise ConfigError(
                f"SGLang HiCache cannot start on {stage.instance}: the host pool of {gb} GB "
                f"({format_value(gb * BYTES_PER_GB, Unit.BYTES)}) per rank is not larger than "
                f"the rank's GPU KV pool of {format_value(device_rank, Unit.BYTES)} "
                "(memory_pool_host.py asserts it is); "
                "choose an instance with more host memory per GPU"
            )
        why += (
            f"; {format_value(gb * BYTES_PER_GB / device_rank, Unit.MULTIPLE)} this rank's GPU "
            f"KV pool of {format_value(device_rank, Unit.BYTES)} (the design doc asks at least 2×)"
        )
    return Setting("hicache-size", str(gb), why)


def _write_policy(ctx: EmitContext) -> Setting:
    reuse = reuse_at(ctx.report, math.inf)
    low = reuse.unbounded is not None and reuse.unbounded < LOW_REUSE_HIT_RATIO
    return Setting(
        "hicache-write-policy",
        "write_through_selective" if low else "write_through",
        (
            f"unbounded prefix hit ratio {format_value(reuse.unbounded, Unit.RATIO)}, under "
            f"{format_value(LOW_REUSE_HIT_RATIO, Unit.RATIO)}: "
            "write back only blocks that are hit again"
            if low
            else "every block written through to the host pool (the default; "
            + (
                f"unbounded prefix hit ratio {format_value(reuse.unbounded, Unit.RATIO)})"
                if reuse.unbounded is not None
                else "prefix reuse unknown without block hashes)"
            )
        ),
    )


def sglang_stage(
    ctx: EmitContext, stage: StageView
) -> tuple[list[Setting], list[Setting], list[str], dict[str, str]]:
    """(environment, flags, notes, extra files) for one stage's server."""
    env: list[Setting] = []
    notes: list[str] = []
    extra: dict[str, str] = {}
    block = ctx.report.trace.block_tokens
    page = math.gcd(HICACHE_PAGE_TOKENS, block) if block else HICACHE_PAGE_TOKENS
    flags = [
        Setting("model-path", placeholder("model-path-or-hf-id"), "the model to serve"),
        *context_flags(ctx, "sglang"),
        Setting(
            "tp-size",
            str(stage.tp),
            f"TP {stage.tp} from the deployment ({sources.SGLANG_PARALLEL})",
        ),
        Setting(
            "dp-size",
            str(stage.replicas_per_instance),
            f"{stage.replicas_per_instance} replica(s) of TP {stage.tp} fill the "
            f"{stage.gpus_per_instance} GPUs of one {stage.instance}; SGLang's data parallel "
            "runs them behind one server, so HiCache runs in each of the "
            f"{stage.ranks_per_instance} rank processes ({sources.SGLANG_PARALLEL})",
        ),
        Setting(
            "page-size",
            str(page),
            f"{page} tokens: the best-practice page ({sources.SGLANG_BEST})"
            + (f", dividing the trace's {block}-token hash block" if block else ""),
        ),
    ]
    size = _host_size(ctx, stage)
    t = stage.storage_tier
    backend = None if t is None else _backend(t)
    shared_l3 = t is not None and t.kind in (TierKind.SHARED_FS, TierKind.POOL)
    decode_offload = stage.stage == Stage.DECODE and shared_l3 and backend is not None
    hicache = size is not None and (stage.stage != Stage.DECODE or decode_offload)
    if stage.stage == Stage.DECODE and not decode_offload and (size is not None or t is not None):
        notes.append(
            "note: the decode tiers the advisor recommends are not written: an SGLang decode "
            "server keeps no host pool unless it offloads finished turns to a shared L3 "
            "(--disaggregation-decode-enable-offload-kvcache) that prefill reads, and "
            + ("a disk on a decode node is not shared" if t is not None else "there is none")
        )
    if hicache and stage.stage != Stage.DECODE:
        flags.append(Setting("enable-hierarchical-cache", None, "HiCache: GPU, host, L3"))
    if hicache:
        assert size is not None
        flags += [
            size,
            _write_policy(ctx),
            Setting(
                "hicache-io-backend",
                "kernel",
                f"GPU-assisted copies between host pool and GPU ({sources.SGLANG_BEST})",
            ),
            Setting(
                "hicache-mem-layout",
                "page_first",
                "page-first host layout: whole pages move to and from L3 in one piece; needs the "
                f"kernel I/O backend ({sources.SGLANG_BEST}; {sources.SGLANG_MOONCAKE})",
            ),
        ]
    if hicache and t is not None and backend is None:
        notes.append(
            f"note: the advisor's {t.role_words} ({t.name}, {t.kind.value}) has no HiCache backend "
            "written here"
        )
    if hicache and t is not None and backend is not None:
        flags += _l3(ctx, stage, t, backend, env, extra)
    if ctx.disaggregated:
        flags += [
            Setting(
                "disaggregation-mode",
                stage.stage,
                f"P/D: this server runs the {stage.stage} stage ({sources.SGLANG_DISAGG})",
            ),
            Setting(
                "disaggregation-transfer-backend",
                "mooncake",
                "the prompt's KV moves from prefill to decode with the Mooncake transfer engine "
                f"(SGLang's default, {sources.SGLANG_DISAGG}) over "
                f"{transfer_plan(stage).fabric}",
            ),
        ]
        fabric_env, fabric_flags = sglang_transfer(stage)
        env += fabric_env
        flags += fabric_flags
    if decode_offload:
        flags.append(
            Setting(
                "disaggregation-decode-enable-offload-kvcache",
                None,
                "decode writes each finished turn's KV to the shared L3, where prefill finds it "
                f"for the next turn ({sources.SGLANG_BEST}, PD integration)",
            )
        )
    return env, flags, notes, extra


def _l3(
    ctx: EmitContext,
    stage: StageView,
    t: TierView,
    backend: str,
    env: list[Setting],
    extra: dict[str, str],
) -> list[Setting]:
    reuse = reuse_at(ctx.report, math.inf)
    where = (
        "a disk of the node"
        if t.kind == TierKind.LOCAL_DISK
        else "a file system every node mounts"
        if t.kind == TierKind.SHARED_FS
        else "a pool shared by the stage"
    )
    cap = "unbounded" if not t.capacity_bytes else format_value(t.capacity_bytes, Unit.BYTES)
    per = "per instance" if not t.shared else "for the whole stage"
    flags = [
        Setting(
            "hicache-storage-backend",
            backend,
            f"the {stage.stage} {t.role_words} ({t.name}, {cap} {per}) is {where}: HiCache's "
            f"'{backend}' L3 backend ({sources.SGLANG_MEMORY}); "
            + (
                f"unbounded prefix hit ratio {format_value(reuse.unbounded, Unit.RATIO)}"
                if reuse.unbounded is not None
                else "prefix reuse unknown without block hashes"
            ),
        ),
        Setting(
            "hicache-storage-prefetch-policy",
            "timeout" if backend == "mooncake" else "wait_complete",
            (
                "stop a slow prefetch at its timeout and compute the rest (the Mooncake "
                f"example in {sources.SGLANG_BEST})"
                if backend == "mooncake"
                else "wait for the whole prefix to arrive before prefill: an L3 hit that "
                f"beats recompute is worth waiting for (the 3FS example in {sources.SGLANG_BEST})"
            ),
        ),
    ]
    if backend == "file":
        mount = (
            "/absolute/local-disk/mount"
            if t.kind == TierKind.LOCAL_DISK
            else "/absolute/shared-fs/mount"
        )
        env.append(
            Setting(
                "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR",
                f"{placeholder(mount)}/hicache",
                f"the directory of the file backend ({sources.SGLANG_FILE}); it has no size "
                f"bound of its own, so give it a volume or quota of {cap} {per} and nothing else",
            )
        )
    elif backend == "mooncake":
        name = f"sglang-mooncake-{stage.stage}.json"
        extra[name] = json_text(mooncake_client_json(name, stage))
        extra[f"sglang-mooncake-{stage.stage}.notes.txt"] = (
            "\n".join(ctx.head(name) + mooncake_notes(name, stage)) + "\n"
        )
        env.append(
            Setting(
                "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH",
                name,
                f"the Mooncake client configuration every rank's backend reads "
                f"({sources.SGLANG_MOONCAKE}); a path relative to where the server starts",
            )
        )
    return flags


def emit_sglang(ctx: EmitContext) -> dict[str, str]:
    """sglang-<stage>.sh for every stage (plus the Mooncake client JSON when the L3 is a pool)."""
    files: dict[str, str] = {}
    for stage in ctx.dep.stages:
        env, flags, notes, extra = sglang_stage(ctx, stage)
        head = ctx.head(f"SGLang {stage.stage} server, one per {stage.instance}")
        files[f"sglang-{stage.stage}.sh"] = shell_script(
            head + [comment(n) for n in notes],
            env,
            "SGLANG_ARGS",
            flags,
            [
                'cd "$(dirname "${BASH_SOURCE[0]}")"',
                'python -m sglang.launch_server "${SGLANG_ARGS[@]}"',
            ],
        )
        files.update(extra)
    return files
