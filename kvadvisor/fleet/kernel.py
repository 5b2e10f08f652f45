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
"""

from __future__ import annotations

import numba as nb
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

INF = np.inf


@nb.njit(cache=True, nogil=True)
def tokens_time(grid, tokens_s, t):  # pragma: no cover - compiled
    """``StepTable.tokens_time_s``: the grid interpolated, extrapolated linearly past its end."""
    n = grid.shape[0]
    last = grid[n - 1]
    if t > last:
        slope = (tokens_s[n - 1] - tokens_s[n - 2]) / (last - grid[n - 2])
        return tokens_s[n - 1] + slope * (t - last)
    return np.interp(t, grid, tokens_s)


@nb.njit(cache=True, nogil=True)
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


@nb.njit(cache=True, nogil=True)
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


@nb.njit(cache=True, nogil=True)
def _rank_kv(c, full_bpt, win_bpt, win_tokens):  # pragma: no cover - compiled
    """``KvLayout.bytes_for`` of one rank for a context of ``c`` tokens."""
    out = full_bpt * c
    if win_bpt > 0.0 and win_tokens > 0:
        out += win_bpt * min(c, float(win_tokens))
    return out


@nb.njit(cache=True, nogil=True)
def _rank_kv_sum(c0, k, full_bpt, win_bpt, win_tokens):  # pragma: no cover - compiled
    """Sum of ``_rank_kv(c0 + j)`` for j in 0..k-1 (``KvLayout.bytes_summed``)."""
    out = full_bpt * (k * c0 + k * (k - 1.0) / 2.0)
    if win_bpt > 0.0 and win_tokens > 0:
        w = float(win_tokens)
        hi = _window_prefix(max(c0 + k - 1.0, 0.0), w)
        lo = _window_prefix(max(c0 - 1.0, 0.0), w)
        out += win_bpt * (hi - lo)
    return out


@nb.njit(cache=True, nogil=True)
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


@nb.njit(cache=True, nogil=True)
def _add_at(series, row, t, amount, window_s):  # pragma: no cover - compiled
    """Add ``amount`` to the window holding time ``t``."""
    w = min(int(t / window_s), series.shape[1] - 1)
    series[row, w] += amount


# ---- the timed-event heap (time, kind, id) -------------------------------------------------


@nb.njit(cache=True, nogil=True)
def _ev_push(ev_t, ev_k, ev_i, size, t, kind, ident):  # pragma: no cover - compiled
    i = size
    ev_t[i] = t
    ev_k[i] = kind
    ev_i[i] = ident
    while i > 0:
        parent = (i - 1) // 2
        if ev_t[parent] <= ev_t[i]:
            break
        ev_t[parent], ev_t[i] = ev_t[i], ev_t[parent]
        ev_k[parent], ev_k[i] = ev_k[i], ev_k[parent]
        ev_i[parent], ev_i[i] = ev_i[i], ev_i[parent]
        i = parent
    return size + 1


@nb.njit(cache=True, nogil=True)
def _ev_pop(ev_t, ev_k, ev_i, size):  # pragma: no cover - compiled
    size -= 1
    ev_t[0] = ev_t[size]
    ev_k[0] = ev_k[size]
    ev_i[0] = ev_i[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        child = left
        if left + 1 < size and ev_t[left + 1] < ev_t[left]:
            child = left + 1
        if ev_t[i] <= ev_t[child]:
            break
        ev_t[child], ev_t[i] = ev_t[i], ev_t[child]
        ev_k[child], ev_k[i] = ev_k[i], ev_k[child]
        ev_i[child], ev_i[i] = ev_i[i], ev_i[child]
        i = child
    return size


# ---- processor-sharing resources: one heap of finish tags per resource ----------------------
# A flow of b bytes joining resource s at virtual time V finishes when V reaches V + b, where V
# advances at bandwidth / flows-in-flight (every flow gets an equal share; Demers, Keshav and
# Shenker, SIGCOMM 1989, for the virtual-time bookkeeping). Heap slots of resource s live at
# ps_base[s] .. ps_base[s] + capacity; fpos[f] is flow f's slot offset (-1 when inactive).


@nb.njit(cache=True, nogil=True)
def _ps_swap(ps_key, ps_fid, fpos, base, a, b):  # pragma: no cover - compiled
    ps_key[base + a], ps_key[base + b] = ps_key[base + b], ps_key[base + a]
    ps_fid[base + a], ps_fid[base + b] = ps_fid[base + b], ps_fid[base + a]
    fpos[ps_fid[base + a]] = a
    fpos[ps_fid[base + b]] = b


@nb.njit(cache=True, nogil=True)
def _ps_up(ps_key, ps_fid, fpos, base, i):  # pragma: no cover - compiled
    while i > 0:
        parent = (i - 1) // 2
        if ps_key[base + parent] <= ps_key[base + i]:
            break
        _ps_swap(ps_key, ps_fid, fpos, base, parent, i)
        i = parent


@nb.njit(cache=True, nogil=True)
def _ps_down(ps_key, ps_fid, fpos, base, size, i):  # pragma: no cover - compiled
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        child = left
        if left + 1 < size and ps_key[base + left + 1] < ps_key[base + left]:
            child = left + 1
        if ps_key[base + i] <= ps_key[base + child]:
            break
        _ps_swap(ps_key, ps_fid, fpos, base, i, child)
        i = child


@nb.njit(cache=True, nogil=True)
def _ps_advance(s, t, ps_v, ps_last, ps_size, rd_bw, rd_series, window_s):  # pragma: no cover
    """Move resource ``s`` to time ``t``: every flow in flight got bandwidth / n since."""
    n = ps_size[s]
    if n > 0 and t > ps_last[s]:
        ps_v[s] += rd_bw[s] * (t - ps_last[s]) / n
        _add_rate(rd_series, s, ps_last[s], t, rd_bw[s], window_s)
    ps_last[s] = t


@nb.njit(cache=True, nogil=True)
def _ps_next(s, ps_v, ps_last, ps_size, ps_key, ps_base, rd_bw):  # pragma: no cover - compiled
    """When resource ``s`` completes its next flow (inf when idle)."""
    n = ps_size[s]
    if n == 0:
        return INF
    remaining = ps_key[ps_base[s]] - ps_v[s]
    if remaining <= 0.0:
        return ps_last[s]
    return ps_last[s] + remaining * n / rd_bw[s]


@nb.njit(cache=True, nogil=True)
def _ps_remove(s, f, ps_key, ps_fid, ps_size, ps_base, fpos):  # pragma: no cover - compiled
    """Take flow ``f`` out of resource ``s`` (completed or cancelled)."""
    base = ps_base[s]
    i = fpos[f]
    last = ps_size[s] - 1
    if i != last:
        _ps_swap(ps_key, ps_fid, fpos, base, i, last)
    ps_size[s] = last
    fpos[f] = -1
    if i < last:
        _ps_down(ps_key, ps_fid, fpos, base, last, i)
        _ps_up(ps_key, ps_fid, fpos, base, i)


# ---- write buffers ---------------------------------------------------------------------------


@nb.njit(cache=True, nogil=True)
def _wb_drain(s, t, wb_level, wb_last, wr_bw, wr_series, window_s):  # pragma: no cover
    """Drain resource ``s``'s write buffer at its write bandwidth up to time ``t``."""
    if wb_level[s] > 0.0 and t > wb_last[s]:
        out = min(wb_level[s], wr_bw[s] * (t - wb_last[s]))
        _add_rate(wr_series, s, wb_last[s], wb_last[s] + out / wr_bw[s], wr_bw[s], window_s)
        wb_level[s] -= out
    if t > wb_last[s]:
        wb_last[s] = t


