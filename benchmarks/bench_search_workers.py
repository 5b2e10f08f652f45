"""The deployment search with --workers 1 against --workers 2: paired, interleaved, medians.

On the bundled Mooncake conversation trace (12,031 requests, every provider, the docs' example
SLO, as bench_search.py): one local Dask cluster of 2 processes (one thread each) is started
once and kept; then ``--pairs`` pairs of searches run, serial and on the cluster, the order
alternating pair by pair (ABBA), so a change in the machine's load falls on both sides.

The search's wall is ``recommend`` from its start until the checks of the chosen deployments
begin (the providers' branch and bound, every replay of it); the whole ``recommend`` (the search,
then each provider's pick checked and grown on the whole trace, the primary's tier values and
stresses: on the cluster too) is timed beside it. CPU seconds count this process and, on the
cluster, the workers' processes too (a machine that shares its cores between login sessions, as
Linux's autogroup does, gives one session's processes one share however many they are: there the
CPU, not the wall, says what idle cores would give: the serial CPU over the cluster's CPU spread
on the workers' cores). Every cluster run's verdicts must equal the serial run's, or the script
stops. The load average is printed before and after: on a shared machine the wall ratio is only
as good as the idle cores it had. The serial warm-up also measures what a task sends back: each
whole replay's outcome pickled, and its compact form (what a worker returns); and each fan-out's
chains (a provider's search, a provider's checks, the tier values, the stresses), the CPU of each
one run alone: replays within a chain depend on each other, so 2 workers cannot finish a fan-out
before its longest chain, whatever the CPU spread (the critical-path bound printed).

    python benchmarks/bench_search_workers.py [--pairs 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
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
from kvadvisor.advice.sizing import Outcome, Replayer, compact
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


@dataclasses.dataclass
class Timing:
    """One recommend: walls (s) and CPU (s) here and on the workers, for the search and whole."""

    search_wall: float
    whole_wall: float
    search_here: float
    search_there: float
    whole_here: float
    whole_there: float
    verdicts: object

    @property
    def search_cpu(self) -> float:
        """The search's CPU, this process and the workers."""
        return self.search_here + self.search_there

    @property
    def whole_cpu(self) -> float:
        """The whole recommend's CPU, this process and the workers."""
        return self.whole_here + self.whole_there


def timed(view: object, inputs: RecommendInputs, ex: Executor) -> Timing:
    """One recommend on ``ex``, timed to the checks' start and to its end."""
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
    here3, there3 = _cpu(ex)
    at, here2, there2 = marks[phases.CHECK]
    return Timing(
        at - start,
        end - start,
        here2 - here,
        there2 - there,
        here3 - here,
        there3 - there,
        verdicts,
    )


def sizes_sent(view: object, inputs: RecommendInputs) -> tuple[list[int], list[int]]:
    """One serial recommend: each whole replay's outcome pickled, whole and compact (bytes)."""
    whole: list[int] = []
    small: list[int] = []
    replay_whole = Replayer.replay_whole

    def measured(self: Replayer, *args: object) -> Outcome:
        out = replay_whole(self, *args)  # type: ignore[arg-type]
        whole.append(len(pickle.dumps(out)))
        small.append(len(pickle.dumps(compact(out))))
        return out

    Replayer.replay_whole = measured  # type: ignore[method-assign]
    try:
        recommend(view, dataclasses.replace(inputs, executor=SERIAL))  # type: ignore[arg-type]
    finally:
        Replayer.replay_whole = replay_whole  # type: ignore[method-assign]
    return whole, small


class Chains(Executor):
    """The serial executor, timing the CPU of each item of each fan-out (one chain each)."""

    def __init__(self) -> None:
        self.cpu: list[list[float]] = []

    def fan_out(self, fn, items, announce=None):  # type: ignore[no-untyped-def]
        """As the serial executor's, each call's CPU seconds recorded."""
        times: list[float] = []
        self.cpu.append(times)
        out = []
        for i, item in enumerate(items, 1):
            if announce is not None:
                announce(i, item)
            start = _cpu_self()
            out.append(fn(item))
            times.append(_cpu_self() - start)
        return out


