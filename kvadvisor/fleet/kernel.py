"""The replay's compiled event loop: one group of replicas replayed over arrays (numba).

This module imports numba at import time; ``kvadvisor.fleet`` imports it only inside the
function that runs a replay, so building a deployment or rendering a report never pays for it.
Everything the loop touches is an array allocated by the caller (``engine.py``), so memory use
is explicit: per request a fixed number of slots, per resource a heap of at most the requests
that can use it, per window a few sums.

A group is a set of replicas that share something (an instance's tier or NIC, a pooled tier, a
router that looks at live load); groups are independent and may run concurrently. The rules
(docs/replay.md states each with its formula and source):

* Continuous batching (vLLM v1 ``Scheduler.schedule``): each step first serves the running
  requests in admission order (a decode token each, a prefill chunk of at most the budget
  left), preempting the most recently admitted request when pages run out; then admits waiting
  requests first come, first served while the token budget, the sequence cap and free pages
  allow; a preemption in a step stops admissions in it.
* Step time from the step-time table (``perfmodel.step.StepTable.step_s``, mirrored by
  :func:`step_time`): token part on a grid, the LM head for the step's sequences, the
  attention floors, attention pairs of the prefill chunks, decode KV
  bytes per rank.
* Loads and transfers share a resource's bandwidth equally among the flows in flight (processor
  sharing, tracked with virtual time as in fair queueing), then pay the resource's latency.
* Writes go through a buffer drained at the write bandwidth; a full buffer stalls the step that
  wrote (block) or loses the excess (drop).

The loop's shape: the state is a few 2-D arrays with named rows (below), and
:func:`simulate_group` is the event loop alone. Each event goes to one phase: an arrival to
routing (:func:`route_request`) and queueing (``_arrive``, which starts a prefetch), a flow's
completion to ``_flow_done``, a request's KV arriving to ``_on_ready``, a step's end to
``_step_end`` (the tier writes of its prefill chunks, then ``_progress``). Every request
finishes in ``_finish``. An idle replica whose state changed starts a step (:func:`start_step`):
the scheduler policy (:func:`schedule_step`, chosen by ``ci[CI_SCHEDULER]``) fills it, then its
time, the decode fast-forward, each request's share and the step log. Tier I/O (loads,
prefetch, write-through and write-back, decode-time offload reads) is the processor-sharing and
write-buffer primitives under them.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba.core import cgutils
from numba.core.extending import intrinsic

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


# ---- the group's named state -----------------------------------------------------------------
# Each family of values lives in one 2-D array whose rows are named here, so a phase takes the
# few families it touches (numba passes an array as one pointer and a few sizes; a tuple of
# arrays would be unpacked member by member at every call). The engine allocates the arrays
# and fills the input rows; the loop fills the rest. Beside them: ``rt`` (replicas x tiers), the
# resource each replica reads a tier from (-1: none); ``run`` (replicas x max sequences), each
# replica's running requests in admission order; and ``io = (rs, rsi, fl_i, fl_f, ser)``, the
# resources' state, the one small tuple the phases pass on (five arrays).

# ``qi``: per request (columns in group order: by arrival at the group), integers.
Q_ROUTE = 0  # input: the replica the caller routed it to, -1 when the router decides
Q_NEXT_SAME = 1  # input: the next request routed to the same replica (fixed routing), -1: none
Q_INPUT = 2  # input: prompt tokens
Q_OUTPUT = 3  # input: tokens to generate
Q_GPU_HIT = 4  # input: prompt tokens in the GPU prefix cache (the KV router writes its own)
Q_XFER = 5  # input: prompt tokens whose KV arrives over the link (disaggregated decode)
Q_STATE = 6  # S_*
Q_PF_POS = 7  # prompt position prefill has reached
Q_PF_END = 8
Q_CTX = 9  # context tokens whose KV is in GPU memory
Q_GEN = 10  # tokens generated
Q_HELD = 11  # pages held
Q_CHUNK = 12  # tokens in the running step (prefill chunk, or decode steps taken at once)
Q_WMARK = 13  # prompt positions already written to the tiers
Q_PENDING = 14  # flows in flight
Q_RESUME = 15  # what a request in S_LOAD does once its flows are in
Q_PREFETCHING = 16  # 1 while its prefetch runs as it waits
Q_FRESH = 17  # 1 until admitted: its prefix hits still apply
Q_WNEXT = 18  # the next request in its replica's waiting list, -1 at the end
Q_REPLICA = 19  # output: the replica that served it
Q_PREEMPT = 20  # output: times preempted
Q_RECOMPUTED = 21  # output: hit tokens recomputed instead of loaded
Q_LOADED = 22  # output: hit tokens loaded from the tiers
N_QI = 23
QI_INPUTS = 6  # rows the engine fills

# ``qf``: per request, floats.
QF_ARRIVAL = 0  # input, s
QF_FRONTEND = 1  # input: the engine's front-end work, in the step that admits it, s
QF_READY_AT = 2  # when its flows are in, latency included
QF_DEADLINE = 3  # its prefetch timeout
QF_PF_LEFT = 4  # prompt tokens it adds to its replica's prefill to compute (the KV router)
QF_ADMIT = 5  # outputs from here, s (NaN: never)
QF_READY = 6
QF_FIRST = 7
QF_DONE = 8
QF_PF_GPU = 9  # its share of prefill steps' time, s
QF_DEC_GPU = 10  # its share of decode steps' time, s
N_QF = 11
QF_INPUTS = 2

# ``tl`` (integers) and ``tw`` (floats): per request and tier, shape (2, requests, tiers).
TL_LOAD = 0  # input: hit tokens loaded from the tier (beyond the faster ones)
TL_OWN = 1  # input: prompt tokens the tier holds
TW_DONE = 0  # input: tokens written to the tier when the request finishes (decode KV kept)
TW_PENDING = 1  # bytes held back by write-back until the request finishes

# ``ri``: per replica, integers.
R_POOL = 0  # input: GPU pages
R_OFFLOAD_PAGES = 1  # input: pages of decode-time offload space
R_FIRST_SAME = 2  # input: its first request (fixed routing), -1 when none
R_LINK = 3  # input: the resource its KV arrives over (disaggregated decode), -1: none
R_SWAP = 4  # input: the resource swaps go over, -1: none
R_OFFLOAD = 5  # input: the resource decode-time offload reads, -1: none
R_FREE = 6  # pages free
R_RUN_CNT = 7
R_WHEAD = 8  # waiting list, first come first served
R_WTAIL = 9
R_BUSY = 10  # a step in flight
R_PREFETCH_N = 11  # requests prefetching while they wait
R_PHASE2 = 12  # a step whose writes stalled: progress still to apply
R_DIRTY = 13  # something changed: try to start a step
R_OVERLAP = 14  # the KV router's overlap for the request being routed
R_NEXT = 15  # the next arrival routed to it (fixed routing)
N_RI = 16
RI_INPUTS = 6

# ``rf``: per replica, floats.
RF_OCC_SINCE = 0  # start of its interval holding requests, -1: empty
RF_OUTSTANDING = 1
RF_ACT_PF = 2  # prompt tokens still to prefill (the KV router's active prefill)
RF_ACT_DEC = 3  # context tokens of its requests (the KV router's active decode blocks)
RF_BUSY_S = 4  # output: time executing steps, s
RF_OCC_S = 5  # output: time holding requests, s
N_RF = 6

# ``rs``: per resource, floats.
RS_RD_BW = 0  # input, bytes/s
RS_LAT = 1  # input, s
RS_IO_BYTES = 2  # input
RS_IOPS = 3  # input
RS_WR_BW = 4  # input, bytes/s
RS_WB_CAP = 5  # input: write buffer, bytes
RS_DROP = 6  # input: 1 when a full buffer loses the excess, 0 when it stalls the writer
RS_V = 7  # processor sharing's virtual time
RS_LAST = 8  # when RS_V was last advanced
RS_WB_LEVEL = 9
RS_WB_LAST = 10
N_RS = 11
RS_INPUTS = 7

# ``rsi``: per resource, integers (n_res + 1 columns).
RSI_BASE = 0  # input: its heap's first slot in ``fl_*`` (the last column: the end)
RSI_SIZE = 1  # flows in flight
N_RSI = 2

# ``fl_i`` / ``fl_f``: flows. Heap slots (per resource, from RSI_BASE) and flow ids
# (request * slots + slot: a slot per tier, then the link, then the swap link) share a length.
FL_FID = 0  # heap slot: its flow
FL_POS = 1  # flow: its heap slot offset, -1 when not in flight
FL_KEY = 0  # heap slot: finish tag (virtual time)
FL_BYTES = 1  # flow: bytes

# ``ser``: per window, rows in blocks of n_res (resource s of block B is row B * n_res + s),
# then the waiting and running counts.
SER_READ = 0  # bytes read
SER_IOS = 1  # read I/Os
SER_READ_DEMAND = 2  # bytes asked for, when asked
SER_WRITE = 3  # bytes drained from write buffers
SER_WRITE_DEMAND = 4  # bytes offered to write buffers
SER_QUEUE = 5  # rows 5 n_res: requests waiting; 5 n_res + 1: running

# ``ci`` and ``cf``: the group's settings.
CI_ROUTE = 0  # ROUTE_*
CI_ROLE = 1  # ROLE_*
CI_PAGE = 2  # tokens per KV page
CI_MAX_TOKENS = 3  # token budget per step
CI_MAX_SEQS = 4
CI_SWAP = 5  # 1: preemption swaps decode KV out; 0: recompute
CI_MIN_LOAD = 6  # hits below this many tokens are recomputed
CI_LOAD_MODE = 7  # LOAD_*
CI_PREFETCH = 8  # PREFETCH_*
CI_WRITE_BACK = 9  # 1: tiers written when the request leaves; 0: as prefill computes
CI_WIN_TOKENS = 10  # sliding-window length
CI_BLK_TOKENS = 11  # tokens per block of the KV router's view
CI_SCHEDULER = 12  # SCHED_*
N_CI = 13
CF_ROUTE_WEIGHT = 0
CF_PREFETCH_BASE_S = 1
CF_PREFETCH_PER_TOKEN_S = 2
CF_KV_BPT = 3  # KV bytes per token in the tiers
CF_GPU_BPT = 4  # KV bytes per token in GPU memory (swaps)
CF_OFFLOAD_IOS = 5  # I/Os per offloaded page read
CF_S_PER_PAIR = 6  # step table: s per attention pair
CF_S_PER_KV = 7  # step table: s per decode KV byte of one rank
CF_PF_FIXED = 8
CF_DEC_FIXED = 9
CF_FULL_LAYERS = 10
CF_WIN_LAYERS = 11
CF_RANK_FULL = 12  # one rank's KV bytes per token, full-attention layers
CF_RANK_WIN = 13  # the same, sliding-window layers
CF_WINDOW_S = 14  # series window, s
CF_T_STOP = 15  # no event after this time
N_CF = 16

# Loop counters, in ``cnt`` after the reported ones (N_COUNTERS).
G_EVENTS = N_COUNTERS  # timed events in the heap
G_WAITING = N_COUNTERS + 1
G_RUNNING = N_COUNTERS + 2
G_DONE = N_COUNTERS + 3
G_NEXT = N_COUNTERS + 4  # the next arrival
G_RR = N_COUNTERS + 5  # where the load-aware routers start their scan
N_CNT = N_COUNTERS + 6

# Rows of ``evi``, the timed-event heap's integers (``evt``: the times).
EVI_KIND = 0
EVI_ID = 1

# Scheduler policies (``schedule_step``).
SCHED_VLLM = 0  # vLLM v1: running first, in admission order; then FCFS admissions

# What an admission check says.
ADMIT_OK = 0
ADMIT_SKIP = 1  # leave it waiting, look at the next
ADMIT_STOP = 2  # no pages: stop admitting in this step
INF = np.inf

# The loop's phases and primitives are called only from compiled code: numba compiles no
# Python-callable wrapper (argument unboxing, the C-function entry) for them, code that each
# of them would otherwise optimise and emit for nothing (docs/benchmarks.md, kernel compile).
_inner = nb.njit(cache=True, nogil=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)


@_inner
def _interp(x, xp, fp):  # pragma: no cover - compiled
    """``np.interp(x, xp, fp)`` for one float ``x``, step for step as numpy's ``arr_interp``.

    numba's own ``np.interp`` is written for arrays of any shape: compiling it (and its search
    helper) cost 1.6 CPU-s of a cold run, for a scalar (docs/benchmarks.md, kernel compile).
    """
    n = xp.shape[0]
    if np.isnan(x):
        return x
    if x < xp[0]:
        return fp[0]
    if x >= xp[n - 1]:
        return fp[n - 1]
    lo, hi = 0, n - 1  # xp[lo] <= x < xp[hi]: the segment holding x, by bisection
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if xp[mid] <= x:
            lo = mid
        else:
            hi = mid
    if xp[lo] == x:
        return fp[lo]
    slope = (fp[lo + 1] - fp[lo]) / (xp[lo + 1] - xp[lo])
    out = slope * (x - xp[lo]) + fp[lo]
    if np.isnan(out):  # numpy then tries from the other end of the segment
        out = slope * (x - xp[lo + 1]) + fp[lo + 1]
        if np.isnan(out) and fp[lo] == fp[lo + 1]:
            out = fp[lo]
    return out


@_inner
def tokens_time(grid, tokens_s, t):  # pragma: no cover - compiled
    """``StepTable.tokens_time_s``: the grid interpolated, extrapolated linearly past its end."""
    n = grid.shape[0]
    last = grid[n - 1]
    if t > last:
        slope = (tokens_s[n - 1] - tokens_s[n - 2]) / (last - grid[n - 2])
        return tokens_s[n - 1] + slope * (t - last)
    return _interp(float(t), grid, tokens_s)


@_inner
def _window_prefix(x, w):  # pragma: no cover - compiled
    """``perfmodel.kv.window_prefix``: sum_{t=1..x} min(t, W)."""
    inside = min(x, w)
    return inside * (inside + 1.0) / 2.0 + max(x - w, 0.0) * w


@nb.njit(cache=True, nogil=True)
def attention_pairs(m, p, full_layers, window_layers, window_tokens):  # pragma: no cover
    """``StepTable.attention_pairs`` for one chunk of ``m`` tokens after ``p``."""
    pairs = full_layers * (m * p + m * (m + 1.0) / 2.0)
    if window_layers > 0 and window_tokens > 0:
        w = float(window_tokens)
        pairs += window_layers * (_window_prefix(p + m, w) - _window_prefix(p, w))
    return pairs


@_inner
def shared_time(
    grid, tokens_s, logits_grid, logits_s, pf_fixed, dec_fixed, tokens, seqs, pairs, kv
):  # pragma: no cover - compiled
    """The part of ``StepTable.step_s`` the step's requests share: tokens, head, floors."""
    out = tokens_time(grid, tokens_s, tokens) + tokens_time(logits_grid, logits_s, seqs)
    if pairs > 0.0:
        out += pf_fixed
    if kv > 0.0:
        out += dec_fixed
    return out


