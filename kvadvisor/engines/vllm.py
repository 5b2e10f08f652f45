"""vLLM launch files: engine flags, KV connectors, and `--emit vllm` (native KV offloading).

One ``vllm serve`` per replica: a dense model's replicas on one instance are independent vLLM
instances, each on its own TP group of GPUs (vllm/config/parallel.py: data parallel is for MoE).
The LMCache and Mooncake targets reuse these launch files with their own connectors.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kvadvisor.emit import sources
from kvadvisor.emit.context import EmitContext, floor_gib
from kvadvisor.emit.contextlen import context_flags
from kvadvisor.emit.deployment import (
    StageFacts,
    TierKind,
    describe,
    storage_tier,
    tier_of,
    tier_words,
)
from kvadvisor.emit.kvcache import engine_page, kv_dtype_flag
from kvadvisor.emit.sizing import SizingScope
from kvadvisor.emit.text import Setting, json_compact, placeholder, shell_script
from kvadvisor.emit.transport import nixl_connector, transfer_plan
from kvadvisor.engines import router
from kvadvisor.engines.registry import Engine, packaged_settings, register, setting_fact
from kvadvisor.plan.model import StagePlan
from kvadvisor.quoting import comment
from kvadvisor.units import BYTES_PER_GIB, Unit, format_value, plural
from kvadvisor.units.format import as_written, count
from kvadvisor.vocab import Stage

if TYPE_CHECKING:  # the review passes them in (importing it here would load the replay)
    from kvadvisor.planreview.scope import FactSet
    from kvadvisor.planreview.settings import EngineSettings

VLLM_BLOCK_TOKENS = 16  # vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE
# `vllm serve`'s token budget and running sequences per step when none is given: vLLM's
# EngineArgs.get_batch_defaults, OpenAI API server context (vllm/engine/arg_utils.py@99d7eb5):
# 8,192 tokens and 1,024 sequences when `device_memory >= 70 * GiB_bytes and "a100" not in
# device_name` (the device name lower-cased, so any A100, 40 or 80 GB, SXM or PCIe; PR #17885:
# the larger budget lowered the A100's throughput), else 2,048 and 256. The one definition: the
# emitted files, the advisor's search and the replay all read it (through the registry).
LARGE_GPU_BYTES = 70 * BYTES_PER_GIB
LARGE_GPU_BATCH = (8192, 1024)
SMALL_GPU_BATCH = (2048, 256)
NIXL_SIDE_CHANNEL_BASE_PORT = 5600  # vLLM NixlConnector usage guide's example port
SERVE_BASE_PORT = 8000


def gpu_memory_utilization(ctx: EmitContext) -> float:
    """The share of GPU memory the stage profile modeled (weights + KV), for vLLM to use."""
    memory = ctx.report.model.memory if ctx.report.model is not None else None
    if memory is None or not memory.memory_bytes_per_gpu:
        return 0.9
    return round(memory.usable_bytes_per_gpu / memory.memory_bytes_per_gpu, 2)


def batch_defaults(gpu_name: str, memory_bytes: float) -> tuple[int, int]:
    """`vllm serve`'s (max_num_batched_tokens, max_num_seqs) on a GPU of this name and memory."""
    large = memory_bytes >= LARGE_GPU_BYTES and "a100" not in gpu_name.lower()
    return LARGE_GPU_BATCH if large else SMALL_GPU_BATCH


def serve_defaults(facts: StageFacts) -> tuple[int, int]:
    """`vllm serve`'s default (max_num_batched_tokens, max_num_seqs) on the stage's GPU."""
    return batch_defaults(facts.gpu or "", facts.gpu_memory_bytes or 0.0)


