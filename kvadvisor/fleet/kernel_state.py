"""The replay loop's named state: codes, column numbers and the records its phases share.

The compiled loop (``fleet.kernel``) reads and writes nothing but these records. Each is a
``namedtuple`` of numpy arrays and scalars: numba passes them by name to every compiled
function and keeps ``cache=True`` working (a jitclass cannot be cached, and a structref's cache
is fragile). The inputs (:class:`Requests`, :class:`Replicas`, :class:`Config`,
:class:`StepModel`, :class:`Resources`) and the :class:`Outputs` are built by the caller
(``fleet.engine``); the loop's own state is allocated by :func:`new_group`, once per group, so
memory use stays explicit: per request a fixed number of slots, per resource a heap of at most
the requests that can use it.

Scalars the loop changes (heap size, requests waiting, running, done, the next arrival, the
round-robin position) live in the int64 array ``tally``, indexed by the ``T_*`` constants: a
record's fields cannot be assigned, its arrays' elements can.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

# Request states.
S_WAIT = 0
S_LOAD = 1
S_PREFILL = 2
S_DECODE = 3
S_DONE = 4

# What the group's replicas do.
ROLE_SERVING = 0  # aggregated: load, prefill, decode
ROLE_PREFILL = 1  # disaggregated prefill: load, prefill; the request leaves with its first token
ROLE_DECODE = 2  # disaggregated decode: receive the prompt's KV over the link, decode

# Router policies applied at arrival (ROUTE_FIXED: the caller routed already).
ROUTE_FIXED = 0
ROUTE_LEAST = 1
ROUTE_KV = 2

# Scheduler policies (``kernel_step.schedule_step`` dispatches on this code).
SCHED_VLLM = 0  # vLLM v1: running first, then waiting first come first served, LIFO preemption

# When prefix-hit loads start and what a request does while they run.
LOAD_ASYNC = 0  # at admission, holding its pages; prefill after (vLLM KV connectors)
LOAD_PREFETCH = 1  # at arrival, into host memory while the request waits (HiCache L3 prefetch)
PREFETCH_WAIT = 0  # wait_complete: not admitted before its prefetch is done
PREFETCH_BEST = 1  # best_effort: admitted with what has arrived; the rest is recomputed
PREFETCH_TIMEOUT = 2  # timeout: waits up to its deadline, then as best_effort

# Timed events.
EV_STEP = 0
EV_READY = 1
EV_TIMEOUT = 2

# Integer counters.
C_PREEMPTIONS = 0
C_RECOMPUTED_LOADS = 1
C_BLOCKED_WRITES = 2
C_DROPPED_WRITES = 3
C_STEPS = 4
C_SWAPS = 5
C_UNFINISHED = 6
C_LOG_ROWS = 7  # step events the step log needed (rows past its capacity are not written)
N_COUNTERS = 8
# Float counters.
F_RECOMPUTED_TOKENS = 0  # hit tokens recomputed instead of loaded
F_DROPPED_BYTES = 1
F_SWAP_BYTES = 2
F_PREEMPT_TOKENS = 3  # tokens recomputed after a preemption
F_END_S = 4  # time of the last event processed
N_FLOAT_COUNTERS = 5
# Step-log columns: one row per step event of a replica (a decode fast-forward of k steps is
# one event; ``fleet.steps`` expands it into its k steps, each with its own time).
L_REPLICA = 0  # the replica, in the group's numbering (the engine maps it to the stage's)
L_START = 1  # when the event's first step starts, s
L_FIRST_S = 2  # the first step's time: compute, offload reads, swaps, front-end work, s
L_SLOPE_S = 3  # each later step of a fast-forward takes this much longer than the one before
L_STEPS = 4  # steps in the event (k)
L_TOTAL_S = 5  # the event's time, all k steps, s
L_PREFILL_TOKENS = 6
L_DECODE_SEQS = 7
L_KV_TOKENS = 8  # context tokens the running requests hold after the first step
L_LOADS = 9  # requests of the replica whose KV is still arriving (loads, prefetches, swaps)
L_WRITE_BYTES = 10  # bytes waiting in the write buffers of the replica's tiers at its start
L_PREEMPTIONS = 11
L_FRONTEND_S = 12  # front-end work of the requests it admitted, inside L_FIRST_S
N_LOG = 13

# Scalars the loop changes, in ``tally``.
T_EVENTS = 0  # timed events in the heap
T_WAITING = 1
T_RUNNING = 2
T_DONE = 3
T_NEXT = 4  # the next arrival
T_RR = 5  # where the dynamic routers start their scan (ties go round robin)
N_TALLY = 6

INF = np.inf

# ---- inputs, built by the caller -------------------------------------------------------------
# Requests in group order (by arrival at the group). Fixed routing: ``route`` per request,
# ``next_same`` the next one routed to the same replica, ``first_same`` per replica its first
# (-1: none). ``frontend_s``: the engine's front-end work, in the step that admits it. The
# ``blk_*`` arrays are read by ROUTE_KV (``blk_masks`` holds the router's view and changes).
Requests = namedtuple(
    "Requests",
    "arrival route next_same first_same input_tok output_tok gpu_hit load_tok own_hit "
    "xfer_tok done_write_tok frontend_s blk_offsets blk_ids blk_masks",
)
# Per replica: its GPU pool and offload pages, the resource of each tier, link, swap, offload.
Replicas = namedtuple("Replicas", "pool_pages offload_pages res_tier res_link res_swap res_offload")
# Scalars: the role, the router, the scheduler and its policy, the engine's load and write
# behaviour, bytes per token, the demand window and when to stop.
Config = namedtuple(
    "Config",
    "role route_policy route_weight blk_tokens scheduler page_tokens max_tokens max_seqs "
    "preempt_swap min_load_tokens load_mode prefetch_policy prefetch_base_s "
    "prefetch_per_token_s write_back kv_bytes_per_token gpu_bytes_per_token "
    "offload_ios_per_page window_s t_stop",
)
# The step-time table (``perfmodel.step.StepTable``) and the KV layout of one rank.
StepModel = namedtuple(
    "StepModel",
    "grid tokens_s s_per_pair s_per_kv logits_grid logits_s pf_fixed dec_fixed full_layers "
    "window_layers window_tokens rank_full_bpt rank_win_bpt",
)
# Per resource (a tier unit, a NIC, a host link): reads, writes, and its heap's first slot.
Resources = namedtuple("Resources", "rd_bw rd_lat rd_io_bytes rd_iops wr_bw wb_cap wb_drop ps_base")
# What the loop fills (the engine's names for them).
Outputs = namedtuple(
    "Outputs",
    "replica admit ready first done preempt recomputed loaded pf_gpu dec_gpu read read_ios "
    "write waiting running busy occupied steps cnt fcnt",
)

# ---- the loop's own state ----------------------------------------------------------------------
# Per request. ``wmark``: prompt positions already written to the tiers; ``resume``: what a
# request in S_LOAD does once its flows are in; ``fresh``: never admitted (its prefix hits
# still apply); ``wnext``: the waiting list's links; ``wpend``: write-back bytes held per tier.
ReqState = namedtuple(
    "ReqState",
    "state pf_pos pf_end ctx gen held chunk wmark pending ready_at resume prefetching fresh "
    "deadline wnext wpend r_pf_tok",
)
# Per replica. ``phase2``: a step whose writes stalled, progress still to apply; ``dirty``:
# its state changed since its last step; ``rep_next``: its next arrival (fixed routing).
RepState = namedtuple(
    "RepState",
    "free run run_cnt whead wtail busy occ_since prefetch_n phase2 dirty outstanding act_pf "
    "act_dec overlap rep_next",
)
# Per resource: processor-sharing virtual time and heap, write buffers; per flow slot its
# heap position (-1: inactive) and bytes.
Flows = namedtuple("Flows", "ps_v ps_last ps_size ps_key ps_fid fpos fbytes wb_level wb_last")
# The timed-event heap: at most one step per replica, one ready and one timeout per request.
Events = namedtuple("Events", "t kind ident")
# Everything, as one argument.
Group = namedtuple("Group", "req reps cfg model res out rq rp fl ev tally")


def new_group(
    req: Requests, reps: Replicas, cfg: Config, model: StepModel, res: Resources, out: Outputs
) -> Group:
    """The loop's state for one group, allocated and set to its start."""
    n = req.arrival.shape[0]
    n_rep = reps.pool_pages.shape[0]
    n_tier = req.load_tok.shape[1]
    n_res = res.rd_bw.shape[0]
    n_slot = n_tier + 2  # flow slots per request: one per tier, the link, the swap link
    n_heap = int(res.ps_base[n_res]) if n_res > 0 else 0
    ev_cap = 2 * n + n_rep + 8
    rq = ReqState(
        *(np.zeros(n, np.int64) for _ in range(9)),  # state .. pending
        np.zeros(n, np.float64),  # ready_at
        np.zeros(n, np.int64),  # resume
        np.zeros(n, np.bool_),  # prefetching
        np.ones(n, np.bool_),  # fresh
        np.full(n, INF),  # deadline
        np.full(n, -1, np.int64),  # wnext
        np.zeros((n, n_tier), np.float64),  # wpend
        np.zeros(n, np.float64),  # r_pf_tok
    )
    rp = RepState(
        reps.pool_pages + reps.offload_pages,
        np.full((n_rep, cfg.max_seqs), -1, np.int64),
        np.zeros(n_rep, np.int64),
        np.full(n_rep, -1, np.int64),
        np.full(n_rep, -1, np.int64),
        np.zeros(n_rep, np.bool_),
        np.full(n_rep, -1.0),
        np.zeros(n_rep, np.int64),
        np.zeros(n_rep, np.bool_),
        np.zeros(n_rep, np.bool_),
        np.zeros(n_rep, np.float64),
        np.zeros(n_rep, np.float64),
        np.zeros(n_rep, np.float64),
        np.zeros(n_rep, np.int64),
        req.first_same.copy(),
    )
    fl = Flows(
        np.zeros(n_res, np.float64),
        np.zeros(n_res, np.float64),
        np.zeros(n_res, np.int64),
        np.zeros(max(n_heap, 1), np.float64),
        np.zeros(max(n_heap, 1), np.int64),
        np.full(n * n_slot, -1, np.int64),
        np.zeros(n * n_slot, np.float64),
        np.zeros(n_res, np.float64),
        np.zeros(n_res, np.float64),
    )
    ev = Events(
        np.zeros(ev_cap, np.float64), np.zeros(ev_cap, np.int64), np.zeros(ev_cap, np.int64)
    )
    out.replica[:] = req.route
    for field in (out.admit, out.ready, out.first, out.done):
        field[:] = np.nan
    tally = np.zeros(N_TALLY, np.int64)
    return Group(req, reps, cfg, model, res, out, rq, rp, fl, ev, tally)
