"""Step times against the stored AIConfigurator sweep (benchmarks/data/aic_benchmark.parquet).

The sweep holds AIC's silicon-calibrated prefill and decode-step latencies for BF16, FP8-weight
(block-scaled and per-tensor), FP8-KV and MoE variants of models the coefficients were not
fitted on (benchmarks/data/README.md has the command). These hold the issue-28 medians the
roofline meets, so a change to the step model or its coefficients that loses them fails here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
SWEEP = REPO / "benchmarks" / "data" / "aic_benchmark.parquet"


def _bench():  # type: ignore[no-untyped-def]
    """benchmarks/bench_perfmodel.py as a module (a script, not a package)."""
    spec = importlib.util.spec_from_file_location(
        "bench_perfmodel", REPO / "benchmarks" / "bench_perfmodel.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _errors() -> pd.DataFrame:
    bench = _bench()
    aic = sys.modules["_aic"]  # imported by the bench from benchmarks/
    return bench.errors(aic.predict(aic.load_sweep(SWEEP), aic.resolver(use_catalog=True)))


def test_the_stored_sweep_covers_fp8_weights_fp8_kv_and_moe() -> None:
    """Block and per-tensor FP8 GEMMs, FP8 KV on bf16 weights, MoE by TP and by EP."""
    df = _errors()
    assert set(df["kind"]) == {"dense", "FP8", "FP8 KV", "MoE"}
    assert {"fp8", "fp8_block"} <= set(df["gemm"])
    moe = df[df["kind"] == "MoE"]
    assert set(moe["layout"]) == {"TP", "EP"}
    assert {"h100-sxm", "h200", "b200"} <= set(df.loc[df["kind"] == "FP8", "gpu"])
    assert len(df) == 2286  # the points AIC estimates and finds in memory


def test_fp8_dense_and_moe_medians_hold() -> None:
    """Median abs. error: dense <= 10 %, FP8 weights <= 15 %, MoE <= 15 %, both phases.

    Before the FP8 refit, FP8 Qwen3-32B ran 77-80 % too slow in prefill (median).
    """
    df = _errors()
    for kind, target in (("dense", 0.10), ("FP8 KV", 0.10), ("FP8", 0.15), ("MoE", 0.15)):
        part = df[df["kind"] == kind]
        for phase in ("prefill", "decode"):
            median = float(np.median(np.abs(part[f"{phase}_err"])))
            assert median <= target, (kind, phase, median)
    qwen_fp8 = df[(df["model"] == "Qwen/Qwen3-32B-FP8") & (df["gpu"] == "h200")]
    assert float(np.median(np.abs(qwen_fp8["prefill_err"]))) < 0.10