@nb.njit(cache=True, nogil=True)
def step_time(
    grid,
    tokens_s,
    s_per_pair,
    s_per_kv,
    logits_grid,
    logits_s,
    pf_fixed,
    dec_fixed,
    tokens,
    seqs,
    pairs,
    kv_bytes,
):  # pragma: no cover - compiled
    """``StepTable.step_s`` for one step (the test suite checks the two agree)."""
    shared = shared_time(
        grid, tokens_s, logits_grid, logits_s, pf_fixed, dec_fixed, tokens, seqs, pairs, kv_bytes
    )
    return shared + s_per_pair * pairs + s_per_kv * kv_bytes


@_inner
def _rank_kv(c, full_bpt, win_bpt, win_tokens):  # pragma: no cover - compiled
    """``KvLayout.bytes_for`` of one rank for a context of ``c`` tokens."""
    out = full_bpt * c
    if win_bpt > 0.0 and win_tokens > 0:
        out += win_bpt * min(c, float(win_tokens))
    return out


@_inner
def _rank_kv_sum(c0, k, full_bpt, win_bpt, win_tokens):  # pragma: no cover - compiled
    """Sum of ``_rank_kv(c0 + j)`` for j in 0..k-1 (``KvLayout.bytes_summed``)."""
    out = full_bpt * (k * c0 + k * (k - 1.0) / 2.0)
    if win_bpt > 0.0 and win_tokens > 0:
        w = float(win_tokens)
        hi = _window_prefix(max(c0 + k - 1.0, 0.0), w)
        lo = _window_prefix(max(c0 - 1.0, 0.0), w)
        out += win_bpt * (hi - lo)
    return out


@_inner
def _add_rate(series, row, t0, t1, rate, window_s):  # pragma: no cover - compiled
    """Spread ``rate`` (per second) over [t0, t1) into the windows of ``series[row]``."""
    if t1 <= t0 or rate == 0.0:
        return
    n_win = series.shape[1]
    w0 = int(t0 / window_s)
    w1 = int(t1 / window_s)
    if w0 >= n_win:
        w0 = n_win - 1
    if w1 >= n_win:
        w1 = n_win - 1
    if w0 == w1:
        series[row, w0] += rate * (t1 - t0)
        return
    series[row, w0] += rate * ((w0 + 1) * window_s - t0)
    for w in range(w0 + 1, w1):
        series[row, w] += rate * window_s
    series[row, w1] += rate * (t1 - w1 * window_s)


@_inner
def _add_at(series, row, t, amount, window_s):  # pragma: no cover - compiled
    """Add ``amount`` to the window holding time ``t``."""
    w = min(int(t / window_s), series.shape[1] - 1)
    series[row, w] += amount


# ---- the timed-event heap (time, kind, id); its size is cnt[G_EVENTS] ----------------------


@_inner
def _ev_swap(evt, evi, a, b):  # pragma: no cover - compiled
    evt[a], evt[b] = evt[b], evt[a]
    evi[EVI_KIND, a], evi[EVI_KIND, b] = evi[EVI_KIND, b], evi[EVI_KIND, a]
    evi[EVI_ID, a], evi[EVI_ID, b] = evi[EVI_ID, b], evi[EVI_ID, a]


@_inner
def _ev_push(evt, evi, cnt, t, kind, ident):  # pragma: no cover - compiled
    # Callers pass the kind as np.int64(EV_*): a bare constant is typed as its literal value,
    # and each kind would compile a specialisation of its own.
    i = cnt[G_EVENTS]
    evt[i] = t
    evi[EVI_KIND, i] = kind
    evi[EVI_ID, i] = ident
    while i > 0:
        parent = (i - 1) // 2
        if evt[parent] <= evt[i]:
            break
        _ev_swap(evt, evi, parent, i)
        i = parent
    cnt[G_EVENTS] += 1


