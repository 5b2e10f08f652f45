"""Whole `kvadvisor analyze` against `llmtrafficlens profile`, in interleaved pairs.

Input: the Mooncake FAST'25 conversation trace repeated ``--repeats`` times (default 50) with
disjoint hash ids (about 600k requests, 14M block accesses), given to both tools as the same
JSONL file. Each tool runs as its own child process; wall time and that child's peak RSS are
measured (os.wait4). kvadvisor runs once first to fill numba's on-disk cache (a user's second
run); the peer has nothing to warm. Then ``--pairs`` pairs, the order alternating (A B, B A,
...), so a load that drifts during the run weighs on both tools alike: each tool's median with
its range, the ratio of the medians and each pair's own ratio (median, range). Targets (issue
27): kvadvisor, the deployment search included, ≥ 20× faster in wall time and ≤ ¼ of the
peer's peak memory. ``--without-search`` adds ``analyze --no-search`` to every pair (the three
runs in turn, the order reversed every other pair), so the ratio is reported with the search
and without it against the same runs of the peer.

    python benchmarks/bench_peer.py [--repeats 50] [--workdir DIR] [--pairs 3] [--without-search]

The peer is an optional benchmark dependency: ``pip install -e ".[bench]"``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import (
    Measured,
    best_of,
    find_tool,
    kvadvisor_argv,
    mooncake_source,
    run_measured,
    spread,
    write_mooncake_repeated,
)

from kvadvisor.units import BYTES_PER_MIB

TARGET_SPEEDUP = 20.0
TARGET_MEMORY_SHARE = 0.25


def main() -> int:
    """Build the input, measure both tools, print figures and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--pairs", type=int, default=3, help="interleaved pairs of runs")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--without-search", action="store_true", help="also time analyze --no-search"
    )
    args = parser.parse_args()
    peer = find_tool("llmtrafficlens")
    if peer is None:
        sys.exit("llmtrafficlens not installed: pip install -e '.[bench]'")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="kvadvisor-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    trace = work / f"mooncake_x{args.repeats}.jsonl"
    requests, accesses = write_mooncake_repeated(mooncake_source(), trace, args.repeats)
    print(
        f"input: {trace.name}: {requests} requests, {accesses} block accesses, "
        f"{trace.stat().st_size / BYTES_PER_MIB:.1f} MiB"
    )

    report = work / "kvadvisor.json"
    kv_argv = kvadvisor_argv(
        "analyze", str(trace), "--trace-format", "mooncake", "--format", "json", "-o", str(report)
    )
    best_of("warm-up (numba cache)", kv_argv, 1)
    peer_argv = [peer, "profile", "--format", "mooncake", str(trace), "-o", str(work / "ltl")]
    tools = [("kvadvisor analyze", kv_argv)]
    if args.without_search:
        tools.append(("kvadvisor analyze --no-search", [*kv_argv, "--no-search"]))
    tools.append(("llmtrafficlens profile", peer_argv))
    runs: dict[str, list[Measured]] = {label: [] for label, _ in tools}
    for i in range(args.pairs):
        for label, argv in tools if i % 2 == 0 else tools[::-1]:
            m = run_measured(f"{label} (pair {i + 1})", argv, cwd=work)
            if m.returncode != 0:
                sys.exit(f"{label} failed (rc {m.returncode}):\n{m.stderr_tail}")
            print(m.line() + f"   CPU {m.cpu_s:7.2f} s   load {os.getloadavg()[0]:.1f}")
            runs[label].append(m)
    for label, got in runs.items():
        print(
            f"{label:<30} wall {spread([r.wall_s for r in got])} s   CPU "
            f"{spread([r.cpu_s for r in got])} s   peak RSS "
            f"{spread([r.peak_rss_bytes / BYTES_PER_MIB for r in got])} MiB"
        )
    ltl = runs[tools[-1][0]]
    for label, _ in tools[:-1]:
        _ratios(label, runs[label], ltl)
    body = json.loads(report.read_text(encoding="utf-8"))
    filled = sorted(k for k, v in body.items() if v not in (None, [], {}, ()))
    peer_keys = sorted(json.loads((work / "ltl.json").read_text(encoding="utf-8")))
    print(f"kvadvisor report sections filled: {', '.join(filled)}")
    print(f"peer report sections:             {', '.join(peer_keys)}")
    return 0


def _ratios(label: str, kv: list[Measured], ltl: list[Measured]) -> None:
    """Print the peer's time over ``label``'s (medians, per pair, CPU) and the memory share."""
    speedup = statistics.median(r.wall_s for r in ltl) / statistics.median(r.wall_s for r in kv)
    cpu = statistics.median(r.cpu_s for r in ltl) / statistics.median(r.cpu_s for r in kv)
    per_pair = [b.wall_s / a.wall_s for a, b in zip(kv, ltl, strict=True)]
    per_cpu = [b.cpu_s / a.cpu_s for a, b in zip(kv, ltl, strict=True)]
    mem_share = max(r.peak_rss_bytes for r in kv) / max(r.peak_rss_bytes for r in ltl)
    print(
        f"{label}: speedup (peer wall / its wall), ratio of medians: {speedup:.1f}x; per pair "
        f"{spread(per_pair)}x; CPU {cpu:.1f}x, per pair {spread(per_cpu)}x   target >= "
        f"{TARGET_SPEEDUP:g}x {'MET' if speedup >= TARGET_SPEEDUP else 'NOT MET'}"
    )
    print(
        f"{label}: memory (its peak / peer peak, the largest of each): {mem_share:.3f}   "
        f"target <= {TARGET_MEMORY_SHARE:g} "
        f"{'MET' if mem_share <= TARGET_MEMORY_SHARE else 'NOT MET'}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