def batched_tokens(ctx: EmitContext, stage: StagePlan) -> tuple[int, str]:
    """The stage's max-num-batched-tokens and why: one mean prompt per prefill step."""
    facts = ctx.stage_facts(stage)
    default = serve_defaults(facts)[0]
    gpu = f"{facts.gpu or 'GPU'}" + (
        ""
        if facts.gpu_memory_bytes is None
        else f", {format_value(facts.gpu_memory_bytes, Unit.BYTES)}"
    )
    if stage.scheduler.max_num_batched_tokens:  # the budget the verdict was replayed with, as is
        return stage.scheduler.max_num_batched_tokens, (
            f"the step budget the verdict was replayed with: vllm serve's default {default} "
            f"on this GPU ({gpu}; {sources.VLLM_BATCH_DEFAULTS})"
            if stage.scheduler.max_num_batched_tokens == default
            else "the step budget the verdict was replayed with"
        )
    mean_in = ctx.mean_input_tokens
    if stage.stage != Stage.DECODE and mean_in:
        budget = max(default, math.ceil(mean_in / VLLM_BLOCK_TOKENS) * VLLM_BLOCK_TOKENS)
        return budget, (
            "one mean prompt per step: the trace's mean prompt is "
            f"{format_value(mean_in, Unit.TOKENS)}, rounded up to the {VLLM_BLOCK_TOKENS}-token "
            f"block; never below vllm serve's default {default} on this GPU ({gpu}; "
            f"{sources.VLLM_BATCH_DEFAULTS})"
        )
    return default, (
        f"vllm serve's default {default} on this GPU ({gpu}; {sources.VLLM_BATCH_DEFAULTS}): "
        "a decode step batches one token per running request, so a larger budget buys nothing"
    )


def scheduler_flags(ctx: EmitContext, stage: StagePlan) -> list[Setting]:
    """The token budget per step and, when the verdict replayed one, the running sequences."""
    budget, why = batched_tokens(ctx, stage)
    out = [Setting("max-num-batched-tokens", str(budget), why)]
    if stage.scheduler.max_num_seqs:
        default = serve_defaults(ctx.stage_facts(stage))[1]
        out.append(
            Setting(
                "max-num-seqs",
                str(stage.scheduler.max_num_seqs),
                "the running sequences per replica the verdict was replayed with"
                + (
                    f": vllm serve's default on this GPU ({sources.VLLM_BATCH_DEFAULTS})"
                    if stage.scheduler.max_num_seqs == default
                    else ""
                ),
            )
        )
    return out


def model_flag() -> Setting:
    """The model, in the flag array: the review's placeholder check (EL11) reads the array only."""
    return Setting(
        "model",
        placeholder("model-path-or-hf-id"),
        f"the model to serve ({sources.VLLM_MODEL_FLAG})",
    )


def block_flag(ctx: EmitContext, stage: StagePlan) -> Setting:
    """The vLLM block the model runs with: the default 16, FlashMLA's 64 for an MLA model."""
    page = engine_page(ctx, "vllm", stage)
    return Setting(
        "block-size",
        str(page.tokens),
        f"{page.tokens}-token blocks: {page.why}"
        + ("; the page the verdict was replayed at" if stage.scheduler.page_tokens else "")
        + " (prefix hits land on block boundaries)"
        + (
            f", and the {stage.io_chunk_tokens()[0]}-token KV chunk is a multiple of it"
            if stage.io_chunk_tokens()[0] % page.tokens == 0
            else ""
        ),
    )


def engine_flags(ctx: EmitContext, stage: StagePlan) -> list[Setting]:
    """Parallelism, block, KV dtype, prefix caching, memory share and token budget of a replica."""
    out = [
        model_flag(),
        Setting(
            "tensor-parallel-size",
            str(stage.tp),
            f"TP {stage.tp} from the deployment ({describe(ctx.plan, ctx.facts).split(';')[0]}); "
            f"{stage.replicas_per_instance} replica(s) of it per {stage.instance} "
            f"({sources.VLLM_PARALLEL})",
        ),
        block_flag(ctx, stage),
        kv_dtype_flag(ctx, "vllm"),
        Setting(
            "enable-prefix-caching",
            None,
            "offloaded KV is found again by prefix block hashes; on by default in "
            f"{sources.VLLM_CACHE}, written so the launch does not depend on the default",
        ),
        Setting(
            "gpu-memory-utilization",
            f"{gpu_memory_utilization(ctx):g}",  # exact: a vLLM flag value
            "the share of GPU memory the stage profile gave weights and the KV pool, so the "
            "device pool the host tier is sized against is the one vLLM allocates",
        ),
    ]
    return out + scheduler_flags(ctx, stage) + context_flags(ctx, "vllm")


