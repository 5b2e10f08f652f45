"""The deployment search with --workers 1 against --workers 2: paired, interleaved, medians.

On the bundled Mooncake conversation trace (12,031 requests, every provider, the docs' example
SLO, as bench_search.py): one local Dask cluster of 2 processes (one thread each) is started
once and kept; then ``--pairs`` pairs of searches run, serial and on the cluster, the order
alternating pair by pair (ABBA), so a change in the machine's load falls on both sides.

The search's wall is ``recommend`` from its start until the checks of the chosen deployments
begin (the providers' branch and bound, every replay of it); the whole ``recommend`` (the checks
and stresses after the search run in this process either way) is printed beside it. CPU seconds
count this process and, on the cluster, the workers' processes too (a machine that shares its
cores between login sessions, as Linux's autogroup does, gives one session's processes one
share however many they are: there the CPU, not the wall, says what idle cores would give).
Every cluster run's verdicts must equal the serial run's, or the script stops. The load average
is printed before and after: on a shared machine the ratio is only as good as the idle cores it
had.

    python benchmarks/bench_search_workers.py [--pairs 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import MOONCAKE, REUSE_BYTES, SLO

from kvadvisor import phases
from kvadvisor.advice.inputs import load_advisor_inputs
from kvadvisor.advice.recommend import RecommendInputs, recommend
from kvadvisor.advice.slo import slo_targets
from kvadvisor.catalog.models import get_model
from kvadvisor.execute import SERIAL, Executor, open_executor
from kvadvisor.pipeline.assemble import trace_view
from kvadvisor.pipeline.replay import ReplaySource
from kvadvisor.trace import read_trace
from kvadvisor.trace.arrays import RequestArrays


def _cpu_self() -> float:
    """This process's user + system seconds (run on each worker too)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _cpu(ex: Executor) -> tuple[float, float]:
    """CPU seconds of this process, and of the executor's workers (0 when serial)."""
    if not ex.parallel:
        return _cpu_self(), 0.0
    return _cpu_self(), sum(ex.client.run(_cpu_self).values())  # type: ignore[attr-defined]


def timed(view: object, inputs: RecommendInputs, ex: Executor) -> tuple[float, ...]:
    """One recommend on ``ex``: search wall, whole wall, the search's CPU here and on workers.

    The last item is the verdicts.
    """
    marks: dict[str, tuple[float, float, float]] = {}

    def mark(name: str, _detail: str) -> None:
        if name == phases.CHECK and name not in marks:
            marks[name] = (time.perf_counter(), *_cpu(ex))

    phases.listen(mark)
    here, there = _cpu(ex)
    start = time.perf_counter()
    try:
        verdicts = recommend(view, dataclasses.replace(inputs, executor=ex))  # type: ignore[arg-type]
    finally:
        phases.listen(None)
    end = time.perf_counter()
    at, here2, there2 = marks[phases.CHECK]
    return at - start, end - start, here2 - here, there2 - there, verdicts  # type: ignore[return-value]


def spread(values: list[float]) -> str:
    """Median with min and max, seconds."""
    return (
        f"median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"
    )


def main() -> int:
    """Start the cluster, warm both sides, run the pairs, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    model = get_model("llama-3.1-70b")
    adv = load_advisor_inputs()
    inputs = RecommendInputs(
        model,
        "bf16",
        "bf16",
        256,
        adv.instances,
        adv.storage,
        slo_targets(SLO, model),
        reuse_bytes=REUSE_BYTES,
    )
    trace = read_trace(MOONCAKE)
    arrays = RequestArrays.of(trace)
    view = trace_view(trace, arrays, ReplaySource(arrays))
    print(f"cores {os.cpu_count()}; load average before {os.getloadavg()}")
    start = time.perf_counter()
    cluster = open_executor(args.workers)
    print(
        f"local cluster of {args.workers} processes started in {time.perf_counter() - start:.2f} s"
    )
    try:
        *_, reference = timed(view, inputs, SERIAL)  # kernels loaded or compiled here
        timed(view, inputs, cluster)  # ... and in each worker (seeded from this process's cache)
        walls: dict[str, list[float]] = {"1": [], str(args.workers): []}
        wholes: dict[str, list[float]] = {"1": [], str(args.workers): []}
        cpus: dict[str, list[float]] = {"1": [], str(args.workers): []}
        cpu_here: dict[str, list[float]] = {"1": [], str(args.workers): []}
        ratios = []
        for i in range(args.pairs):
            order = [("1", SERIAL), (str(args.workers), cluster)]
            got = {}
            for label, ex in order if i % 2 == 0 else order[::-1]:
                wall, whole, here, there, verdicts = timed(view, inputs, ex)
                if verdicts != reference:
                    raise SystemExit(f"--workers {label}: the verdicts differ from the serial run")
                walls[label].append(wall)
                wholes[label].append(whole)
                cpus[label].append(here + there)
                cpu_here[label].append(here)
                got[label] = wall
            ratios.append(got["1"] / got[str(args.workers)])
            print(
                f"pair {i + 1}: search 1 worker {got['1']:.2f} s, {args.workers} workers "
                f"{got[str(args.workers)]:.2f} s, ratio {ratios[-1]:.2f}x",
                flush=True,
            )
    finally:
        cluster.close()
    for label in walls:
        print(
            f"--workers {label}: search {spread(walls[label])}; whole recommend "
            f"{spread(wholes[label])}; the search's CPU {spread(cpus[label])}, of which this "
            f"process {spread(cpu_here[label])}"
        )
    n = str(args.workers)
    serial_cpu, cluster_cpu = statistics.median(cpus["1"]), statistics.median(cpus[n])
    # What idle cores would allow: the cluster's search cannot take less wall than its CPU
    # spread evenly over the cores (this process and the workers share them).
    cores = min(args.workers, os.cpu_count() or 1)
    print(
        f"the search's CPU on the cluster is {cluster_cpu / serial_cpu:.2f}x the serial one; "
        f"on {cores} idle cores its wall would be at least {cluster_cpu / cores:.2f} s against "
        f"the serial {serial_cpu:.2f} s of CPU: at most {serial_cpu * cores / cluster_cpu:.2f}x"
    )
    print(
        f"speed-up of the search, ratio of medians: "
        f"{statistics.median(walls['1']) / statistics.median(walls[n]):.2f}x; per pair: "
        f"median {statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f})"
    )
    print(f"load average after {os.getloadavg()}; replays per search {reference.replayed}")  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
