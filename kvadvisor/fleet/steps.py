"""The step log: every step of every replica, expanded from the loop's step events.

The compiled loop records one row per step event (``kernel.L_*`` columns); a decode
fast-forward of ``k`` identical steps is one event whose steps differ only by the KV read
growing one token per sequence per step (docs/replay.md, R1): step ``j`` takes
``first + slope * j`` and starts after the ``j`` before it. :func:`step_batches` expands the
events into one row per step, a bounded batch at a time, so a writer never holds the whole
log expanded.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from kvadvisor.fleet.engine import ReplayRun

# The step log's columns (docs/replay.md, "Outputs"), in file order.
STEP_COLUMNS = (
    "stage",
    "replica",
    "start_s",
    "duration_s",
    "prefill_tokens",
    "decode_sequences",
    "kv_tokens",
    "loads_in_flight",
    "write_buffer_bytes",
    "preemptions",
    "frontend_s",
)
BATCH_ROWS = 65_536
BUSIEST_WINDOW_S = 60.0


def _steps(events: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per step of ``events``: its event, its place in the event's run, its start and duration.

    An event is one step or a run of fast-forwarded decode steps whose duration grows by the
    event's slope each step (start = start0 + j * first + slope * j * (j - 1) / 2).
    """
    from kvadvisor.fleet import kernel  # numba only when a replay ran

    k = events[:, kernel.L_STEPS].astype(np.int64)
    ev = np.repeat(np.arange(events.shape[0]), k)
    j = (np.arange(ev.size) - np.repeat(np.cumsum(k) - k, k)).astype(np.float64)
    first, slope = events[ev, kernel.L_FIRST_S], events[ev, kernel.L_SLOPE_S]
    start = events[ev, kernel.L_START] + j * first + slope * j * (j - 1.0) / 2.0
    return ev, j, start, first + slope * j


def _expand(role: str, events: np.ndarray) -> dict[str, np.ndarray]:
    """One row per step of ``events`` (rows of the loop's step log)."""
    from kvadvisor.fleet import kernel  # numba only when a replay ran

    ev, j, start, duration = _steps(events)
    later = j > 0  # steps after an event's first: fast-forwarded decode steps only
    return {
        "stage": np.full(ev.size, role, dtype=object),
        "replica": events[ev, kernel.L_REPLICA].astype(np.int64),
        "start_s": start,
        "duration_s": duration,
        "prefill_tokens": np.where(later, 0, events[ev, kernel.L_PREFILL_TOKENS]).astype(np.int64),
        "decode_sequences": events[ev, kernel.L_DECODE_SEQS].astype(np.int64),
        "kv_tokens": (events[ev, kernel.L_KV_TOKENS] + j * events[ev, kernel.L_DECODE_SEQS]).astype(
            np.int64
        ),
        "loads_in_flight": events[ev, kernel.L_LOADS].astype(np.int64),
        "write_buffer_bytes": events[ev, kernel.L_WRITE_BYTES],
        "preemptions": np.where(later, 0, events[ev, kernel.L_PREEMPTIONS]).astype(np.int64),
        "frontend_s": np.where(later, 0.0, events[ev, kernel.L_FRONTEND_S]),
    }


def step_batches(run: ReplayRun, rows: int = BATCH_ROWS) -> Iterator[dict[str, np.ndarray]]:
    """The step log of ``run`` (stage by stage, by start time) in batches of about ``rows``.

    A batch holds whole events: at least one, so a fast-forward longer than ``rows`` is one
    batch. Empty when the replay kept no step log (``ReplayOptions.step_log``).
    """
    from kvadvisor.fleet import kernel

    for st in run.stages:
        log = st.step_log
        if log is None or log.shape[0] == 0:
            continue
        ends = np.cumsum(log[:, kernel.L_STEPS].astype(np.int64))
        i = 0
        while i < log.shape[0]:
            base = ends[i - 1] if i else 0
            stop = max(int(np.searchsorted(ends, base + rows, side="right")), i + 1)
            yield _expand(st.role.value, log[i:stop])
            i = stop


def _minute_time(log: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per (replica, minute) key pair, the time of the steps that start in it, exactly.

    A run of fast-forwarded decode steps may cross a minute's end, so the events are expanded
    (a bounded chunk at a time) and each step counted in the minute it starts in.
    """
    from kvadvisor.fleet import kernel

    keys, times = [], []
    chunk = max(1, BATCH_ROWS // 8)
    for lo in range(0, log.shape[0], chunk):
        events = log[lo : lo + chunk]
        ev, _, start, duration = _steps(events)
        pair = np.stack([events[ev, kernel.L_REPLICA], np.floor(start / BUSIEST_WINDOW_S)])
        uniq, inverse = np.unique(pair, axis=1, return_inverse=True)
        keys.append(uniq)
        times.append(np.bincount(inverse.ravel(), weights=duration))
    uniq, inverse = np.unique(np.concatenate(keys, axis=1), axis=1, return_inverse=True)
    return uniq, np.bincount(inverse.ravel(), weights=np.concatenate(times))


def busiest_minute(run: ReplayRun) -> tuple[str, int, float, dict[str, np.ndarray]] | None:
    """The replica-minute with the most time in steps: (stage, replica, minute start, its steps).

    Minutes count from the first arrival's; a step belongs to the minute it starts in. None
    without a step log or steps.
    """
    from kvadvisor.fleet import kernel

    best: tuple[float, str, int, float, np.ndarray] | None = None
    for st in run.stages:
        log = st.step_log
        if log is None or log.shape[0] == 0:
            continue
        keys, time = _minute_time(log)
        top = int(np.argmax(time))
        if best is None or time[top] > best[0]:
            replica, begin = int(keys[0, top]), float(keys[1, top]) * BUSIEST_WINDOW_S
            # the events with a step in the minute: those of the replica that overlap it
            overlap = (
                (log[:, kernel.L_REPLICA] == replica)
                & (log[:, kernel.L_START] < begin + BUSIEST_WINDOW_S)
                & (log[:, kernel.L_START] + log[:, kernel.L_TOTAL_S] >= begin)
            )
            best = (float(time[top]), st.role.value, replica, begin, log[overlap])
    if best is None:
        return None
    _, role, replica, start, events = best
    rows = _expand(role, events)
    inside = (rows["start_s"] >= start) & (rows["start_s"] < start + BUSIEST_WINDOW_S)
    return role, replica, start, {k: v[inside] for k, v in rows.items()}
