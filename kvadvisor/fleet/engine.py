"""Run a resolved plan over a trace: route, read the tier hits, split into groups, run the loop.

The order of work for one stage (docs/replay.md, "How a replay runs"):

1. Route. Round robin is fixed by arrival order. Least outstanding and prefix-aware routing
   look at live load, so a first pass replays the whole stage as one group with the router
   choosing at each arrival (prefix hits as the router believes them), and keeps only its
   choices.
2. Read each request's hits per tier off exact LRU passes of each replica's, instance's or
   pool's stream (:mod:`kvadvisor.fleet.hits`): GPU pool first, then the tiers fastest first.
3. Split the replicas into groups that share nothing (a pooled tier or an instance's tier or
   NIC joins replicas) and replay the groups independently (threads here, or tasks on a
   Dask cluster's workers: :mod:`kvadvisor.fleet.fanout`).

Disaggregated deployments run the prefill stage, then the decode stage with each request
arriving when its prefill produced the first token.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from kvadvisor.errors import ConfigError
from kvadvisor.fleet.hits import ReplayContext, TraceArrays, gather_blocks
from kvadvisor.fleet.resolved import (
    LoadMode,
    Preemption,
    PrefetchPolicy,
    ResolvedFleet,
    ResolvedLink,
    ResolvedStage,
    RouterPolicy,
    Scope,
    Stage,
    Topology,
    WritePolicy,
)
from kvadvisor.units import Unit, format_value

if TYPE_CHECKING:
    from kvadvisor.fleet.fanout import Tasks

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
    # Replay in independent time slices of this length (None: whole), each after a warm-up of
    # the requests of the slice_warmup_s before it, replayed but not counted (fleet.slices).
    slice_s: float | None = None
    slice_warmup_s: float = 0.0

    def __post_init__(self) -> None:
        """Positive window, drain cap and slice; a warm-up only with slices."""
        if not self.window_s > 0:
            raise ConfigError(f"replay window must be > 0 s, got {self.window_s}")
        if self.drain_cap_s is not None and not self.drain_cap_s >= 0:
            raise ConfigError(f"replay drain cap must be >= 0 s, got {self.drain_cap_s}")
        if self.slice_s is not None and not (self.slice_s > 0 and math.isfinite(self.slice_s)):
            raise ConfigError(f"replay time slice must be > 0 s, got {self.slice_s}")
        if not (self.slice_warmup_s >= 0 and math.isfinite(self.slice_warmup_s)):
            raise ConfigError(f"replay slice warm-up must be >= 0 s, got {self.slice_warmup_s}")
        if self.slice_warmup_s and self.slice_s is None:
            raise ConfigError("a slice warm-up needs time slices (give the slice length too)")


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
    spec: ResolvedStage
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

    deployment: ResolvedFleet  # the plan as resolved (fleet-private: read, never built, outside)
    arrays: TraceArrays
    stages: tuple[StageRun, ...]
    window_s: float
    drain_cap_s: float
    stop_s: float
    end_s: float
    notes: tuple[str, ...] = ()
    # which defaults the plan's resolution took (fromplan.resolve_plan), kept apart from
    # ``notes`` because callers place them ahead of a note of their own (traffic.scale)
    plan_notes: tuple[str, ...] = ()


def _choose_window(options: ReplayOptions, stop_s: float, rows: int) -> float:
    """The demand window: as asked, widened so the series stay within the memory bound."""
    need = (stop_s + 1.0) / max(MAX_SERIES_CELLS / max(rows, 1), 1.0)
    return max(options.window_s, need, (stop_s + 1.0) / MAX_WINDOWS)


def _resources(
    stage: ResolvedStage, kv_bpt: float, link: ResolvedLink | None
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


def _settings(
    stage: ResolvedStage,
    dep: ResolvedFleet,
    route_policy: int,
    block_tokens: int,
    window_s: float,
    stop_s: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The loop's integer and float settings (``kernel.CI_*`` and ``kernel.CF_*``)."""
    from kvadvisor.fleet import kernel as k

    step, kv, sch = stage.step, stage.kv or dep.kv, stage.scheduler
    ci = np.zeros(k.N_CI, np.int64)
    ci[[k.CI_ROUTE, k.CI_ROLE, k.CI_PAGE, k.CI_MAX_TOKENS, k.CI_MAX_SEQS]] = (
        route_policy,
        ROLE_CODE[stage.role],
        sch.page_tokens,
        sch.max_batched_tokens,
        sch.max_seqs,
    )
    ci[[k.CI_SWAP, k.CI_MIN_LOAD, k.CI_LOAD_MODE, k.CI_PREFETCH, k.CI_WRITE_BACK]] = (
        sch.preemption is Preemption.SWAP,
        stage.min_load_tokens,
        0 if stage.load_mode is LoadMode.ASYNC else 1,
        PREFETCH_CODE[stage.prefetch_policy],
        stage.write_policy is WritePolicy.WRITE_BACK,
    )
    ci[[k.CI_WIN_TOKENS, k.CI_BLK_TOKENS, k.CI_SCHEDULER]] = (
        step.window_tokens,
        block_tokens,
        k.SCHED_VLLM,
    )
    cf = np.zeros(k.N_CF)
    cf[k.CF_ROUTE_WEIGHT] = stage.router_weight
    cf[k.CF_PREFETCH_BASE_S] = stage.prefetch_timeout_base_s
    cf[k.CF_PREFETCH_PER_TOKEN_S] = float(stage.prefetch_timeout_per_ki_token_s) / 1024.0
    cf[[k.CF_KV_BPT, k.CF_GPU_BPT, k.CF_OFFLOAD_IOS]] = (
        kv.bytes_per_token,
        kv.gpu_bytes_per_token,
        kv.layers,
    )
    cf[[k.CF_S_PER_PAIR, k.CF_S_PER_KV, k.CF_PF_FIXED, k.CF_DEC_FIXED]] = (
        step.s_per_pair,
        step.decode_s_per_kv_byte,
        step.prefill_attention_fixed_s,
        step.decode_attention_fixed_s,
    )
    cf[[k.CF_FULL_LAYERS, k.CF_WIN_LAYERS, k.CF_RANK_FULL, k.CF_RANK_WIN]] = (
        step.full_attention_layers,
        step.sliding_window_layers,
        kv.rank_full_bytes_per_token,
        kv.rank_window_bytes_per_token,
    )
    cf[[k.CF_WINDOW_S, k.CF_T_STOP]] = (window_s, stop_s)
    return ci, cf