@_inner
def _ev_pop(evt, evi, cnt):  # pragma: no cover - compiled
    size = cnt[G_EVENTS] - 1
    cnt[G_EVENTS] = size
    evt[0] = evt[size]
    evi[EVI_KIND, 0] = evi[EVI_KIND, size]
    evi[EVI_ID, 0] = evi[EVI_ID, size]
    i = np.int64(0)  # not the literal 0: one _ev_swap compiled, not one more for i == 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        child = left
        if left + 1 < size and evt[left + 1] < evt[left]:
            child = left + 1
        if evt[i] <= evt[child]:
            break
        _ev_swap(evt, evi, child, i)
        i = child


# ---- processor-sharing resources: one heap of finish tags per resource ----------------------
# A flow of b bytes joining resource s at virtual time V finishes when V reaches V + b, where V
# advances at bandwidth / flows-in-flight (every flow gets an equal share; Demers, Keshav and
# Shenker, SIGCOMM 1989, for the virtual-time bookkeeping). Heap slots of resource s live at
# rsi[RSI_BASE, s] .. + capacity; fl_i[FL_POS, f] is flow f's slot offset (-1 when inactive).


@_inner
def _ps_swap(fl_i, fl_f, base, a, b):  # pragma: no cover - compiled
    i, j = base + a, base + b
    fl_f[FL_KEY, i], fl_f[FL_KEY, j] = fl_f[FL_KEY, j], fl_f[FL_KEY, i]
    fl_i[FL_FID, i], fl_i[FL_FID, j] = fl_i[FL_FID, j], fl_i[FL_FID, i]
    fl_i[FL_POS, fl_i[FL_FID, i]] = a
    fl_i[FL_POS, fl_i[FL_FID, j]] = b


@_inner
def _ps_up(fl_i, fl_f, base, i):  # pragma: no cover - compiled
    while i > 0:
        parent = (i - 1) // 2
        if fl_f[FL_KEY, base + parent] <= fl_f[FL_KEY, base + i]:
            break
        _ps_swap(fl_i, fl_f, base, parent, i)
        i = parent


@_inner
def _ps_down(fl_i, fl_f, base, size, i):  # pragma: no cover - compiled
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        child = left
        if left + 1 < size and fl_f[FL_KEY, base + left + 1] < fl_f[FL_KEY, base + left]:
            child = left + 1
        if fl_f[FL_KEY, base + i] <= fl_f[FL_KEY, base + child]:
            break
        _ps_swap(fl_i, fl_f, base, i, child)
        i = child


@_inner
def _ps_advance(s, t, rs, rsi, ser, window_s):  # pragma: no cover - compiled
    """Move resource ``s`` to time ``t``: every flow in flight got bandwidth / n since."""
    n = rsi[RSI_SIZE, s]
    last = rs[RS_LAST, s]
    if n > 0 and t > last:
        rs[RS_V, s] += rs[RS_RD_BW, s] * (t - last) / n
        _add_rate(ser, SER_READ * rs.shape[1] + s, last, t, rs[RS_RD_BW, s], window_s)
    rs[RS_LAST, s] = t


@_inner
def _ps_next(s, rs, rsi, fl_f):  # pragma: no cover - compiled
    """When resource ``s`` completes its next flow (inf when idle)."""
    n = rsi[RSI_SIZE, s]
    if n == 0:
        return INF
    remaining = fl_f[FL_KEY, rsi[RSI_BASE, s]] - rs[RS_V, s]
    if remaining <= 0.0:
        return rs[RS_LAST, s]
    return rs[RS_LAST, s] + remaining * n / rs[RS_RD_BW, s]


@_inner
def _ps_remove(s, f, rsi, fl_i, fl_f):  # pragma: no cover - compiled
    """Take flow ``f`` out of resource ``s`` (completed or cancelled)."""
    base = rsi[RSI_BASE, s]
    i = fl_i[FL_POS, f]
    last = rsi[RSI_SIZE, s] - 1
    if i != last:
        _ps_swap(fl_i, fl_f, base, i, last)
    rsi[RSI_SIZE, s] = last
    fl_i[FL_POS, f] = -1
    if i < last:
        _ps_down(fl_i, fl_f, base, last, i)
        _ps_up(fl_i, fl_f, base, i)


@_inner
def _ps_push(s, f, nbytes, t, rs, rsi, fl_i, fl_f, ser, window_s):  # pragma: no cover
    """Start flow ``f`` of ``nbytes`` on resource ``s`` at ``t`` (its I/Os counted now)."""
    _ps_advance(s, t, rs, rsi, ser, window_s)
    fl_f[FL_BYTES, f] = nbytes
    base = rsi[RSI_BASE, s]
    i = rsi[RSI_SIZE, s]
    fl_f[FL_KEY, base + i] = rs[RS_V, s] + nbytes
    fl_i[FL_FID, base + i] = f
    fl_i[FL_POS, f] = i
    rsi[RSI_SIZE, s] = i + 1
    _ps_up(fl_i, fl_f, base, i)
    n_res = rs.shape[1]
    _add_at(ser, SER_IOS * n_res + s, t, np.ceil(nbytes / rs[RS_IO_BYTES, s]), window_s)
    _add_at(ser, SER_READ_DEMAND * n_res + s, t, nbytes, window_s)


@_inner
def _next_flow(rs, rsi, fl_f):  # pragma: no cover - compiled
    """The resource whose flow completes first, and when (-1 and inf when none is in flight)."""
    t_ps = INF
    s_ps = -1
    for s in range(rs.shape[1]):
        tc = _ps_next(s, rs, rsi, fl_f)
        if tc < t_ps:
            t_ps = tc
            s_ps = s
    return t_ps, s_ps


@_inner
def _flow(q, f, s, nbytes, t, qi, io, cf):  # pragma: no cover
    """Request ``q`` starts flow ``f`` on resource ``s``; it waits for one more."""
    rs, rsi, fl_i, fl_f, ser = io
    _ps_push(s, f, nbytes, t, rs, rsi, fl_i, fl_f, ser, cf[CF_WINDOW_S])
    qi[Q_PENDING, q] += 1


@_inner
def _hit_tokens(q, tl):  # pragma: no cover - compiled
    """Hit tokens request ``q`` loads from the tiers, all tiers together."""
    total = 0
    for k in range(tl.shape[2]):
        total += tl[TL_LOAD, q, k]
    return total


@_inner
def _load_tiers(q, r, t, qi, tl, rt, io, cf):  # pragma: no cover
    """Start request ``q``'s loads of its hits, one flow per tier that holds some."""
    n_tier = tl.shape[2]
    for k in range(n_tier):
        if tl[TL_LOAD, q, k] > 0:
            nbytes = float(tl[TL_LOAD, q, k]) * cf[CF_KV_BPT]
            _flow(q, q * (n_tier + 2) + k, rt[r, k], nbytes, t, qi, io, cf)


# ---- write buffers ---------------------------------------------------------------------------


@_inner
def _wb_drain(s, t, rs, ser, window_s):  # pragma: no cover - compiled
    """Drain resource ``s``'s write buffer at its write bandwidth up to time ``t``."""
    last = rs[RS_WB_LAST, s]
    if rs[RS_WB_LEVEL, s] > 0.0 and t > last:
        bw = rs[RS_WR_BW, s]
        out = min(rs[RS_WB_LEVEL, s], bw * (t - last))
        _add_rate(ser, SER_WRITE * rs.shape[1] + s, last, last + out / bw, bw, window_s)
        rs[RS_WB_LEVEL, s] -= out
    if t > last:
        rs[RS_WB_LAST, s] = t


@_inner
def _wb_write(s, t, nbytes, rs, ser, window_s, cnt, fcnt):  # pragma: no cover - compiled
    """Put ``nbytes`` into resource ``s``'s buffer at ``t``; return how long the writer stalls."""
    if nbytes <= 0.0:
        return 0.0
    _wb_drain(s, t, rs, ser, window_s)
    _add_at(ser, SER_WRITE_DEMAND * rs.shape[1] + s, t, nbytes, window_s)
    rs[RS_WB_LEVEL, s] += nbytes
    excess = rs[RS_WB_LEVEL, s] - rs[RS_WB_CAP, s]
    if excess <= 0.0:
        return 0.0
    if rs[RS_DROP, s] != 0.0:
        rs[RS_WB_LEVEL, s] = rs[RS_WB_CAP, s]
        cnt[C_DROPPED_WRITES] += 1
        fcnt[F_DROPPED_BYTES] += excess
        return 0.0
    cnt[C_BLOCKED_WRITES] += 1
    return excess / rs[RS_WR_BW, s]


@_inner
def _tier_write(q, k, s, t, tok, tw, io, ci, cf, cnt, fcnt):  # pragma: no cover
    """Tier ``k`` (resource ``s``) is given ``tok`` tokens of ``q``: held back or buffered."""
    rs, rsi, fl_i, fl_f, ser = io
    nbytes = float(tok) * cf[CF_KV_BPT]
    if ci[CI_WRITE_BACK]:
        tw[TW_PENDING, q, k] += nbytes
        return 0.0
    return _wb_write(s, t, nbytes, rs, ser, cf[CF_WINDOW_S], cnt, fcnt)


