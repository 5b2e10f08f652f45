"""vLLM launch files: engine flags, KV connectors, and `--emit vllm` (native KV offloading).

One ``vllm serve`` per replica: a dense model's replicas on one instance are independent vLLM
instances, each on its own TP group of GPUs (vllm/config/parallel.py: data parallel is for MoE).
The LMCache and Mooncake targets reuse these launch files with their own connectors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kvadvisor.emit import sources
from kvadvisor.emit.context import EmitContext, floor_gib
from kvadvisor.emit.contextlen import context_flags
from kvadvisor.emit.deployment import StageView, TierKind
from kvadvisor.emit.sizing import Scope
from kvadvisor.emit.text import Setting, json_compact, placeholder, shell_script
from kvadvisor.emit.transport import nixl_connector, transfer_plan
from kvadvisor.quoting import comment
from kvadvisor.units import BYTES_PER_GIB, Unit, format_value
from kvadvisor.vocab import Stage

VLLM_BLOCK_TOKENS = 16  # vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE
# `vllm serve`'s token budget per step when none is given (EngineArgs._set_default_args, OpenAI
# API server context): 8,192 on GPUs of at least 70 GiB other than the A100, else 2,048.
VLLM_SERVE_BATCHED_TOKENS_LARGE_GPU = 8192
VLLM_SERVE_BATCHED_TOKENS = 2048
VLLM_LARGE_GPU_BYTES = 70 * BYTES_PER_GIB
NIXL_SIDE_CHANNEL_BASE_PORT = 5600  # vLLM NixlConnector usage guide's example port
SERVE_BASE_PORT = 8000


def gpu_memory_utilization(ctx: EmitContext) -> float:
    """The share of GPU memory the stage profile modeled (weights + KV), for vLLM to use."""
    memory = ctx.report.model.memory if ctx.report.model is not None else None
    if memory is None or not memory.memory_bytes_per_gpu:
        return 0.9
    return round(memory.usable_bytes_per_gpu / memory.memory_bytes_per_gpu, 2)


def serve_default_batched_tokens(stage: StageView) -> int:
    """`vllm serve`'s default max_num_batched_tokens on the stage's GPU."""
    mem = stage.gpu_memory_bytes or 0.0
    large = mem >= VLLM_LARGE_GPU_BYTES and "a100" not in (stage.gpu or "").lower()
    return VLLM_SERVE_BATCHED_TOKENS_LARGE_GPU if large else VLLM_SERVE_BATCHED_TOKENS


def batched_tokens(ctx: EmitContext, stage: StageView) -> tuple[int, str]:
    """The stage's max-num-batched-tokens and why: one mean prompt per prefill step."""
    default = serve_default_batched_tokens(stage)
    gpu = f"{stage.gpu or 'GPU'}" + (
        ""
        if stage.gpu_memory_bytes is None
        else f", {format_value(stage.gpu_memory_bytes, Unit.BYTES)}"
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


def engine_flags(ctx: EmitContext, stage: StageView) -> list[Setting]:
    """Parallelism, block, prefix caching, memory share and token budget of one replica."""
    out = [
        Setting(
            "tensor-parallel-size",
            str(stage.tp),
            f"TP {stage.tp} from the deployment ({ctx.dep.describe().split(';')[0]}); "
            f"{stage.replicas_per_instance} replica(s) of it per {stage.instance} "
            f"({sources.VLLM_PARALLEL})",
        ),
        Setting(
            "block-size",
            str(VLLM_BLOCK_TOKENS),
            f"vLLM's default {VLLM_BLOCK_TOKENS}-token block ({sources.VLLM_CACHE}); prefix "
            f"hits land on block boundaries, and the {stage.chunk_tokens}-token KV chunk is a "
            "multiple of it",
        ),
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
    budget, why = batched_tokens(ctx, stage)
    out.append(Setting("max-num-batched-tokens", str(budget), why))
    return out + context_flags(ctx, "vllm")


def kv_transfer(connectors: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One connector as is; several under MultiConnector (vLLM docs/features/disagg_prefill.md)."""
    if len(connectors) == 1:
        return dict(connectors[0])
    return {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"connectors": list(connectors)},
    }


def nixl_reason(ctx: EmitContext, stage: StageView) -> str:
    """Why the P/D connector is there, and its NIXL backend for the stage's fabric."""
    other = Stage.DECODE if stage.stage == Stage.PREFILL else Stage.PREFILL
    plan = transfer_plan(stage)
    return (
        f"P/D transfer: the prompt's KV moves from prefill to decode replicas over the network "
        f"(NixlConnector, kv_both on both sides; {sources.VLLM_DISAGG}); this {stage.stage} "
        f"side pairs with the {other} launch file; NIXL backend {plan.nixl_backend}: {plan.why}"
    )


NIXL_PORT = ("VLLM_NIXL_SIDE_CHANNEL_PORT", NIXL_SIDE_CHANNEL_BASE_PORT)


def launch_lines(
    stage: StageView,
    run: str,
    env_lines: Sequence[str] = (),
    port_env: tuple[str, int] | None = None,
) -> list[str]:
    """Start one process per replica on its own GPUs; ``run`` is the command (``$r`` = index).

    ``port_env`` (name, base): a port every replica on the node needs its own of.
    """
    lines = [
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        f"MODEL={placeholder('model-path-or-hf-id')!r}",
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


def offload_bytes(ctx: EmitContext, stage: StageView) -> tuple[float, str] | None:
    """One replica's host-tier bytes and the reason, or None when the stage has no host tier."""
    host = stage.tier(TierKind.HOST)
    if host is None or not host.capacity_bytes:
        return None
    sh = ctx.share(stage, host, Scope.REPLICA)
    return sh.bytes, ctx.tier_reason(
        stage, sh, f"GiB per vLLM instance, the total over its TP ranks ({sources.VLLM_OFFLOAD})"
    )


def emit_vllm(ctx: EmitContext) -> dict[str, str]:
    """vllm-<stage>.sh: vLLM with native CPU offloading and, disaggregated, NixlConnector."""
    files = {}
    for stage in ctx.dep.stages:
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
            connectors: list[dict[str, Any]] = [nixl_connector(stage)]
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
        run = 'vllm serve "$MODEL" --port $((' + f"{SERVE_BASE_PORT}" + ' + r)) "${VLLM_ARGS[@]}"'
        files[f"vllm-{stage.stage}.sh"] = shell_script(
            head,
            [],
            "VLLM_ARGS",
            flags,
            launch_lines(stage, run, port_env=NIXL_PORT if ctx.disaggregated else None),
        )
    return files


def _unsupported_tiers(stage: StageView) -> list[str]:
    """Say what the other tiers need: vLLM's native offloading holds CPU memory only."""
    t = stage.storage_tier
    if t is None:
        return []
    return [
        f"note: the advisor's {t.role_words} ({t.name}, {t.kind.value}) is not written here: "
        "vLLM's native offloading keeps KV in CPU memory only; use --emit lmcache or --emit "
        "dynamo-kvbm for a disk or shared tier"
    ]
