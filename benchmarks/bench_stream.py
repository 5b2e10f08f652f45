"""The large streaming run: `kvadvisor synth` N requests, then `analyze` within a memory limit.

Measures, each as its own child process: the synth write (time, peak RSS) and the analysis
(time, peak RSS against ``--memory-limit``), and prints the plan the analysis chose (exact or
SHARDS at which rate, with the error estimate). The issue's run is 100M requests; on a small
machine pass a smaller ``--requests`` and the script extrapolates the time linearly (the
streaming pass is linear in requests; memory is bounded by the limit, not the trace), saying so.

    python benchmarks/bench_stream.py [--requests 100000000] [--memory-limit 4GiB]
                                      [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import kvadvisor_argv, run_measured

TARGET_REQUESTS = 100_000_000


def _size_bytes(text: str) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kvadvisor.pipeline.streaming import parse_memory_limit

    return parse_memory_limit(text)


def main() -> int:
    """Generate, analyze, print time, memory, plan and the extrapolation."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=TARGET_REQUESTS)
    parser.add_argument("--memory-limit", default="4GiB")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the generated trace")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="kvadvisor-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    trace = work / f"synth_{args.requests}.parquet"
    limit = _size_bytes(args.memory_limit)
    if not trace.exists():
        synth = run_measured(
            "synth",
            kvadvisor_argv(
                "synth",
                "-o",
                str(trace),
                "--requests",
                str(args.requests),
                "--seed",
                str(args.seed),
                "--arrival",
                "bursty",
                "--diurnal-amplitude",
                "0.5",
                "--rate",
                "1000",
                "--sessions",
                "200000",
            ),
        )
        if synth.returncode:
            sys.exit(synth.stderr_tail)
        print(synth.line())
        print(f"  {synth.stderr_tail.strip()}")
    report = work / "stream-report.json"
    run = run_measured(
        "analyze --memory-limit " + args.memory_limit,
        kvadvisor_argv(
            "analyze",
            str(trace),
            "--memory-limit",
            args.memory_limit,
            "--format",
            "json",
            "-o",
            str(report),
        ),
    )
    if run.returncode:
        sys.exit(run.stderr_tail)
    print(run.line())
    print(f"  CPU (user + system) {run.cpu_s:.1f} s")
    body = json.loads(report.read_text(encoding="utf-8"))
    pcache = body.get("prefix_cache") or {}
    sampling = pcache.get("sampling") or {}
    accesses = sampling.get("total_accesses")
    print(
        f"  requests {body['trace']['requests']}, plan: {pcache.get('status')}; "
        f"{pcache.get('note')}"
    )
    if sampling:
        print(
            f"  SHARDS rate {sampling['rate']:g}, sampled {sampling['sampled_accesses']} of "
            f"{accesses} block accesses, error estimate {sampling['error_estimate']}"
        )
    print(f"  token hit ratio (unbounded): {pcache.get('hit_ratio')}")
    verdicts = ((body.get("recommendation") or {}).get("verdict") or {}).get("verdicts") or []
    for v in verdicts:
        print(f"  verdict {v.get('provider')}: {v.get('status')}")
    print(f"  unavailable: {sorted(body.get('unavailable') or {}) or 'nothing'}")
    print(
        f"  peak RSS / memory limit: {run.peak_rss_bytes / limit:.2f} "
        f"({'within' if run.peak_rss_bytes <= limit else 'OVER'} the budget)"
    )
    rate = args.requests / run.wall_s
    print(f"  throughput {rate:,.0f} requests/s")
    if args.requests < TARGET_REQUESTS:
        print(
            f"  EXTRAPOLATED (linear) to {TARGET_REQUESTS:,} requests: "
            f"{TARGET_REQUESTS / rate:,.0f} s analyze; measured only {args.requests:,}"
        )
    if not args.keep:
        trace.unlink(missing_ok=True)
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
