"""Run a deployment over a trace: route, read the tier hits, split into groups, run the loop.

The order of work for one stage (docs/replay.md, "How a replay runs"):

1. Route. Round robin is fixed by arrival order. Least outstanding and prefix-aware routing
   look at live load, so a first pass replays the whole stage as one group with the router
   choosing at each arrival (prefix hits as the router believes them), and keeps only its
   choices.
2. Read each request's hits per tier off exact LRU passes of each replica's, instance's or
   pool's stream (:mod:`kvadvisor.fleet.hits`): GPU pool first, then the tiers fastest first.
3. Split the replicas into groups that share nothing (a pooled tier or an instance's tier or
   NIC joins replicas) and replay the groups independently (threads here; a distributed
   engine would fan the same tasks out).

Disaggregated deployments run the prefill stage, then the decode stage with each request
arriving when its prefill produced the first token.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from kvadvisor.errors import ConfigError
from kvadvisor.fleet.deployment import (
    Deployment,
    LinkSpec,
    LoadMode,
    Preemption,
    PrefetchPolicy,
    RouterPolicy,
    Scope,
    Stage,
    StageSpec,
    Topology,
    WritePolicy,
)
from kvadvisor.fleet.hits import ReplayContext, TraceArrays, gather_blocks
from kvadvisor.units import Unit, format_value

# The replay runs this long past the last arrival before it stops (a fleet that cannot keep
# up never drains): the trace's own span, and at least ten minutes.
MIN_DRAIN_S = 600.0
# Cells per demand series (resources x windows); past it the window is widened, so memory
# stays bounded on long traces (the report states the window used).
MAX_SERIES_CELLS = 4_000_000
MAX_WINDOWS = 400_000
# Replicas that share one pooled tier replay as one group, whose cost grows with the square of
# its replicas (a 30-request trace: 20,000 replicas 14 s, 100,000 replicas 360 s, one core).
# Independent replicas replay one group each, and only those a request reaches.
MAX_POOLED_REPLICAS = 10_000

ROLE_CODE = {Stage.SERVING: 0, Stage.PREFILL: 1, Stage.DECODE: 2}
ROUTE_CODE = {
    RouterPolicy.ROUND_ROBIN: 0,
    RouterPolicy.LEAST_OUTSTANDING: 1,
    RouterPolicy.PREFIX_AWARE: 2,
}
PREFETCH_CODE = {
    PrefetchPolicy.WAIT_COMPLETE: 0,
    PrefetchPolicy.BEST_EFFORT: 1,
    PrefetchPolicy.TIMEOUT: 2,
}


@dataclass(frozen=True)
class ReplayOptions:
    """How long to run past the last arrival, the demand window, threads, the step log."""

    window_s: float = 1.0
    drain_cap_s: float | None = None
    workers: int | None = None
    step_log: bool = False  # keep every step event (``fleet.steps`` writes them)

    def __post_init__(self) -> None:
        """Positive window and drain cap."""
        if not self.window_s > 0:
            raise ConfigError(f"replay window must be > 0 s, got {self.window_s}")
        if self.drain_cap_s is not None and not self.drain_cap_s >= 0:
            raise ConfigError(f"replay drain cap must be >= 0 s, got {self.drain_cap_s}")


@dataclass(frozen=True)
class Resource:
    """A shared thing a group's flows or writes go through: a tier unit, a NIC, a host link."""

    kind: str  # "tier", "link" or "swap"
    tier: int  # tier index for "tier", else -1
    unit: int  # replica, instance or 0 (pooled), in the stage's numbering
    read_bytes_per_s: float
    latency_s: float
    io_bytes: float
    iops: float
    write_bytes_per_s: float
    buffer_bytes: float
    drop: bool