@_inner
def _flush_writes(q, r, t, rt, tw, io, cf, cnt, fcnt):  # pragma: no cover
    """A request releases its KV: write-back bytes held back and decode KV kept for later."""
    rs, rsi, fl_i, fl_f, ser = io
    for k in range(rt.shape[1]):
        s = rt[r, k]
        nbytes = tw[TW_DONE, q, k] * cf[CF_KV_BPT] + tw[TW_PENDING, q, k]
        tw[TW_PENDING, q, k] = 0.0
        if s >= 0 and nbytes > 0.0:
            _wb_write(s, t, nbytes, rs, ser, cf[CF_WINDOW_S], cnt, fcnt)


@_inner
def _write_chunks(r, t, qi, tl, tw, ri, run, rt, io, ci, cf, cnt, fcnt):  # pragma: no cover
    """A step ends: the tiers are given what its prefill chunks computed; the longest stall."""
    stall = 0.0
    for i in range(ri[R_RUN_CNT, r]):
        q = run[r, i]
        if qi[Q_CHUNK, q] <= 0 or qi[Q_STATE, q] != S_PREFILL:
            continue
        b = qi[Q_PF_POS, q] + qi[Q_CHUNK, q]
        for k in range(tl.shape[2]):
            s = rt[r, k]
            tok = b - max(max(qi[Q_PF_POS, q], tl[TL_OWN, q, k]), qi[Q_WMARK, q])
            if s < 0 or tok <= 0:
                continue
            stall = max(stall, _tier_write(q, k, s, t, tok, tw, io, ci, cf, cnt, fcnt))
        qi[Q_WMARK, q] = max(qi[Q_WMARK, q], b)
    return stall


@_inner
def _offload_read(r, t, ri, io, ci, cf):  # pragma: no cover - compiled
    """Decode-time offload: KV beyond the GPU pool is read from the tier every step; its time."""
    rs, rsi, fl_i, fl_f, ser = io
    s = ri[R_OFFLOAD, r]
    n_res = rs.shape[1]
    window_s = cf[CF_WINDOW_S]
    over = ri[R_OFFLOAD_PAGES, r] - ri[R_FREE, r]
    nbytes = float(over * ci[CI_PAGE]) * cf[CF_KV_BPT]
    ios = float(over * cf[CF_OFFLOAD_IOS])
    read_s = rs[RS_LAT, s] + max(nbytes / rs[RS_RD_BW, s], ios / rs[RS_IOPS, s])
    _add_rate(ser, SER_READ * n_res + s, t, t + read_s, nbytes / read_s, window_s)
    _add_at(ser, SER_IOS * n_res + s, t, ios, window_s)
    _add_at(ser, SER_READ_DEMAND * n_res + s, t, nbytes, window_s)
    return read_s


# ---- requests and replicas -------------------------------------------------------------------


@_inner
def _occupy(r, t, ri, rf):  # pragma: no cover - compiled
    """Open or close replica ``r``'s interval holding requests (occupancy), at time ``t``."""
    if ri[R_RUN_CNT, r] > 0 and rf[RF_OCC_SINCE, r] < 0.0:
        rf[RF_OCC_SINCE, r] = t
    elif ri[R_RUN_CNT, r] == 0 and rf[RF_OCC_SINCE, r] >= 0.0:
        rf[RF_OCC_S, r] += t - rf[RF_OCC_SINCE, r]
        rf[RF_OCC_SINCE, r] = -1.0


@_inner
def _pages(tokens, page):  # pragma: no cover - compiled
    return (tokens + page - 1) // page


@_inner
def _drop_running(run, ri, r, q):  # pragma: no cover - compiled
    """Remove request ``q`` from replica ``r``'s running list, keeping the order."""
    j = 0
    for i in range(ri[R_RUN_CNT, r]):
        if run[r, i] != q:
            run[r, j] = run[r, i]
            j += 1
    ri[R_RUN_CNT, r] = j


@_inner
def _finish(q, r, t, qi, qf, tw, ri, rf, rt, io, cf, cnt, fcnt):  # pragma: no cover
    """Request ``q`` is done: its writes flushed, its pages freed (it stays in the list)."""
    qi[Q_STATE, q] = S_DONE
    _flush_writes(q, r, t, rt, tw, io, cf, cnt, fcnt)
    ri[R_FREE, r] += qi[Q_HELD, q]
    qi[Q_HELD, q] = 0
    qf[QF_DONE, q] = t
    cnt[G_DONE] += 1
    cnt[G_RUNNING] -= 1
    rf[RF_OUTSTANDING, r] -= 1.0
    rf[RF_ACT_DEC, r] -= float(qi[Q_INPUT, q])


@_inner
def _init(qi, qf, ri, rf):  # pragma: no cover - compiled
    """The state rows' starting values (the engine passes them zeroed)."""
    for q in range(qi.shape[1]):
        qi[Q_FRESH, q] = 1
        qi[Q_WNEXT, q] = -1
        qi[Q_REPLICA, q] = qi[Q_ROUTE, q]
        qf[QF_DEADLINE, q] = INF
        qf[QF_ADMIT, q] = np.nan
        qf[QF_READY, q] = np.nan
        qf[QF_FIRST, q] = np.nan
        qf[QF_DONE, q] = np.nan
    for r in range(ri.shape[1]):
        ri[R_FREE, r] = ri[R_POOL, r] + ri[R_OFFLOAD_PAGES, r]
        ri[R_WHEAD, r] = -1
        ri[R_WTAIL, r] = -1
        ri[R_NEXT, r] = ri[R_FIRST_SAME, r]
        rf[RF_OCC_SINCE, r] = -1.0


# ---- routing and arrivals --------------------------------------------------------------------


@_inner
def _kv_overlaps(q, qi, ri, ci, blk_offsets, blk_ids, blk_masks):  # pragma: no cover
    """Per replica, the leading prompt tokens the KV router's view says it holds."""
    nblk = blk_offsets[q + 1] - blk_offsets[q]
    for x in range(ri.shape[1]):
        word = x // 64
        bit = np.uint64(1) << np.uint64(x % 64)
        k = 0
        while k < nblk:
            if blk_masks[blk_ids[blk_offsets[q] + k], word] & bit == 0:
                break
            k += 1
        # whole pages only: a partial page is no hit
        matched = min(k * ci[CI_BLK_TOKENS], qi[Q_INPUT, q])
        ri[R_OVERLAP, x] = matched // ci[CI_PAGE] * ci[CI_PAGE]


@_inner
def route_request(q, qi, ri, rf, ci, cf, blocks, cnt):  # pragma: no cover - compiled
    """The router's replica for request ``q`` (ROUTE_LEAST or ROUTE_KV), from live load.

    ``blocks``: the KV router's view, (block offsets per request, block ids, per block a mask
    of the replicas it believes hold it).
    """
    blk_offsets, blk_ids, blk_masks = blocks
    policy = ci[CI_ROUTE]
    n_rep = ri.shape[1]
    inp = qi[Q_INPUT, q]
    if policy == ROUTE_KV:
        _kv_overlaps(q, qi, ri, ci, blk_offsets, blk_ids, blk_masks)
    rr = cnt[G_RR]
    best = 0
    best_cost = INF
    for y in range(n_rep):
        x = (rr + y) % n_rep
        if policy == ROUTE_KV:
            # Dynamo's KV router: prefill blocks to compute (active and this request's
            # uncached ones) weighted, plus active decode blocks
            cost = cf[CF_ROUTE_WEIGHT] * (rf[RF_ACT_PF, x] + inp - ri[R_OVERLAP, x])
            cost += rf[RF_ACT_DEC, x] + inp
        else:
            cost = rf[RF_OUTSTANDING, x]
        if cost < best_cost:
            best_cost = cost
            best = x
    cnt[G_RR] = (rr + 1) % n_rep
    if policy == ROUTE_KV:
        qi[Q_GPU_HIT, q] = ri[R_OVERLAP, best]
        word = best // 64
        bit = np.uint64(1) << np.uint64(best % 64)
        for k in range(blk_offsets[q], blk_offsets[q + 1]):
            blk_masks[blk_ids[k], word] |= bit
    return best


@_inner
def _prefetch(q, r, t, qi, qf, tl, ri, rt, io, ci, cf, evt, evi, cnt):  # pragma: no cover
    """HiCache's L3 prefetch: request ``q`` starts loading its hits as it arrives."""
    total = _hit_tokens(q, tl)
    if total <= 0 or total < ci[CI_MIN_LOAD]:
        return
    qi[Q_PREFETCHING, q] = 1
    ri[R_PREFETCH_N, r] += 1
    qf[QF_READY_AT, q] = t
    _load_tiers(q, r, t, qi, tl, rt, io, cf)
    if ci[CI_PREFETCH] == PREFETCH_TIMEOUT:
        qf[QF_DEADLINE, q] = t + cf[CF_PREFETCH_BASE_S] + cf[CF_PREFETCH_PER_TOKEN_S] * total
        _ev_push(evt, evi, cnt, qf[QF_DEADLINE, q], np.int64(EV_TIMEOUT), q)