def kv_transfer(connectors: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One connector as is; several under MultiConnector (vLLM docs/features/disagg_prefill.md)."""
    if len(connectors) == 1:
        return dict(connectors[0])
    return {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"connectors": list(connectors)},
    }


def nixl_reason(ctx: EmitContext, stage: StagePlan) -> str:
    """Why the P/D connector is there, and its NIXL backend for the stage's fabric."""
    other = Stage.DECODE if stage.stage == Stage.PREFILL else Stage.PREFILL
    plan = transfer_plan(ctx.stage_facts(stage).transport)
    return (
        f"P/D transfer: the prompt's KV moves from prefill to decode replicas over the network "
        f"(NixlConnector, kv_both on both sides; {sources.VLLM_DISAGG}); this {stage.stage} "
        f"side pairs with the {other} launch file; NIXL backend {plan.nixl_backend}: {plan.why}"
    )


NIXL_PORT = ("VLLM_NIXL_SIDE_CHANNEL_PORT", NIXL_SIDE_CHANNEL_BASE_PORT)


def launch_lines(
    stage: StagePlan,
    run: str,
    env_lines: Sequence[str] = (),
    port_env: tuple[str, int] | None = None,
) -> list[str]:
    """Start one process per replica on its own GPUs; ``run`` is the command (``$r`` = index).

    ``port_env`` (name, base): a port every replica on the node needs its own of.
    """
    lines = [
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        f"TP={stage.tp}",
        f"REPLICAS={stage.replicas_per_instance}  "
        + comment(f"per {stage.instance} ({stage.gpus_per_instance} GPUs / TP {stage.tp})"),
        *env_lines,
        "for r in $(seq 0 $((REPLICAS - 1))); do",
        "  first=$((r * TP))",
        '  export CUDA_VISIBLE_DEVICES="$(seq -s, "$first" $((first + TP - 1)))"',
    ]
    if port_env is not None:
        lines.append(f"  export {port_env[0]}=$(({port_env[1]} + r))")
    lines += [f"  {run} &", "done", "wait"]
    return lines


def offload_bytes(ctx: EmitContext, stage: StagePlan) -> tuple[float, str] | None:
    """One replica's host-tier bytes and the reason, or None when the stage has no host tier."""
    host = tier_of(stage, TierKind.HOST)
    if host is None or not host.capacity_bytes:
        return None
    sh = ctx.share(stage, host, SizingScope.REPLICA)
    return sh.bytes, ctx.tier_reason(
        stage, sh, f"GiB per vLLM instance, the total over its TP ranks ({sources.VLLM_OFFLOAD})"
    )


def emit_vllm(ctx: EmitContext) -> dict[str, str]:
    """vllm-<stage>.sh: vLLM with native CPU offloading and, disaggregated, NixlConnector."""
    files = {}
    for stage in ctx.plan.stages:
        flags = engine_flags(ctx, stage)
        off = offload_bytes(ctx, stage)
        notes = _unsupported_tiers(stage)
        if not ctx.disaggregated:
            if off is not None:
                gib = floor_gib(off[0])
                flags += [
                    Setting("kv-offloading-backend", "native", "vLLM's own CPU offloading"),
                    Setting("kv-offloading-size", f"{gib:g}", off[1]),  # exact: a vLLM flag
                ]
        else:
            connectors: list[dict[str, Any]] = [nixl_connector(ctx.stage_facts(stage).transport)]
            why = nixl_reason(ctx, stage)
            if off is not None:
                cpu = int(floor_gib(off[0]) * BYTES_PER_GIB)
                connectors.append(
                    {
                        "kv_connector": "OffloadingConnector",
                        "kv_role": "kv_both",
                        "kv_connector_extra_config": {"cpu_bytes_to_use": cpu},
                    }
                )
                why += (
                    f". Native offloading rides along as OffloadingConnector with "
                    f"cpu_bytes_to_use {format_value(cpu, Unit.BYTES)}: {off[1]}. "
                    "--kv-offloading-size is not used because it would replace the P/D connector"
                )
            flags.append(Setting("kv-transfer-config", json_compact(kv_transfer(connectors)), why))
        head = ctx.head(f"vLLM {stage.stage} replicas (native KV offloading)")
        head += [comment(n) for n in notes]
        run = "vllm serve --port $((" + f"{SERVE_BASE_PORT}" + ' + r)) "${VLLM_ARGS[@]}"'
        files[f"vllm-{stage.stage}.sh"] = shell_script(
            head,
            [],
            "VLLM_ARGS",
            flags,
            launch_lines(stage, run, port_env=NIXL_PORT if ctx.disaggregated else None),
        )
    files.update(router.http_router(ctx, "vllm", "vllm-router.sh"))
    return files


def _unsupported_tiers(stage: StagePlan) -> list[str]:
    """Say what the other tiers need: vLLM's native offloading holds CPU memory only."""
    t = storage_tier(stage)
    if t is None:
        return []
    return [
        f"note: the advisor's {tier_words(t)} is not written here: "
        "vLLM's native offloading keeps KV in CPU memory only; use --emit lmcache or --emit "
        "dynamo-kvbm for a disk or shared tier"
    ]


# -- the review: facts of a stage's settings, what they take of the instance ---------------
# kv_connector values vLLM ships (disagg_prefill.md), KVBM's (DynamoConnector, PdConnector) and
# Mooncake's connectors.
VLLM_CONNECTORS = frozenset(
    {
        "NixlConnector",
        "LMCacheConnectorV1",
        "LMCacheMPConnector",
        "MultiConnector",
        "OffloadingConnector",
        "SimpleCPUOffloadConnector",
        "P2pNcclConnector",
        "ExampleConnector",
        "SharedStorageConnector",
        "MooncakeConnector",
        "MooncakeStoreConnector",
        "DynamoConnector",
        "PdConnector",
    }
)
FACT_SPECS = (
    setting_fact("vllm_offloading_size_set", Unit.BOOL, "Whether vLLM kv-offloading-size is set."),
    setting_fact("vllm_kv_transfer_config_set", Unit.BOOL, "Whether kv-transfer-config is set."),
    setting_fact("vllm_offloading_backend_set", Unit.BOOL, "Whether kv-offloading-backend is set."),
    setting_fact("vllm_connectors", Unit.TEXT, "kv_connector values, nested ones included."),
    setting_fact(
        "vllm_unknown_connector_count",
        Unit.COUNT,
        "kv_connector values vLLM, Dynamo and Mooncake do not register.",
    ),
    setting_fact("vllm_unknown_connectors", Unit.TEXT, "Those connectors."),
    setting_fact(
        "vllm_batched_tokens_per_seq",
        Unit.MULTIPLE,
        "max-num-batched-tokens / max-num-seqs (both given).",
    ),
    setting_fact("vllm_max_num_batched_tokens", Unit.TOKENS, "vLLM max-num-batched-tokens."),
    setting_fact("vllm_max_num_seqs", Unit.COUNT, "vLLM max-num-seqs."),
    setting_fact("vllm_gpu_memory_utilization", Unit.RATIO, "vLLM gpu-memory-utilization."),
)


def kv_connectors(config: Any) -> Iterator[dict[str, Any]]:
    """A --kv-transfer-config mapping and the connectors nested in it (Multi- or PdConnector)."""
    if not isinstance(config, dict):
        return
    yield config
    extra = config.get("kv_connector_extra_config")
    for child in (extra or {}).get("connectors", []) if isinstance(extra, dict) else []:
        yield from kv_connectors(child)


def _vllm_facts(f: FactSet, s: EngineSettings) -> None:
    e = "vllm"
    if e not in s.stage.engines:
        return
    size, cfg = s.get(e, "kv-offloading-size"), s.get(e, "kv-transfer-config")
    f.add("vllm_offloading_size_set", size is not None)
    f.add("vllm_kv_transfer_config_set", cfg is not None)
    f.add("vllm_offloading_backend_set", s.has(e, "kv-offloading-backend"))
    if cfg is not None:
        names = [str(c.get("kv_connector")) for c in kv_connectors(cfg)]
        unknown = [n for n in names if n not in VLLM_CONNECTORS]
        f.add("vllm_connectors", ", ".join(names))
        f.add("vllm_unknown_connector_count", len(unknown))
        f.add("vllm_unknown_connectors", ", ".join(unknown) or "none")
    # Only both given can clash: `vllm serve` caps its default max_num_seqs at the token budget
    # (EngineArgs._set_default_args: min(default, max_num_batched_tokens)).
    if s.has(e, "max-num-batched-tokens") and s.has(e, "max-num-seqs"):
        tokens, seqs = int(s.get(e, "max-num-batched-tokens")), int(s.get(e, "max-num-seqs"))
        f.add("vllm_max_num_batched_tokens", tokens)
        f.add("vllm_max_num_seqs", seqs)
        f.add("vllm_batched_tokens_per_seq", tokens / seqs)
    if s.has(e, "gpu-memory-utilization"):
        f.add("vllm_gpu_memory_utilization", float(s.get(e, "gpu-memory-utilization")))


def _host_demand(s: EngineSettings) -> tuple[float, str] | None:
    """Host bytes: kv-offloading-size (else OffloadingConnector's) per engine instance."""
    g, engine = s.get, "vllm"
    n = s.replicas(engine)
    if s.has(engine, "kv-offloading-size"):
        gib = float(g(engine, "kv-offloading-size"))
        how = f"kv-offloading-size {as_written(gib)} GiB x {plural(n, 'instance')}"
        return gib * BYTES_PER_GIB * n, how
    cpu = [
        c["kv_connector_extra_config"]["cpu_bytes_to_use"]
        for c in kv_connectors(g(engine, "kv-transfer-config"))
        if c.get("kv_connector") == "OffloadingConnector"
        and "cpu_bytes_to_use" in (c.get("kv_connector_extra_config") or {})
    ]
    if cpu:
        return float(sum(cpu)) * n, (
            f"OffloadingConnector cpu_bytes_to_use {count(sum(cpu))} B x {plural(n, 'instance')}"
        )
    return None


# -- the plan and the replay: what its settings say of I/O, pages, loads and writes -----------
def _io_chunk(engines: Mapping[str, Any]) -> tuple[int, str]:
    return int(engines["vllm"].get("block-size", VLLM_BLOCK_TOKENS)), "vLLM --block-size"


# Its scheduler flags, as the replay names them.
_SCHEDULER_FLAGS = {
    "gpu-memory-utilization": "gpu_memory_utilization",
    "max-num-batched-tokens": "max_batched_tokens",
    "max-num-seqs": "max_seqs",
}


def _scheduler(engines: Mapping[str, Any]) -> dict[str, float]:
    vllm = engines["vllm"]
    return {name: float(vllm[flag]) for flag, name in _SCHEDULER_FLAGS.items() if flag in vllm}


def _tier_keys(ctx: EmitContext, stage: StagePlan) -> set[str]:
    return {"kv-offloading-size"} if offload_bytes(ctx, stage) is not None else set()


# vLLM's V1 engine preempts by recompute only: Scheduler._preempt_request frees the request's
# blocks and resets its computed tokens (vllm/v1/core/sched/scheduler.py); swap and
# --preemption-mode were V0's (vllm-project/vllm#18115). Engines that run vLLM's processes
# (LMCache, Mooncake's connector, Dynamo's workers) preempt the same way.
PREEMPTION = (
    "recompute",
    "vLLM V1 preempts by recompute only (vllm/v1/core/sched/scheduler.py _preempt_request; "
    "--preemption-mode was V0's, vllm-project/vllm#18115)",
)


ENGINE = register(
    Engine(
        preemption=PREEMPTION,
        name="vllm",
        **packaged_settings("vllm"),
        label="vLLM",
        files={"VLLM_ARGS": "", "vllm_router.launch_router": "router"},
        # the router file every stage sits behind (its placeholders are linted too)
        shared_files=("vllm-router.sh",),
        facts=_vllm_facts,
        fact_specs=FACT_SPECS,
        host_demand=_host_demand,
        # vLLM alone (its native offloading): its KV cache is one tensor per layer, so a block
        # moves as one copy per layer (vllm/v1 KV cache layout)
        layout=lambda s: (
            True,
            "vLLM paged KV: one tensor per layer, so one copy per layer per rank",
        ),
        tp_setting=("vllm", "tensor-parallel-size"),
        io_chunk=_io_chunk,
        page_tokens=lambda engines: engines["vllm"].get("block-size"),
        scheduler=_scheduler,
        emit=emit_vllm,
        tier_keys=_tier_keys,
        host_keys=frozenset({"kv-offloading-size"}),
        step_tokens=lambda ctx, stage: batched_tokens(ctx, stage)[0],
        batch_defaults=batch_defaults,
        # vLLM's OffloadingConnector offloads every block, the generated ones too.
        decode_saves=lambda ctx, stage: offload_bytes(ctx, stage) is not None,
    )
)
