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
from kvadvisor.emit.kvcache import engine_page, kv_dtype_flag
from kvadvisor.emit.sizing import SizingScope, reuse_at
from kvadvisor.emit.text import Setting, json_text, placeholder, shell_script
from kvadvisor.emit.transport import (
    TransferPlan,
    mooncake_client_transport,
    sglang_transfer,
    transfer_plan,
)
from kvadvisor.engines import router
from kvadvisor.engines.registry import Engine, packaged_settings, register, setting_fact
from kvadvisor.errors import ConfigError
from kvadvisor.plan.model import KvLoadPlan, StagePlan, TierPlan
from kvadvisor.quoting import comment
from kvadvisor.results.verdict import Transport
from kvadvisor.units import BYTES_PER_GB, Unit, format_value
from kvadvisor.vocab import Stage

if TYPE_CHECKING:  # the review passes them in (importing it here would load the replay)
    from kvadvisor.planreview.scope import FactSet
    from kvadvisor.planreview.settings import EngineSettings

LOW_REUSE_HIT_RATIO = 0.20  # below this, writing every block through is mostly a write-only cost
MOONCAKE_LOCAL_BUFFER_BYTES = 1 << 30  # Mooncake DEFAULT_LOCAL_BUFFER_SIZE (mooncake_config.py)


def _backend(t: TierPlan) -> str | None:
    """The HiCache L3 backend for a tier kind (None: none written)."""
    if tier_kind(t) in (TierKind.LOCAL_DISK, TierKind.SHARED_FS):
        return "file"
    if tier_kind(t) == TierKind.POOL:
        return "hf3fs" if "3fs" in tier_label(t) else "mooncake"
    return None


def mooncake_client_json(what: str, transport: Transport | None = None) -> dict[str, object]:
    """A complete Mooncake client configuration whose process gives the pool no memory.

    Its protocol and NICs follow the stage's fabric (:mod:`kvadvisor.emit.transport`).
    """
    master = placeholder("mooncake-master-host")
    return {
        "local_hostname": placeholder("this-node-ip"),
        "metadata_server": f"http://{master}:8080/metadata",
        "master_server_address": f"{master}:50051",
        **mooncake_client_transport(transport),
        "global_segment_size": 0,
        "local_buffer_size": MOONCAKE_LOCAL_BUFFER_BYTES,
    }


def mooncake_notes(what: str, plan: TransferPlan | None = None) -> list[str]:
    """Why each Mooncake client key has its value (JSON has no comments).

    ``plan``: the stage's transfer settings (None: no stage, the RDMA defaults in words).
    """
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


def _host_size(ctx: EmitContext, stage: StagePlan) -> Setting | None:
    host = tier_of(stage, TierKind.HOST)
    if host is None or not host.capacity_bytes:
        return None
    sh = ctx.share(stage, host, SizingScope.RANK)
    gb = floor_gb(sh.bytes)
    device = ctx.stage_facts(stage).pool_tokens_per_replica
    why = (
        ctx.tier_reason(stage, sh, "whole GB per TP rank process")
        + f" ({sources.SGLANG_HOST_POOL})"
    )
    if device is not None:
        device_rank = device * ctx.facts.kv_bytes_per_rank_per_token
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


def _scheduler_flags(stage: StagePlan) -> list[Setting]:
    """The prefill chunk and running requests the verdict was replayed with (if it was)."""
    out = []
    if stage.scheduler.max_num_batched_tokens:
        out.append(
            Setting(
                "chunked-prefill-size",
                str(stage.scheduler.max_num_batched_tokens),
                "the step token budget the verdict was replayed with: SGLang prefills a long "
                f"prompt in chunks of this many tokens ({sources.SGLANG_SCHEDULE})",
            )
        )
    if stage.scheduler.max_num_seqs:
        out.append(
            Setting(
                "max-running-requests",
                str(stage.scheduler.max_num_seqs),
                "the running sequences per replica the verdict was replayed with "
                f"({sources.SGLANG_SCHEDULE})",
            )
        )
    return out


