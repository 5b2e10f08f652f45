"""Cold compile of the replay loop: process CPU of a first replay with an empty numba cache.

Usage: python benchmarks/bench_kernel_compile.py [--trace FILE] [--analyze TRACE]

Runs itself again in a child process whose ``NUMBA_CACHE_DIR`` is a new empty folder, so every
compiled function of the replay (the loop in ``fleet/kernel*`` and the kernels it calls) is
compiled, not loaded. The child replays the trace (default: the 103-request Bailian example)
through replay_identity's three-tier deployment once and prints its process CPU (user +
system, all threads) in total and inside the calls of the compiled loop (``_kernel_call``:
compiling the loop, then running it on 103 requests, which is a few milliseconds).

``--analyze TRACE``: instead, a user's first run, ``kvadvisor analyze TRACE --quiet`` with an
empty cache (every kernel the command uses compiled), then the same command again on the cache
it filled; the process CPU of each and their difference, the compile.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child(trace: Path) -> None:
    """The measured run: import, one replay, the CPU figures on stdout."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from replay_identity import aggregated

    from kvadvisor.fleet import ReplayOptions, TraceArrays, engine
    from kvadvisor.trace import read_trace

    inner = engine._kernel_call
    in_loop = [0.0]

    def timed(*args: object, **kw: object) -> object:
        t0 = time.process_time()
        try:
            return inner(*args, **kw)
        finally:
            in_loop[0] += time.process_time() - t0

    engine._kernel_call = timed
    arrays = TraceArrays.from_trace(read_trace(trace))
    wall = time.perf_counter()
    engine.run_resolved(arrays, aggregated(), ReplayOptions(step_log=True, workers=1))
    wall = time.perf_counter() - wall
    print(
        f"process CPU {time.process_time():.1f} s, inside the compiled loop's calls "
        f"{in_loop[0]:.1f} s, replay wall {wall:.1f} s"
    )


def children_cpu() -> float:
    """User + system CPU of the finished child processes so far, in seconds."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def analyze_twice(trace: Path, cache: str) -> None:
    """``kvadvisor analyze`` cold, then warm on the same cache: the CPU of each."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    figures = []
    with tempfile.TemporaryDirectory() as out:
        for _ in ("cold", "warm"):
            cmd = [sys.executable, "-m", "kvadvisor", "analyze", str(trace), "--quiet"]
            cmd += ["-o", str(Path(out) / "report.json")]
            before = children_cpu()
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            figures.append(children_cpu() - before)
    cold, warm = figures
    print(
        f"analyze {trace.name}: process CPU {cold:.1f} s with an empty cache, {warm:.1f} s "
        f"on the cache it filled; compiling {cold - warm:.1f} s"
    )


def main() -> None:
    """Start the child with an empty numba cache and print what it measured."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bailian = REPO / "sample_traces" / "bailian_example.jsonl"
    parser.add_argument("--trace", type=Path, default=bailian)
    parser.add_argument("--analyze", type=Path, help="time a first `kvadvisor analyze` instead")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.trace)
        return
    with tempfile.TemporaryDirectory() as cache:
        if args.analyze is not None:
            analyze_twice(args.analyze, cache)
            return
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        cmd = [sys.executable, __file__, "--child", "--trace", str(args.trace)]
        subprocess.run(cmd, env=env, check=True)


if __name__ == "__main__":
    main()