@dataclass(frozen=True, eq=False)
class _GroupMaps:
    """A group's replicas: their pages and the resources each uses.

    ``res_*`` index ``resources`` (-1: none): per replica and tier the unit it reads that tier
    from, the link it receives over, the host link it swaps over, the tier it offloads to.
    """

    pool_pages: np.ndarray
    offload_pages: np.ndarray
    res_tier: np.ndarray
    res_link: np.ndarray
    res_swap: np.ndarray
    res_offload: np.ndarray
    resources: list[Resource]

    @property
    def replicas(self) -> int:
        return int(self.pool_pages.shape[0])

    def heap_bases(self, route: np.ndarray, routed: bool) -> np.ndarray:
        """Each resource's first flow-heap slot, and the end.

        Room for every request that can use it (all of them when the router decides at
        arrival: ``routed`` False).
        """
        counts = np.zeros(len(self.resources), np.int64)
        for s in range(counts.size):
            users = np.zeros(self.replicas, bool)
            for mp in (self.res_tier, self.res_link.reshape(-1, 1), self.res_swap.reshape(-1, 1)):
                users |= (mp.reshape(self.replicas, -1) == s).any(axis=1)
            counts[s] = (
                route.size if not routed else int(np.isin(route, np.flatnonzero(users)).sum())
            )
        return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)

    def resource_rows(self, route: np.ndarray, routed: bool) -> tuple[np.ndarray, np.ndarray]:
        """The resources' input rows of ``rs`` and ``rsi`` (``kernel.RS_*``, ``RSI_*``)."""
        from kvadvisor.fleet import kernel as k

        rs = np.zeros((k.N_RS, len(self.resources)))
        for s, r in enumerate(self.resources):
            rs[: k.RS_INPUTS, s] = (
                r.read_bytes_per_s,
                r.latency_s,
                r.io_bytes,
                r.iops,
                r.write_bytes_per_s,
                r.buffer_bytes,
                1.0 if r.drop else 0.0,
            )
        rsi = np.zeros((k.N_RSI, len(self.resources) + 1), np.int64)
        rsi[k.RSI_BASE] = self.heap_bases(route, routed)
        return rs, rsi


