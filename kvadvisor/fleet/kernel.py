"""The replay's compiled event loop: one group of replicas replayed over arrays (numba).

This module imports numba at import time; ``kvadvisor.fleet`` imports it only inside the
function that runs a replay, so building a deployment or rendering a report never pays for it.
Everything the loop touches is in the named records of ``fleet.kernel_state`` (the caller's
inputs and outputs, the loop's own state allocated once per group), so memory use is
explicit: per request a fixed number of slots, per resource a heap of at most the requests
that can use it, per window a few sums.

A group is a set of replicas that share something (an instance's tier or NIC, a pooled tier, a
router that looks at live load); groups are independent and may run concurrently. The loop
(:func:`run_group`) takes the earliest event (a flow completing, a timed event, an arrival),
hands it to its phase, then starts a step on every idle replica whose state changed. The
phases, in this order below: tier I/O (shared-bandwidth loads, buffered writes, the event
heap), the step (the scheduler policy, the step's cost), then the events (a step's progress,
the one completion block :func:`finish`, routing and prefetch at arrival) and the loop.
docs/replay.md states each rule with its formula and source.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from kvadvisor.fleet.kernel_state import (
    C_BLOCKED_WRITES,
    C_DROPPED_WRITES,
    C_LOG_ROWS,
    C_PREEMPTIONS,
    C_RECOMPUTED_LOADS,
    C_STEPS,
    C_SWAPS,
    C_UNFINISHED,
    EV_READY,
    EV_STEP,
    EV_TIMEOUT,
    F_DROPPED_BYTES,
    F_END_S,
    F_PREEMPT_TOKENS,
    F_RECOMPUTED_TOKENS,
    F_SWAP_BYTES,
    INF,
    L_DECODE_SEQS,
    L_FIRST_S,
    L_FRONTEND_S,
    L_KV_TOKENS,
    L_LOADS,
    L_PREEMPTIONS,
    L_PREFILL_TOKENS,
    L_REPLICA,
    L_SLOPE_S,
    L_START,
    L_STEPS,
    L_TOTAL_S,
    L_WRITE_BYTES,
    LOAD_ASYNC,
    LOAD_PREFETCH,
    N_COUNTERS,
    N_FLOAT_COUNTERS,
    N_LOG,
    PREFETCH_BEST,
    PREFETCH_TIMEOUT,
    PREFETCH_WAIT,
    ROLE_DECODE,
    ROLE_PREFILL,
    ROLE_SERVING,
    ROUTE_FIXED,
    ROUTE_KV,
    ROUTE_LEAST,
    S_DECODE,
    S_DONE,
    S_LOAD,
    S_PREFILL,
    S_WAIT,
    SCHED_VLLM,
    T_DONE,
    T_EVENTS,
    T_NEXT,
    T_RR,
    T_RUNNING,
    T_WAITING,
    Config,
    Outputs,
    Replicas,
    Requests,
    Resources,
    StepModel,
    new_group,
)

__all__ = [
    "C_BLOCKED_WRITES",
    "C_DROPPED_WRITES",
    "C_LOG_ROWS",
    "C_PREEMPTIONS",
    "C_RECOMPUTED_LOADS",
    "C_STEPS",
    "C_SWAPS",
    "C_UNFINISHED",
    "F_DROPPED_BYTES",
    "F_END_S",
    "F_PREEMPT_TOKENS",
    "F_RECOMPUTED_TOKENS",
    "F_SWAP_BYTES",
    "L_DECODE_SEQS",
    "L_FIRST_S",
    "L_FRONTEND_S",
    "L_KV_TOKENS",
    "L_LOADS",
    "L_PREEMPTIONS",
    "L_PREFILL_TOKENS",
    "L_REPLICA",
    "L_SLOPE_S",
    "L_START",
    "L_STEPS",
    "L_TOTAL_S",
    "L_WRITE_BYTES",
    "LOAD_ASYNC",
    "LOAD_PREFETCH",
    "N_COUNTERS",
    "N_FLOAT_COUNTERS",
    "N_LOG",
    "PREFETCH_BEST",
    "PREFETCH_TIMEOUT",
    "PREFETCH_WAIT",
    "ROLE_DECODE",
    "ROLE_PREFILL",
    "ROLE_SERVING",
    "ROUTE_FIXED",
    "ROUTE_KV",
    "ROUTE_LEAST",
    "SCHED_VLLM",
    "Config",
    "Outputs",
    "Replicas",
    "Requests",
    "Resources",
    "StepModel",
    "attention_pairs",
    "simulate_group",
    "step_time",
]


# ==== tier I/O: shared-bandwidth flows, write buffers, the timed-event heap ====
# Loads and transfers share a resource's bandwidth equally among the flows in flight (processor
# sharing, tracked with virtual time as in fair queueing), then pay the resource's latency.
# Writes go through a buffer drained at the write bandwidth; a full buffer stalls the step that
# wrote (block) or loses the excess (drop).


@nb.njit(cache=True, nogil=True)
def add_rate(series, row, t0, t1, rate, window_s):  # pragma: no cover - compiled
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
def add_at(series, row, t, amount, window_s):  # pragma: no cover - compiled
    """Add ``amount`` to the window holding time ``t``."""
    w = min(int(t / window_s), series.shape[1] - 1)
    series[row, w] += amount


# ---- the timed-event heap (time, kind, id) -------------------------------------------------


@nb.njit(cache=True, nogil=True)
def _ev_swap(ev, a, b):  # pragma: no cover - compiled
    ev.t[a], ev.t[b] = ev.t[b], ev.t[a]
    ev.kind[a], ev.kind[b] = ev.kind[b], ev.kind[a]
    ev.ident[a], ev.ident[b] = ev.ident[b], ev.ident[a]


@nb.njit(cache=True, nogil=True)
def ev_push(ev, tally, t, kind, ident):  # pragma: no cover - compiled
    """Add a timed event."""
    i = tally[T_EVENTS]
    ev.t[i] = t
    ev.kind[i] = kind
    ev.ident[i] = ident
    while i > 0:
        parent = (i - 1) // 2
        if ev.t[parent] <= ev.t[i]:
            break
        _ev_swap(ev, parent, i)
        i = parent
    tally[T_EVENTS] += 1


@nb.njit(cache=True, nogil=True)
def ev_pop(ev, tally):  # pragma: no cover - compiled
    """Remove the earliest timed event (read it at slot 0 first)."""
    size = tally[T_EVENTS] - 1
    tally[T_EVENTS] = size
    ev.t[0] = ev.t[size]
    ev.kind[0] = ev.kind[size]
    ev.ident[0] = ev.ident[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        child = left
        if left + 1 < size and ev.t[left + 1] < ev.t[left]:
            child = left + 1
        if ev.t[i] <= ev.t[child]:
            break
        _ev_swap(ev, child, i)
        i = child


# ---- processor-sharing resources: one heap of finish tags per resource ----------------------
# A flow of b bytes joining resource s at virtual time V finishes when V reaches V + b, where V
# advances at bandwidth / flows-in-flight (every flow gets an equal share; Demers, Keshav and
# Shenker, SIGCOMM 1989, for the virtual-time bookkeeping). Heap slots of resource s live at
# ps_base[s] .. ps_base[s] + capacity; fpos[f] is flow f's slot offset (-1 when inactive).


@nb.njit(cache=True, nogil=True)
def _ps_swap(fl, base, a, b):  # pragma: no cover - compiled
    ps_key, ps_fid, fpos = fl.ps_key, fl.ps_fid, fl.fpos
    ps_key[base + a], ps_key[base + b] = ps_key[base + b], ps_key[base + a]
    ps_fid[base + a], ps_fid[base + b] = ps_fid[base + b], ps_fid[base + a]
    fpos[ps_fid[base + a]] = a
    fpos[ps_fid[base + b]] = b


@nb.njit(cache=True, nogil=True)
def _ps_up(fl, base, i):  # pragma: no cover - compiled
    while i > 0:
        parent = (i - 1) // 2
        if fl.ps_key[base + parent] <= fl.ps_key[base + i]:
            break
        _ps_swap(fl, base, parent, i)
        i = parent


@nb.njit(cache=True, nogil=True)
def _ps_down(fl, base, size, i):  # pragma: no cover - compiled
    ps_key = fl.ps_key
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        child = left
        if left + 1 < size and ps_key[base + left + 1] < ps_key[base + left]:
            child = left + 1
        if ps_key[base + i] <= ps_key[base + child]:
            break
        _ps_swap(fl, base, i, child)
        i = child


@nb.njit(cache=True, nogil=True)
def ps_advance(fl, res, read, window_s, s, t):  # pragma: no cover - compiled
    """Move resource ``s`` to time ``t``: every flow in flight got bandwidth / n since."""
    n = fl.ps_size[s]
    if n > 0 and t > fl.ps_last[s]:
        fl.ps_v[s] += res.rd_bw[s] * (t - fl.ps_last[s]) / n
        add_rate(read, s, fl.ps_last[s], t, res.rd_bw[s], window_s)
    fl.ps_last[s] = t


@nb.njit(cache=True, nogil=True)
def ps_next(fl, res, s):  # pragma: no cover - compiled
    """When resource ``s`` completes its next flow (inf when idle)."""
    n = fl.ps_size[s]
    if n == 0:
        return INF
    remaining = fl.ps_key[res.ps_base[s]] - fl.ps_v[s]
    if remaining <= 0.0:
        return fl.ps_last[s]
    return fl.ps_last[s] + remaining * n / res.rd_bw[s]


@nb.njit(cache=True, nogil=True)
def ps_remove(fl, res, s, f):  # pragma: no cover - compiled
    """Take flow ``f`` out of resource ``s`` (completed or cancelled)."""
    base = res.ps_base[s]
    i = fl.fpos[f]
    last = fl.ps_size[s] - 1
    if i != last:
        _ps_swap(fl, base, i, last)
    fl.ps_size[s] = last
    fl.fpos[f] = -1
    if i < last:
        _ps_down(fl, base, last, i)
        _ps_up(fl, base, i)


@nb.njit(cache=True, nogil=True)
def ps_push(g, s, f, nbytes, t):  # pragma: no cover - compiled
    """Start flow ``f`` of ``nbytes`` on resource ``s`` at ``t`` (its I/Os counted now)."""
    fl, res, out, window_s = g.fl, g.res, g.out, g.cfg.window_s
    ps_advance(fl, res, out.read, window_s, s, t)
    fl.fbytes[f] = nbytes
    base = res.ps_base[s]
    i = fl.ps_size[s]
    fl.ps_key[base + i] = fl.ps_v[s] + nbytes
    fl.ps_fid[base + i] = f
    fl.fpos[f] = i
    fl.ps_size[s] = i + 1
    _ps_up(fl, base, i)
    add_at(out.read_ios, s, t, np.ceil(nbytes / res.rd_io_bytes[s]), window_s)
    # rows [S, 2S) of the I/O series hold the bytes asked for (the demand) when asked
    add_at(out.read_ios, s + out.read_ios.shape[0] // 2, t, nbytes, window_s)


@nb.njit(cache=True, nogil=True)
def start_tier_loads(g, q, r, t):  # pragma: no cover - compiled
    """Start request ``q``'s loads of its prefix hits from each tier of replica ``r``."""
    n_tier = g.req.load_tok.shape[1]
    n_slot = n_tier + 2
    for k in range(n_tier):
        if g.req.load_tok[q, k] > 0:
            nbytes = float(g.req.load_tok[q, k]) * g.cfg.kv_bytes_per_token
            ps_push(g, g.reps.res_tier[r, k], q * n_slot + k, nbytes, t)
            g.rq.pending[q] += 1