@_inner
def _arrive(t, qi, qf, tl, ri, rf, rt, io, ci, cf, blocks, evt, evi, cnt):  # pragma: no cover
    """The next arrival: routed, queued, and its prefetch started where the engine does."""
    q = cnt[G_NEXT]
    cnt[G_NEXT] += 1
    r = qi[Q_ROUTE, q]
    if r < 0:
        r = route_request(q, qi, ri, rf, ci, cf, blocks, cnt)
    else:
        ri[R_NEXT, r] = qi[Q_NEXT_SAME, q]
    qi[Q_REPLICA, q] = r
    rf[RF_OUTSTANDING, r] += 1.0
    qf[QF_PF_LEFT, q] = float(qi[Q_INPUT, q] - min(qi[Q_GPU_HIT, q], qi[Q_INPUT, q]))
    rf[RF_ACT_PF, r] += qf[QF_PF_LEFT, q]
    rf[RF_ACT_DEC, r] += float(qi[Q_INPUT, q])
    if ri[R_WTAIL, r] < 0:
        ri[R_WHEAD, r] = q
    else:
        qi[Q_WNEXT, ri[R_WTAIL, r]] = q
    ri[R_WTAIL, r] = q
    cnt[G_WAITING] += 1
    ri[R_DIRTY, r] = 1
    if ci[CI_LOAD_MODE] == LOAD_PREFETCH and ci[CI_ROLE] != ROLE_DECODE:
        _prefetch(q, r, t, qi, qf, tl, ri, rt, io, ci, cf, evt, evi, cnt)


# ---- events: a flow completes, a request's KV is in, a step ends -----------------------------


@_inner
def _flow_done(s, t, n_slot, qi, qf, io, cf, evt, evi, cnt):  # pragma: no cover
    """Resource ``s``'s next flow completes; its request is ready when all are in, + latency."""
    rs, rsi, fl_i, fl_f, ser = io
    _ps_advance(s, t, rs, rsi, ser, cf[CF_WINDOW_S])
    f = fl_i[FL_FID, rsi[RSI_BASE, s]]
    _ps_remove(s, f, rsi, fl_i, fl_f)
    q = f // n_slot
    qi[Q_PENDING, q] -= 1
    qf[QF_READY_AT, q] = max(qf[QF_READY_AT, q], t + rs[RS_LAT, s])
    if qi[Q_PENDING, q] == 0:
        _ev_push(evt, evi, cnt, qf[QF_READY_AT, q], np.int64(EV_READY), q)


@_inner
def _on_ready(q, t, qi, qf, tw, ri, rf, run, rt, io, cf, cnt, fcnt):  # pragma: no cover
    """Request ``q``'s KV is in (a prefetch, a load, a swap-in, or the link's transfer)."""
    r = qi[Q_REPLICA, q]
    if qi[Q_STATE, q] == S_WAIT and qi[Q_PREFETCHING, q]:
        qi[Q_PREFETCHING, q] = 0  # its prefetch is in: the scheduler may admit it
        ri[R_PREFETCH_N, r] -= 1
        qf[QF_READY, q] = t
        ri[R_DIRTY, r] = 1
    elif qi[Q_STATE, q] == S_LOAD:
        qf[QF_READY, q] = t
        ri[R_DIRTY, r] = 1
        if qi[Q_RESUME, q] != S_DECODE:
            qi[Q_STATE, q] = S_PREFILL
            return
        if qi[Q_GEN, q] == 0:
            # disaggregated decode: the prompt's KV is in; the first token computed by
            # prefill goes out now
            qi[Q_GEN, q] = 1
            qf[QF_FIRST, q] = t
            rf[RF_ACT_PF, r] -= qf[QF_PF_LEFT, q]
            qf[QF_PF_LEFT, q] = 0.0
        qi[Q_STATE, q] = S_DECODE
        if qi[Q_GEN, q] >= qi[Q_OUTPUT, q]:
            _finish(q, r, t, qi, qf, tw, ri, rf, rt, io, cf, cnt, fcnt)
            _drop_running(run, ri, r, q)
            _occupy(r, t, ri, rf)


@_inner
def _progress(r, t, qi, qf, tw, ri, rf, run, rt, io, ci, cf, cnt, fcnt):  # pragma: no cover
    """Replica ``r``'s step is over: chunks and tokens applied, finished requests leave."""
    j = 0
    for i in range(ri[R_RUN_CNT, r]):
        q = run[r, i]
        c = qi[Q_CHUNK, q]
        qi[Q_CHUNK, q] = 0
        finished = False
        if c > 0 and qi[Q_STATE, q] == S_PREFILL:
            qi[Q_PF_POS, q] += c
            qi[Q_CTX, q] = qi[Q_PF_POS, q]
            if qi[Q_PF_POS, q] >= qi[Q_PF_END, q]:
                qi[Q_GEN, q] += 1
                if np.isnan(qf[QF_FIRST, q]):
                    qf[QF_FIRST, q] = t
                rf[RF_ACT_PF, r] -= qf[QF_PF_LEFT, q]
                qf[QF_PF_LEFT, q] = 0.0
                if ci[CI_ROLE] == ROLE_PREFILL or qi[Q_GEN, q] >= qi[Q_OUTPUT, q]:
                    finished = True
                else:
                    qi[Q_STATE, q] = S_DECODE
        elif c > 0 and qi[Q_STATE, q] == S_DECODE:
            qi[Q_CTX, q] += c  # c > 1: several decode steps taken at once (the fast-forward)
            qi[Q_GEN, q] += c
            if qi[Q_GEN, q] >= qi[Q_OUTPUT, q]:
                finished = True
        if finished:
            _finish(q, r, t, qi, qf, tw, ri, rf, rt, io, cf, cnt, fcnt)
        else:
            run[r, j] = q
            j += 1
    ri[R_RUN_CNT, r] = j
    _occupy(r, t, ri, rf)


@_inner
def _step_end(r, t, qi, qf, tl, tw, ri, rf, run, rt, io, ci, cf, cnt, fcnt):  # pragma: no cover
    """Replica ``r``'s step ends: write what its prefill chunks produced, then progress.

    Returns how long the writes stall it (then the progress waits for a second EV_STEP).
    """
    if not ri[R_PHASE2, r]:
        stall = 0.0
        if ci[CI_ROLE] != ROLE_DECODE:
            stall = _write_chunks(r, t, qi, tl, tw, ri, run, rt, io, ci, cf, cnt, fcnt)
        if stall > 0.0:
            ri[R_PHASE2, r] = 1
            return stall
    ri[R_PHASE2, r] = 0
    ri[R_BUSY, r] = 0
    ri[R_DIRTY, r] = 1
    _progress(r, t, qi, qf, tw, ri, rf, run, rt, io, ci, cf, cnt, fcnt)
    return 0.0


# ---- the scheduler: what replica r's next step runs -------------------------------------------


@_inner
def _preempt(r, x, need, qi, ri, run, io, ci, cf, cnt, fcnt):  # pragma: no cover - compiled
    """Preempt the running request at ``run[r, x]`` for ``need`` pages; the swap-out time."""
    rs, rsi, fl_i, fl_f, ser = io
    v = run[r, x]
    for y in range(x, ri[R_RUN_CNT, r] - 1):
        run[r, y] = run[r, y + 1]
    ri[R_RUN_CNT, r] -= 1
    cnt[C_PREEMPTIONS] += 1
    qi[Q_PREEMPT, v] += 1
    # vLLM frees the victim's blocks into the evictable prefix cache: the pages this
    # allocation does not take keep its leading tokens for its return
    survive = max(qi[Q_HELD, v] - (need - ri[R_FREE, r]), 0)
    kept = min(survive * ci[CI_PAGE], qi[Q_CTX, v])
    ri[R_FREE, r] += qi[Q_HELD, v]
    swap_s = 0.0
    if ci[CI_SWAP] and qi[Q_STATE, v] == S_DECODE and ri[R_SWAP, r] >= 0:
        # swap: its KV goes to host memory within this step, back on resume
        cnt[C_SWAPS] += 1
        nbytes = float(qi[Q_CTX, v]) * cf[CF_GPU_BPT]
        fcnt[F_SWAP_BYTES] += nbytes
        swap_s = nbytes / rs[RS_RD_BW, ri[R_SWAP, r]]
        qi[Q_RESUME, v] = S_DECODE
    else:
        # recompute what it held beyond the surviving prefix (prompt and the tokens
        # generated so far)
        if qi[Q_STATE, v] == S_DECODE:
            qi[Q_PF_END, v] = qi[Q_CTX, v] + 1
            qi[Q_GEN, v] -= 1  # the recompute produces that token again
        qi[Q_PF_POS, v] = min(kept, qi[Q_PF_END, v] - 1)
        fcnt[F_PREEMPT_TOKENS] += float(max(qi[Q_CTX, v] - qi[Q_PF_POS, v], 0))
        qi[Q_RESUME, v] = S_PREFILL
    qi[Q_HELD, v] = 0
    qi[Q_STATE, v] = S_WAIT
    qi[Q_WNEXT, v] = ri[R_WHEAD, r]
    ri[R_WHEAD, r] = v
    if ri[R_WTAIL, r] < 0:
        ri[R_WTAIL, r] = v
    cnt[G_WAITING] += 1
    cnt[G_RUNNING] -= 1
    return swap_s