def _request_rows(
    stage: ResolvedStage, inp: _StageInputs, local: np.ndarray, route: np.ndarray, maps: _GroupMaps
) -> tuple[np.ndarray, ...]:
    """The requests' and replicas' input rows: ``qi``, ``qf``, ``tl``, ``tw``, ``ri``, ``rf``."""
    from kvadvisor.fleet import kernel as k

    m = int(local.size)
    next_same, first_same = _chains(route, maps.replicas)
    qi = np.zeros((k.N_QI, m), np.int64)
    qi[: k.QI_INPUTS] = (
        route,
        next_same,
        inp.input_tok[local],
        inp.output_tok[local],
        inp.gpu_hit[local],
        inp.xfer_tok[local],
    )
    qf = np.zeros((k.N_QF, m))
    qf[k.QF_ARRIVAL] = inp.arrival[local]
    if stage.role is not Stage.DECODE:
        qf[k.QF_FRONTEND] = (
            stage.frontend_fixed_s + stage.frontend_per_token_s * inp.input_tok[local]
        )
    tl = np.ascontiguousarray(np.stack((inp.load_tok[local], inp.own_hit[local])), np.int64)
    tw = np.zeros((2, m, inp.done_write_tok.shape[1]))
    tw[k.TW_DONE] = inp.done_write_tok[local]
    ri = np.zeros((k.N_RI, maps.replicas), np.int64)
    ri[: k.RI_INPUTS] = (
        maps.pool_pages,
        maps.offload_pages,
        first_same,
        maps.res_link,
        maps.res_swap,
        maps.res_offload,
    )
    rf = np.zeros((k.N_RF, maps.replicas))
    return qi, qf, tl, tw, ri, rf


