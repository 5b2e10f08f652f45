"""Whole `kvadvisor analyze` against `llmtrafficlens profile`, side by side in one run.

Input: the Mooncake FAST'25 conversation trace repeated ``--repeats`` times (default 50) with
disjoint hash ids (about 600k requests, 14M block accesses), given to both tools as the same
JSONL file. Each tool runs as its own child process; wall time and that child's peak RSS are
measured (os.wait4). kvadvisor runs once first to fill numba's on-disk cache (a user's second
run); the peer has nothing to warm. Targets (issue 7): kvadvisor ≥ 10× faster in wall time and
≤ ¼ of the peer's peak memory.

    python benchmarks/bench_peer.py [--repeats 50] [--workdir DIR] [--runs 1]

The peer is an optional benchmark dependency: ``pip install -e ".[bench]"``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import (
    best_of,
    find_tool,
    kvadvisor_argv,
    mooncake_source,
    write_mooncake_repeated,
)

from kvadvisor.units import BYTES_PER_MIB

TARGET_SPEEDUP = 10.0
TARGET_MEMORY_SHARE = 0.25


def main() -> int:
    """Build the input, measure both tools, print figures and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--runs", type=int, default=1, help="runs per tool; the fastest counts")
    parser.add_argument("--workdir", type=Path, default=None)
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
    kv = best_of("kvadvisor analyze (jsonl)", kv_argv, args.runs)
    ltl = best_of(
        "llmtrafficlens profile (jsonl)",
        [peer, "profile", "--format", "mooncake", str(trace), "-o", str(work / "ltl")],
        args.runs,
        cwd=work,
    )
    for m in (kv, ltl):
        print(m.line())
    speedup = ltl.wall_s / kv.wall_s
    mem_share = kv.peak_rss_bytes / ltl.peak_rss_bytes
    print(
        f"speedup (peer wall / kvadvisor wall): {speedup:.1f}x   target >= {TARGET_SPEEDUP:g}x "
        f"{'MET' if speedup >= TARGET_SPEEDUP else 'NOT MET'}"
    )
    print(
        f"memory (kvadvisor peak / peer peak):  {mem_share:.3f}   target <= "
        f"{TARGET_MEMORY_SHARE:g} {'MET' if mem_share <= TARGET_MEMORY_SHARE else 'NOT MET'}"
    )
    body = json.loads(report.read_text(encoding="utf-8"))
    filled = sorted(k for k, v in body.items() if v not in (None, [], {}, ()))
    peer_keys = sorted(json.loads((work / "ltl.json").read_text(encoding="utf-8")))
    print(f"kvadvisor report sections filled: {', '.join(filled)}")
    print(f"peer report sections:             {', '.join(peer_keys)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