def critical_path(view: object, inputs: RecommendInputs, workers: int) -> list[str]:
    """Per fan-out of one serial recommend: its chains' CPU, and what ``workers`` could give."""
    chains = Chains()
    recommend(view, dataclasses.replace(inputs, executor=chains))  # type: ignore[arg-type]
    names = ("the search", "the checks", "tier values and stresses")
    lines = []
    for name, times in zip(names, chains.cpu, strict=False):
        total, longest = sum(times), max(times, default=0.0)
        best = max(total / workers, longest)
        lines.append(
            f"{name}: chains' CPU {', '.join(f'{t:.2f}' for t in times)} s; sum {total:.2f} s, "
            f"longest {longest:.2f} s: on {workers} workers at most "
            f"{total / best if best else 1.0:.2f}x (sum / max(sum / {workers}, longest))"
        )
    return lines


def spread(values: list[float], unit: str = " s") -> str:
    """Median with min and max."""
    return (
        f"median {statistics.median(values):.2f}{unit} (min {min(values):.2f}, "
        f"max {max(values):.2f})"
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
        reference = timed(view, inputs, SERIAL).verdicts  # kernels loaded or compiled here
        timed(view, inputs, cluster)  # ... and in each worker (seeded from this process's cache)
        whole_b, small_b = sizes_sent(view, inputs)
        print(
            f"a whole replay's outcome pickled: median {statistics.median(whole_b) / 1e6:.2f} MB "
            f"(min {min(whole_b) / 1e6:.2f}, max {max(whole_b) / 1e6:.2f}, {len(whole_b)} "
            f"replays); what a task returns now: median {statistics.median(small_b) / 1e3:.2f} kB "
            f"(max {max(small_b) / 1e3:.2f})",
            flush=True,
        )
        for line in critical_path(view, inputs, args.workers):
            print("critical path, " + line, flush=True)
        n = str(args.workers)
        runs: dict[str, list[Timing]] = {"1": [], n: []}
        for i in range(args.pairs):
            order = [("1", SERIAL), (n, cluster)]
            for label, ex in order if i % 2 == 0 else order[::-1]:
                t = timed(view, inputs, ex)
                if t.verdicts != reference:
                    raise SystemExit(f"--workers {label}: the verdicts differ from the serial run")
                runs[label].append(t)
            a, b = runs["1"][-1], runs[n][-1]
            print(
                f"pair {i + 1}: search {a.search_wall:.2f} s / {b.search_wall:.2f} s "
                f"({a.search_wall / b.search_wall:.2f}x); whole recommend {a.whole_wall:.2f} s / "
                f"{b.whole_wall:.2f} s ({a.whole_wall / b.whole_wall:.2f}x); load "
                f"{os.getloadavg()[0]:.1f}",
                flush=True,
            )
    finally:
        cluster.close()
    cores = min(args.workers, os.cpu_count() or 1)
    for part in ("search", "whole"):
        for label, ts in runs.items():
            walls = [getattr(t, f"{part}_wall") for t in ts]
            cpus = [getattr(t, f"{part}_cpu") for t in ts]
            here = [getattr(t, f"{part}_here") for t in ts]
            print(
                f"{part}, --workers {label}: wall {spread(walls)}; CPU {spread(cpus)}, of which "
                f"this process {spread(here)}"
            )
        one = [getattr(t, f"{part}_wall") for t in runs["1"]]
        many = [getattr(t, f"{part}_wall") for t in runs[n]]
        ratios = [a / b for a, b in zip(one, many, strict=True)]
        serial_cpu = statistics.median(getattr(t, f"{part}_cpu") for t in runs["1"])
        cluster_cpu = statistics.median(getattr(t, f"{part}_cpu") for t in runs[n])
        # What idle cores would allow: the cluster's run cannot take less wall than its CPU
        # spread evenly over the cores (this process and the workers share them).
        print(
            f"{part}: wall ratio of medians {statistics.median(one) / statistics.median(many):.2f}x"
            f", per pair {spread(ratios, 'x')}; CPU on the cluster {cluster_cpu / serial_cpu:.2f}x"
            f" the serial; on {cores} idle cores at most {serial_cpu * cores / cluster_cpu:.2f}x "
            f"(serial CPU {serial_cpu:.2f} s / (cluster CPU {cluster_cpu:.2f} s / {cores}))"
        )
    print(f"load average after {os.getloadavg()}; replays per recommend {reference.replayed}")  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
