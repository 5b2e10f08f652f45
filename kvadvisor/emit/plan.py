"""`--emit plan`: the recommended deployment as a plan file that `kvadvisor review` reads.

The plan names the catalog instance and storage of every tier, so the review looks up the same
figures the advisor used; the GPU KV pool per instance is the one the engine files were sized
against. Engine files written in the same run are listed per stage (``engine_files``), so
`review` lints the very files an operator starts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import PurePath

import yaml

from kvadvisor.emit.context import EmitContext
from kvadvisor.emit.deployment import StageView

STAGE_KEYS = {"prefill": "prefill", "decode": "decode", "serving": "prefill"}


def _quantity_gib(nbytes: float) -> str:
    """GiB to a millionth, rounded up: engine sizes, rounded down from it, stay within it."""
    gib = math.ceil(nbytes / 2**30 * 1e6) / 1e6
    return f"{gib:.6f}".rstrip("0").rstrip(".") + " GiB"


def _stage(ctx: EmitContext, stage: StageView, files: Sequence[str]) -> dict[str, object]:
    out: dict[str, object] = {"instance": stage.instance, "count": stage.count}
    if stage.device_pool_tokens_per_replica is not None:
        pool = (
            stage.device_pool_tokens_per_replica
            * ctx.dep.kv_bytes_per_rank_per_token
            * stage.tp
            * stage.replicas_per_instance
        )
        out["gpu_kv_pool"] = _quantity_gib(pool)
    out["chunk_tokens"] = stage.chunk_tokens
    if files:
        out["engine_files"] = list(files)
    tiers = []
    for t in stage.tiers:
        tier: dict[str, object] = {"name": t.name, "storage": t.name}
        tier["capacity"] = None if t.capacity_bytes is None else _quantity_gib(t.capacity_bytes)
        if t.devices != 1:
            tier["devices"] = t.devices
        tier["shared"] = t.shared
        tiers.append(tier)
    out["tiers"] = tiers
    return out


def plan_document(
    ctx: EmitContext, engine_files: Mapping[str, Sequence[str]] | None = None
) -> dict[str, object]:
    """The plan as a mapping; ``engine_files`` is {stage: [file names]} to reference."""
    dep = ctx.dep
    model: dict[str, object] = {"kv_bytes_per_token": dep.kv_bytes_per_token}
    if dep.model_in_catalog:
        model = {"name": dep.model, **model}
    tp = dep.stages[0].tp
    model.update(tp=tp, kv_dtype=dep.kv_dtype, weight_dtype=dep.weight_dtype)
    stages = {
        STAGE_KEYS[s.stage]: _stage(ctx, s, (engine_files or {}).get(s.stage, ()))
        for s in dep.stages
    }
    stem = PurePath(ctx.report.trace.path).name.split(".")[0] or "trace"
    return {
        "name": f"kvadvisor-{stem}",
        "description": f"The {dep.topology.value} deployment kvadvisor recommended for "
        f"{ctx.report.trace.path}",
        "model": model,
        "stages": stages,
    }


def emit_plan(
    ctx: EmitContext, engine_files: Mapping[str, Sequence[str]] | None = None
) -> dict[str, str]:
    """plan.yaml."""
    head = ctx.head("Deployment plan: kvadvisor review TRACE --plan plan.yaml")
    body = yaml.safe_dump(plan_document(ctx, engine_files), sort_keys=False)
    return {"plan.yaml": "\n".join(head) + "\n" + body}