def sglang_stage(
    ctx: EmitContext, stage: StagePlan
) -> tuple[list[Setting], list[Setting], list[str], dict[str, str]]:
    """(environment, flags, notes, extra files) for one stage's server."""
    env: list[Setting] = []
    notes: list[str] = []
    extra: dict[str, str] = {}
    page = engine_page(ctx, "sglang-hicache", stage)
    page_why = f"{page.tokens} tokens: {page.why}" + (
        "; the page the verdict was replayed at" if stage.scheduler.page_tokens else ""
    )
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
        Setting("page-size", str(page.tokens), page_why),
        *(
            [
                Setting(
                    "attention-backend",
                    page.backend,
                    f"the MLA back-end SGLang runs on {ctx.stage_facts(stage).gpu or 'this GPU'} "
                    f"({None if stage.gpu is None else stage.gpu.architecture}), whose page is "
                    f"above ({sources.SGLANG_MLA})",
                )
            ]
            if page.backend
            else []
        ),
        kv_dtype_flag(ctx, "sglang"),
        *_scheduler_flags(stage),
    ]
    size = _host_size(ctx, stage)
    t = storage_tier(stage)
    backend = None if t is None else _backend(t)
    shared_l3 = t is not None and tier_kind(t) in (TierKind.SHARED_FS, TierKind.POOL)
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
        notes.append(f"note: the advisor's {tier_words(t)} has no HiCache backend written here")
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
                f"{transfer_plan(ctx.stage_facts(stage).transport).fabric}",
            ),
        ]
        fabric_env, fabric_flags = sglang_transfer(ctx.stage_facts(stage).transport)
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
    stage: StagePlan,
    t: TierPlan,
    backend: str,
    env: list[Setting],
    extra: dict[str, str],
) -> list[Setting]:
    reuse = reuse_at(ctx.report, math.inf)
    where = (
        "a disk of the node"
        if tier_kind(t) == TierKind.LOCAL_DISK
        else "a file system every node mounts"
        if tier_kind(t) == TierKind.SHARED_FS
        else "a pool shared by the stage"
    )
    cap = "unbounded" if not t.capacity_bytes else format_value(t.capacity_bytes, Unit.BYTES)
    per = "per instance" if not t.shared else "for the whole stage"
    flags = [
        Setting(
            "hicache-storage-backend",
            backend,
            f"the {stage.stage} {role_words(t)} ({tier_label(t)}, {cap} {per}) is {where}: "
            "HiCache's "
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
            if tier_kind(t) == TierKind.LOCAL_DISK
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
        transport = ctx.stage_facts(stage).transport
        extra[name] = json_text(mooncake_client_json(name, transport))
        extra[f"sglang-mooncake-{stage.stage}.notes.txt"] = (
            "\n".join(ctx.head(name) + mooncake_notes(name, transfer_plan(transport))) + "\n"
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
    for stage in ctx.plan.stages:
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
    files.update(router.http_router(ctx, "sglang", "sglang-router.sh"))
    return files


# -- the review: facts of a stage's settings, what they take of the instance ---------------
# SGLang's defaults (python/sglang/srt/arg_groups/fields/memory.py@00fe477): host layout and
# I/O backend; releases before the arg_groups split defaulted to layer_first.
SGLANG_DEFAULT_LAYOUT = "page_first"
SGLANG_DEFAULT_IO_BACKEND = "kernel"
FACT_SPECS = (
    setting_fact("sglang_configured", Unit.BOOL, "Whether the stage configures SGLang HiCache."),
    setting_fact(
        "sglang_host_to_device_ratio",
        Unit.MULTIPLE,
        "HiCache host pool / device pool per rank: hicache-size over the per-rank pool, else "
        "hicache-ratio (default 2).",
    ),
    setting_fact(
        "sglang_host_pool_bytes_per_rank",
        Unit.BYTES,
        "HiCache host pool per rank: hicache-size x 10^9, else ratio x the per-rank device pool.",
    ),
    setting_fact(
        "sglang_host_pool_bytes", Unit.BYTES, "sglang_host_pool_bytes_per_rank x stage_ranks."
    ),
    setting_fact(
        "sglang_hicache_size_bytes_per_rank",
        Unit.BYTES,
        "hicache-size x 10^9 (absent when 0 or unset).",
    ),
    setting_fact("sglang_hicache_size_set", Unit.BOOL, "Whether hicache-size is set (non-zero)."),
    setting_fact("sglang_mem_layout_set", Unit.BOOL, "Whether hicache-mem-layout is given."),
    setting_fact(
        "sglang_mem_layout",
        Unit.TEXT,
        "hicache-mem-layout as given (SGLang's default page_first).",
    ),
    setting_fact("sglang_io_backend", Unit.TEXT, "hicache-io-backend (default kernel)."),
    setting_fact(
        "sglang_storage_backend_set", Unit.BOOL, "Whether hicache-storage-backend is set."
    ),
    setting_fact(
        "sglang_storage_backend", Unit.TEXT, 'hicache-storage-backend ("none" when unset).'
    ),
    setting_fact(
        "sglang_file_backend_dir_set",
        Unit.BOOL,
        "Whether SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR is set.",
    ),
    setting_fact(
        "sglang_file_backend_dir",
        Unit.TEXT,
        "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR.",
    ),
    setting_fact(
        "sglang_decode_offload",
        Unit.BOOL,
        "Whether disaggregation-decode-enable-offload-kvcache is on.",
    ),
    setting_fact(
        "sglang_disaggregation_mode",
        Unit.TEXT,
        'SGLang --disaggregation-mode (default "null").',
    ),
    setting_fact(
        "sglang_hierarchical_cache_enabled",
        Unit.BOOL,
        "Whether --enable-hierarchical-cache is on.",
    ),
)


def _sglang_facts(f: FactSet, s: EngineSettings) -> None:
    e = "sglang-hicache"
    f.add("sglang_configured", e in s.stage.engines)
    if e not in s.stage.engines:
        return
    g = s.get
    size_gb = g(e, "hicache-size", 0) or None
    ratio = g(e, "hicache-ratio", 2.0)
    per_rank_pool = s.pool / s.ranks if s.pool else None
    if size_gb is not None:
        ratio = (size_gb * BYTES_PER_GB / per_rank_pool) if per_rank_pool else None
    f.add(
        "sglang_host_to_device_ratio",
        ratio,
        "hicache-size is set but the device KV pool is unknown",
    )
    host_rank = (
        size_gb * BYTES_PER_GB
        if size_gb is not None
        else (ratio * per_rank_pool if per_rank_pool and ratio else None)
    )
    why = "needs the host pool size (hicache-size, or the device pool x ratio)"
    f.add("sglang_host_pool_bytes_per_rank", host_rank, why)
    f.add("sglang_host_pool_bytes", None if host_rank is None else host_rank * s.ranks, why)
    f.add("sglang_hicache_size_set", size_gb is not None)
    f.add("sglang_hicache_size_bytes_per_rank", None if size_gb is None else size_gb * BYTES_PER_GB)
    layout, backend = g(e, "hicache-mem-layout"), g(e, "hicache-storage-backend")
    f.add("sglang_mem_layout_set", layout is not None)
    f.add("sglang_mem_layout", layout or SGLANG_DEFAULT_LAYOUT)
    f.add("sglang_io_backend", g(e, "hicache-io-backend") or SGLANG_DEFAULT_IO_BACKEND)
    f.add("sglang_storage_backend_set", bool(backend))
    f.add("sglang_storage_backend", backend or "none")
    if backend == "file":
        d = g(e, "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR")
        f.add("sglang_file_backend_dir_set", bool(d))
        if d:
            f.add("sglang_file_backend_dir", d)
    f.add("sglang_decode_offload", bool(g(e, "disaggregation-decode-enable-offload-kvcache")))
    f.add("sglang_disaggregation_mode", g(e, "disaggregation-mode") or "null")
    f.add("sglang_hierarchical_cache_enabled", bool(g(e, "enable-hierarchical-cache")))


def _layout(s: EngineSettings) -> tuple[bool, str]:
    """Whole pages, every layer in each: HiCache's storage backends take a page at a time.

    The file backend flattens a page across layers (``get_data_page``), and the mooncake
    backend needs page_first, to which SGLang switches a layer_first layout
    (arg_groups/hicache_hook.py).
    """
    layout = s.get("sglang-hicache", "hicache-mem-layout") or SGLANG_DEFAULT_LAYOUT
    return False, f"SGLang HiCache pages ({layout} host layout): a page holds every layer"


# -- the plan and the replay: what its settings say of I/O, pages, loads and writes -----------
# HiCache prefetches from storage (L3) only when at least this many tokens hit there
# (hicache_design.md).
HICACHE_PREFETCH_THRESHOLD_TOKENS = 256


def _page_tokens(engines: Mapping[str, Any]) -> int | None:
    hicache = engines["sglang-hicache"]
    return int(hicache["page-size"]) if "page-size" in hicache else None


def _io_chunk(engines: Mapping[str, Any]) -> tuple[int, str] | None:
    page = _page_tokens(engines)
    return None if page is None else (page, "SGLang --page-size")


def _kv_load(engines: Mapping[str, Any]) -> tuple[KvLoadPlan, str] | None:
    """With a storage backend, HiCache prefetches at arrival with its prefetch policy."""
    hicache = engines["sglang-hicache"]
    if not hicache.get("hicache-storage-backend"):
        return None
    policy = str(hicache.get("hicache-storage-prefetch-policy", "best_effort"))
    return (
        KvLoadPlan("prefetch", policy, min_tokens=HICACHE_PREFETCH_THRESHOLD_TOKENS),
        "SGLang HiCache storage prefetch",
    )


# Host layouts that write K and V apart (verify's fio jobs write them as two pieces).
SPLIT_LAYOUTS = ("page_first", "page_first_direct")


def _io_shape(
    engines: Mapping[str, Any], chunk_from: str, layers: int | None
) -> tuple[str, int, str]:
    """A flat page per rank, or K and V apart in the split host layouts."""
    mem = engines["sglang-hicache"].get("hicache-mem-layout", "layer_first")
    if mem in SPLIT_LAYOUTS:
        return "kv_split", 2, f"SGLang --hicache-mem-layout {mem}: K and V written apart"
    return "contiguous", 1, f"SGLang --hicache-mem-layout {mem}: one flat page per rank"


def _front_end(engines: Mapping[str, Any]) -> tuple[str, bool]:
    """SGLang's own front end; it hashes pages only for a HiCache storage backend.

    Its radix tree matches token ids; HiCache hashes each page with SHA-256 for a storage
    backend (``get_hash_str``, mem_cache/hicache_storage.py).
    """
    return "sglang", bool(engines["sglang-hicache"].get("hicache-storage-backend"))


def _tier_keys(ctx: EmitContext, stage: StagePlan) -> set[str]:
    env, flags, _, _ = sglang_stage(ctx, stage)
    return {s.name for s in env + flags}


# SGLang retracts running requests when decode runs out of KV pages and queues them again,
# their KV freed (python/sglang/srt/managers/scheduler.py: retract_decode, ScheduleBatch):
# preemption by recompute, with no swap to host.
PREEMPTION = (
    "recompute",
    "SGLang retracts decode requests and recomputes them (python/sglang/srt/managers/"
    "scheduler.py retract_decode); it has no swap",
)


ENGINE = register(
    Engine(
        preemption=PREEMPTION,
        name="sglang-hicache",
        **packaged_settings("sglang"),
        label="SGLang HiCache",
        files={"SGLANG_ARGS": "", "sglang_router.launch_router": "router"},
        # the router file every stage sits behind (its placeholders are linted too)
        shared_files=("sglang-router.sh",),
        facts=_sglang_facts,
        fact_specs=FACT_SPECS,
        layout=_layout,
        tp_setting=("sglang-hicache", "tp-size"),
        dp_setting="dp-size",
        io_chunk=_io_chunk,
        page_tokens=_page_tokens,
        kv_load=_kv_load,
        write_policy=lambda engines: engines["sglang-hicache"].get("hicache-write-policy"),
        # its `file` storage backend reaches a file system as plain POSIX files
        local_disk_backend=lambda engines: (
            "SGLang HiCache file backend"
            if engines["sglang-hicache"].get("hicache-storage-backend") == "file"
            else None
        ),
        io_shape=_io_shape,
        front_end=_front_end,
        emit=emit_sglang,
        tier_keys=_tier_keys,
        host_keys=frozenset({"hicache-size"}),
        storage_keys=frozenset({"hicache-storage-backend"}),
        decode_saves=lambda ctx, stage: (
            "disaggregation-decode-enable-offload-kvcache" in _tier_keys(ctx, stage)
        ),
    )
)