@dataclass(frozen=True, eq=False)
class StageRun:
    """One stage's outcome: per request (global trace rows), per resource, per window."""

    role: Stage
    spec: StageSpec
    rows: np.ndarray  # trace rows this stage served, in its arrival order
    arrival_s: np.ndarray  # when each reached the stage
    replica: np.ndarray
    admit_s: np.ndarray
    ready_s: np.ndarray
    first_s: np.ndarray
    done_s: np.ndarray
    preemptions: np.ndarray
    recomputed_tokens: np.ndarray
    loaded_tokens: np.ndarray
    hit_tokens: np.ndarray  # prefix hits found (GPU and tiers), before any recompute rule
    tier_hit_tokens: np.ndarray  # (tiers, requests): served by each tier
    prefill_gpu_s: np.ndarray  # replica-seconds charged to the request's prefill
    decode_gpu_s: np.ndarray
    resources: tuple[Resource, ...]
    read_bytes: np.ndarray  # (resources, windows) bytes delivered per window
    read_ios: np.ndarray
    write_bytes: np.ndarray  # bytes the write buffer drained to the device per window
    read_demand_bytes: np.ndarray  # bytes of loads started per window (asked for)
    write_demand_bytes: np.ndarray  # bytes handed to the write buffer per window (offered)
    waiting: np.ndarray  # time-integral of requests waiting, per window (request-seconds)
    running: np.ndarray
    busy_s: np.ndarray  # per replica: time executing steps
    occupied_s: np.ndarray  # per replica: time holding at least one admitted request
    counters: dict[str, float] = field(default_factory=dict)
    # step events (kernel.L_* columns, replicas in the stage's numbering, by start time);
    # None unless ReplayOptions.step_log
    step_log: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class ReplayRun:
    """Everything a replay measured, before it is summarised (:mod:`kvadvisor.fleet.summary`)."""

    deployment: Deployment
    arrays: TraceArrays
    stages: tuple[StageRun, ...]
    window_s: float
    drain_cap_s: float
    stop_s: float
    end_s: float
    notes: tuple[str, ...] = ()


def _choose_window(options: ReplayOptions, stop_s: float, rows: int) -> float:
    """The demand window: as asked, widened so the series stay within the memory bound."""
    need = (stop_s + 1.0) / max(MAX_SERIES_CELLS / max(rows, 1), 1.0)
    return max(options.window_s, need, (stop_s + 1.0) / MAX_WINDOWS)