def _kernel_call(
    stage: ResolvedStage,
    dep: ResolvedFleet,
    inp: _StageInputs,
    local: np.ndarray,  # indices into the stage's requests
    route: np.ndarray,  # replica per local request (group numbering), or -1 (router decides)
    maps: _GroupMaps,
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

    n_res = len(maps.resources)
    n_win = int(math.ceil(stop_s / window_s)) + 2
    route = np.ascontiguousarray(route, dtype=np.int64)
    if blocks is None:
        blocks = (
            np.zeros(local.size + 1, np.int64),
            np.zeros(1, np.int32),
            1,
            np.zeros((1, 1), np.uint64),
        )
    ci, cf = _settings(stage, dep, route_policy, int(blocks[2]), window_s, stop_s)
    step = stage.step
    tables = tuple(
        np.ascontiguousarray(a, dtype=np.float64)
        for a in (step.tokens_grid, step.tokens_s, step.logits_grid, step.logits_s)
    )

    def run(rows: int) -> dict[str, np.ndarray]:
        """One pass of the compiled loop, with room for ``rows`` step events."""
        qi, qf, tl, tw, ri, rf = _request_rows(stage, inp, local, route, maps)
        rs, rsi = maps.resource_rows(route, route_policy == 0)
        ser = np.zeros(((kernel.SER_QUEUE * n_res) + 2, n_win))
        steps = np.zeros((rows, kernel.N_LOG))
        cnt = np.zeros(kernel.N_CNT, np.int64)
        fcnt = np.zeros(kernel.N_FLOAT_COUNTERS)
        n_rep, m = maps.replicas, int(local.size)
        run = np.full((n_rep, int(ci[kernel.CI_MAX_SEQS])), -1, np.int64)
        n_flows = max(int(rsi[kernel.RSI_BASE, n_res]), m * (tl.shape[2] + 2), 1)
        fl_i = np.zeros((2, n_flows), np.int64)
        fl_i[kernel.FL_POS] = -1
        # timed events: at most one step per replica, one ready and one timeout per request
        evt = np.zeros(2 * m + n_rep + 8)
        state = (qi, qf, tl, tw, ri, rf, maps.res_tier, run, ci, cf, steps, cnt, fcnt)
        io = (rs, rsi, fl_i, np.zeros((2, n_flows)), ser)
        events = (evt, np.zeros((2, evt.size), np.int64))
        kernel.simulate_group(state, io, events, tables, (blocks[0], blocks[1], blocks[3]))
        queue = kernel.SER_QUEUE * n_res
        # copies, not views: the state's other rows (about 3.4x the outputs) can go now
        per_request = {
            "replica": qi[kernel.Q_REPLICA],
            "admit": qf[kernel.QF_ADMIT],
            "ready": qf[kernel.QF_READY],
            "first": qf[kernel.QF_FIRST],
            "done": qf[kernel.QF_DONE],
            "preempt": qi[kernel.Q_PREEMPT],
            "recomputed": qi[kernel.Q_RECOMPUTED],
            "loaded": qi[kernel.Q_LOADED],
            "pf_gpu": qf[kernel.QF_PF_GPU],
            "dec_gpu": qf[kernel.QF_DEC_GPU],
        }
        return (
            {key: row.copy() for key, row in per_request.items()}
            | {
                "read": ser[:n_res],
                "read_ios": ser[n_res : 3 * n_res],  # I/Os, then the bytes asked for
                "write": ser[3 * n_res : queue],  # drained, then offered
                "waiting": ser[queue : queue + 1],
                "running": ser[queue + 1 : queue + 2],
                "busy": rf[kernel.RF_BUSY_S],
                "occupied": rf[kernel.RF_OCC_S],
                "steps": steps,
                "cnt": cnt[: kernel.N_COUNTERS],
                "fcnt": fcnt,
            }
        )

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
    stage: ResolvedStage,
    dep: ResolvedFleet,
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


def _pool_pages(stage: ResolvedStage) -> int:
    return max(stage.pool_tokens // stage.scheduler.page_tokens, 1)


def _offload_pages(stage: ResolvedStage) -> int:
    """Pages of decode-time offload space per replica (its share of the offload tier)."""
    if stage.offload_tier is None:
        return 0
    tier = next(t for t in stage.tiers if t.name == stage.offload_tier)
    if tier.capacity_tokens is None:
        return 1 << 40
    share = {Scope.REPLICA: 1, Scope.INSTANCE: stage.replicas_per_instance}
    per = tier.capacity_tokens / share.get(tier.scope, stage.replicas)
    return int(per // stage.scheduler.page_tokens)


def _stage_maps(stage: ResolvedStage, dep: ResolvedFleet) -> _GroupMaps:
    """The whole stage as one group: its replicas' pages and resources."""
    resources, res_tier, res_link, res_swap, res_offload = _resources(
        stage, dep.kv.bytes_per_token, dep.link
    )
    reps = stage.replicas
    pool = np.full(reps, _pool_pages(stage), np.int64)
    offload = np.full(reps, _offload_pages(stage), np.int64)
    return _GroupMaps(pool, offload, res_tier, res_link, res_swap, res_offload, resources)


def _router_choices(
    ctx: ReplayContext,
    dep: ResolvedFleet,
    stage: ResolvedStage,
    rows: np.ndarray,
    arrival: np.ndarray,
    maps: _GroupMaps,
    window_s: float,
    stop_s: float,
) -> np.ndarray:
    """Pass 1 of a load-aware router: each request's replica.

    The whole stage replays as one group without its tiers, the router deciding at each
    arrival (with its own view of cached blocks).
    """
    reps, m = stage.replicas, rows.size
    first = _stage_inputs(ctx, stage, dep, rows, arrival, None)
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
    keep = [r for r in maps.resources if r.kind != "tier"]
    remap = {id(r): i for i, r in enumerate(keep)}

    def kept(mp: np.ndarray) -> np.ndarray:
        return np.array([remap[id(maps.resources[s])] if s >= 0 else -1 for s in mp], np.int64)

    untiered = _GroupMaps(
        maps.pool_pages,
        maps.offload_pages * 0,
        np.full((reps, 0), -1, np.int64),
        kept(maps.res_link),
        kept(maps.res_swap),
        np.full(reps, -1, np.int64),
        keep,
    )
    policy = ROUTE_CODE[stage.router]
    blocks = _block_view(ctx.arrays, rows, reps) if policy == 2 else None
    route = np.full(m, -1, np.int64)
    out = _kernel_call(
        stage, dep, first, np.arange(m), route, untiered, window_s, stop_s, policy, blocks
    )
    assign = out["replica"]
    unrouted = assign < 0
    if unrouted.any():  # arrivals past the drain cap: spread them as round robin would
        assign[unrouted] = np.arange(int(unrouted.sum())) % reps
    return assign


def _run_group(
    stage: ResolvedStage,
    dep: ResolvedFleet,
    inp: _StageInputs,
    assign: np.ndarray,
    reps_g: np.ndarray,
    maps: _GroupMaps,
    window_s: float,
    stop_s: float,
    step_log: bool,
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Replay the replicas ``reps_g``: their requests, resources used, and the loop's arrays.

    Replicas in the arrays are in the stage's numbering.
    """
    from kvadvisor.fleet import kernel  # numba only when a replay runs

    local = np.flatnonzero(np.isin(assign, reps_g))
    new_index = np.full(maps.replicas, -1, np.int64)
    new_index[reps_g] = np.arange(reps_g.size)
    mps = (maps.res_tier, maps.res_link, maps.res_swap)
    used = sorted({int(s) for mp in mps for s in mp[reps_g].ravel() if s >= 0})
    res_index = np.full(len(maps.resources) + 1, -1, np.int64)
    res_index[used] = np.arange(len(used))

    def local_map(mp: np.ndarray) -> np.ndarray:
        return np.where(mp[reps_g] >= 0, res_index[mp[reps_g]], -1).astype(np.int64)

    group = _GroupMaps(
        maps.pool_pages[reps_g],
        maps.offload_pages[reps_g],
        local_map(maps.res_tier),
        local_map(maps.res_link),
        local_map(maps.res_swap),
        local_map(maps.res_offload),
        [maps.resources[s] for s in used],
    )
    log_rows = (8 * local.size + 1024) if step_log else 0
    route = new_index[assign[local]]
    out = _kernel_call(stage, dep, inp, local, route, group, window_s, stop_s, log_rows=log_rows)
    if step_log:
        out["steps"][:, kernel.L_REPLICA] = reps_g[out["steps"][:, kernel.L_REPLICA].astype(int)]
    out["replica"] = np.where(out["replica"] >= 0, reps_g[np.maximum(out["replica"], 0)], -1)
    return local, np.asarray(used, np.int64), out


PER_REQUEST = (
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
)


def _counter_names() -> tuple[dict[int, str], dict[int, str]]:
    """The loop's counters (``kernel.C_*``, ``kernel.F_*``) by their names in a StageRun."""
    from kvadvisor.fleet import kernel

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
    return cnames, fnames


def _merge_groups(
    results: list[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]],
    groups: list[np.ndarray],
    m: int,
    maps: _GroupMaps,
    n_win: int,
) -> dict[str, np.ndarray]:
    """The groups' arrays as the stage's: per request, per resource, per replica, counters."""
    from kvadvisor.fleet import kernel

    full: dict[str, np.ndarray] = {key: np.zeros(m, dtype) for key, dtype in PER_REQUEST}
    for key in ("read", "read_ios", "write", "read_demand", "write_demand"):
        full[key] = np.zeros((len(maps.resources), n_win))
    for key in ("waiting", "running"):
        full[key] = np.zeros(n_win)
    for key in ("busy", "occupied"):
        full[key] = np.zeros(maps.replicas)
    full["cnt"] = np.zeros(len(results[0][2]["cnt"]) if results else 0, np.int64)
    full["fcnt"] = np.zeros(len(results[0][2]["fcnt"]) if results else 0)
    for (local, used, out), reps_g in zip(results, groups, strict=True):
        for key, _ in PER_REQUEST:
            full[key][local] = out[key]
        k = used.size
        full["read"][used] = out["read"]
        full["read_ios"][used] = out["read_ios"][:k]
        full["read_demand"][used] = out["read_ios"][k:]
        full["write"][used] = out["write"][:k]
        full["write_demand"][used] = out["write"][k:]
        full["waiting"] += out["waiting"][0]
        full["running"] += out["running"][0]
        full["busy"][reps_g] = out["busy"]
        full["occupied"][reps_g] = out["occupied"]
        full["cnt"] += out["cnt"]
        fcnt = full["fcnt"]
        end = max(fcnt[kernel.F_END_S], out["fcnt"][kernel.F_END_S])
        fcnt += out["fcnt"]
        fcnt[kernel.F_END_S] = end
    return full


def run_stage(
    ctx: ReplayContext,
    dep: ResolvedFleet,
    stage: ResolvedStage,
    rows: np.ndarray,
    arrival: np.ndarray,
    window_s: float,
    stop_s: float,
    workers: int,
    step_log: bool = False,
    executor: Tasks | None = None,
) -> StageRun:
    """Route, read hits, and replay every group of one stage (see the module docstring).

    ``executor``: a parallel one (Dask's) replays the groups as its tasks (``fleet.fanout``).
    """
    reps = stage.replicas
    m = rows.size
    maps = _stage_maps(stage, dep)
    if stage.router is RouterPolicy.ROUND_ROBIN or reps == 1:
        assign = np.arange(m, dtype=np.int64) % reps
    else:
        assign = _router_choices(ctx, dep, stage, rows, arrival, maps, window_s, stop_s)
    inp = _stage_inputs(ctx, stage, dep, rows, arrival, assign)
    # A group no request reaches replays to zeros, which the arrays below start as: only the
    # groups with requests run (at least one, for the counters' shape), so a stage's cost
    # follows its requests, not its replica count.
    reached = np.zeros(reps, bool)
    reached[assign] = True
    groups = _groups(reps, reached, maps.res_tier, maps.res_link, maps.res_swap)

    def one(reps_g: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        return _run_group(stage, dep, inp, assign, reps_g, maps, window_s, stop_s, step_log)

    if executor is not None and executor.parallel and len(groups) > 1:
        from kvadvisor.fleet.fanout import run_groups

        results = run_groups(
            executor, stage, dep, inp, assign, groups, maps, window_s, stop_s, step_log
        )
    else:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(groups)))) as ex:
            results = list(ex.map(one, groups))
    n_win = int(math.ceil(stop_s / window_s)) + 2
    full = _merge_groups(results, groups, m, maps, n_win)
    cnames, fnames = _counter_names()
    counts: dict[str, float] = {name: float(full["cnt"][i]) for i, name in cnames.items()}
    counts.update({name: float(full["fcnt"][i]) for i, name in fnames.items()})
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
        tier_hit_tokens=np.ascontiguousarray(inp.load_tok.T),
        prefill_gpu_s=full["pf_gpu"],
        decode_gpu_s=full["dec_gpu"],
        resources=tuple(maps.resources),
        read_bytes=full["read"],
        read_ios=full["read_ios"],
        write_bytes=full["write"],
        read_demand_bytes=full["read_demand"],
        write_demand_bytes=full["write_demand"],
        waiting=full["waiting"],
        running=full["running"],
        busy_s=full["busy"],
        occupied_s=full["occupied"],
        counters=counts,
        step_log=_merge_logs([r[2]["steps"] for r in results]) if step_log else None,
    )