@_inner
def _serve_running(r, qi, ri, run, io, ci, cf, cnt, fcnt):  # pragma: no cover - compiled
    """VLLM's first pass: a decode token or a prefill chunk for each running request.

    Runs in admission order while the budget lasts, preempting the most recently admitted
    running request when pages run out. Returns the step's figures so far.
    """
    page = ci[CI_PAGE]
    budget = ci[CI_MAX_TOKENS]
    n_tok = 0
    n_seq = 0  # sequences in the step: each computes its last position's logits
    n_pf_tok = 0
    pairs = 0.0
    kv = 0.0
    swap_s = 0.0
    n_preempt = 0
    i = 0
    while i < ri[R_RUN_CNT, r] and budget > 0:
        q = run[r, i]
        if qi[Q_STATE, q] == S_LOAD:
            i += 1
            continue
        prefill = qi[Q_STATE, q] == S_PREFILL
        if prefill:
            m = min(qi[Q_PF_END, q] - qi[Q_PF_POS, q], budget)
            need = _pages(qi[Q_PF_POS, q] + m, page) - qi[Q_HELD, q]
        else:
            m = 1
            need = _pages(qi[Q_CTX, q] + 1, page) - qi[Q_HELD, q]
        lost_self = False
        while need > ri[R_FREE, r]:
            # vLLM preempts the most recently admitted running request (never one whose KV
            # is still being loaded: it holds no computed state to give up)
            x = ri[R_RUN_CNT, r] - 1
            while x >= 0 and qi[Q_STATE, run[r, x]] == S_LOAD:
                x -= 1
            if x < 0:
                lost_self = True  # stuck: nothing to preempt
                break
            lost_self = run[r, x] == q
            swap_s += _preempt(r, x, need, qi, ri, run, io, ci, cf, cnt, fcnt)
            n_preempt += 1
            if lost_self:
                break
        if lost_self:
            break
        qi[Q_HELD, q] += need
        ri[R_FREE, r] -= need
        qi[Q_CHUNK, q] = m
        budget -= m
        n_tok += m
        n_seq += 1
        if prefill:
            n_pf_tok += m
            pos = float(qi[Q_PF_POS, q])
            pairs += attention_pairs(
                float(m), pos, cf[CF_FULL_LAYERS], cf[CF_WIN_LAYERS], ci[CI_WIN_TOKENS]
            )
        else:
            ctx = float(qi[Q_CTX, q] + 1)
            kv += _rank_kv(ctx, cf[CF_RANK_FULL], cf[CF_RANK_WIN], ci[CI_WIN_TOKENS])
        i += 1
    return budget, n_tok, n_seq, n_pf_tok, pairs, kv, swap_s, n_preempt


@_inner
def _harvest(q, t, qi, tl, rt, io, cf):  # pragma: no cover
    """Best effort: stop ``q``'s prefetch; the leading run of hit tokens that has arrived."""
    rs, rsi, fl_i, fl_f, ser = io
    n_tier = tl.shape[2]
    loaded = 0
    whole = True
    for k in range(n_tier):
        if tl[TL_LOAD, q, k] <= 0:
            continue
        f = q * (n_tier + 2) + k
        got = tl[TL_LOAD, q, k]
        if fl_i[FL_POS, f] >= 0:
            s = rt[qi[Q_REPLICA, q], k]
            _ps_advance(s, t, rs, rsi, ser, cf[CF_WINDOW_S])
            left = fl_f[FL_KEY, rsi[RSI_BASE, s] + fl_i[FL_POS, f]] - rs[RS_V, s]
            # whole tokens delivered (a relative 1e-9 absorbs rounding)
            got = int((fl_f[FL_BYTES, f] - left) / cf[CF_KV_BPT] * (1 + 1e-9))
            got = max(0, min(got, tl[TL_LOAD, q, k]))
            _ps_remove(s, f, rsi, fl_i, fl_f)
            qi[Q_PENDING, q] -= 1
        if whole:
            loaded += got
        if got < tl[TL_LOAD, q, k]:
            whole = False
    return loaded


@_inner
def _admit_prompt(
    q, r, t, budget, qi, qf, tl, tw, ri, rt, io, ci, cf, cnt, fcnt
):  # pragma: no cover
    """A new prompt: what its hits give it, the pages it needs, its writes to the tiers.

    Returns (ADMIT_*, pages, whether it loads first, its front-end seconds).
    """
    page = ci[CI_PAGE]
    h0 = min(qi[Q_GPU_HIT, q], qi[Q_INPUT, q])
    total = _hit_tokens(q, tl)
    loaded = total
    if total > 0 and total < ci[CI_MIN_LOAD]:
        # below the engine's threshold the hit is recomputed, not loaded
        loaded = 0
        cnt[C_RECOMPUTED_LOADS] += 1
        fcnt[F_RECOMPUTED_TOKENS] += float(total)
        qi[Q_RECOMPUTED, q] += total
    elif total > 0 and ci[CI_LOAD_MODE] == LOAD_PREFETCH and qi[Q_PREFETCHING, q]:
        policy = ci[CI_PREFETCH]
        if policy == PREFETCH_WAIT or (policy == PREFETCH_TIMEOUT and t < qf[QF_DEADLINE, q]):
            return ADMIT_SKIP, 0, False, 0.0
        loaded = _harvest(q, t, qi, tl, rt, io, cf)
        qi[Q_PREFETCHING, q] = 0
        ri[R_PREFETCH_N, r] -= 1
        if loaded < total:
            cnt[C_RECOMPUTED_LOADS] += 1
            fcnt[F_RECOMPUTED_TOKENS] += float(total - loaded)
            qi[Q_RECOMPUTED, q] += total - loaded
    start = h0 + loaded
    qi[Q_PF_END, q] = qi[Q_INPUT, q]
    qi[Q_PF_POS, q] = min(start, qi[Q_INPUT, q] - 1)
    loads = loaded > 0 and ci[CI_LOAD_MODE] == LOAD_ASYNC
    if loads:
        need = _pages(start, page)
    else:
        m = min(qi[Q_PF_END, q] - qi[Q_PF_POS, q], budget)
        need = _pages(qi[Q_PF_POS, q] + m, page)
    if need > ri[R_FREE, r]:
        return ADMIT_STOP, 0, False, 0.0
    if loads:
        qi[Q_CTX, q] = start
        qi[Q_RESUME, q] = S_PREFILL
    else:
        qi[Q_CTX, q] = qi[Q_PF_POS, q]
    qi[Q_LOADED, q] = loaded
    # the engine's front end (request handling, tokens, block hashes) runs in its loop: the
    # step admitting the request takes that much longer
    qf[QF_PF_GPU, q] += qf[QF_FRONTEND, q]
    # tier k is written what it did not hold of the prefix now in GPU memory (promoted from
    # a slower tier, or a GPU hit it had evicted)
    for k in range(tl.shape[2]):
        s = rt[r, k]
        tok = start - tl[TL_OWN, q, k]
        if s >= 0 and tok > 0:
            _tier_write(q, k, s, t, tok, tw, io, ci, cf, cnt, fcnt)
    qi[Q_WMARK, q] = start
    return ADMIT_OK, need, loads, qf[QF_FRONTEND, q]


@_inner
def _admission(q, r, t, budget, qi, qf, tl, tw, ri, rt, io, ci, cf, cnt, fcnt):  # pragma: no cover
    """Whether waiting request ``q`` fits: (ADMIT_*, pages, loads first, front-end seconds)."""
    page = ci[CI_PAGE]
    if qi[Q_FRESH, q] and ci[CI_ROLE] == ROLE_DECODE:
        need = _pages(qi[Q_INPUT, q], page)
        if need > ri[R_FREE, r]:
            return ADMIT_STOP, 0, False, 0.0
        qi[Q_CTX, q] = qi[Q_INPUT, q]
        qi[Q_PF_POS, q] = qi[Q_INPUT, q]
        qi[Q_PF_END, q] = qi[Q_INPUT, q]
        qi[Q_RESUME, q] = S_DECODE
        return ADMIT_OK, need, True, 0.0
    if qi[Q_FRESH, q]:
        return _admit_prompt(q, r, t, budget, qi, qf, tl, tw, ri, rt, io, ci, cf, cnt, fcnt)
    if qi[Q_RESUME, q] == S_DECODE:
        need = _pages(qi[Q_CTX, q], page)  # swap its KV back in
        loads = True
    else:
        m = min(qi[Q_PF_END, q] - qi[Q_PF_POS, q], budget)  # recompute after a preemption
        need = _pages(qi[Q_PF_POS, q] + m, page)
        loads = False
    if need > ri[R_FREE, r]:
        return ADMIT_STOP, 0, False, 0.0
    return ADMIT_OK, need, loads, 0.0


@_inner
def _enter_running(q, r, t, prev, need, qi, qf, ri, rf, run, cnt):  # pragma: no cover
    """Waiting request ``q`` (after ``prev`` in the list) joins the running list with its pages."""
    nxt = qi[Q_WNEXT, q]
    if prev < 0:
        ri[R_WHEAD, r] = nxt
    else:
        qi[Q_WNEXT, prev] = nxt
    if ri[R_WTAIL, r] == q:
        ri[R_WTAIL, r] = prev
    qi[Q_WNEXT, q] = -1
    cnt[G_WAITING] -= 1
    cnt[G_RUNNING] += 1
    run[r, ri[R_RUN_CNT, r]] = q
    ri[R_RUN_CNT, r] += 1
    _occupy(r, t, ri, rf)
    qi[Q_HELD, q] = need
    ri[R_FREE, r] -= need
    if np.isnan(qf[QF_ADMIT, q]):
        qf[QF_ADMIT, q] = t