# ---- write buffers ---------------------------------------------------------------------------


@nb.njit(cache=True, nogil=True)
def wb_drain(g, s, t):  # pragma: no cover - compiled
    """Drain resource ``s``'s write buffer at its write bandwidth up to time ``t``."""
    fl, wr_bw = g.fl, g.res.wr_bw
    if fl.wb_level[s] > 0.0 and t > fl.wb_last[s]:
        out = min(fl.wb_level[s], wr_bw[s] * (t - fl.wb_last[s]))
        last = fl.wb_last[s]
        add_rate(g.out.write, s, last, last + out / wr_bw[s], wr_bw[s], g.cfg.window_s)
        fl.wb_level[s] -= out
    if t > fl.wb_last[s]:
        fl.wb_last[s] = t


@nb.njit(cache=True, nogil=True)
def wb_write(g, s, t, nbytes):  # pragma: no cover - compiled
    """Put ``nbytes`` into resource ``s``'s buffer at ``t``; return how long the writer stalls."""
    if nbytes <= 0.0:
        return 0.0
    fl, res, out = g.fl, g.res, g.out
    wb_drain(g, s, t)
    # rows [S, 2S) of the write series hold what was offered (the demand), [0, S) what drained
    add_at(out.write, s + out.write.shape[0] // 2, t, nbytes, g.cfg.window_s)
    fl.wb_level[s] += nbytes
    excess = fl.wb_level[s] - res.wb_cap[s]
    if excess <= 0.0:
        return 0.0
    if res.wb_drop[s]:
        fl.wb_level[s] = res.wb_cap[s]
        out.cnt[C_DROPPED_WRITES] += 1
        out.fcnt[F_DROPPED_BYTES] += excess
        return 0.0
    out.cnt[C_BLOCKED_WRITES] += 1
    return excess / res.wr_bw[s]


@nb.njit(cache=True, nogil=True)
def write_tier(g, q, k, s, tok, t):  # pragma: no cover - compiled
    """Request ``q`` writes ``tok`` tokens to tier ``k`` (resource ``s``): the writer's stall.

    Write-back holds the bytes until the request releases its KV; write-through buffers them.
    """
    if s < 0 or tok <= 0:
        return 0.0
    nbytes = float(tok) * g.cfg.kv_bytes_per_token
    if g.cfg.write_back:
        g.rq.wpend[q, k] += nbytes
        return 0.0
    return wb_write(g, s, t, nbytes)


@nb.njit(cache=True, nogil=True)
def flush_writes(g, q, r, t):  # pragma: no cover - compiled
    """A request releases its KV: write-back bytes held back and decode KV kept for later."""
    res_tier, wpend = g.reps.res_tier, g.rq.wpend
    for k in range(res_tier.shape[1]):
        s = res_tier[r, k]
        nbytes = g.req.done_write_tok[q, k] * g.cfg.kv_bytes_per_token + wpend[q, k]
        wpend[q, k] = 0.0
        if s >= 0 and nbytes > 0.0:
            wb_write(g, s, t, nbytes)


@nb.njit(cache=True, nogil=True)
def offload_read(g, r, t):  # pragma: no cover - compiled
    """Decode-time offload: KV beyond replica ``r``'s GPU pool read from its tier this step, s."""
    s = g.reps.res_offload[r]
    if s < 0 or g.reps.offload_pages[r] <= g.rp.free[r]:
        return 0.0
    res, out, cfg = g.res, g.out, g.cfg
    over = g.reps.offload_pages[r] - g.rp.free[r]
    nbytes = float(over * cfg.page_tokens) * cfg.kv_bytes_per_token
    ios = float(over * cfg.offload_ios_per_page)
    read_s = res.rd_lat[s] + max(nbytes / res.rd_bw[s], ios / res.rd_iops[s])
    add_rate(out.read, s, t, t + read_s, nbytes / read_s, cfg.window_s)
    add_at(out.read_ios, s, t, ios, cfg.window_s)
    add_at(out.read_ios, s + res.rd_bw.shape[0], t, nbytes, cfg.window_s)
    return read_s


# ==== steps: the scheduler policy that fills a batch, and the step's time ====
# * Continuous batching (vLLM v1 ``Scheduler.schedule``, policy ``SCHED_VLLM``): each step first
#   serves the running requests in admission order (a decode token each, a prefill chunk of at
#   most the budget left), preempting the most recently admitted request when pages run out;
#   then admits waiting requests first come, first served while the token budget, the sequence
#   cap and free pages allow; a preemption in a step stops admissions in it.
# * Step time from the step-time table (``perfmodel.step.StepTable.step_s``, mirrored by
#   :func:`step_time`): token part on a grid, the LM head for the step's sequences, the
#   attention floors, attention pairs of the prefill chunks, decode KV bytes per rank.
#
# A scheduler policy is a function ``(group, replica, t) -> Batch`` that decides which requests
# run, are preempted or admitted; :func:`schedule_step` picks it by ``Config.scheduler``. What a
# batch costs and how the replay advances are the same for every policy (``fleet.kernel``).

# What admission decided for a waiting request.
ADMIT = 0
NO_PAGES = 1  # not enough free pages: admissions stop
NOT_YET = 2  # its prefetch is still running: the next waiting request is considered


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
def model_shared_time(model, tokens, seqs, pairs, kv):  # pragma: no cover - compiled
    """:func:`shared_time` of the group's step table."""
    return shared_time(
        model.grid,
        model.tokens_s,
        model.logits_grid,
        model.logits_s,
        model.pf_fixed,
        model.dec_fixed,
        tokens,
        seqs,
        pairs,
        kv,
    )


@nb.njit(cache=True, nogil=True)
def chunk_pairs(model, m, p):  # pragma: no cover - compiled
    """:func:`attention_pairs` of a prefill chunk of ``m`` tokens after ``p``, in the group."""
    return attention_pairs(
        float(m), float(p), model.full_layers, model.window_layers, model.window_tokens
    )


@nb.njit(cache=True, nogil=True)
def rank_kv(model, c):  # pragma: no cover - compiled
    """``KvLayout.bytes_for`` of one rank for a context of ``c`` tokens."""
    out = model.rank_full_bpt * c
    if model.rank_win_bpt > 0.0 and model.window_tokens > 0:
        out += model.rank_win_bpt * min(c, float(model.window_tokens))
    return out


@nb.njit(cache=True, nogil=True)
def rank_kv_sum(model, c0, k):  # pragma: no cover - compiled
    """Sum of ``rank_kv(c0 + j)`` for j in 0..k-1 (``KvLayout.bytes_summed``)."""
    out = model.rank_full_bpt * (k * c0 + k * (k - 1.0) / 2.0)
    if model.rank_win_bpt > 0.0 and model.window_tokens > 0:
        w = float(model.window_tokens)
        hi = _window_prefix(max(c0 + k - 1.0, 0.0), w)
        lo = _window_prefix(max(c0 - 1.0, 0.0), w)
        out += model.rank_win_bpt * (hi - lo)
    return out


@nb.njit(cache=True, nogil=True)
def pages(tokens, page):  # pragma: no cover - compiled
    """KV pages that hold ``tokens`` tokens."""
    return (tokens + page - 1) // page


@nb.njit(cache=True, nogil=True)
def occupy(g, r, t):  # pragma: no cover - compiled
    """Open or close replica ``r``'s interval holding requests (occupancy), at time ``t``."""
    rp = g.rp
    if rp.run_cnt[r] > 0 and rp.occ_since[r] < 0.0:
        rp.occ_since[r] = t
    elif rp.run_cnt[r] == 0 and rp.occ_since[r] >= 0.0:
        g.out.occupied[r] += t - rp.occ_since[r]
        rp.occ_since[r] = -1.0


# ---- the vLLM policy: serve the running, preempt the newest, admit first come first served --


@nb.njit(cache=True, nogil=True)
def preempt(g, r, v, short):  # pragma: no cover - compiled
    """Preempt running request ``v`` of replica ``r`` (``short`` pages missing): swap seconds.

    vLLM frees the victim's blocks into the evictable prefix cache: the pages this allocation
    does not take keep its leading tokens for its return.
    """
    rq, rp, cfg, out = g.rq, g.rp, g.cfg, g.out
    out.cnt[C_PREEMPTIONS] += 1
    out.preempt[v] += 1
    survive = max(rq.held[v] - short, 0)
    kept = min(survive * cfg.page_tokens, rq.ctx[v])
    rp.free[r] += rq.held[v]
    swap_s = 0.0
    if cfg.preempt_swap and rq.state[v] == S_DECODE and g.reps.res_swap[r] >= 0:
        # swap: its KV goes to host memory within this step, back on resume
        out.cnt[C_SWAPS] += 1
        nbytes = float(rq.ctx[v]) * cfg.gpu_bytes_per_token
        out.fcnt[F_SWAP_BYTES] += nbytes
        swap_s = nbytes / g.res.rd_bw[g.reps.res_swap[r]]
        rq.resume[v] = S_DECODE
    else:
        # recompute what it held beyond the surviving prefix (prompt and the tokens
        # generated so far)
        if rq.state[v] == S_DECODE:
            rq.pf_end[v] = rq.ctx[v] + 1
            rq.gen[v] -= 1  # the recompute produces that token again
        rq.pf_pos[v] = min(kept, rq.pf_end[v] - 1)
        out.fcnt[F_PREEMPT_TOKENS] += float(max(rq.ctx[v] - rq.pf_pos[v], 0))
        rq.resume[v] = S_PREFILL
    rq.held[v] = 0
    rq.state[v] = S_WAIT
    rq.wnext[v] = rp.whead[r]
    rp.whead[r] = v
    if rp.wtail[r] < 0:
        rp.wtail[r] = v
    g.tally[T_WAITING] += 1
    g.tally[T_RUNNING] -= 1
    return swap_s


@nb.njit(cache=True, nogil=True)
def serve_running(g, r):  # pragma: no cover - compiled
    """The running requests' tokens this step, preempting for pages; the batch so far."""
    rq, rp, cfg, model = g.rq, g.rp, g.cfg, g.model
    run, state = rp.run, rq.state
    budget = cfg.max_tokens
    n_tok = 0
    n_seq = 0  # sequences in the step: each computes its last position's logits
    n_pf_tok = 0
    pairs = 0.0
    kv = 0.0
    swap_s = 0.0
    n_preempt = 0
    i = 0
    while i < rp.run_cnt[r] and budget > 0:
        q = run[r, i]
        if state[q] == S_LOAD:
            i += 1
            continue
        if state[q] == S_PREFILL:
            m = min(rq.pf_end[q] - rq.pf_pos[q], budget)
            need = pages(rq.pf_pos[q] + m, cfg.page_tokens) - rq.held[q]
        else:
            m = 1
            need = pages(rq.ctx[q] + 1, cfg.page_tokens) - rq.held[q]
        lost_self = False
        stuck = False
        while need > rp.free[r]:
            # vLLM preempts the most recently admitted running request (never one whose KV
            # is still being loaded: it holds no computed state to give up)
            x = rp.run_cnt[r] - 1
            while x >= 0 and state[run[r, x]] == S_LOAD:
                x -= 1
            if x < 0:
                stuck = True
                break
            v = run[r, x]
            for y in range(x, rp.run_cnt[r] - 1):
                run[r, y] = run[r, y + 1]
            rp.run_cnt[r] -= 1
            n_preempt += 1
            swap_s += preempt(g, r, v, need - rp.free[r])
            if v == q:
                lost_self = True
                break
        if lost_self or stuck:
            break
        rq.held[q] += need
        rp.free[r] -= need
        rq.chunk[q] = m
        budget -= m
        n_tok += m
        n_seq += 1
        if state[q] == S_PREFILL:
            n_pf_tok += m
            pairs += chunk_pairs(model, m, rq.pf_pos[q])
        else:
            kv += rank_kv(model, float(rq.ctx[q] + 1))
        i += 1
    return budget, n_tok, n_seq, n_pf_tok, pairs, kv, swap_s, n_preempt


@nb.njit(cache=True, nogil=True)
def best_effort_loaded(g, r, q, t, total):  # pragma: no cover - compiled
    """Stop request ``q``'s prefetch: the leading run of its hit that has arrived, tokens."""
    rq, req, fl = g.rq, g.req, g.fl
    n_slot = req.load_tok.shape[1] + 2
    loaded = 0
    whole = True
    for k in range(req.load_tok.shape[1]):
        if req.load_tok[q, k] <= 0:
            continue
        f = q * n_slot + k
        got = req.load_tok[q, k]
        if fl.fpos[f] >= 0:
            s = g.reps.res_tier[g.out.replica[q], k]
            ps_advance(fl, g.res, g.out.read, g.cfg.window_s, s, t)
            left = fl.ps_key[g.res.ps_base[s] + fl.fpos[f]] - fl.ps_v[s]
            # whole tokens delivered (a relative 1e-9 absorbs rounding)
            got = int((fl.fbytes[f] - left) / g.cfg.kv_bytes_per_token * (1 + 1e-9))
            got = max(0, min(got, req.load_tok[q, k]))
            ps_remove(fl, g.res, s, f)
            rq.pending[q] -= 1
        if whole:
            loaded += got
        if got < req.load_tok[q, k]:
            whole = False
    rq.prefetching[q] = False
    g.rp.prefetch_n[r] -= 1
    if loaded < total:
        recomputed(g, q, total - loaded)
    return loaded


@nb.njit(cache=True, nogil=True)
def recomputed(g, q, tokens):  # pragma: no cover - compiled
    """Request ``q`` recomputes ``tokens`` tokens of its hit instead of loading them."""
    g.out.cnt[C_RECOMPUTED_LOADS] += 1
    g.out.fcnt[F_RECOMPUTED_TOKENS] += float(tokens)
    g.out.recomputed[q] += tokens


@nb.njit(cache=True, nogil=True)
def hit_loaded(g, r, q, t):  # pragma: no cover - compiled
    """Tokens of request ``q``'s hits below the GPU it starts with (-1: its prefetch runs)."""
    cfg = g.cfg
    total = 0
    for k in range(g.req.load_tok.shape[1]):
        total += g.req.load_tok[q, k]
    if total > 0 and total < cfg.min_load_tokens:
        # below the engine's threshold the hit is recomputed, not loaded
        recomputed(g, q, total)
        return 0
    if total > 0 and cfg.load_mode == LOAD_PREFETCH and g.rq.prefetching[q]:
        if cfg.prefetch_policy == PREFETCH_WAIT or (
            cfg.prefetch_policy == PREFETCH_TIMEOUT and t < g.rq.deadline[q]
        ):
            return -1
        return best_effort_loaded(g, r, q, t, total)
    return total


@nb.njit(cache=True, nogil=True)
def admit_fresh(g, r, q, t, budget):  # pragma: no cover - compiled
    """A first admission of request ``q``: (decision, pages, loads first, front-end s)."""
    rq, req, cfg = g.rq, g.req, g.cfg
    loaded = hit_loaded(g, r, q, t)
    if loaded < 0:
        return NOT_YET, 0, False, 0.0
    start = min(req.gpu_hit[q], req.input_tok[q]) + loaded
    rq.pf_end[q] = req.input_tok[q]
    rq.pf_pos[q] = min(start, req.input_tok[q] - 1)
    loads = loaded > 0 and cfg.load_mode == LOAD_ASYNC
    if loads:
        need = pages(start, cfg.page_tokens)
    else:
        m = min(rq.pf_end[q] - rq.pf_pos[q], budget)
        need = pages(rq.pf_pos[q] + m, cfg.page_tokens)
    if need > g.rp.free[r]:
        return NO_PAGES, need, loads, 0.0
    if loads:
        rq.ctx[q] = start
        rq.resume[q] = S_PREFILL
    else:
        rq.ctx[q] = rq.pf_pos[q]
    g.out.loaded[q] = loaded
    # the engine's front end (request handling, tokens, block hashes) runs in its loop: the
    # step admitting the request takes that much longer
    g.out.pf_gpu[q] += req.frontend_s[q]
    # tier k is written what it did not hold of the prefix now in GPU memory (promoted from a
    # slower tier, or a GPU hit it had evicted)
    for k in range(req.load_tok.shape[1]):
        write_tier(g, q, k, g.reps.res_tier[r, k], start - req.own_hit[q, k], t)
    rq.wmark[q] = start
    return ADMIT, need, loads, req.frontend_s[q]


@nb.njit(cache=True, nogil=True)
def admission(g, r, q, t, budget):  # pragma: no cover - compiled
    """Whether waiting request ``q`` can be admitted: (decision, pages, loads first, fe s)."""
    rq, cfg = g.rq, g.cfg
    if rq.fresh[q] and cfg.role == ROLE_DECODE:
        need = pages(g.req.input_tok[q], cfg.page_tokens)
        if need > g.rp.free[r]:
            return NO_PAGES, need, True, 0.0
        rq.ctx[q] = g.req.input_tok[q]
        rq.pf_pos[q] = g.req.input_tok[q]
        rq.pf_end[q] = g.req.input_tok[q]
        rq.resume[q] = S_DECODE
        return ADMIT, need, True, 0.0
    if rq.fresh[q]:
        return admit_fresh(g, r, q, t, budget)
    if rq.resume[q] == S_DECODE:
        need = pages(rq.ctx[q], cfg.page_tokens)  # swap its KV back in
        loads = True
    else:
        m = min(rq.pf_end[q] - rq.pf_pos[q], budget)  # recompute after a preemption
        need = pages(rq.pf_pos[q] + m, cfg.page_tokens)
        loads = False
    if need > g.rp.free[r]:
        return NO_PAGES, need, loads, 0.0
    return ADMIT, need, loads, 0.0


@nb.njit(cache=True, nogil=True)
def start_loads(g, r, q, t):  # pragma: no cover - compiled
    """Admitted request ``q`` waits for its KV: the P-to-D transfer, its hits, or a swap-in."""
    rq, req, cfg = g.rq, g.req, g.cfg
    n_tier = req.load_tok.shape[1]
    n_slot = n_tier + 2
    rq.state[q] = S_LOAD
    rq.ready_at[q] = t
    if rq.fresh[q] and cfg.role == ROLE_DECODE:
        nbytes = float(req.xfer_tok[q]) * cfg.kv_bytes_per_token
        ps_push(g, g.reps.res_link[r], q * n_slot + n_tier, nbytes, t)
        rq.pending[q] += 1
    elif rq.fresh[q]:
        start_tier_loads(g, q, r, t)
    else:
        nbytes = float(rq.ctx[q]) * cfg.gpu_bytes_per_token
        ps_push(g, g.reps.res_swap[r], q * n_slot + n_tier + 1, nbytes, t)
        rq.pending[q] += 1


@nb.njit(cache=True, nogil=True)
def admit(g, r, q, prev, need, t):  # pragma: no cover - compiled
    """Move request ``q`` from replica ``r``'s waiting list (after ``prev``) to its running."""
    rq, rp = g.rq, g.rp
    nxt = rq.wnext[q]
    if prev < 0:
        rp.whead[r] = nxt
    else:
        rq.wnext[prev] = nxt
    if rp.wtail[r] == q:
        rp.wtail[r] = prev
    rq.wnext[q] = -1
    g.tally[T_WAITING] -= 1
    g.tally[T_RUNNING] += 1
    rp.run[r, rp.run_cnt[r]] = q
    rp.run_cnt[r] += 1
    occupy(g, r, t)
    rq.held[q] = need
    rp.free[r] -= need
    if np.isnan(g.out.admit[q]):
        g.out.admit[q] = t


@nb.njit(cache=True, nogil=True)
def admit_waiting(g, r, t, batch):  # pragma: no cover - compiled
    """Admissions, first come first served, while budget, sequences and pages allow."""
    budget, n_tok, n_seq, n_pf_tok, pairs, kv, swap_s, n_preempt = batch
    rq, rp, cfg = g.rq, g.rp, g.cfg
    fe = 0.0
    admitted = False
    prev = -1
    q = rp.whead[r]
    while q >= 0 and n_preempt == 0 and budget > 0 and rp.run_cnt[r] < cfg.max_seqs:
        nxt = rq.wnext[q]
        decision, need, loads, fe_q = admission(g, r, q, t, budget)
        if decision == NOT_YET:
            prev = q
            q = nxt
            continue
        if decision == NO_PAGES:
            break
        fe += fe_q
        admitted = True
        admit(g, r, q, prev, need, t)
        if loads:
            start_loads(g, r, q, t)
        else:
            rq.state[q] = S_PREFILL
            m = min(rq.pf_end[q] - rq.pf_pos[q], budget)
            rq.chunk[q] = m
            budget -= m
            n_tok += m
            n_seq += 1
            n_pf_tok += m
            pairs += chunk_pairs(g.model, m, rq.pf_pos[q])
        rq.fresh[q] = False
        q = nxt
    return n_tok, n_seq, n_pf_tok, pairs, kv, swap_s, fe, n_preempt, admitted


@nb.njit(cache=True, nogil=True)
def vllm_schedule(g, r, t):  # pragma: no cover - compiled
    """The vLLM v1 batch for replica ``r`` at ``t``: the running first, then the waiting."""
    return admit_waiting(g, r, t, serve_running(g, r))


@nb.njit(cache=True, nogil=True)
def schedule_step(g, r, t):  # pragma: no cover - compiled
    """The batch of replica ``r``'s next step under the group's scheduler policy.

    Returns (tokens, sequences, prefill tokens, attention pairs, decode KV bytes per rank,
    swap-out s, front-end s, preemptions, whether it admitted a request); the chunk of each
    request in the batch is in ``ReqState.chunk``.
    """
    if g.cfg.scheduler == SCHED_VLLM:
        return vllm_schedule(g, r, t)
    raise ValueError("unknown scheduler policy")


# ---- what a step costs and records -----------------------------------------------------------


@nb.njit(cache=True, nogil=True)
def fast_forward(g, r, t, compute):  # pragma: no cover - compiled
    """Decode steps replica ``r`` can take as one event: (steps, their time, slope s).

    A replica running only decode tokens, with nothing waiting, loading or offloaded, takes
    identical steps but for the KV growing by one token per request per step, until a request
    finishes, the next request routed to it arrives, or its pages run out. Those k steps are
    taken as one event, each with the time R1 gives it: the same results, k - 1 fewer events.
    """
    rq, rp, cfg, model = g.rq, g.rp, g.cfg, g.model
    run, ctx, page = rp.run, rq.ctx, cfg.page_tokens
    kmax = INF
    slope = 0.0
    for i in range(rp.run_cnt[r]):
        q = run[r, i]
        kmax = min(kmax, float(g.req.output_tok[q] - rq.gen[q]))
        slope += model.rank_full_bpt
        if model.rank_win_bpt > 0.0 and model.window_tokens > 0:
            below = model.window_tokens - (ctx[q] + 1)
            if below > 0:
                slope += model.rank_win_bpt
                kmax = min(kmax, float(below))
    slope *= model.s_per_kv
    nxt = g.tally[T_NEXT]
    if cfg.route_policy == ROUTE_FIXED:
        t_lim = g.req.arrival[rp.rep_next[r]] if rp.rep_next[r] >= 0 else INF
    else:
        t_lim = g.req.arrival[nxt] if nxt < g.req.arrival.shape[0] else INF
    t_lim = min(t_lim, cfg.t_stop) - t
    total = compute
    k = 1
    while k < kmax:
        d = compute + slope * k
        if total + d > t_lim:
            break
        # pages for one more token each, from the free ones
        more = 0
        for i in range(rp.run_cnt[r]):
            if (ctx[run[r, i]] + k + 1) % page == 1 or page == 1:
                more += 1
        if more > rp.free[r]:
            break
        rp.free[r] -= more
        for i in range(rp.run_cnt[r]):
            q = run[r, i]
            if (ctx[q] + k + 1) % page == 1 or page == 1:
                rq.held[q] += 1
        total += d
        k += 1
    if k == 1:
        return 1, compute, slope
    for i in range(rp.run_cnt[r]):
        rq.chunk[run[r, i]] = k
    return k, total, slope


@nb.njit(cache=True, nogil=True)
def charge_step(g, r, tok_part, extra, n_tok, n_dec, steps):  # pragma: no cover - compiled
    """Each request's share of the step's time (docs/replay.md, stage split); KV tokens held."""
    rq, rp, model, out = g.rq, g.rp, g.model, g.out
    kv_tok = 0.0
    for i in range(rp.run_cnt[r]):
        q = rp.run[r, i]
        c = rq.chunk[q]
        if rq.state[q] == S_PREFILL:
            kv_tok += float(rq.pf_pos[q] + max(c, 0))
        elif rq.state[q] == S_DECODE:
            kv_tok += float(rq.ctx[q] + min(max(c, 0), 1))
        else:
            kv_tok += float(rq.ctx[q])
        if c <= 0:
            continue
        if rq.state[q] == S_PREFILL:
            out.pf_gpu[q] += tok_part * c / n_tok + model.s_per_pair * chunk_pairs(
                model, c, rq.pf_pos[q]
            )
            if n_dec == 0:
                out.pf_gpu[q] += extra * c / n_tok
        else:
            out.dec_gpu[q] += (
                steps * tok_part / n_tok
                + extra / n_dec
                + model.s_per_kv * rank_kv_sum(model, float(rq.ctx[q] + 1), float(c))
            )
    return kv_tok


@nb.njit(cache=True, nogil=True)
def log_step(g, r, t, first_s, slope_s, steps, total_s, batch, kv_tok):  # pragma: no cover
    """One step-log row for replica ``r``'s step event (when the log has room)."""
    n_pf_tok, n_dec, n_preempt, fe = batch
    out = g.out
    row = out.cnt[C_LOG_ROWS]
    out.cnt[C_LOG_ROWS] += 1
    if row >= out.steps.shape[0]:
        return
    loading = g.rp.prefetch_n[r]
    for i in range(g.rp.run_cnt[r]):
        if g.rq.state[g.rp.run[r, i]] == S_LOAD:
            loading += 1
    wbytes = 0.0
    for k in range(g.reps.res_tier.shape[1]):
        s = g.reps.res_tier[r, k]
        if s >= 0:
            wb_drain(g, s, t)
            wbytes += g.fl.wb_level[s]
    slog = out.steps
    slog[row, L_REPLICA] = r
    slog[row, L_START] = t
    slog[row, L_FIRST_S] = first_s
    slog[row, L_SLOPE_S] = slope_s if steps > 1 else 0.0
    slog[row, L_STEPS] = steps
    slog[row, L_TOTAL_S] = total_s
    slog[row, L_PREFILL_TOKENS] = n_pf_tok
    slog[row, L_DECODE_SEQS] = n_dec
    slog[row, L_KV_TOKENS] = kv_tok
    slog[row, L_LOADS] = loading
    slog[row, L_WRITE_BYTES] = wbytes
    slog[row, L_PREEMPTIONS] = n_preempt
    slog[row, L_FRONTEND_S] = fe


@nb.njit(cache=True, nogil=True)
def start_step(g, r, t):  # pragma: no cover - compiled
    """Schedule replica ``r``'s next step, charge it and time its end; False: nothing to run."""
    n_tok, n_seq, n_pf_tok, pairs, kv, swap_s, fe, n_preempt, admitted = schedule_step(g, r, t)
    occupy(g, r, t)  # preemptions may have emptied it
    if n_tok == 0 and fe == 0.0:
        return False
    model, rp = g.model, g.rp
    tok_part = model_shared_time(model, float(n_tok), float(n_seq), pairs, kv)
    if n_tok == 0:
        tok_part = 0.0  # only front-end work: every admitted request is loading
    compute = tok_part + model.s_per_pair * pairs + model.s_per_kv * kv
    extra = swap_s + offload_read(g, r, t)
    n_dec = n_tok - n_pf_tok
    first_s = compute + extra + fe
    steps = 1
    slope_s = 0.0
    if (
        n_pf_tok == 0
        and n_dec == rp.run_cnt[r]
        and n_preempt == 0
        and not admitted
        and rp.whead[r] < 0
        and extra == 0.0
        and fe == 0.0
        and g.reps.res_offload[r] < 0
    ):
        steps, compute, slope_s = fast_forward(g, r, t, compute)
    kv_tok = charge_step(g, r, tok_part, extra, n_tok, n_dec, steps)
    rp.busy[r] = True
    g.out.cnt[C_STEPS] += steps
    # busy time: the replica executing steps (a write stall after it is not)
    g.out.busy[r] += compute + extra + fe
    if g.out.steps.shape[0] > 0:
        batch = (n_pf_tok, n_dec, n_preempt, fe)
        log_step(g, r, t, first_s, slope_s, steps, compute + extra + fe, batch, kv_tok)
    ev_push(g.ev, g.tally, t + compute + extra + fe, EV_STEP, r)
    return True


# ==== the loop: events, progress, the one completion block, routing ====


def simulate_group(
    req: Requests, reps: Replicas, cfg: Config, model: StepModel, res: Resources, out: Outputs
) -> None:
    """Replay one group of replicas; fills ``out`` (the module docstring has the rules)."""
    run_group(new_group(req, reps, cfg, model, res, out))


# ---- the one completion block --------------------------------------------------------------


@nb.njit(cache=True, nogil=True)
def finish(g, q, r, t):  # pragma: no cover - compiled
    """Request ``q`` of replica ``r`` is done at ``t``: its KV written back and released.

    The caller takes it off the running list (in place while it walks the list, or at once).
    """
    g.rq.state[q] = S_DONE
    flush_writes(g, q, r, t)
    g.rp.free[r] += g.rq.held[q]
    g.rq.held[q] = 0
    g.out.done[q] = t
    g.tally[T_DONE] += 1
    g.tally[T_RUNNING] -= 1
    g.rp.outstanding[r] -= 1.0
    g.rp.act_dec[r] -= float(g.req.input_tok[q])


@nb.njit(cache=True, nogil=True)
def _drop_running(g, r, q):  # pragma: no cover - compiled
    """Remove request ``q`` from replica ``r``'s running list, keeping the order."""
    run = g.rp.run
    j = 0
    for i in range(g.rp.run_cnt[r]):
        if run[r, i] != q:
            run[r, j] = run[r, i]
            j += 1
    g.rp.run_cnt[r] = j


# ---- events: a flow completes, a timed event fires, a request arrives ----------------------


@nb.njit(cache=True, nogil=True)
def next_flow(g):  # pragma: no cover - compiled
    """The earliest flow completion over the group's resources: (time, resource)."""
    t_ps = INF
    s_ps = -1
    for s in range(g.res.rd_bw.shape[0]):
        tc = ps_next(g.fl, g.res, s)
        if tc < t_ps:
            t_ps = tc
            s_ps = s
    return t_ps, s_ps


@nb.njit(cache=True, nogil=True)
def on_flow_done(g, s, t):  # pragma: no cover - compiled
    """A flow of resource ``s`` completes; its request is ready when all its flows are in."""
    fl, res, rq = g.fl, g.res, g.rq
    ps_advance(fl, res, g.out.read, g.cfg.window_s, s, t)
    f = fl.ps_fid[res.ps_base[s]]
    ps_remove(fl, res, s, f)
    q = f // (g.req.load_tok.shape[1] + 2)
    rq.pending[q] -= 1
    rq.ready_at[q] = max(rq.ready_at[q], t + res.rd_lat[s])  # + the resource's latency
    if rq.pending[q] == 0:
        ev_push(g.ev, g.tally, rq.ready_at[q], EV_READY, q)


@nb.njit(cache=True, nogil=True)
def on_ready(g, q, t):  # pragma: no cover - compiled
    """Request ``q``'s KV is in: its prefetch (it may be admitted), or its load (it runs)."""
    rq, rp, out = g.rq, g.rp, g.out
    r = out.replica[q]
    if rq.state[q] == S_WAIT and rq.prefetching[q]:
        rq.prefetching[q] = False  # its prefetch is in: the scheduler may admit it
        rp.prefetch_n[r] -= 1
        out.ready[q] = t
        rp.dirty[r] = True
    elif rq.state[q] == S_LOAD:
        out.ready[q] = t
        rp.dirty[r] = True
        if rq.resume[q] != S_DECODE:
            rq.state[q] = S_PREFILL
            return
        if rq.gen[q] == 0:
            # disaggregated decode: the prompt's KV is in; the first token computed by
            # prefill goes out now
            rq.gen[q] = 1
            out.first[q] = t
            rp.act_pf[r] -= rq.r_pf_tok[q]
            rq.r_pf_tok[q] = 0.0
        rq.state[q] = S_DECODE
        if rq.gen[q] >= g.req.output_tok[q]:
            finish(g, q, r, t)
            _drop_running(g, r, q)
            occupy(g, r, t)


@nb.njit(cache=True, nogil=True)
def write_chunks(g, r, t):  # pragma: no cover - compiled
    """A step of replica ``r`` ends: its prefill chunks' new KV to the tiers; the stall, s."""
    rq, own_hit = g.rq, g.req.own_hit
    stall = 0.0
    if g.cfg.role == ROLE_DECODE:
        return stall
    for i in range(g.rp.run_cnt[r]):
        q = g.rp.run[r, i]
        if rq.chunk[q] <= 0 or rq.state[q] != S_PREFILL:
            continue
        b = rq.pf_pos[q] + rq.chunk[q]
        for k in range(own_hit.shape[1]):
            tok = b - max(max(rq.pf_pos[q], own_hit[q, k]), rq.wmark[q])
            stall = max(stall, write_tier(g, q, k, g.reps.res_tier[r, k], tok, t))
        rq.wmark[q] = max(rq.wmark[q], b)
    return stall


@nb.njit(cache=True, nogil=True)
def progress(g, r, t):  # pragma: no cover - compiled
    """Apply replica ``r``'s finished step: prefill chunks, decode tokens, completions."""
    rq, rp, out = g.rq, g.rp, g.out
    rp.phase2[r] = False
    rp.busy[r] = False
    rp.dirty[r] = True
    j = 0
    for i in range(rp.run_cnt[r]):
        q = rp.run[r, i]
        c = rq.chunk[q]
        rq.chunk[q] = 0
        finished = False
        if c > 0 and rq.state[q] == S_PREFILL:
            rq.pf_pos[q] += c
            rq.ctx[q] = rq.pf_pos[q]
            if rq.pf_pos[q] >= rq.pf_end[q]:
                rq.gen[q] += 1
                if np.isnan(out.first[q]):
                    out.first[q] = t
                rp.act_pf[r] -= rq.r_pf_tok[q]
                rq.r_pf_tok[q] = 0.0
                if g.cfg.role == ROLE_PREFILL or rq.gen[q] >= g.req.output_tok[q]:
                    finished = True
                else:
                    rq.state[q] = S_DECODE
        elif c > 0 and rq.state[q] == S_DECODE:
            rq.ctx[q] += c  # c > 1: several decode steps taken at once (a fast-forward)
            rq.gen[q] += c
            finished = rq.gen[q] >= g.req.output_tok[q]
        if finished:
            finish(g, q, r, t)
        else:
            rp.run[r, j] = q
            j += 1
    rp.run_cnt[r] = j
    occupy(g, r, t)


@nb.njit(cache=True, nogil=True)
def on_timed_event(g, t):  # pragma: no cover - compiled
    """The earliest timed event fires: a prefetch deadline, a request ready, a step's end."""
    kind = g.ev.kind[0]
    ident = g.ev.ident[0]
    ev_pop(g.ev, g.tally)
    if kind == EV_TIMEOUT:
        g.rp.dirty[g.out.replica[ident]] = True
    elif kind == EV_READY:
        on_ready(g, ident, t)
    elif g.rp.phase2[ident]:
        progress(g, ident, t)  # its write stall is over
    else:
        stall = write_chunks(g, ident, t)
        if stall > 0.0:
            g.rp.phase2[ident] = True
            ev_push(g.ev, g.tally, t + stall, EV_STEP, ident)
        else:
            progress(g, ident, t)


# ---- routing: the caller's fixed route, least outstanding, or Dynamo's KV router -----------


@nb.njit(cache=True, nogil=True)
def kv_overlap(g, q):  # pragma: no cover - compiled
    """Per replica, the tokens of request ``q``'s leading blocks the router saw it hold."""
    req = g.req
    nblk = req.blk_offsets[q + 1] - req.blk_offsets[q]
    for x in range(g.rp.overlap.shape[0]):
        word = x // 64
        bit = np.uint64(1) << np.uint64(x % 64)
        k = 0
        while k < nblk:
            if req.blk_masks[req.blk_ids[req.blk_offsets[q] + k], word] & bit == 0:
                break
            k += 1
        g.rp.overlap[x] = min(k * g.cfg.blk_tokens, req.input_tok[q])


@nb.njit(cache=True, nogil=True)
def pick_replica(g, q):  # pragma: no cover - compiled
    """The dynamic router's replica for request ``q`` (ties to the first from ``T_RR``)."""
    req, rp, cfg = g.req, g.rp, g.cfg
    n_rep = rp.overlap.shape[0]
    kv_aware = cfg.route_policy == ROUTE_KV
    if kv_aware:
        kv_overlap(g, q)
    best = 0
    best_cost = INF
    for y in range(n_rep):
        x = (g.tally[T_RR] + y) % n_rep
        if kv_aware:
            # Dynamo's KV router: prefill blocks to compute (active and this request's
            # uncached ones) weighted, plus active decode blocks
            cost = cfg.route_weight * (rp.act_pf[x] + req.input_tok[q] - rp.overlap[x])
            cost += rp.act_dec[x] + req.input_tok[q]
        else:
            cost = rp.outstanding[x]
        if cost < best_cost:
            best_cost = cost
            best = x
    g.tally[T_RR] = (g.tally[T_RR] + 1) % n_rep
    if kv_aware:
        req.gpu_hit[q] = rp.overlap[best]
        word = best // 64
        bit = np.uint64(1) << np.uint64(best % 64)
        for k in range(req.blk_offsets[q], req.blk_offsets[q + 1]):
            req.blk_masks[req.blk_ids[k], word] |= bit
    return best


@nb.njit(cache=True, nogil=True)
def start_prefetch(g, q, r, t):  # pragma: no cover - compiled
    """HiCache L3 prefetch: request ``q``'s hits start loading at arrival, while it waits."""
    rq, cfg = g.rq, g.cfg
    total = 0
    for k in range(g.req.load_tok.shape[1]):
        total += g.req.load_tok[q, k]
    if total <= 0 or total < cfg.min_load_tokens:
        return
    rq.prefetching[q] = True
    g.rp.prefetch_n[r] += 1
    rq.ready_at[q] = t
    start_tier_loads(g, q, r, t)
    if cfg.prefetch_policy == PREFETCH_TIMEOUT:
        rq.deadline[q] = t + cfg.prefetch_base_s + cfg.prefetch_per_token_s * total
        ev_push(g.ev, g.tally, rq.deadline[q], EV_TIMEOUT, q)


@nb.njit(cache=True, nogil=True)
def on_arrival(g, t):  # pragma: no cover - compiled
    """The next request arrives: route it, queue it, start its prefetch where the engine does."""
    req, rq, rp = g.req, g.rq, g.rp
    q = g.tally[T_NEXT]
    g.tally[T_NEXT] += 1
    r = req.route[q]
    if r < 0:
        r = pick_replica(g, q)
    else:
        rp.rep_next[r] = req.next_same[q]
    g.out.replica[q] = r
    rp.outstanding[r] += 1.0
    rq.r_pf_tok[q] = float(req.input_tok[q] - min(req.gpu_hit[q], req.input_tok[q]))
    rp.act_pf[r] += rq.r_pf_tok[q]
    rp.act_dec[r] += float(req.input_tok[q])
    if rp.wtail[r] < 0:
        rp.whead[r] = q
    else:
        rq.wnext[rp.wtail[r]] = q
    rp.wtail[r] = q
    g.tally[T_WAITING] += 1
    rp.dirty[r] = True
    if g.cfg.load_mode == LOAD_PREFETCH and g.cfg.role != ROLE_DECODE:
        start_prefetch(g, q, r, t)


# ---- the event loop ----------------------------------------------------------------------------


@nb.njit(cache=True, nogil=True)
def run_group(g):  # pragma: no cover - compiled
    """Replay the group: take the earliest event, then start a step on every changed replica."""
    req, rp, out, cfg, tally = g.req, g.rp, g.out, g.cfg, g.tally
    n = req.arrival.shape[0]
    n_rep = rp.busy.shape[0]
    t = 0.0
    while tally[T_DONE] < n:
        # ---- the next event: an arrival, a timed event, or a flow completing
        t_arr = req.arrival[tally[T_NEXT]] if tally[T_NEXT] < n else INF
        t_ev = g.ev.t[0] if tally[T_EVENTS] > 0 else INF
        t_ps, s_ps = next_flow(g)
        t_next = min(t_arr, min(t_ev, t_ps))
        if t_next == INF or t_next > cfg.t_stop:
            break
        if t_next > t:
            add_rate(out.waiting, 0, t, t_next, float(tally[T_WAITING]), cfg.window_s)
            add_rate(out.running, 0, t, t_next, float(tally[T_RUNNING]), cfg.window_s)
            t = t_next
        if t_ps <= t_ev and t_ps <= t_arr:
            on_flow_done(g, s_ps, t)
        elif t_ev <= t_arr:
            on_timed_event(g, t)
        else:
            on_arrival(g, t)
        # ---- start a step on every idle replica whose state changed
        for r in range(n_rep):
            if rp.busy[r] or not rp.dirty[r]:
                continue
            rp.dirty[r] = False
            start_step(g, r, t)
    close_group(g, t)


@nb.njit(cache=True, nogil=True)
def close_group(g, t):  # pragma: no cover - compiled
    """The end: flows and buffers brought to the last event; what never finished counted."""
    for s in range(g.res.rd_bw.shape[0]):
        ps_advance(g.fl, g.res, g.out.read, g.cfg.window_s, s, t)
        wb_drain(g, s, INF)
    for r in range(g.rp.busy.shape[0]):
        if g.rp.occ_since[r] >= 0.0:
            g.out.occupied[r] += t - g.rp.occ_since[r]
    g.out.cnt[C_UNFINISHED] += g.req.arrival.shape[0] - g.tally[T_DONE]
    g.out.fcnt[F_END_S] = max(g.out.fcnt[F_END_S], t)
