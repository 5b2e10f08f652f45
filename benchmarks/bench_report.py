"""Rendering cost of each report format on a real analysis (the Mooncake sample trace).

Analyses the sample trace once (with a model, so every section is filled), then renders each
format several times and prints the best wall time and the output size. The HTML is timed
cold (every chart drawn) and warm (charts cached per spec, as when one run writes several
HTML files), since drawing the charts is most of its cost.

    python benchmarks/bench_report.py [TRACE] [--model qwen3-32b] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from kvadvisor import __version__
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.pipeline.options import AnalyzeOptions
from kvadvisor.report import RENDERERS
from kvadvisor.report.charts import render_svg
from kvadvisor.trace import read_trace

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "mooncake_conversation.parquet"


def best_of(repeat: int, fn: Callable[[], str]) -> tuple[float, str]:
    """Best wall time of ``repeat`` calls and the last result."""
    best, out = float("inf"), ""
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    """Print one line per renderer: best wall time and output size."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=SAMPLE)
    ap.add_argument("--model", default="qwen3-32b")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    start = time.perf_counter()
    report = analyze(
        read_trace(args.trace, None),
        AnalyzeOptions(model=args.model),
        version=__version__,
        generated_at="2026-01-01T00:00:00+00:00",
    )
    print(
        f"analyze {args.trace.name} ({report.trace.requests:,} requests): "
        f"{time.perf_counter() - start:.2f} s"
    )
    for name, cls in sorted(RENDERERS.items()):
        if name == "html":

            def cold(cls: type = cls) -> str:
                render_svg.cache_clear()
                return cls().render(report)

            t_cold, out = best_of(args.repeat, cold)
            t_warm, _ = best_of(args.repeat, lambda cls=cls: cls().render(report))
            charts = out.count('<figure class="chart')
            print(
                f"{name:<9} cold {t_cold:6.3f} s  warm {t_warm:6.3f} s  "
                f"{len(out.encode()) / 1024:8.1f} KiB  {charts} charts"
            )
        else:
            t, out = best_of(args.repeat, lambda cls=cls: cls().render(report))
            print(f"{name:<9}      {t:6.3f} s              {len(out.encode()) / 1024:8.1f} KiB")


if __name__ == "__main__":
    main()
