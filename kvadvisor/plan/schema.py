"""The plan file's schema: every key, what it holds, its bounds and how to write it.

kvadvisor.checker walks a parsed plan against these fields and collects every problem with its
key path and line; kvadvisor.plan.loader then builds the Plan from the checked values.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from kvadvisor.checker import Field
from kvadvisor.plan.model import (
    FULL_BUFFER_ACTIONS,
    LOAD_MODES,
    PREEMPTION_MODES,
    PREFETCH_POLICIES,
    ROUTERS,
    STAGE_BLOCKS,
    TIER_KINDS,
    TIER_SCOPES,
    TOPOLOGIES,
    WRITE_POLICIES,
)

# Upper bounds for every count and plain number in a plan, far above any real deployment:
# counts (instances, devices, GPUs, tokens per chunk) and IOPS or a traffic scale. A value
# beyond them is a typo, and would make the review allocate or loop by it.
MAX_COUNT = 1_000_000
MAX_TP = 1024
MAX_SETTING = 1 << 53
MAX_TRAFFIC_SCALE = 1e6
MIN_TRAFFIC_SCALE = 1e-6
DTYPES = ("bf16", "fp16", "fp8")
SHARE = "a share of the rated bandwidth, in (0, 1]"


def _count(minimum: int = 1, maximum: int = MAX_COUNT) -> Field:
    return Field("int", minimum=minimum, maximum=maximum)


def _share() -> Field:
    return Field("number", positive=True, maximum=1, help=SHARE)


MODEL_FIELDS = {
    "name": Field("text", help="a catalog model name"),
    "kv_bytes_per_token": _count(1, 1 << 30),
    "tp": _count(1, MAX_TP),
    "kv_dtype": Field("text", choices=DTYPES),
    "weight_dtype": Field("text", choices=DTYPES),
}
SLO_FIELDS = {
    "ttft_p99": Field("time", positive=True, help="give the latency target, e.g. 2 s"),
    "tpot_p99": Field("time", positive=True, help="give the latency target, e.g. 50 ms"),
}
TRAFFIC_FIELDS = {"scale": Field("number", positive=True, maximum=MAX_TRAFFIC_SCALE)}
LINK_FIELDS = {
    "bandwidth": Field("rate", positive=True, help="e.g. '50 GB/s'"),
    "efficiency": _share(),
    "latency": Field("time"),
}
SCHEDULER_FIELDS = {
    "max_num_batched_tokens": _count(),
    "max_num_seqs": _count(),
    "page_tokens": _count(),
    "preemption": Field("text", choices=PREEMPTION_MODES),
}
KV_LOAD_FIELDS = {
    "mode": Field("text", choices=LOAD_MODES),
    "prefetch_policy": Field("text", choices=PREFETCH_POLICIES),
    "prefetch_timeout": Field("time"),
    "prefetch_timeout_per_ki_token": Field("time"),
    "min_tokens": _count(0),
}
FRONTEND_FIELDS = {"fixed": Field("time"), "per_ki_token": Field("time")}
INLINE_STORAGE_FIELDS = {
    "kind": Field("text", required=True, choices=TIER_KINDS, help=" | ".join(TIER_KINDS)),
    "read_bandwidth": Field("rate"),
    "write_bandwidth": Field("rate"),
    "read_iops": Field("number", positive=True),
    "write_iops": Field("number", positive=True),
    "latency": Field("time"),
}
TIER_FIELDS = {
    "name": Field("name"),
    # A catalog name or an inline mapping: the loader checks which (INLINE_STORAGE_FIELDS).
    "storage": Field("any", required=True, help="a storage catalog name or an inline spec"),
    "capacity": Field("size", positive=True, help="give its size, or null for no bound"),
    "devices": _count(),
    "shared": Field("bool"),
    "scope": Field("text", choices=TIER_SCOPES),
    "write_buffer": Field("size", positive=True, help="or leave it out (unbounded)"),
    "on_full": Field("text", choices=FULL_BUFFER_ACTIONS),
    "io_tokens": _count(),
    "efficiency": _share(),
}


@lru_cache(maxsize=1)
def plan_fields() -> Mapping[str, Field]:
    """The whole plan's fields."""
    stage = {
        "instance": Field("text", help="a catalog instance name"),
        "gpu": Field("text", help="a GPU catalog name"),
        "count": _count(),
        "gpus_per_instance": _count(),
        "host_memory": Field("size"),
        "gpu_kv_pool": Field("size", positive=True, help="or leave it out (modeled)"),
        "disk_bandwidth_cap": Field("rate"),
        "chunk_tokens": _count(),
        # Engine names and each engine's settings are checked by the loader: a null engine
        # (`lmcache:`) is one enabled with its defaults, not one left out.
        "engines": Field("mapping", help="engine name: its settings"),
        "engine_files": Field("list[str]", help="engine configuration file names"),
        "tiers": Field(
            "list", items=Field("mapping", fields=TIER_FIELDS), help="tiers, fastest first"
        ),
        "gpus_per_replica": _count(),
        "replicas_per_instance": _count(),
        "scheduler": Field("mapping", fields=SCHEDULER_FIELDS),
        "router": Field("text", choices=ROUTERS),
        "write_policy": Field("text", choices=WRITE_POLICIES),
        "kv_load": Field("mapping", fields=KV_LOAD_FIELDS),
        "decode_offload": Field("text", help="a tier name"),
        "save_decode_kv": Field("bool"),
        "frontend": Field("mapping", fields=FRONTEND_FIELDS),
    }
    stages = {s.value: Field("mapping", fields=stage) for s in STAGE_BLOCKS}
    return {
        "name": Field("name"),
        "description": Field("text"),
        "model": Field(
            "mapping", required=True, fields=MODEL_FIELDS, help="name and/or kv_bytes_per_token"
        ),
        "slo": Field("mapping", fields=SLO_FIELDS),
        "traffic": Field("mapping", fields=TRAFFIC_FIELDS),
        "topology": Field("text", choices=TOPOLOGIES),
        "pd_link": Field("mapping", fields=LINK_FIELDS),
        "stages": Field(
            "mapping",
            required=True,
            fields=stages,
            help="prefill and/or decode, or one serving block (aggregated)",
        ),
    }


def engine_fields(engine: str, documented: Mapping[str, Any]) -> dict[str, Field]:
    """An engine's documented settings as fields (``kind`` from its settings table)."""
    out: dict[str, Field] = {}
    for key, spec in documented.items():
        kind = spec.get("kind", "")
        if kind == "int":
            # Chunk, page and block sizes divide token counts in the review: the table's
            # minimum. Engine settings hold byte sizes too: bounded by the table's maximum, or
            # by 2^53 (every whole number below it is exact where the review computes in floats).
            out[key] = Field(
                "int",
                minimum=int(spec.get("minimum", 0)),
                maximum=int(spec.get("maximum", MAX_SETTING)),
            )
        elif kind == "number":
            unit = f"in {spec['unit']}, as {engine} takes it" if "unit" in spec else ""
            out[key] = Field("number", help=unit)
        elif kind == "str":
            out[key] = Field("text", choices=tuple(spec["choices"]) if "choices" in spec else None)
        else:
            # bool and mapping check as such; list takes one word or a list; mooncake-size (a
            # number or a size in Mooncake's units) is read by the loader.
            out[key] = Field(
                {"bool": "bool", "mapping": "mapping", "list": "list[str]"}.get(kind, "any")
            )
    return out