def _merge_logs(logs: list[np.ndarray]) -> np.ndarray:
    """The groups' step events as one array, by start time (then replica)."""
    from kvadvisor.fleet import kernel

    both = np.concatenate(logs) if logs else np.zeros((0, kernel.N_LOG))
    order = np.lexsort((both[:, kernel.L_REPLICA], both[:, kernel.L_START]))
    return both[order]


def run_resolved(
    ctx: ReplayContext | TraceArrays,
    dep: ResolvedFleet,
    options: ReplayOptions | None = None,
    progress: Callable[[str], None] | None = None,
    executor: Tasks | None = None,
) -> ReplayRun:
    """Replay the trace through a resolved plan (pure: arrays in, arrays out).

    The public entry takes the Plan (:func:`kvadvisor.fleet.entry.run_replay`); this one takes
    what :func:`kvadvisor.fleet.fromplan.resolve_plan` made of it, or a test's toy stages.
    ``executor``: where the replica groups (or, with ``options.slice_s``, the time slices)
    run; None or a serial one: here, on threads.
    """
    options = options or ReplayOptions()
    if isinstance(ctx, TraceArrays):
        ctx = ReplayContext(ctx)
    if options.slice_s is not None:
        from kvadvisor.fleet.slices import run_sliced

        return run_sliced(ctx, dep, options, progress, executor)
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
        run_stage(
            ctx,
            dep,
            first,
            rows,
            arrays.arrival_s,
            window,
            stop,
            workers,
            options.step_log,
            executor,
        )
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
                ctx,
                dep,
                dep.stages[1],
                d_rows,
                d_arrival,
                window,
                stop,
                workers,
                options.step_log,
                executor,
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