@_inner
def _start_loads(q, r, t, qi, qf, tl, ri, rt, io, ci, cf):  # pragma: no cover
    """Admitted request ``q`` first waits for its KV: the link, its tier hits, or a swap-in."""
    n_tier = tl.shape[2]
    f = q * (n_tier + 2) + n_tier
    qi[Q_STATE, q] = S_LOAD
    qf[QF_READY_AT, q] = t
    if qi[Q_FRESH, q] and ci[CI_ROLE] == ROLE_DECODE:
        nbytes = float(qi[Q_XFER, q]) * cf[CF_KV_BPT]
        _flow(q, f, ri[R_LINK, r], nbytes, t, qi, io, cf)
    elif qi[Q_FRESH, q]:
        _load_tiers(q, r, t, qi, tl, rt, io, cf)
    else:
        nbytes = float(qi[Q_CTX, q]) * cf[CF_GPU_BPT]
        _flow(q, f + 1, ri[R_SWAP, r], nbytes, t, qi, io, cf)


@_inner
def schedule_step(r, t, qi, qf, tl, tw, ri, rf, run, rt, io, ci, cf, cnt, fcnt):  # pragma: no cover
    """The scheduler policy ``ci[CI_SCHEDULER]`` fills replica ``r``'s next step.

    Sets each chosen request's chunk and returns the step's (tokens, sequences, prefill tokens,
    attention pairs, decode KV bytes of a rank, swap seconds, front-end seconds, preemptions,
    whether it admitted a request). A new policy is a function of the same arguments and a
    SCHED_* code here.
    """
    if ci[CI_SCHEDULER] != SCHED_VLLM:
        raise ValueError("unknown scheduler policy")
    got = _serve_running(r, qi, ri, run, io, ci, cf, cnt, fcnt)
    budget, n_tok, n_seq, n_pf_tok, pairs, kv, swap_s, n_preempt = got
    # admissions, first come first served, while budget, sequences and pages allow; a
    # preemption in the step stops them
    fe = 0.0
    admitted = False
    prev = np.int64(-1)  # typed int64 from the start: no literal-typed _enter_running compiled
    q = ri[R_WHEAD, r] if n_preempt == 0 else -1
    while q >= 0 and budget > 0 and ri[R_RUN_CNT, r] < ci[CI_MAX_SEQS]:
        nxt = qi[Q_WNEXT, q]
        verdict, need, loads, fe_q = _admission(
            q, r, t, budget, qi, qf, tl, tw, ri, rt, io, ci, cf, cnt, fcnt
        )
        if verdict == ADMIT_SKIP:
            prev = q
            q = nxt
            continue
        if verdict == ADMIT_STOP:
            break
        fe += fe_q
        admitted = True
        _enter_running(q, r, t, prev, need, qi, qf, ri, rf, run, cnt)
        if loads:
            _start_loads(q, r, t, qi, qf, tl, ri, rt, io, ci, cf)
        else:
            qi[Q_STATE, q] = S_PREFILL
            m = min(qi[Q_PF_END, q] - qi[Q_PF_POS, q], budget)
            qi[Q_CHUNK, q] = m
            budget -= m
            n_tok += m
            n_seq += 1
            n_pf_tok += m
            pos = float(qi[Q_PF_POS, q])
            pairs += attention_pairs(
                float(m), pos, cf[CF_FULL_LAYERS], cf[CF_WIN_LAYERS], ci[CI_WIN_TOKENS]
            )
        qi[Q_FRESH, q] = 0
        q = nxt
    return n_tok, n_seq, n_pf_tok, pairs, kv, swap_s, fe, n_preempt, admitted


# ---- a step: its time, the decode fast-forward, each request's share, the step log -------------


@_inner
def _fast_forward(r, t, compute, qi, qf, ri, run, ci, cf, cnt):  # pragma: no cover - compiled
    """Decode fast-forward: the k identical decode steps replica ``r`` can take as one event.

    A replica running only decode tokens, with nothing waiting, loading or offloaded, takes
    identical steps but for the KV growing by one token per request per step, until a request
    finishes, the next request routed to it arrives, or its pages run out. Those k steps are
    one event, each with the time R1 gives it: the same results, k - 1 fewer events. Returns
    (k, the k steps' compute time, each later step's increase).
    """
    page = ci[CI_PAGE]
    win_tokens = ci[CI_WIN_TOKENS]
    n_run = ri[R_RUN_CNT, r]
    kmax = INF
    slope = 0.0
    for i in range(n_run):
        q = run[r, i]
        kmax = min(kmax, float(qi[Q_OUTPUT, q] - qi[Q_GEN, q]))
        slope += cf[CF_RANK_FULL]
        if cf[CF_RANK_WIN] > 0.0 and win_tokens > 0:
            below = win_tokens - (qi[Q_CTX, q] + 1)
            if below > 0:
                slope += cf[CF_RANK_WIN]
                kmax = min(kmax, float(below))
    slope *= cf[CF_S_PER_KV]
    if ci[CI_ROUTE] == ROUTE_FIXED:
        t_lim = qf[QF_ARRIVAL, ri[R_NEXT, r]] if ri[R_NEXT, r] >= 0 else INF
    else:
        t_lim = qf[QF_ARRIVAL, cnt[G_NEXT]] if cnt[G_NEXT] < qi.shape[1] else INF
    t_lim = min(t_lim, cf[CF_T_STOP]) - t
    total = compute
    k = 1
    while k < kmax:
        d = compute + slope * k
        if total + d > t_lim:
            break
        # pages for one more token each, from the free ones
        more = 0
        for i in range(n_run):
            if (qi[Q_CTX, run[r, i]] + k + 1) % page == 1 or page == 1:
                more += 1
        if more > ri[R_FREE, r]:
            break
        ri[R_FREE, r] -= more
        for i in range(n_run):
            q = run[r, i]
            if (qi[Q_CTX, q] + k + 1) % page == 1 or page == 1:
                qi[Q_HELD, q] += 1
        total += d
        k += 1
    if k == 1:
        return 1, compute, slope
    for i in range(n_run):
        qi[Q_CHUNK, run[r, i]] = k
    return k, total, slope


@_inner
def _shares(r, steps, tok_part, extra, n_tok, n_dec, qi, qf, ri, run, ci, cf):  # pragma: no cover
    """Each request's share of the step's time (docs/replay.md, stage split); KV tokens held."""
    full_layers, window_layers = cf[CF_FULL_LAYERS], cf[CF_WIN_LAYERS]
    rank_full_bpt, rank_win_bpt = cf[CF_RANK_FULL], cf[CF_RANK_WIN]
    window_tokens = ci[CI_WIN_TOKENS]
    kv_tok = 0.0
    for i in range(ri[R_RUN_CNT, r]):
        q = run[r, i]
        c = qi[Q_CHUNK, q]
        state = qi[Q_STATE, q]
        if state == S_PREFILL:
            kv_tok += float(qi[Q_PF_POS, q] + max(c, 0))
        elif state == S_DECODE:
            kv_tok += float(qi[Q_CTX, q] + min(max(c, 0), 1))
        else:
            kv_tok += float(qi[Q_CTX, q])
        if c <= 0:
            continue
        if state == S_PREFILL:
            qf[QF_PF_GPU, q] += tok_part * c / n_tok + cf[CF_S_PER_PAIR] * attention_pairs(
                float(c), float(qi[Q_PF_POS, q]), full_layers, window_layers, window_tokens
            )
            if n_dec == 0:
                qf[QF_PF_GPU, q] += extra * c / n_tok
        else:
            qf[QF_DEC_GPU, q] += (
                steps * tok_part / n_tok
                + extra / n_dec
                + cf[CF_S_PER_KV]
                * _rank_kv_sum(
                    float(qi[Q_CTX, q] + 1), float(c), rank_full_bpt, rank_win_bpt, window_tokens
                )
            )
    return kv_tok


@_inner
def _log_step(r, t, figures, qi, ri, run, rt, io, cf, slog, cnt):  # pragma: no cover - compiled
    """One step-log row (rows past the log's capacity are only counted).

    ``figures``: the step's (first step s, slope s, steps, total s, prefill tokens, decode
    sequences, KV tokens, preemptions, front-end s).
    """
    rs, rsi, fl_i, fl_f, ser = io
    first_s, slope_s, steps, total_s, n_pf_tok, n_dec, kv_tok, n_preempt, fe = figures
    row = cnt[C_LOG_ROWS]
    cnt[C_LOG_ROWS] += 1
    if row >= slog.shape[0]:
        return
    loading = ri[R_PREFETCH_N, r]
    for i in range(ri[R_RUN_CNT, r]):
        if qi[Q_STATE, run[r, i]] == S_LOAD:
            loading += 1
    wbytes = 0.0
    for k in range(rt.shape[1]):
        s = rt[r, k]
        if s >= 0:
            _wb_drain(s, t, rs, ser, cf[CF_WINDOW_S])
            wbytes += rs[RS_WB_LEVEL, s]
    slog[row, L_REPLICA] = r
    slog[row, L_START] = t
    slog[row, L_FIRST_S] = first_s
    slog[row, L_SLOPE_S] = slope_s
    slog[row, L_STEPS] = steps
    slog[row, L_TOTAL_S] = total_s
    slog[row, L_PREFILL_TOKENS] = n_pf_tok
    slog[row, L_DECODE_SEQS] = n_dec
    slog[row, L_KV_TOKENS] = kv_tok
    slog[row, L_LOADS] = loading
    slog[row, L_WRITE_BYTES] = wbytes
    slog[row, L_PREEMPTIONS] = n_preempt
    slog[row, L_FRONTEND_S] = fe


