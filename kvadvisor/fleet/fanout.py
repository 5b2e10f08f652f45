"""A stage's replica groups as tasks on an executor's workers, merged as in one process.

After the routing pass every group of replicas that shares nothing replays on its own
(``engine.run_stage``). On a parallel executor (``kvadvisor.execute``'s Dask one) each group
is a task that carries only its own requests' rows, so a worker receives what its group
reads, not the stage; the results come back in the groups' order and merge exactly as the
threads' do. A group's replay is a pure function of those rows, so the figures are the same.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import fields, replace
from typing import Any, Protocol

import numpy as np

from kvadvisor.fleet.engine import _GroupMaps, _run_group, _StageInputs
from kvadvisor.fleet.resolved import ResolvedFleet, ResolvedStage

GroupResult = tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]


class Tasks(Protocol):
    """What the replay needs of an executor (``kvadvisor.execute.Executor`` has it)."""

    parallel: bool

    def submit(self, fn: Any, *args: Any) -> Future:
        """``fn(*args)`` somewhere; the future of its result."""
        ...


def _rows_of(inp: _StageInputs, local: np.ndarray) -> _StageInputs:
    """The stage's inputs for requests ``local`` only (every per-request field, in order)."""
    return replace(inp, **{f.name: getattr(inp, f.name)[local] for f in fields(inp)})


def group_task(
    stage: ResolvedStage,
    dep: ResolvedFleet,
    inp: _StageInputs,
    assign: np.ndarray,
    reps_g: np.ndarray,
    maps: _GroupMaps,
    window_s: float,
    stop_s: float,
    step_log: bool,
) -> GroupResult:
    """One group replayed on a worker (``inp`` and ``assign``: that group's requests only)."""
    return _run_group(stage, dep, inp, assign, reps_g, maps, window_s, stop_s, step_log)


def run_groups(
    executor: Tasks,
    stage: ResolvedStage,
    dep: ResolvedFleet,
    inp: _StageInputs,
    assign: np.ndarray,
    groups: list[np.ndarray],
    maps: _GroupMaps,
    window_s: float,
    stop_s: float,
    step_log: bool,
) -> list[GroupResult]:
    """Every group as a task on ``executor``; results as ``_run_group`` gives them, in order.

    A task returns its requests as indices into its own rows; they are mapped back to the
    stage's here, so ``engine._merge_groups`` reads them exactly as it reads the threads'.
    """
    pending = []
    for reps_g in groups:
        local = np.flatnonzero(np.isin(assign, reps_g))
        sent = _rows_of(inp, local)
        future = executor.submit(
            group_task, stage, dep, sent, assign[local], reps_g, maps, window_s, stop_s, step_log
        )
        pending.append((local, future))
    results = []
    for local, future in pending:
        mine, used, out = future.result()
        results.append((local[mine], used, out))
    return results
