"""Replay identity: every figure of the replay on the sample traces, to compare two versions.

Usage: python benchmarks/replay_identity.py --write FILE   (record this checkout's figures)
       python benchmarks/replay_identity.py --check FILE   (exit 1 on any difference)

A refactor of the compiled loop (``fleet/kernel*``) must not move a single bit. This replays
the sample traces through deployments that exercise every mechanism of the loop (tiers of
each scope, write-through and write-back, blocking and dropping buffers, async loads and
prefetch under each policy, recompute and swap preemption, decode-time offload, the three
routers, the disaggregated link) and records, per group, a SHA-256 of every array the loop
filled (per-request times, series, counters, the step log) and the summary's full repr.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.catalog.models import get_model
from kvadvisor.fleet import ReplayOptions, TraceArrays, engine, summarize
from kvadvisor.fleet.build import kv_model, pool_tokens, roofline_for

# The fleet's resolved inputs, built by hand (outside the fleet only tests and benchmarks may):
# each scenario sets one mechanism's knob directly, which a Plan reaches only through defaults.
from kvadvisor.fleet.engine import run_resolved
from kvadvisor.fleet.resolved import (
    LoadMode,
    Preemption,
    PrefetchPolicy,
    ResolvedFleet,
    ResolvedLink,
    ResolvedScheduler,
    ResolvedStage,
    ResolvedTier,
    RouterPolicy,
    Scope,
    WritePolicy,
)
from kvadvisor.trace import read_trace
from kvadvisor.units import BYTES_PER_GB
from kvadvisor.vocab import Stage, Topology

REPO = Path(__file__).resolve().parents[1]
TRACES = (
    "mooncake_conversation_head.jsonl.gz",
    "azure_code_head.csv.zst",
    "bailian_example.jsonl",
)
MODEL = get_model("qwen3-32b")
PM, STEP = roofline_for(MODEL, get_gpu("h200"), 2)
KV = kv_model(MODEL, "bf16", 2)


def tier(name: str, scope: Scope, cap_gb: float | None, rd_gb: float, wr_gb: float, **kw: object):
    """A tier of ``cap_gb`` GB per scope unit (None: unbounded)."""
    cap = None if cap_gb is None else cap_gb * BYTES_PER_GB / KV.bytes_per_token
    kind = "dram" if name == "dram" else "ssd"
    return ResolvedTier(name, kind, scope, cap, rd_gb * BYTES_PER_GB, wr_gb * BYTES_PER_GB, **kw)


def stage(role: Stage = Stage.SERVING, **kw: object) -> ResolvedStage:
    """Qwen3-32B TP 2 on H200, 2 instances of 2 replicas, with ``kw`` changed."""
    base: dict[str, object] = dict(
        role=role,
        instances=2,
        replicas_per_instance=2,
        gpus_per_replica=2,
        step=STEP,
        pool_tokens=pool_tokens(PM),
        scheduler=ResolvedScheduler(8192, 256, 16),
        tiers=(
            tier("dram", Scope.REPLICA, 20, 50, 50, latency_s=10e-6),
            tier("nvme", Scope.INSTANCE, 200, 7, 3, latency_s=80e-6, read_iops=1e6),
            tier("pool", Scope.POOLED, None, 25, 25, latency_s=200e-6),
        ),
        kv=KV,
    )
    base.update(kw)
    return ResolvedStage(**base)  # type: ignore[arg-type]


def aggregated(**kw: object) -> ResolvedFleet:
    """One serving stage."""
    return ResolvedFleet("identity", Topology.AGGREGATED, (stage(**kw),), KV)


SMALL = dict(pool_tokens=60000, scheduler=ResolvedScheduler(2048, 64, 16))
SMALL_SWAP = dict(pool_tokens=60000, scheduler=ResolvedScheduler(2048, 64, 16, Preemption.SWAP))
SLOW_TIERS = (
    tier("dram", Scope.REPLICA, 2, 5, 1.0, write_buffer_bytes=2e9),
    tier("nvme", Scope.INSTANCE, 50, 2, 0.5, write_buffer_bytes=1e9, drop_when_full=True),
)
SCENARIOS: dict[str, Callable[[], ResolvedFleet]] = {
    "three-tiers": lambda: aggregated(),
    "write-back": lambda: aggregated(write_policy=WritePolicy.WRITE_BACK, save_decode_kv=True),
    "small-buffers": lambda: aggregated(tiers=SLOW_TIERS),
    "recompute-threshold": lambda: aggregated(min_load_tokens=2048),
    "prefetch-wait": lambda: aggregated(load_mode=LoadMode.PREFETCH),
    "prefetch-best": lambda: aggregated(
        load_mode=LoadMode.PREFETCH, prefetch_policy=PrefetchPolicy.BEST_EFFORT, tiers=SLOW_TIERS
    ),
    "prefetch-timeout": lambda: aggregated(
        load_mode=LoadMode.PREFETCH,
        prefetch_policy=PrefetchPolicy.TIMEOUT,
        prefetch_timeout_base_s=0.002,
        prefetch_timeout_per_ki_token_s=0.001,
        tiers=SLOW_TIERS,
    ),
    "preempt-recompute": lambda: aggregated(**SMALL),
    "preempt-swap": lambda: aggregated(**SMALL_SWAP, swap_bytes_per_s=20e9),
    "offload": lambda: aggregated(**SMALL, offload_tier="dram"),
    "least-outstanding": lambda: aggregated(router=RouterPolicy.LEAST_OUTSTANDING),
    "prefix-aware": lambda: aggregated(router=RouterPolicy.PREFIX_AWARE, router_weight=2.0),
    "frontend": lambda: aggregated(frontend_fixed_s=0.004, frontend_per_token_s=2e-7),
    "disaggregated": lambda: ResolvedFleet(
        "identity",
        Topology.DISAGGREGATED,
        (stage(Stage.PREFILL), stage(Stage.DECODE, tiers=(), **SMALL)),
        KV,
        ResolvedLink(12.5e9, 20e-6),
    ),
}


def digest(array: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and bytes."""
    a = np.ascontiguousarray(array)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def figures() -> dict[str, object]:
    """Every scenario on every sample trace: the loop's arrays per group and the summary."""
    calls: list[dict[str, str]] = []
    inner = engine._kernel_call

    def recorded(*args: object, **kw: object) -> dict[str, np.ndarray]:
        out = inner(*args, **kw)
        calls.append({k: digest(v) for k, v in sorted(out.items())})
        return out

    engine._kernel_call = recorded
    found: dict[str, object] = {}
    try:
        for name in TRACES:
            arrays = TraceArrays.from_trace(read_trace(REPO / "sample_traces" / name))
            for label, build in SCENARIOS.items():
                calls.clear()
                run = run_resolved(arrays, build(), ReplayOptions(step_log=True, workers=1))
                found[f"{name} {label}"] = {
                    "groups": list(calls),
                    "summary": repr(dataclasses.asdict(summarize(run))),
                }
                print(f"{name} {label}: {len(calls)} groups", file=sys.stderr)
    finally:
        engine._kernel_call = inner
    return found


def main() -> int:
    """Write or check the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path)
    group.add_argument("--check", type=Path)
    args = parser.parse_args()
    found = figures()
    if args.write:
        args.write.write_text(json.dumps(found, indent=1, sort_keys=True))
        print(f"wrote {len(found)} scenario runs to {args.write}")
        return 0
    want = json.loads(args.check.read_text())
    differ = sorted(k for k in want.keys() | found.keys() if want.get(k) != found.get(k))
    for key in differ:
        print(f"differs: {key}")
    print(f"{len(found) - len(differ)} of {len(found)} scenario runs identical")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
