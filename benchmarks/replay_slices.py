"""The replay in time slices against the whole replay: how far each figure moves (issue 27).

Usage: python benchmarks/replay_slices.py TRACE --plan PLAN [--slice S] [--warmup W ...]

Replays TRACE through PLAN's deployment once whole and once per warm-up W in slices of S
seconds (``ReplayOptions.slice_s``/``slice_warmup_s``), and prints each slicing's figures
beside the whole replay's: TTFT and TPOT p50/p99, GPU-seconds per stage, and the bytes read
from and written to each tier, with the relative difference. docs/replay.md ("Time slices")
records a run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from kvadvisor.fleet import (
    ReplayContext,
    ReplayOptions,
    ReplayRun,
    TraceArrays,
    run_replay,
    summarize,
)
from kvadvisor.plan import load_plan
from kvadvisor.trace import read_trace


def figures(run: ReplayRun) -> dict[str, float]:
    """The compared figures of one replay, by name (seconds and bytes)."""
    result = summarize(run)
    req = result.requests
    out: dict[str, float] = {}
    for name, p in (("ttft", req.ttft_s), ("tpot", req.tpot_s)):
        assert p is not None
        out[f"{name}_p50_s"] = p.p50
        out[f"{name}_p99_s"] = p.p99
    for st in run.stages:
        role = st.role.value
        out[f"{role}_prefill_gpu_s"] = float(st.prefill_gpu_s.sum())
        out[f"{role}_decode_gpu_s"] = float(st.decode_gpu_s.sum())
        for k, tier in enumerate(st.spec.tiers):
            on = [i for i, r in enumerate(st.resources) if r.kind == "tier" and r.tier == k]
            out[f"{role}_{tier.name}_read_bytes"] = float(st.read_bytes[on].sum())
            out[f"{role}_{tier.name}_write_bytes"] = float(st.write_bytes[on].sum())
    return out


def main() -> None:
    """Replay whole and sliced; print the figures side by side."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--plan", type=Path, required=True)
    ap.add_argument("--slice", type=float, default=600.0, help="slice length, s")
    ap.add_argument("--warmup", type=float, nargs="+", default=[0.0, 60.0, 300.0])
    args = ap.parse_args()
    arrays = TraceArrays.from_trace(read_trace(args.trace))
    plan = load_plan(args.plan)
    t0 = time.perf_counter()
    whole = figures(run_replay(ReplayContext(arrays), plan))
    print(f"whole replay: {arrays.requests:,} requests, {time.perf_counter() - t0:.1f} s")
    sliced = {}
    for w in args.warmup:
        t0 = time.perf_counter()
        opts = ReplayOptions(slice_s=args.slice, slice_warmup_s=w)
        sliced[w] = figures(run_replay(ReplayContext(arrays), plan, opts))
        print(f"slices of {args.slice:g} s, warm-up {w:g} s: {time.perf_counter() - t0:.1f} s")
    head = f"{'figure':34} {'whole':>12}" + "".join(f" {f'W={w:g}s':>18}" for w in args.warmup)
    print(head)
    for name, value in whole.items():
        cells = []
        for w in args.warmup:
            v = sliced[w][name]
            rel = (v - value) / value if value else (0.0 if v == 0 else np.inf)
            cells.append(f" {v:>10.4g} {rel:+7.2%}")
        print(f"{name:34} {value:>12.4g}" + "".join(cells))


if __name__ == "__main__":
    main()