@_inner
def start_step(
    r, t, tables, qi, qf, tl, tw, ri, rf, run, rt, io, ci, cf, slog, cnt, fcnt
):  # pragma: no cover
    """Start replica ``r``'s next step: schedule it, time it; when it ends (-1: no step).

    ``tables``: the step-time table's arrays (``step_time``'s first, second, fifth, sixth).
    """
    got = schedule_step(r, t, qi, qf, tl, tw, ri, rf, run, rt, io, ci, cf, cnt, fcnt)
    n_tok, n_seq, n_pf_tok, pairs, kv, swap_s, fe, n_preempt, admitted = got
    _occupy(r, t, ri, rf)  # preemptions may have emptied it
    if n_tok == 0 and fe == 0.0:
        return -1.0
    grid, tokens_s, logits_grid, logits_s = tables
    pf_fixed, dec_fixed = cf[CF_PF_FIXED], cf[CF_DEC_FIXED]
    tok_part = shared_time(
        grid,
        tokens_s,
        logits_grid,
        logits_s,
        pf_fixed,
        dec_fixed,
        float(n_tok),
        float(n_seq),
        pairs,
        kv,
    )
    if n_tok == 0:
        tok_part = 0.0  # only front-end work: every admitted request is loading
    compute = tok_part + cf[CF_S_PER_PAIR] * pairs + cf[CF_S_PER_KV] * kv
    extra = swap_s
    if ri[R_OFFLOAD, r] >= 0 and ri[R_OFFLOAD_PAGES, r] > ri[R_FREE, r]:
        extra += _offload_read(r, t, ri, io, ci, cf)
    n_dec = n_tok - n_pf_tok
    first_s = compute + extra + fe
    steps = 1
    slope_s = 0.0
    if (
        n_pf_tok == 0
        and n_dec == ri[R_RUN_CNT, r]
        and n_preempt == 0
        and not admitted
        and ri[R_WHEAD, r] < 0
        and extra == 0.0
        and fe == 0.0
        and ri[R_OFFLOAD, r] < 0
    ):
        steps, compute, slope_s = _fast_forward(r, t, compute, qi, qf, ri, run, ci, cf, cnt)
    kv_tok = _shares(r, steps, tok_part, extra, n_tok, n_dec, qi, qf, ri, run, ci, cf)
    ri[R_BUSY, r] = 1
    cnt[C_STEPS] += steps
    # busy time: the replica executing steps (a write stall after it is not)
    rf[RF_BUSY_S, r] += compute + extra + fe
    if slog.shape[0] > 0:
        total_s = compute + extra + fe
        slope_s = slope_s if steps > 1 else 0.0
        figures = (first_s, slope_s, steps, total_s, n_pf_tok, n_dec, kv_tok, n_preempt, fe)
        _log_step(r, t, figures, qi, ri, run, rt, io, cf, slog, cnt)
    return t + compute + extra + fe


# ---- the event loop --------------------------------------------------------------------------


@intrinsic
def _borrowed(typingctx, arr):  # pragma: no cover - compiled
    """A view of array ``arr`` that holds no reference to its memory.

    numba counts references to an array at every function boundary and every alias (an
    atomic add and subtract on its memory's header), and the phases below pass the state's
    arrays on at every event: the loop runs on these views, whose count is null so each of
    those operations is a test of a null pointer. The arrays stay alive: the engine holds them
    for the whole call of ``simulate_group``, and no view outlives it.
    """

    def codegen(context, builder, signature, args):
        src = context.make_array(arr)(context, builder, value=args[0])
        out = context.make_array(arr)(context, builder)
        out.meminfo = cgutils.get_null_value(out.meminfo.type)
        out.parent = cgutils.get_null_value(out.parent.type)
        out.nitems = src.nitems
        out.itemsize = src.itemsize
        out.data = src.data
        out.shape = src.shape
        out.strides = src.strides
        return out._getvalue()

    return arr(arr), codegen


@nb.njit(cache=True, nogil=True)
def simulate_group(state, io, events, tables, blocks):  # pragma: no cover - compiled
    """Replay one group of replicas; fills the state arrays' output rows (module docstring).

    ``state``: (qi, qf, tl, tw, ri, rf, rt, run, ci, cf, slog, cnt, fcnt), the named state
    above with the settings, the step log and the counters; ``io``: (rs, rsi, fl_i, fl_f,
    ser), the resources'; ``events``: the timed-event heap (evt, evi); ``tables``: the
    step-time table's four arrays; ``blocks``: the KV router's (offsets, block ids, per-block
    replica masks). The engine allocates them all (the caller keeps them alive: the loop runs
    on borrowed views of them, see ``_borrowed``) and zeroes the state rows; the event loop
    takes the next event to its phase, then starts steps on the replicas it changed.
    """
    qi, qf, tl, tw, ri, rf, rt, run, ci, cf, slog, cnt, fcnt = state
    qi, qf, tl, tw = _borrowed(qi), _borrowed(qf), _borrowed(tl), _borrowed(tw)
    ri, rf, rt, run = _borrowed(ri), _borrowed(rf), _borrowed(rt), _borrowed(run)
    ci, cf, slog = _borrowed(ci), _borrowed(cf), _borrowed(slog)
    cnt, fcnt = _borrowed(cnt), _borrowed(fcnt)
    rs, rsi, fl_i, fl_f, ser = io
    rs, rsi, fl_i, fl_f = _borrowed(rs), _borrowed(rsi), _borrowed(fl_i), _borrowed(fl_f)
    ser = _borrowed(ser)
    io = (rs, rsi, fl_i, fl_f, ser)  # the resources' state, travelling together
    evt, evi = _borrowed(events[0]), _borrowed(events[1])
    tables = (
        _borrowed(tables[0]),
        _borrowed(tables[1]),
        _borrowed(tables[2]),
        _borrowed(tables[3]),
    )
    blocks = (_borrowed(blocks[0]), _borrowed(blocks[1]), _borrowed(blocks[2]))
    n = qi.shape[1]
    n_rep = ri.shape[1]
    n_res = rs.shape[1]
    n_slot = tl.shape[2] + 2  # flow slots per request: one per tier, the link, the swap link
    window_s = cf[CF_WINDOW_S]
    _init(qi, qf, ri, rf)
    t = 0.0
    while cnt[G_DONE] < n:
        # ---- the next event: an arrival, a timed event, or a flow completing
        t_arr = qf[QF_ARRIVAL, cnt[G_NEXT]] if cnt[G_NEXT] < n else INF
        t_ev = evt[0] if cnt[G_EVENTS] > 0 else INF
        t_ps, s_ps = _next_flow(rs, rsi, fl_f)
        t_next = min(t_arr, min(t_ev, t_ps))
        if t_next == INF or t_next > cf[CF_T_STOP]:
            break
        if t_next > t:
            queue = SER_QUEUE * n_res
            _add_rate(ser, queue, t, t_next, float(cnt[G_WAITING]), window_s)
            _add_rate(ser, queue + 1, t, t_next, float(cnt[G_RUNNING]), window_s)
            t = t_next
        if t_ps <= t_ev and t_ps <= t_arr:
            _flow_done(s_ps, t, n_slot, qi, qf, io, cf, evt, evi, cnt)
        elif t_ev <= t_arr:
            kind = evi[EVI_KIND, 0]
            i = evi[EVI_ID, 0]
            _ev_pop(evt, evi, cnt)
            if kind == EV_TIMEOUT:
                ri[R_DIRTY, qi[Q_REPLICA, i]] = 1
            elif kind == EV_READY:
                _on_ready(i, t, qi, qf, tw, ri, rf, run, rt, io, cf, cnt, fcnt)
            else:
                stall = _step_end(i, t, qi, qf, tl, tw, ri, rf, run, rt, io, ci, cf, cnt, fcnt)
                if stall > 0.0:
                    _ev_push(evt, evi, cnt, t + stall, np.int64(EV_STEP), i)
                    continue  # nothing else changed
        else:
            _arrive(t, qi, qf, tl, ri, rf, rt, io, ci, cf, blocks, evt, evi, cnt)
        # ---- start a step on every idle replica whose state changed
        for r in range(n_rep):
            if ri[R_BUSY, r] or not ri[R_DIRTY, r]:
                continue
            ri[R_DIRTY, r] = 0
            end = start_step(
                r, t, tables, qi, qf, tl, tw, ri, rf, run, rt, io, ci, cf, slog, cnt, fcnt
            )
            if end >= 0.0:
                _ev_push(evt, evi, cnt, end, np.int64(EV_STEP), r)
    # ---- the end: flows and buffers brought to the last event; what never finished counted
    for s in range(n_res):
        _ps_advance(s, t, rs, rsi, ser, window_s)
        _wb_drain(s, INF, rs, ser, window_s)
    for r in range(n_rep):
        if rf[RF_OCC_SINCE, r] >= 0.0:
            rf[RF_OCC_S, r] += t - rf[RF_OCC_SINCE, r]
    cnt[C_UNFINISHED] += n - cnt[G_DONE]
    fcnt[F_END_S] = max(fcnt[F_END_S], t)
