"""The deployment search alone: its wall time and replays, on the Mooncake trace and on it x50.

1. The bundled Mooncake conversation trace (12,031 requests): every provider, the docs' example
   SLO (``ttft_p99=10s,tpot_p99=100ms``); the search samples 3,000 requests and verifies each
   chosen deployment on the whole trace.
2. The same trace repeated ``--repeats`` times (disjoint hash ids, shifted arrivals, as
   bench_peer.py builds it): too large to verify whole, so the search samples the busiest
   window and checks each verdict on a second window.

Each line: wall seconds of ``recommend`` (the search, in process, the trace already read and
numba's kernels loaded by one run before), replays run, configurations enumerated, the primary
verdict and the sample's error. The rest of ``analyze`` is measured by bench_peer.py.

    python benchmarks/bench_search.py [--repeats 50] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import mooncake_source, write_mooncake_repeated

from kvadvisor.advice.inputs import load_advisor_inputs
from kvadvisor.advice.recommend import RecommendInputs, recommend
from kvadvisor.advice.slo import slo_targets
from kvadvisor.catalog.models import get_model
from kvadvisor.pipeline.assemble import trace_view
from kvadvisor.pipeline.replay import ReplaySource
from kvadvisor.trace import read_trace
from kvadvisor.trace.arrays import RequestArrays
from kvadvisor.trace.model import Trace
from kvadvisor.units import BYTES_PER_GIB

REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO / "sample_traces" / "mooncake_conversation.parquet"
SLO = "ttft_p99=10s,tpot_p99=100ms"
# The conversation trace's KV worth keeping (its working set, docs/advisor.md's example).
REUSE_BYTES = 5.53 * 1024 * BYTES_PER_GIB


def search(trace: Trace) -> tuple[float, object]:
    """One search on ``trace``: wall seconds and the verdicts."""
    model = get_model("llama-3.1-70b")
    inputs = load_advisor_inputs()
    ri = RecommendInputs(
        model,
        "bf16",
        "bf16",
        256,
        inputs.instances,
        inputs.storage,
        slo_targets(SLO, model),
        reuse_bytes=REUSE_BYTES,
    )
    arrays = RequestArrays.of(trace)
    view = trace_view(trace, arrays, ReplaySource(arrays))
    start = time.perf_counter()
    verdicts = recommend(view, ri)
    return time.perf_counter() - start, verdicts


def report(label: str, trace: Trace, runs: int) -> None:
    """Warm up once, then ``runs`` timed searches; print the median and what it found."""
    search(trace)  # numba's kernels loaded, LRU kernels compiled or read from the disk cache
    times = []
    for _ in range(runs):
        wall, vs = search(trace)
        times.append(wall)
    primary = vs.primary_verdict  # type: ignore[attr-defined]
    what = "none" if primary is None else f"{primary.provider}: {primary.reason}"
    s = vs.sample  # type: ignore[attr-defined]
    errs = ", ".join(f"{k} {v:+.1%}" for k, v in s.error.items()) if s.error else "none"
    print(
        f"{label}: {trace.requests:,} requests; search median {statistics.median(times):.2f} s "
        f"(min {min(times):.2f}, max {max(times):.2f}, {runs} runs); "
        f"{vs.replayed} replays, {vs.enumerated} configurations; "  # type: ignore[attr-defined]
        f"primary {what}; sample error ({s.error_basis or 'none'}): {errs}"
    )


def main() -> int:
    """Build the inputs, time the search, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    report("mooncake conversation", read_trace(MOONCAKE), args.runs)
    work = Path(tempfile.mkdtemp(prefix="kvadvisor-bench-"))
    big = work / f"mooncake_x{args.repeats}.jsonl"
    write_mooncake_repeated(mooncake_source(), big, args.repeats)
    trace = read_trace(big, "mooncake")
    report(f"mooncake x{args.repeats}", trace, args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
