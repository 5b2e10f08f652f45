"""The large streaming run: `kvadvisor synth` N requests, then `analyze` within a memory limit.

Measures, each as its own child process: the synth write (time, peak RSS) and the analysis
(time, peak RSS against ``--memory-limit``), and prints the plan the analysis chose (exact or
SHARDS at which rate, with the error estimate). The issue's run is 100M requests; on a small
machine pass a smaller ``--requests`` and the script extrapolates the time linearly (the
streaming pass is linear in requests; memory is bounded by the limit, not the trace), saying so.

    python benchmarks/bench_stream.py [--requests 100000000] [--memory-limit 4GiB]
                                      [--workdir DIR] [--keep]

The analysis runs with ``--model deepseek-v3`` (see MODEL), and the plan is printed first
from the file's footers (the script stops if a planned peak is over the limit).
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
MODEL = "deepseek-v3"


def _size_bytes(text: str) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kvadvisor.pipeline.streaming import parse_memory_limit

    return parse_memory_limit(text)


def _print_plan(trace: Path, limit: int) -> None:
    """The plan `analyze` will follow, from the file's footers, before it runs."""
    from kvadvisor.pipeline.streaming import plan_for_stream
    from kvadvisor.trace.stream import open_trace_stream

    stream = open_trace_stream(trace)
    plan = plan_for_stream(stream, limit)
    curve = "exact curve" if plan.exact_curve else f"SHARDS at rate {plan.sample_rate:g}"
    advice = (
        f"profile in chunks of {plan.profile_chunk_rows:,} requests, search and replay on "
        f"windows; planned peak {plan.profile_bytes / 2**30:.2f} GiB of "
        f"{limit / 2**30:.2f} GiB ({plan.profile_counts})"
        if plan.stage_profile
        else f"no stage profile: it would need {plan.profile_bytes / 2**30:.2f} GiB"
    )
    print(
        f"  plan: {plan.mode}, {curve}; {advice}; {stream.requests:,} requests, "
        f"{stream.block_accesses:,} block accesses (footers), {stream.duration_s:,.0f} s"
    )
    if plan.mode != "in_memory" and plan.stage_profile and plan.profile_bytes > limit:
        sys.exit("the plan does not fit the memory limit")


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
    _print_plan(trace, limit)
    report = work / "stream-report.json"
    run = run_measured(
        "analyze --memory-limit " + args.memory_limit,
        kvadvisor_argv(
            "analyze",
            str(trace),
            "--memory-limit",
            args.memory_limit,
            # The synth shape clips prompts at 131,072 tokens and outputs at 16,384, so some
            # requests exceed a 128K-context model (a streamed trace cannot leave them out);
            # DeepSeek-V3's 163,840 tokens hold the longest possible request (147,456).
            "--model",
            MODEL,
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
    for extra in pcache.get("extras_sampling") or ():
        print(
            f"  {extra['extra']} estimated at rate {extra['rate']:g} ({extra['sampled_accesses']} "
            f"sampled accesses), standard error {extra['error_estimate']} ({extra['error_unit']})"
        )
    ttl = (pcache.get("reuse") or {}).get("ttl") or ()
    if ttl:
        print("  TTL rows (share, s): " + ", ".join(f"{t['share']}: {t['ttl_s']:.1f}" for t in ttl))
    verdicts = ((body.get("recommendation") or {}).get("verdict") or {}).get("verdicts") or []
    for v in verdicts:
        print(f"  verdict {v.get('provider')}: {v.get('status')}")
    print(f"  unavailable: {sorted(body.get('unavailable') or {}) or 'nothing'}")
    split = body.get("stage_split") or {}
    print(
        f"  stage split: {split.get('classification')} (source {split.get('source')}); "
        f"{next((n for n in split.get('notes') or () if n.startswith('profiled in')), 'whole')}"
    )
    replay = body.get("replay") or {}
    print(f"  replay: {(replay.get('notes') or ['none'])[-1]}")
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