def _resources(
    stage: StageSpec, kv_bpt: float, link: LinkSpec | None
) -> tuple[list[Resource], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The stage's resources and each replica's: per tier, its link, its swap link, offload."""
    reps, rpi = stage.replicas, stage.replicas_per_instance
    res: list[Resource] = []
    res_tier = np.full((reps, len(stage.tiers)), -1, np.int64)
    for k, tier in enumerate(stage.tiers):
        io_bytes = max(float(tier.io_tokens) * kv_bpt, 1.0)
        # IOPS cap the rate at which whole I/Os of the engine's chunk move.
        bw = tier.read_bytes_per_s
        if tier.read_iops:
            bw = min(bw, tier.read_iops * io_bytes)
        units = {Scope.REPLICA: reps, Scope.INSTANCE: stage.instances, Scope.POOLED: 1}
        first = len(res)
        for u in range(units[tier.scope]):
            res.append(
                Resource(
                    "tier",
                    k,
                    u,
                    bw,
                    tier.latency_s,
                    io_bytes,
                    tier.read_iops or math.inf,
                    tier.write_bytes_per_s,
                    math.inf if tier.write_buffer_bytes is None else tier.write_buffer_bytes,
                    tier.drop_when_full,
                )
            )
        for r in range(reps):
            unit = {Scope.REPLICA: r, Scope.INSTANCE: r // rpi, Scope.POOLED: 0}[tier.scope]
            res_tier[r, k] = first + unit
    res_link = np.full(reps, -1, np.int64)
    if stage.role is Stage.DECODE and link is not None:
        first = len(res)
        for u in range(stage.instances):
            res.append(
                Resource(
                    "link",
                    -1,
                    u,
                    link.bytes_per_s,
                    link.latency_s,
                    1.0,
                    math.inf,
                    1.0,
                    math.inf,
                    False,
                )
            )
        res_link[:] = first + np.arange(reps) // rpi
    res_swap = np.full(reps, -1, np.int64)
    if stage.scheduler.preemption is Preemption.SWAP and stage.swap_bytes_per_s:
        first = len(res)
        for r in range(reps):
            res.append(
                Resource(
                    "swap",
                    -1,
                    r,
                    stage.swap_bytes_per_s,
                    0.0,
                    1.0,
                    math.inf,
                    1.0,
                    math.inf,
                    False,
                )
            )
        res_swap[:] = first + np.arange(reps)
    res_offload = np.full(reps, -1, np.int64)
    if stage.offload_tier is not None:
        k = [t.name for t in stage.tiers].index(stage.offload_tier)
        res_offload[:] = res_tier[:, k]
    return res, res_tier, res_link, res_swap, res_offload


def _groups(reps: int, reached: np.ndarray, *maps: np.ndarray) -> list[np.ndarray]:
    """Replicas joined by any shared resource (union-find), each group's replicas ascending.

    Only the groups holding a replica in ``reached`` (bool per replica) are returned (or the
    first group, when none is): a group no request reaches replays to zeros. Groups come in the
    order of their root, as the replay has always merged them.
    """
    flats = [m.reshape(reps, -1) for m in maps]
    rep_idx = np.concatenate([np.nonzero(f >= 0)[0] for f in flats]) if flats else np.zeros(0)
    res_idx = np.concatenate([f[f >= 0] for f in flats]) if flats else np.zeros(0)
    pairs = np.unique(np.stack([rep_idx, res_idx]).astype(np.int64), axis=1)
    if np.unique(pairs[1]).size == pairs.shape[1]:
        # No resource shared: every replica is its own group and its own root (the common
        # case, and the one a million-instance stage takes without a loop per replica).
        chosen = np.flatnonzero(reached)
        return [chosen[i : i + 1] for i in range(chosen.size)] or [np.zeros(1, np.int64)]
    parent = np.arange(reps)

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = int(parent[x])
        return x

    owner: dict[int, int] = {}
    for flat in flats:
        for r in range(reps):
            for s in flat[r]:
                if s < 0:
                    continue
                if int(s) in owner:
                    a, b = find(r), find(owner[int(s)])
                    if a != b:
                        parent[a] = b
                else:
                    owner[int(s)] = r
    roots = np.array([find(r) for r in range(reps)], dtype=np.int64)
    keep = np.unique(roots[reached]) if reached.any() else roots[:1]
    # One stable sort of the kept replicas, not a scan of every root per group.
    members = np.flatnonzero(np.isin(roots, keep))
    order = members[np.argsort(roots[members], kind="stable")]
    cuts = np.flatnonzero(np.diff(roots[order])) + 1
    return np.split(order, cuts)


@dataclass(frozen=True, eq=False)
class _StageInputs:
    """Per request of a stage (its arrival order): routing, hits and what each moves."""

    rows: np.ndarray
    arrival: np.ndarray
    input_tok: np.ndarray
    output_tok: np.ndarray
    gpu_hit: np.ndarray
    load_tok: np.ndarray  # (requests, tiers)
    own_hit: np.ndarray  # (requests, tiers)
    xfer_tok: np.ndarray
    done_write_tok: np.ndarray  # (requests, tiers)


def _kernel_call(
    stage: StageSpec,
    dep: Deployment,
    inp: _StageInputs,
    local: np.ndarray,  # indices into the stage's requests
    route: np.ndarray,  # replica per local request (group numbering), or -1 (router decides)
    pool_pages: np.ndarray,
    offload_pages: np.ndarray,
    res_tier: np.ndarray,
    res_link: np.ndarray,
    res_swap: np.ndarray,
    res_offload: np.ndarray,
    resources: list[Resource],
    window_s: float,
    stop_s: float,
    route_policy: int = 0,
    blocks: tuple[np.ndarray, np.ndarray, int, np.ndarray] | None = None,
    log_rows: int = 0,
) -> dict[str, np.ndarray]:
    """Run the compiled loop on one group; every array is allocated here.

    ``log_rows`` > 0 keeps the group's step events; when they outnumber it the group is run
    again with room for all of them (the first run counted them).
    """
    from kvadvisor.fleet import kernel  # numba only when a replay runs

    m = int(local.size)
    n_res = len(resources)
    n_win = int(math.ceil(stop_s / window_s)) + 2
    counts = np.zeros(n_res, np.int64)
    reps_of = route if route_policy == 0 else None
    for s in range(n_res):
        users = np.zeros(pool_pages.shape[0], bool)
        for mp in (res_tier, res_link.reshape(-1, 1), res_swap.reshape(-1, 1)):
            users |= (mp.reshape(pool_pages.shape[0], -1) == s).any(axis=1)
        counts[s] = m if reps_of is None else int(np.isin(reps_of, np.flatnonzero(users)).sum())
    ps_base = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    if blocks is None:
        blocks = (np.zeros(m + 1, np.int64), np.zeros(1, np.int32), 1, np.zeros((1, 1), np.uint64))
    step, kv, sch = stage.step, stage.kv or dep.kv, stage.scheduler

    def col(values: list[float]) -> np.ndarray:
        return np.asarray(values, dtype=np.float64)

    route = np.ascontiguousarray(route, dtype=np.int64)
    next_same, first_same = _chains(route, pool_pages.shape[0])
    frontend = np.zeros(m)
    if stage.role is not Stage.DECODE:
        frontend = stage.frontend_fixed_s + stage.frontend_per_token_s * inp.input_tok[local]

    def run(rows: int) -> dict[str, np.ndarray]:
        """One pass of the compiled loop, with room for ``rows`` step events."""
        out = {
            "replica": np.zeros(m, np.int64),
            "admit": np.zeros(m),
            "ready": np.zeros(m),
            "first": np.zeros(m),
            "done": np.zeros(m),
            "preempt": np.zeros(m, np.int64),
            "recomputed": np.zeros(m, np.int64),
            "loaded": np.zeros(m, np.int64),
            "pf_gpu": np.zeros(m),
            "dec_gpu": np.zeros(m),
            "read": np.zeros((n_res, n_win)),
            "read_ios": np.zeros((2 * n_res, n_win)),  # I/Os, then the bytes asked for
            "write": np.zeros((2 * n_res, n_win)),  # drained, then offered
            "waiting": np.zeros((1, n_win)),
            "running": np.zeros((1, n_win)),
            "busy": np.zeros(pool_pages.shape[0]),
            "occupied": np.zeros(pool_pages.shape[0]),
            "steps": np.zeros((rows, kernel.N_LOG)),
            "cnt": np.zeros(kernel.N_COUNTERS, np.int64),
            "fcnt": np.zeros(kernel.N_FLOAT_COUNTERS),
        }
        kernel.simulate_group(
            np.ascontiguousarray(inp.arrival[local]),
            route,
            next_same,
            first_same,
            np.ascontiguousarray(inp.input_tok[local]),
            np.ascontiguousarray(inp.output_tok[local]),
            np.ascontiguousarray(inp.gpu_hit[local]),
            np.ascontiguousarray(inp.load_tok[local]),
            np.ascontiguousarray(inp.own_hit[local]),
            np.ascontiguousarray(inp.xfer_tok[local]),
            np.ascontiguousarray(inp.done_write_tok[local]),
            route_policy,
            float(stage.router_weight),
            blocks[0],
            blocks[1],
            int(blocks[2]),
            blocks[3],
            ROLE_CODE[stage.role],
            pool_pages,
            offload_pages,
            res_tier,
            res_link,
            res_swap,
            res_offload,
            int(sch.page_tokens),
            int(sch.max_batched_tokens),
            int(sch.max_seqs),
            sch.preemption is Preemption.SWAP,
            int(stage.min_load_tokens),
            0 if stage.load_mode is LoadMode.ASYNC else 1,
            PREFETCH_CODE[stage.prefetch_policy],
            float(stage.prefetch_timeout_base_s),
            float(stage.prefetch_timeout_per_ki_token_s) / 1024.0,
            stage.write_policy is WritePolicy.WRITE_BACK,
            float(kv.bytes_per_token),
            float(kv.gpu_bytes_per_token),
            float(kv.layers),
            np.ascontiguousarray(frontend, dtype=np.float64),
            np.ascontiguousarray(step.tokens_grid, dtype=np.float64),
            np.ascontiguousarray(step.tokens_s, dtype=np.float64),
            float(step.s_per_pair),
            float(step.decode_s_per_kv_byte),
            np.ascontiguousarray(step.logits_grid, dtype=np.float64),
            np.ascontiguousarray(step.logits_s, dtype=np.float64),
            float(step.prefill_attention_fixed_s),
            float(step.decode_attention_fixed_s),
            float(step.full_attention_layers),
            float(step.sliding_window_layers),
            int(step.window_tokens),
            float(kv.rank_full_bytes_per_token),
            float(kv.rank_window_bytes_per_token),
            col([r.read_bytes_per_s for r in resources]),
            col([r.latency_s for r in resources]),
            col([r.io_bytes for r in resources]),
            col([r.iops for r in resources]),
            col([r.write_bytes_per_s for r in resources]),
            col([r.buffer_bytes for r in resources]),
            np.asarray([r.drop for r in resources], dtype=np.bool_),
            ps_base,
            float(window_s),
            float(stop_s),
            out["replica"],
            out["admit"],
            out["ready"],
            out["first"],
            out["done"],
            out["preempt"],
            out["recomputed"],
            out["loaded"],
            out["pf_gpu"],
            out["dec_gpu"],
            out["read"],
            out["read_ios"],
            out["write"],
            out["waiting"],
            out["running"],
            out["busy"],
            out["occupied"],
            out["steps"],
            out["cnt"],
            out["fcnt"],
        )
        return out

    out = run(log_rows)
    needed = int(out["cnt"][kernel.C_LOG_ROWS])
    if log_rows and needed > log_rows:
        # The first pass counted the events; a second has room for them all.
        out = run(needed)
        log_rows = needed
    out["steps"] = out["steps"][: min(needed, log_rows)]
    return out


def _chains(route: np.ndarray, replicas: int) -> tuple[np.ndarray, np.ndarray]:
    """Per request the next one routed to the same replica; per replica its first (-1: none)."""
    next_same = np.full(route.size, -1, np.int64)
    first = np.full(replicas, -1, np.int64)
    fixed = np.flatnonzero(route >= 0)
    if fixed.size:
        order = fixed[np.argsort(route[fixed], kind="stable")]
        reps = route[order]
        same = reps[1:] == reps[:-1]
        next_same[order[:-1][same]] = order[1:][same]
        starts = np.concatenate(([True], ~same))
        first[reps[starts]] = order[starts]
    return next_same, first


def _block_view(
    arrays: TraceArrays, rows: np.ndarray, replicas: int
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """The stage's block ids for the prefix-aware router, and its empty view of the replicas."""
    if not arrays.has_hashes:
        return (
            np.zeros(rows.size + 1, np.int64),
            np.zeros(1, np.int32),
            1,
            np.zeros((1, 1), np.uint64),
        )
    assert arrays.offsets is not None and arrays.block_ids is not None
    offsets, ids = gather_blocks(arrays.offsets, arrays.block_ids, rows)
    words = (replicas + 63) // 64
    masks = np.zeros((max(arrays.id_bound, 1), words), np.uint64)
    return offsets, np.ascontiguousarray(ids, dtype=np.int32), int(arrays.block_tokens or 1), masks


def _stage_inputs(
    ctx: ReplayContext,
    stage: StageSpec,
    dep: Deployment,
    rows: np.ndarray,
    arrival: np.ndarray,
    assign: np.ndarray | None,
) -> _StageInputs:
    """Hits per tier for the requests ``rows`` routed by ``assign`` (None: not routed yet)."""
    arrays = ctx.arrays
    m, n_tier = rows.size, len(stage.tiers)
    inp, out = arrays.input_tokens[rows], arrays.output_tokens[rows]
    gpu = np.zeros(m, np.int64)
    own = np.zeros((m, n_tier), np.int64)
    load = np.zeros((m, n_tier), np.int64)
    # Engines cache whole pages: a hit ends at the last full page it covers (a page coarser
    # than the trace's hash block loses the partial page, docs/replay.md).
    page = stage.scheduler.page_tokens
    if stage.role is not Stage.DECODE and arrays.has_hashes and m:
        if assign is None:
            # the first pass of a load-aware router: the fleet's GPU pools as one cache
            idx = ctx.hit_index(rows, np.zeros(m, np.int64))
            gpu = idx.hit_tokens(float(stage.pool_tokens) * stage.replicas)[rows]
            gpu = gpu // page * page
        else:
            units = {
                Scope.REPLICA: assign,
                Scope.INSTANCE: assign // stage.replicas_per_instance,
                Scope.POOLED: np.zeros(m, np.int64),
            }
            gpu = ctx.hit_index(rows, units[Scope.REPLICA]).hit_tokens(float(stage.pool_tokens))
            gpu = gpu[rows] // page * page
            have = gpu.copy()
            for k, tier in enumerate(stage.tiers):
                hits = ctx.hit_index(rows, units[tier.scope]).hit_tokens(tier.capacity_tokens)
                own[:, k] = hits[rows] // page * page
                cum = np.maximum(have, own[:, k])
                load[:, k] = cum - have
                have = cum
    done_write = np.zeros((m, n_tier))
    if stage.save_decode_kv and n_tier:
        kept = out + (inp if stage.role is Stage.DECODE else 0)
        done_write[:] = kept[:, None].astype(np.float64)
    xfer = inp.copy() if stage.role is Stage.DECODE else np.zeros(m, np.int64)
    return _StageInputs(rows, arrival, inp, out, gpu, load, own, xfer, done_write)


def _pool_pages(stage: StageSpec) -> int:
    return max(stage.pool_tokens // stage.scheduler.page_tokens, 1)


def _offload_pages(stage: StageSpec) -> int:
    """Pages of decode-time offload space per replica (its share of the offload tier)."""
    if stage.offload_tier is None:
        return 0
    tier = next(t for t in stage.tiers if t.name == stage.offload_tier)
    if tier.capacity_tokens is None:
        return 1 << 40
    share = {Scope.REPLICA: 1, Scope.INSTANCE: stage.replicas_per_instance}
    per = tier.capacity_tokens / share.get(tier.scope, stage.replicas)
    return int(per // stage.scheduler.page_tokens)


def run_stage(
    ctx: ReplayContext,
    dep: Deployment,
    stage: StageSpec,
    rows: np.ndarray,
    arrival: np.ndarray,
    window_s: float,
    stop_s: float,
    workers: int,
    step_log: bool = False,
) -> StageRun:
    """Route, read hits, and replay every group of one stage (see the module docstring)."""
    reps = stage.replicas
    m = rows.size
    resources, res_tier, res_link, res_swap, res_offload = _resources(
        stage, dep.kv.bytes_per_token, dep.link
    )
    pool = np.full(reps, _pool_pages(stage), np.int64)
    offload = np.full(reps, _offload_pages(stage), np.int64)
    if stage.router is RouterPolicy.ROUND_ROBIN or reps == 1:
        assign = np.arange(m, dtype=np.int64) % reps
    else:
        # Pass 1: the router decides with live load (and its own view of cached blocks).
        first = _stage_inputs(ctx, stage, dep, rows, arrival, None)
        no_tiers = np.full((reps, 0), -1, np.int64)
        first = _StageInputs(
            first.rows,
            first.arrival,
            first.input_tok,
            first.output_tok,
            first.gpu_hit,
            np.zeros((m, 0), np.int64),
            np.zeros((m, 0), np.int64),
            first.xfer_tok,
            np.zeros((m, 0)),
        )
        keep = [r for r in resources if r.kind != "tier"]
        remap = {id(r): i for i, r in enumerate(keep)}
        link = np.array([remap[id(resources[s])] if s >= 0 else -1 for s in res_link])
        swap = np.array([remap[id(resources[s])] if s >= 0 else -1 for s in res_swap])
        policy = ROUTE_CODE[stage.router]
        blocks = _block_view(ctx.arrays, rows, reps) if policy == 2 else None
        out = _kernel_call(
            stage,
            dep,
            first,
            np.arange(m),
            np.full(m, -1, np.int64),
            pool,
            offload * 0,
            no_tiers,
            link.astype(np.int64),
            swap.astype(np.int64),
            np.full(reps, -1, np.int64),
            keep,
            window_s,
            stop_s,
            policy,
            blocks,
        )
        assign = out["replica"]
        unrouted = assign < 0
        if unrouted.any():  # arrivals past the drain cap: spread them as round robin would
            assign[unrouted] = np.arange(int(unrouted.sum())) % reps
    inp = _stage_inputs(ctx, stage, dep, rows, arrival, assign)
    # A group no request reaches replays to zeros, which the arrays below start as: only the
    # groups with requests run (at least one, for the counters' shape), so a stage's cost
    # follows its requests, not its replica count.
    reached = np.zeros(reps, bool)
    reached[assign] = True
    groups = _groups(reps, reached, res_tier, res_link, res_swap)

    def one(reps_g: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        local = np.flatnonzero(np.isin(assign, reps_g))
        new_index = np.full(reps, -1, np.int64)
        new_index[reps_g] = np.arange(reps_g.size)
        used = sorted(
            {int(s) for mp in (res_tier, res_link, res_swap) for s in mp[reps_g].ravel() if s >= 0}
        )
        res_index = np.full(len(resources) + 1, -1, np.int64)
        res_index[used] = np.arange(len(used))

        def local_map(mp: np.ndarray) -> np.ndarray:
            return np.where(mp[reps_g] >= 0, res_index[mp[reps_g]], -1).astype(np.int64)

        out = _kernel_call(
            stage,
            dep,
            inp,
            local,
            new_index[assign[local]],
            pool[reps_g],
            offload[reps_g],
            local_map(res_tier),
            local_map(res_link),
            local_map(res_swap),
            local_map(res_offload),
            [resources[s] for s in used],
            window_s,
            stop_s,
            log_rows=(8 * local.size + 1024) if step_log else 0,
        )
        if step_log:
            out["steps"][:, kernel.L_REPLICA] = reps_g[
                out["steps"][:, kernel.L_REPLICA].astype(int)
            ]
        out["replica"] = np.where(out["replica"] >= 0, reps_g[np.maximum(out["replica"], 0)], -1)
        return local, np.asarray(used, np.int64), out

    from kvadvisor.fleet import kernel  # numba only when a replay runs

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(groups)))) as ex:
        results = list(ex.map(one, groups))
    n_win = int(math.ceil(stop_s / window_s)) + 2
    full: dict[str, np.ndarray] = {}
    for key, dtype in (
        ("replica", np.int64),
        ("admit", float),
        ("ready", float),
        ("first", float),
        ("done", float),
        ("preempt", np.int64),
        ("recomputed", np.int64),
        ("loaded", np.int64),
        ("pf_gpu", float),
        ("dec_gpu", float),
    ):
        full[key] = np.zeros(m, dtype)
    read = np.zeros((len(resources), n_win))
    read_ios = np.zeros_like(read)
    write = np.zeros_like(read)
    read_demand = np.zeros_like(read)
    write_demand = np.zeros_like(read)
    waiting = np.zeros(n_win)
    running = np.zeros(n_win)
    busy = np.zeros(reps)
    occupied = np.zeros(reps)
    logs: list[np.ndarray] = []
    counters = np.zeros(len(results[0][2]["cnt"]) if results else 0, np.int64)
    fcounters = np.zeros(len(results[0][2]["fcnt"]) if results else 0)
    for (local, used, out), reps_g in zip(results, groups, strict=True):
        for key in full:
            full[key][local] = out[key]
        k = used.size
        read[used] = out["read"]
        read_ios[used] = out["read_ios"][:k]
        read_demand[used] = out["read_ios"][k:]
        write[used] = out["write"][:k]
        write_demand[used] = out["write"][k:]
        waiting += out["waiting"][0]
        running += out["running"][0]
        busy[reps_g] = out["busy"]
        occupied[reps_g] = out["occupied"]
        logs.append(out["steps"])
        counters += out["cnt"]
        end = max(fcounters[kernel.F_END_S], out["fcnt"][kernel.F_END_S])
        fcounters += out["fcnt"]
        fcounters[kernel.F_END_S] = end

    cnames = {
        kernel.C_PREEMPTIONS: "preemptions",
        kernel.C_RECOMPUTED_LOADS: "recomputed_loads",
        kernel.C_BLOCKED_WRITES: "blocked_writes",
        kernel.C_DROPPED_WRITES: "dropped_writes",
        kernel.C_STEPS: "steps",
        kernel.C_SWAPS: "swaps",
        kernel.C_UNFINISHED: "unfinished",
    }
    fnames = {
        kernel.F_RECOMPUTED_TOKENS: "recomputed_tokens",
        kernel.F_DROPPED_BYTES: "dropped_write_bytes",
        kernel.F_SWAP_BYTES: "swap_bytes",
        kernel.F_PREEMPT_TOKENS: "preemption_recompute_tokens",
        kernel.F_END_S: "end_s",
    }
    counts: dict[str, float] = {name: float(counters[i]) for i, name in cnames.items()}
    counts.update({name: float(fcounters[i]) for i, name in fnames.items()})
    tier_hits = np.ascontiguousarray(inp.load_tok.T)
    hit = inp.gpu_hit + inp.load_tok.sum(axis=1)
    return StageRun(
        role=stage.role,
        spec=stage,
        rows=rows,
        arrival_s=arrival,
        replica=full["replica"],
        admit_s=full["admit"],
        ready_s=full["ready"],
        first_s=full["first"],
        done_s=full["done"],
        preemptions=full["preempt"],
        recomputed_tokens=full["recomputed"],
        loaded_tokens=full["loaded"],
        hit_tokens=np.minimum(hit, inp.input_tok),
        tier_hit_tokens=tier_hits,
        prefill_gpu_s=full["pf_gpu"],
        decode_gpu_s=full["dec_gpu"],
        resources=tuple(resources),
        read_bytes=read,
        read_ios=read_ios,
        write_bytes=write,
        read_demand_bytes=read_demand,
        write_demand_bytes=write_demand,
        waiting=waiting,
        running=running,
        busy_s=busy,
        occupied_s=occupied,
        counters=counts,
        step_log=_merge_logs(logs) if step_log else None,
    )


def _merge_logs(logs: list[np.ndarray]) -> np.ndarray:
    """The groups' step events as one array, by start time (then replica)."""
    from kvadvisor.fleet import kernel

    both = np.concatenate(logs) if logs else np.zeros((0, kernel.N_LOG))
    order = np.lexsort((both[:, kernel.L_REPLICA], both[:, kernel.L_START]))
    return both[order]


def run_replay(
    ctx: ReplayContext | TraceArrays,
    dep: Deployment,
    options: ReplayOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> ReplayRun:
    """Replay the trace through the deployment (pure: arrays in, arrays out)."""
    options = options or ReplayOptions()
    if isinstance(ctx, TraceArrays):
        ctx = ReplayContext(ctx)
    arrays = ctx.arrays
    n = arrays.requests
    span = float(arrays.arrival_s[-1]) if n else 0.0
    drain = options.drain_cap_s if options.drain_cap_s is not None else max(MIN_DRAIN_S, span)
    stop = span + drain
    rows_total = sum(s.replicas * (len(s.tiers) + 2) + s.instances for s in dep.stages)
    window = _choose_window(options, stop, rows_total)
    workers = options.workers or os.cpu_count() or 1
    notes: list[str] = []
    if window > options.window_s:
        notes.append(
            f"the demand window was widened from {format_value(options.window_s, Unit.SECONDS)} "
            f"to {format_value(window, Unit.SECONDS)} to keep the time series within memory"
        )
    if arrays.clamped:
        notes.append(
            f"{arrays.clamped} requests with 0 prompt or output tokens were replayed as 1 "
            "(every request prefills and produces at least one token)"
        )
    for stage in dep.stages:
        pooled = [t.name for t in stage.tiers if t.scope is Scope.POOLED]
        if pooled and stage.replicas > MAX_POOLED_REPLICAS:
            raise ConfigError(
                f"{stage.role.value}: {format_value(stage.replicas, Unit.COUNT)} replicas share "
                f"the pooled tier '{pooled[0]}'; the replay runs at most "
                f"{format_value(MAX_POOLED_REPLICAS, Unit.COUNT)} replicas on one pooled tier "
                "(its cost grows with their square): replay a slice of the fleet (fewer "
                "instances, traffic.scale below 1) with the same load per replica"
            )
    rows = np.arange(n, dtype=np.int64)
    runs: list[StageRun] = []
    first = dep.stages[0]
    if progress:
        progress(f"replaying {first.role.value}")
    runs.append(
        run_stage(ctx, dep, first, rows, arrays.arrival_s, window, stop, workers, options.step_log)
    )
    if dep.topology is Topology.DISAGGREGATED:
        pre = runs[0]
        ok = np.isfinite(pre.first_s)
        order = np.argsort(pre.first_s[ok], kind="stable")
        d_rows = pre.rows[ok][order]
        d_arrival = pre.first_s[ok][order]
        if progress:
            progress("replaying decode")
        runs.append(
            run_stage(
                ctx, dep, dep.stages[1], d_rows, d_arrival, window, stop, workers, options.step_log
            )
        )
    end = max((r.counters.get("end_s", 0.0) for r in runs), default=0.0)
    return ReplayRun(
        deployment=dep,
        arrays=arrays,
        stages=tuple(runs),
        window_s=window,
        drain_cap_s=drain,
        stop_s=stop,
        end_s=end,
        notes=tuple(notes),
    )