@nb.njit(cache=True, nogil=True)
def _wb_write(
    s, t, nbytes, wb_level, wb_last, wr_bw, wb_cap, wb_drop, wr_series, window_s, cnt, fcnt
):  # pragma: no cover - compiled
    """Put ``nbytes`` into resource ``s``'s buffer at ``t``; return how long the writer stalls."""
    if nbytes <= 0.0:
        return 0.0
    _wb_drain(s, t, wb_level, wb_last, wr_bw, wr_series, window_s)
    # rows [S, 2S) of the write series hold what was offered (the demand), [0, S) what drained
    _add_at(wr_series, s + wr_series.shape[0] // 2, t, nbytes, window_s)
    wb_level[s] += nbytes
    excess = wb_level[s] - wb_cap[s]
    if excess <= 0.0:
        return 0.0
    if wb_drop[s]:
        wb_level[s] = wb_cap[s]
        cnt[C_DROPPED_WRITES] += 1
        fcnt[F_DROPPED_BYTES] += excess
        return 0.0
    cnt[C_BLOCKED_WRITES] += 1
    return excess / wr_bw[s]


@nb.njit(cache=True, nogil=True)
def _occupy(r, t, run_cnt, occ_since, occ_s):  # pragma: no cover - compiled
    """Open or close replica ``r``'s interval holding requests (occupancy), at time ``t``."""
    if run_cnt[r] > 0 and occ_since[r] < 0.0:
        occ_since[r] = t
    elif run_cnt[r] == 0 and occ_since[r] >= 0.0:
        occ_s[r] += t - occ_since[r]
        occ_since[r] = -1.0


@nb.njit(cache=True, nogil=True)
def _pages(tokens, page):  # pragma: no cover - compiled
    return (tokens + page - 1) // page


@nb.njit(cache=True, nogil=True)
def _ps_push(
    s,
    f,
    nbytes,
    t,
    ps_v,
    ps_last,
    ps_size,
    ps_key,
    ps_fid,
    ps_base,
    fpos,
    fbytes,
    rd_bw,
    rd_series,
    rd_io_series,
    rd_io_bytes,
    window_s,
):  # pragma: no cover - compiled
    """Start flow ``f`` of ``nbytes`` on resource ``s`` at ``t`` (its I/Os counted now)."""
    _ps_advance(s, t, ps_v, ps_last, ps_size, rd_bw, rd_series, window_s)
    fbytes[f] = nbytes
    base = ps_base[s]
    i = ps_size[s]
    ps_key[base + i] = ps_v[s] + nbytes
    ps_fid[base + i] = f
    fpos[f] = i
    ps_size[s] = i + 1
    _ps_up(ps_key, ps_fid, fpos, base, i)
    _add_at(rd_io_series, s, t, np.ceil(nbytes / rd_io_bytes[s]), window_s)
    # rows [S, 2S) of the I/O series hold the bytes asked for (the demand) when asked
    _add_at(rd_io_series, s + rd_io_series.shape[0] // 2, t, nbytes, window_s)


@nb.njit(cache=True, nogil=True)
def _drop_running(run, run_cnt, r, q):  # pragma: no cover - compiled
    """Remove request ``q`` from replica ``r``'s running list, keeping the order."""
    j = 0
    for i in range(run_cnt[r]):
        if run[r, i] != q:
            run[r, j] = run[r, i]
            j += 1
    run_cnt[r] = j


@nb.njit(cache=True, nogil=True)
def _flush_writes(
    q,
    r,
    t,
    res_tier,
    done_write_tok,
    wpend,
    kv_bytes_per_token,
    wb_level,
    wb_last,
    wr_bw,
    wb_cap,
    wb_drop,
    wr_series,
    window_s,
    cnt,
    fcnt,
):  # pragma: no cover - compiled
    """A request releases its KV: write-back bytes held back and decode KV kept for later."""
    for k in range(res_tier.shape[1]):
        s = res_tier[r, k]
        nbytes = done_write_tok[q, k] * kv_bytes_per_token + wpend[q, k]
        wpend[q, k] = 0.0
        if s >= 0 and nbytes > 0.0:
            _wb_write(
                s,
                t,
                nbytes,
                wb_level,
                wb_last,
                wr_bw,
                wb_cap,
                wb_drop,
                wr_series,
                window_s,
                cnt,
                fcnt,
            )


@nb.njit(cache=True, nogil=True)
def simulate_group(
    # requests (group order: by arrival at the group)
    arrival,
    route,
    next_same,  # the next request routed to the same replica (fixed routing), -1 at the end
    first_same,  # per replica, its first request (fixed routing), -1 when none
    input_tok,
    output_tok,
    gpu_hit,
    load_tok,
    own_hit,
    xfer_tok,
    done_write_tok,
    # dynamic routing (ROUTE_KV reads the block ids; blk_masks holds the router's view)
    route_policy,
    route_weight,
    blk_offsets,
    blk_ids,
    blk_tokens,
    blk_masks,
    # replicas
    role,
    pool_pages,
    offload_pages,
    res_tier,
    res_link,
    res_swap,
    res_offload,
    # scheduler and engine
    page_tokens,
    max_tokens,
    max_seqs,
    preempt_swap,
    min_load_tokens,
    load_mode,
    prefetch_policy,
    prefetch_base_s,
    prefetch_per_token_s,
    write_back,
    kv_bytes_per_token,
    gpu_bytes_per_token,
    offload_ios_per_page,
    frontend_s,  # per request: the engine's front-end work, in the step that admits it
    # step table and the KV layout of one rank
    grid,
    tokens_s,
    s_per_pair,
    s_per_kv,
    logits_grid,
    logits_s,
    pf_fixed,
    dec_fixed,
    full_layers,
    window_layers,
    window_tokens,
    rank_full_bpt,
    rank_win_bpt,
    # resources
    rd_bw,
    rd_lat,
    rd_io_bytes,
    rd_iops,
    wr_bw,
    wb_cap,
    wb_drop,
    ps_base,
    # time
    window_s,
    t_stop,
    # outputs
    o_replica,
    o_admit,
    o_ready,
    o_first,
    o_done,
    o_preempt,
    o_recomputed,
    o_loaded,
    o_pf_gpu,
    o_dec_gpu,
    rd_series,
    rd_io_series,
    wr_series,
    wait_series,
    run_series,
    busy_s,
    occ_s,
    slog,
    cnt,
    fcnt,
):  # pragma: no cover - compiled
    """Replay one group of replicas; fills the output arrays (module docstring has the rules)."""
    n = arrival.shape[0]
    n_rep = pool_pages.shape[0]
    n_tier = load_tok.shape[1]
    n_res = rd_bw.shape[0]
    n_slot = n_tier + 2  # flow slots per request: one per tier, the link, the swap link
    # ---- per-request state
    state = np.zeros(n, np.int64)
    pf_pos = np.zeros(n, np.int64)
    pf_end = np.zeros(n, np.int64)
    ctx = np.zeros(n, np.int64)
    gen = np.zeros(n, np.int64)
    held = np.zeros(n, np.int64)
    chunk = np.zeros(n, np.int64)
    wmark = np.zeros(n, np.int64)  # prompt positions already written to the tiers
    pending = np.zeros(n, np.int64)
    ready_at = np.zeros(n, np.float64)
    resume = np.zeros(n, np.int64)  # what a request in S_LOAD does once its flows are in
    prefetching = np.zeros(n, np.bool_)
    fresh = np.ones(n, np.bool_)  # never admitted: its prefix hits still apply
    deadline = np.full(n, INF)
    wnext = np.full(n, -1, np.int64)
    wpend = np.zeros((n, n_tier), np.float64)
    r_pf_tok = np.zeros(n, np.float64)
    fpos = np.full(n * n_slot, -1, np.int64)
    fbytes = np.zeros(n * n_slot, np.float64)
    for i in range(n):
        o_replica[i] = route[i]
        o_admit[i] = np.nan
        o_ready[i] = np.nan
        o_first[i] = np.nan
        o_done[i] = np.nan
    # ---- per-replica state
    free = pool_pages + offload_pages
    run = np.full((n_rep, max_seqs), -1, np.int64)
    run_cnt = np.zeros(n_rep, np.int64)
    whead = np.full(n_rep, -1, np.int64)
    wtail = np.full(n_rep, -1, np.int64)
    busy = np.zeros(n_rep, np.bool_)
    occ_since = np.full(n_rep, -1.0)
    prefetch_n = np.zeros(n_rep, np.int64)  # requests prefetching while they wait
    log_cap = slog.shape[0]
    phase2 = np.zeros(n_rep, np.bool_)  # a step whose writes stalled: progress still to apply
    dirty = np.zeros(n_rep, np.bool_)
    outstanding = np.zeros(n_rep, np.float64)
    act_pf = np.zeros(n_rep, np.float64)
    act_dec = np.zeros(n_rep, np.float64)
    overlap = np.zeros(n_rep, np.int64)
    rep_next = first_same.copy()  # the next arrival routed to each replica (fixed routing)
    rr = 0
    # ---- resources
    ps_v = np.zeros(n_res, np.float64)
    ps_last = np.zeros(n_res, np.float64)
    ps_size = np.zeros(n_res, np.int64)
    n_heap = ps_base[n_res] if n_res > 0 else 0
    ps_key = np.zeros(max(n_heap, 1), np.float64)
    ps_fid = np.zeros(max(n_heap, 1), np.int64)
    wb_level = np.zeros(n_res, np.float64)
    wb_last = np.zeros(n_res, np.float64)
    # ---- timed events: at most one step per replica, one ready and one timeout per request
    ev_cap = 2 * n + n_rep + 8
    ev_t = np.zeros(ev_cap, np.float64)
    ev_k = np.zeros(ev_cap, np.int64)
    ev_i = np.zeros(ev_cap, np.int64)
    ev_n = 0
    n_waiting = 0
    n_running = 0
    n_done = 0
    next_arr = 0
    t = 0.0

    while n_done < n:
        # ---- the next event: an arrival, a timed event, or a flow completing
        t_arr = arrival[next_arr] if next_arr < n else INF
        t_ev = ev_t[0] if ev_n > 0 else INF
        t_ps = INF
        s_ps = -1
        for s in range(n_res):
            tc = _ps_next(s, ps_v, ps_last, ps_size, ps_key, ps_base, rd_bw)
            if tc < t_ps:
                t_ps = tc
                s_ps = s
        t_next = min(t_arr, min(t_ev, t_ps))
        if t_next == INF or t_next > t_stop:
            break
        if t_next > t:
            _add_rate(wait_series, 0, t, t_next, float(n_waiting), window_s)
            _add_rate(run_series, 0, t, t_next, float(n_running), window_s)
            t = t_next
        if t_ps <= t_ev and t_ps <= t_arr:
            # ---- a flow completes; its request is ready when all its flows are in, + latency
            s = s_ps
            _ps_advance(s, t, ps_v, ps_last, ps_size, rd_bw, rd_series, window_s)
            f = ps_fid[ps_base[s]]
            _ps_remove(s, f, ps_key, ps_fid, ps_size, ps_base, fpos)
            q = f // n_slot
            pending[q] -= 1
            ready_at[q] = max(ready_at[q], t + rd_lat[s])
            if pending[q] == 0:
                ev_n = _ev_push(ev_t, ev_k, ev_i, ev_n, ready_at[q], EV_READY, q)
        elif t_ev <= t_arr:
            kind = ev_k[0]
            ident = ev_i[0]
            ev_n = _ev_pop(ev_t, ev_k, ev_i, ev_n)
            if kind == EV_TIMEOUT:
                dirty[o_replica[ident]] = True
            elif kind == EV_READY:
                q = ident
                r = o_replica[q]
                if state[q] == S_WAIT and prefetching[q]:
                    prefetching[q] = False  # its prefetch is in: the scheduler may admit it
                    prefetch_n[r] -= 1
                    o_ready[q] = t
                    dirty[r] = True
                elif state[q] == S_LOAD:
                    o_ready[q] = t
                    dirty[r] = True
                    if resume[q] == S_DECODE:
                        if gen[q] == 0:
                            # disaggregated decode: the prompt's KV is in; the first token
                            # computed by prefill goes out now
                            gen[q] = 1
                            o_first[q] = t
                            act_pf[r] -= r_pf_tok[q]
                            r_pf_tok[q] = 0.0
                        state[q] = S_DECODE
                        if gen[q] >= output_tok[q]:
                            state[q] = S_DONE
                            _flush_writes(
                                q,
                                r,
                                t,
                                res_tier,
                                done_write_tok,
                                wpend,
                                kv_bytes_per_token,
                                wb_level,
                                wb_last,
                                wr_bw,
                                wb_cap,
                                wb_drop,
                                wr_series,
                                window_s,
                                cnt,
                                fcnt,
                            )
                            free[r] += held[q]
                            held[q] = 0
                            o_done[q] = t
                            n_done += 1
                            n_running -= 1
                            outstanding[r] -= 1.0
                            act_dec[r] -= float(input_tok[q])
                            _drop_running(run, run_cnt, r, q)
                            _occupy(r, t, run_cnt, occ_since, occ_s)
                    else:
                        state[q] = S_PREFILL
            else:
                # ---- a step ends: write what its prefill chunks produced, then progress
                r = ident
                if not phase2[r]:
                    stall = 0.0
                    if role != ROLE_DECODE:
                        for i in range(run_cnt[r]):
                            q = run[r, i]
                            if chunk[q] <= 0 or state[q] != S_PREFILL:
                                continue
                            b = pf_pos[q] + chunk[q]
                            for k in range(n_tier):
                                s = res_tier[r, k]
                                tok = b - max(max(pf_pos[q], own_hit[q, k]), wmark[q])
                                if s < 0 or tok <= 0:
                                    continue
                                nbytes = float(tok) * kv_bytes_per_token
                                if write_back:
                                    wpend[q, k] += nbytes
                                else:
                                    stall = max(
                                        stall,
                                        _wb_write(
                                            s,
                                            t,
                                            nbytes,
                                            wb_level,
                                            wb_last,
                                            wr_bw,
                                            wb_cap,
                                            wb_drop,
                                            wr_series,
                                            window_s,
                                            cnt,
                                            fcnt,
                                        ),
                                    )
                            wmark[q] = max(wmark[q], b)
                    if stall > 0.0:
                        phase2[r] = True
                        ev_n = _ev_push(ev_t, ev_k, ev_i, ev_n, t + stall, EV_STEP, r)
                        continue
                phase2[r] = False
                busy[r] = False
                dirty[r] = True
                j = 0
                for i in range(run_cnt[r]):
                    q = run[r, i]
                    c = chunk[q]
                    chunk[q] = 0
                    finished = False
                    if c > 0 and state[q] == S_PREFILL:
                        pf_pos[q] += c
                        ctx[q] = pf_pos[q]
                        if pf_pos[q] >= pf_end[q]:
                            gen[q] += 1
                            if np.isnan(o_first[q]):
                                o_first[q] = t
                            act_pf[r] -= r_pf_tok[q]
                            r_pf_tok[q] = 0.0
                            if role == ROLE_PREFILL or gen[q] >= output_tok[q]:
                                finished = True
                            else:
                                state[q] = S_DECODE
                    elif c > 0 and state[q] == S_DECODE:
                        ctx[q] += c  # c > 1: several decode steps taken at once (below)
                        gen[q] += c
                        if gen[q] >= output_tok[q]:
                            finished = True
                    if finished:
                        state[q] = S_DONE
                        _flush_writes(
                            q,
                            r,
                            t,
                            res_tier,
                            done_write_tok,
                            wpend,
                            kv_bytes_per_token,
                            wb_level,
                            wb_last,
                            wr_bw,
                            wb_cap,
                            wb_drop,
                            wr_series,
                            window_s,
                            cnt,
                            fcnt,
                        )
                        free[r] += held[q]
                        held[q] = 0
                        o_done[q] = t
                        n_done += 1
                        n_running -= 1
                        outstanding[r] -= 1.0
                        act_dec[r] -= float(input_tok[q])
                    else:
                        run[r, j] = q
                        j += 1
                run_cnt[r] = j
                _occupy(r, t, run_cnt, occ_since, occ_s)
        else:
            # ---- an arrival: route, queue, and start its prefetch where the engine does
            q = next_arr
            next_arr += 1
            r = route[q]
            if r < 0:
                if route_policy == ROUTE_KV:
                    nblk = blk_offsets[q + 1] - blk_offsets[q]
                    for x in range(n_rep):
                        word = x // 64
                        bit = np.uint64(1) << np.uint64(x % 64)
                        k = 0
                        while k < nblk:
                            if blk_masks[blk_ids[blk_offsets[q] + k], word] & bit == 0:
                                break
                            k += 1
                        # whole pages only: a partial page is no hit
                        matched = min(k * blk_tokens, input_tok[q])
                        overlap[x] = matched // page_tokens * page_tokens
                best = 0
                best_cost = INF
                for y in range(n_rep):
                    x = (rr + y) % n_rep
                    if route_policy == ROUTE_KV:
                        # Dynamo's KV router: prefill blocks to compute (active and this
                        # request's uncached ones) weighted, plus active decode blocks
                        cost = route_weight * (act_pf[x] + input_tok[q] - overlap[x])
                        cost += act_dec[x] + input_tok[q]
                    else:
                        cost = outstanding[x]
                    if cost < best_cost:
                        best_cost = cost
                        best = x
                r = best
                rr = (rr + 1) % n_rep
                if route_policy == ROUTE_KV:
                    gpu_hit[q] = overlap[r]
                    word = r // 64
                    bit = np.uint64(1) << np.uint64(r % 64)
                    for k in range(blk_offsets[q], blk_offsets[q + 1]):
                        blk_masks[blk_ids[k], word] |= bit
            else:
                rep_next[r] = next_same[q]
            o_replica[q] = r
            outstanding[r] += 1.0
            r_pf_tok[q] = float(input_tok[q] - min(gpu_hit[q], input_tok[q]))
            act_pf[r] += r_pf_tok[q]
            act_dec[r] += float(input_tok[q])
            if wtail[r] < 0:
                whead[r] = q
            else:
                wnext[wtail[r]] = q
            wtail[r] = q
            n_waiting += 1
            dirty[r] = True
            if load_mode == LOAD_PREFETCH and role != ROLE_DECODE:
                total = 0
                for k in range(n_tier):
                    total += load_tok[q, k]
                if total > 0 and total >= min_load_tokens:
                    prefetching[q] = True
                    prefetch_n[r] += 1
                    ready_at[q] = t
                    for k in range(n_tier):
                        if load_tok[q, k] > 0:
                            _ps_push(
                                res_tier[r, k],
                                q * n_slot + k,
                                float(load_tok[q, k]) * kv_bytes_per_token,
                                t,
                                ps_v,
                                ps_last,
                                ps_size,
                                ps_key,
                                ps_fid,
                                ps_base,
                                fpos,
                                fbytes,
                                rd_bw,
                                rd_series,
                                rd_io_series,
                                rd_io_bytes,
                                window_s,
                            )
                            pending[q] += 1
                    if prefetch_policy == PREFETCH_TIMEOUT:
                        deadline[q] = t + prefetch_base_s + prefetch_per_token_s * total
                        ev_n = _ev_push(ev_t, ev_k, ev_i, ev_n, deadline[q], EV_TIMEOUT, q)

        # ---- start a step on every idle replica whose state changed
        for r in range(n_rep):
            if busy[r] or not dirty[r]:
                continue
            dirty[r] = False
            budget = max_tokens
            n_tok = 0
            n_seq = 0  # sequences in the step: each computes its last position's logits
            n_pf_tok = 0
            pairs = 0.0
            kv = 0.0
            swap_s = 0.0
            fe = 0.0
            n_preempt = 0
            preempted = False
            i = 0
            while i < run_cnt[r] and budget > 0:
                q = run[r, i]
                if state[q] == S_LOAD:
                    i += 1
                    continue
                if state[q] == S_PREFILL:
                    m = min(pf_end[q] - pf_pos[q], budget)
                    need = _pages(pf_pos[q] + m, page_tokens) - held[q]
                else:
                    m = 1
                    need = _pages(ctx[q] + 1, page_tokens) - held[q]
                lost_self = False
                stuck = False
                while need > free[r]:
                    # vLLM preempts the most recently admitted running request (never one
                    # whose KV is still being loaded: it holds no computed state to give up)
                    x = run_cnt[r] - 1
                    while x >= 0 and state[run[r, x]] == S_LOAD:
                        x -= 1
                    if x < 0:
                        stuck = True
                        break
                    v = run[r, x]
                    for y in range(x, run_cnt[r] - 1):
                        run[r, y] = run[r, y + 1]
                    run_cnt[r] -= 1
                    preempted = True
                    n_preempt += 1
                    cnt[C_PREEMPTIONS] += 1
                    o_preempt[v] += 1
                    # vLLM frees the victim's blocks into the evictable prefix cache: the pages
                    # this allocation does not take keep its leading tokens for its return
                    survive = max(held[v] - (need - free[r]), 0)
                    kept = min(survive * page_tokens, ctx[v])
                    free[r] += held[v]
                    if preempt_swap and state[v] == S_DECODE and res_swap[r] >= 0:
                        # swap: its KV goes to host memory within this step, back on resume
                        cnt[C_SWAPS] += 1
                        nbytes = float(ctx[v]) * gpu_bytes_per_token
                        fcnt[F_SWAP_BYTES] += nbytes
                        swap_s += nbytes / rd_bw[res_swap[r]]
                        resume[v] = S_DECODE
                    else:
                        # recompute what it held beyond the surviving prefix (prompt and the
                        # tokens generated so far)
                        if state[v] == S_DECODE:
                            pf_end[v] = ctx[v] + 1
                            gen[v] -= 1  # the recompute produces that token again
                        pf_pos[v] = min(kept, pf_end[v] - 1)
                        fcnt[F_PREEMPT_TOKENS] += float(max(ctx[v] - pf_pos[v], 0))
                        resume[v] = S_PREFILL
                    held[v] = 0
                    state[v] = S_WAIT
                    wnext[v] = whead[r]
                    whead[r] = v
                    if wtail[r] < 0:
                        wtail[r] = v
                    n_waiting += 1
                    n_running -= 1
                    if v == q:
                        lost_self = True
                        break
                if lost_self or stuck:
                    break
                held[q] += need
                free[r] -= need
                chunk[q] = m
                budget -= m
                n_tok += m
                n_seq += 1
                if state[q] == S_PREFILL:
                    n_pf_tok += m
                    pairs += attention_pairs(
                        float(m), float(pf_pos[q]), full_layers, window_layers, window_tokens
                    )
                else:
                    kv += _rank_kv(float(ctx[q] + 1), rank_full_bpt, rank_win_bpt, window_tokens)
                i += 1
            # admissions, first come first served, while budget, sequences and pages allow
            admitted = False
            prev = -1
            q = whead[r]
            while q >= 0 and not preempted and budget > 0 and run_cnt[r] < max_seqs:
                nxt = wnext[q]
                loads = False
                if fresh[q] and role == ROLE_DECODE:
                    need = _pages(input_tok[q], page_tokens)
                    if need > free[r]:
                        break
                    ctx[q] = input_tok[q]
                    pf_pos[q] = input_tok[q]
                    pf_end[q] = input_tok[q]
                    resume[q] = S_DECODE
                    loads = True
                elif fresh[q]:
                    h0 = min(gpu_hit[q], input_tok[q])
                    total = 0
                    for k in range(n_tier):
                        total += load_tok[q, k]
                    loaded = total
                    if total > 0 and total < min_load_tokens:
                        # below the engine's threshold the hit is recomputed, not loaded
                        loaded = 0
                        cnt[C_RECOMPUTED_LOADS] += 1
                        fcnt[F_RECOMPUTED_TOKENS] += float(total)
                        o_recomputed[q] += total
                    elif total > 0 and load_mode == LOAD_PREFETCH and prefetching[q]:
                        if prefetch_policy == PREFETCH_WAIT or (
                            prefetch_policy == PREFETCH_TIMEOUT and t < deadline[q]
                        ):
                            prev = q
                            q = nxt
                            continue
                        # best effort: keep the leading run of what has arrived
                        loaded = 0
                        whole = True
                        for k in range(n_tier):
                            if load_tok[q, k] <= 0:
                                continue
                            f = q * n_slot + k
                            got = load_tok[q, k]
                            if fpos[f] >= 0:
                                s = res_tier[o_replica[q], k]
                                _ps_advance(
                                    s, t, ps_v, ps_last, ps_size, rd_bw, rd_series, window_s
                                )
                                left = ps_key[ps_base[s] + fpos[f]] - ps_v[s]
                                # whole tokens delivered (a relative 1e-9 absorbs rounding)
                                got = int((fbytes[f] - left) / kv_bytes_per_token * (1 + 1e-9))
                                got = max(0, min(got, load_tok[q, k]))
                                _ps_remove(s, f, ps_key, ps_fid, ps_size, ps_base, fpos)
                                pending[q] -= 1
                            if whole:
                                loaded += got
                            if got < load_tok[q, k]:
                                whole = False
                        prefetching[q] = False
                        prefetch_n[r] -= 1
                        if loaded < total:
                            cnt[C_RECOMPUTED_LOADS] += 1
                            fcnt[F_RECOMPUTED_TOKENS] += float(total - loaded)
                            o_recomputed[q] += total - loaded
                    start = h0 + loaded
                    pf_end[q] = input_tok[q]
                    pf_pos[q] = min(start, input_tok[q] - 1)
                    if loaded > 0 and load_mode == LOAD_ASYNC:
                        need = _pages(start, page_tokens)
                        if need > free[r]:
                            break
                        ctx[q] = start
                        resume[q] = S_PREFILL
                        loads = True
                    else:
                        m = min(pf_end[q] - pf_pos[q], budget)
                        need = _pages(pf_pos[q] + m, page_tokens)
                        if need > free[r]:
                            break
                        ctx[q] = pf_pos[q]
                    o_loaded[q] = loaded
                    # the engine's front end (request handling, tokens, block hashes) runs in
                    # its loop: the step admitting the request takes that much longer
                    fe += frontend_s[q]
                    o_pf_gpu[q] += frontend_s[q]
                    # tier k is written what it did not hold of the prefix now in GPU memory
                    # (promoted from a slower tier, or a GPU hit it had evicted)
                    for k in range(n_tier):
                        s = res_tier[r, k]
                        tok = start - own_hit[q, k]
                        if s < 0 or tok <= 0:
                            continue
                        nbytes = float(tok) * kv_bytes_per_token
                        if write_back:
                            wpend[q, k] += nbytes
                        else:
                            _wb_write(
                                s,
                                t,
                                nbytes,
                                wb_level,
                                wb_last,
                                wr_bw,
                                wb_cap,
                                wb_drop,
                                wr_series,
                                window_s,
                                cnt,
                                fcnt,
                            )
                    wmark[q] = start
                elif resume[q] == S_DECODE:
                    need = _pages(ctx[q], page_tokens)  # swap its KV back in
                    if need > free[r]:
                        break
                    loads = True
                else:
                    m = min(pf_end[q] - pf_pos[q], budget)  # recompute after a preemption
                    need = _pages(pf_pos[q] + m, page_tokens)
                    if need > free[r]:
                        break
                # admitted: out of the waiting list, into the running list
                admitted = True
                if prev < 0:
                    whead[r] = nxt
                else:
                    wnext[prev] = nxt
                if wtail[r] == q:
                    wtail[r] = prev
                wnext[q] = -1
                n_waiting -= 1
                n_running += 1
                run[r, run_cnt[r]] = q
                run_cnt[r] += 1
                _occupy(r, t, run_cnt, occ_since, occ_s)
                held[q] = need
                free[r] -= need
                if np.isnan(o_admit[q]):
                    o_admit[q] = t
                if loads:
                    state[q] = S_LOAD
                    ready_at[q] = t
                    if fresh[q] and role == ROLE_DECODE:
                        _ps_push(
                            res_link[r],
                            q * n_slot + n_tier,
                            float(xfer_tok[q]) * kv_bytes_per_token,
                            t,
                            ps_v,
                            ps_last,
                            ps_size,
                            ps_key,
                            ps_fid,
                            ps_base,
                            fpos,
                            fbytes,
                            rd_bw,
                            rd_series,
                            rd_io_series,
                            rd_io_bytes,
                            window_s,
                        )
                        pending[q] += 1
                    elif fresh[q]:
                        for k in range(n_tier):
                            if load_tok[q, k] > 0:
                                _ps_push(
                                    res_tier[r, k],
                                    q * n_slot + k,
                                    float(load_tok[q, k]) * kv_bytes_per_token,
                                    t,
                                    ps_v,
                                    ps_last,
                                    ps_size,
                                    ps_key,
                                    ps_fid,
                                    ps_base,
                                    fpos,
                                    fbytes,
                                    rd_bw,
                                    rd_series,
                                    rd_io_series,
                                    rd_io_bytes,
                                    window_s,
                                )
                                pending[q] += 1
                    else:
                        _ps_push(
                            res_swap[r],
                            q * n_slot + n_tier + 1,
                            float(ctx[q]) * gpu_bytes_per_token,
                            t,
                            ps_v,
                            ps_last,
                            ps_size,
                            ps_key,
                            ps_fid,
                            ps_base,
                            fpos,
                            fbytes,
                            rd_bw,
                            rd_series,
                            rd_io_series,
                            rd_io_bytes,
                            window_s,
                        )
                        pending[q] += 1
                else:
                    state[q] = S_PREFILL
                    m = min(pf_end[q] - pf_pos[q], budget)
                    chunk[q] = m
                    budget -= m
                    n_tok += m
                    n_seq += 1
                    n_pf_tok += m
                    pairs += attention_pairs(
                        float(m), float(pf_pos[q]), full_layers, window_layers, window_tokens
                    )
                fresh[q] = False
                q = nxt
            _occupy(r, t, run_cnt, occ_since, occ_s)  # preemptions may have emptied it
            if n_tok == 0 and fe == 0.0:
                continue
            # the step's time, and each request's share of it (docs/replay.md, stage split)
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
            compute = tok_part + s_per_pair * pairs + s_per_kv * kv
            extra = swap_s
            if res_offload[r] >= 0 and offload_pages[r] > free[r]:
                # decode-time offload: KV beyond the GPU pool is read from the tier every step
                s = res_offload[r]
                over = offload_pages[r] - free[r]
                nbytes = float(over * page_tokens) * kv_bytes_per_token
                ios = float(over * offload_ios_per_page)
                read_s = rd_lat[s] + max(nbytes / rd_bw[s], ios / rd_iops[s])
                _add_rate(rd_series, s, t, t + read_s, nbytes / read_s, window_s)
                _add_at(rd_io_series, s, t, ios, window_s)
                _add_at(rd_io_series, s + n_res, t, nbytes, window_s)
                extra += read_s
            n_dec = n_tok - n_pf_tok
            first_s = compute + extra + fe
            # Decode fast-forward: a replica running only decode tokens, with nothing waiting,
            # loading or offloaded, takes identical steps but for the KV growing by one token
            # per request per step, until a request finishes, the next request routed to it
            # arrives, or its pages run out. Those k steps are taken as one event, each with
            # the time R1 gives it: the same results, k - 1 fewer events.
            steps = 1
            slope_s = 0.0
            if (
                n_pf_tok == 0
                and n_dec == run_cnt[r]
                and not preempted
                and not admitted
                and whead[r] < 0
                and extra == 0.0
                and fe == 0.0
                and res_offload[r] < 0
            ):
                kmax = INF
                slope = 0.0
                for i in range(run_cnt[r]):
                    q = run[r, i]
                    kmax = min(kmax, float(output_tok[q] - gen[q]))
                    slope += rank_full_bpt
                    if rank_win_bpt > 0.0 and window_tokens > 0:
                        below = window_tokens - (ctx[q] + 1)
                        if below > 0:
                            slope += rank_win_bpt
                            kmax = min(kmax, float(below))
                slope *= s_per_kv
                if route_policy == ROUTE_FIXED:
                    t_lim = arrival[rep_next[r]] if rep_next[r] >= 0 else INF
                else:
                    t_lim = arrival[next_arr] if next_arr < n else INF
                t_lim = min(t_lim, t_stop) - t
                total = compute
                k = 1
                slope_s = slope
                while k < kmax:
                    d = compute + slope * k
                    if total + d > t_lim:
                        break
                    # pages for one more token each, from the free ones
                    more = 0
                    for i in range(run_cnt[r]):
                        q = run[r, i]
                        if (ctx[q] + k + 1) % page_tokens == 1 or page_tokens == 1:
                            more += 1
                    if more > free[r]:
                        break
                    free[r] -= more
                    for i in range(run_cnt[r]):
                        q = run[r, i]
                        if (ctx[q] + k + 1) % page_tokens == 1 or page_tokens == 1:
                            held[q] += 1
                    total += d
                    k += 1
                if k > 1:
                    steps = k
                    compute = total
                    for i in range(run_cnt[r]):
                        chunk[run[r, i]] = k
            kv_tok = 0.0
            for i in range(run_cnt[r]):
                q = run[r, i]
                c = chunk[q]
                if state[q] == S_PREFILL:
                    kv_tok += float(pf_pos[q] + max(c, 0))
                elif state[q] == S_DECODE:
                    kv_tok += float(ctx[q] + min(max(c, 0), 1))
                else:
                    kv_tok += float(ctx[q])
                if c <= 0:
                    continue
                if state[q] == S_PREFILL:
                    o_pf_gpu[q] += tok_part * c / n_tok + s_per_pair * attention_pairs(
                        float(c), float(pf_pos[q]), full_layers, window_layers, window_tokens
                    )
                    if n_dec == 0:
                        o_pf_gpu[q] += extra * c / n_tok
                else:
                    o_dec_gpu[q] += (
                        steps * tok_part / n_tok
                        + extra / n_dec
                        + s_per_kv
                        * _rank_kv_sum(
                            float(ctx[q] + 1), float(c), rank_full_bpt, rank_win_bpt, window_tokens
                        )
                    )
            busy[r] = True
            cnt[C_STEPS] += steps
            # busy time: the replica executing steps (a write stall after it is not)
            busy_s[r] += compute + extra + fe
            if log_cap > 0:
                row = cnt[C_LOG_ROWS]
                cnt[C_LOG_ROWS] += 1
                if row < log_cap:
                    loading = prefetch_n[r]
                    for i in range(run_cnt[r]):
                        if state[run[r, i]] == S_LOAD:
                            loading += 1
                    wbytes = 0.0
                    for k2 in range(n_tier):
                        s = res_tier[r, k2]
                        if s >= 0:
                            _wb_drain(s, t, wb_level, wb_last, wr_bw, wr_series, window_s)
                            wbytes += wb_level[s]
                    slog[row, L_REPLICA] = r
                    slog[row, L_START] = t
                    slog[row, L_FIRST_S] = first_s
                    slog[row, L_SLOPE_S] = slope_s if steps > 1 else 0.0
                    slog[row, L_STEPS] = steps
                    slog[row, L_TOTAL_S] = compute + extra + fe
                    slog[row, L_PREFILL_TOKENS] = n_pf_tok
                    slog[row, L_DECODE_SEQS] = n_dec
                    slog[row, L_KV_TOKENS] = kv_tok
                    slog[row, L_LOADS] = loading
                    slog[row, L_WRITE_BYTES] = wbytes
                    slog[row, L_PREEMPTIONS] = n_preempt
                    slog[row, L_FRONTEND_S] = fe
            ev_n = _ev_push(ev_t, ev_k, ev_i, ev_n, t + compute + extra + fe, EV_STEP, r)
    # ---- the end: flows and buffers brought to the last event; what never finished counted
    for s in range(n_res):
        _ps_advance(s, t, ps_v, ps_last, ps_size, rd_bw, rd_series, window_s)
        _wb_drain(s, INF, wb_level, wb_last, wr_bw, wr_series, window_s)
    for r in range(n_rep):
        if occ_since[r] >= 0.0:
            occ_s[r] += t - occ_since[r]
    cnt[C_UNFINISHED] += n - n_done
    fcnt[F_END_S] = max(fcnt[F_END_S], t)
