"""AIConfigurator static-mode sweep: silicon-calibrated prefill and decode-step latencies.

Runs NVIDIA AIConfigurator's static mode (``aiconfigurator.cli.api.cli_estimate(mode="static")``,
no latency corrections applied) for every model x GPU x TP x ISL x batch point of a grid and
writes one row per point: the prefill latency of ``batch`` prompts of ``isl`` tokens in one
forward pass (AIC's ``context_latency``), the latency of one decode step of ``batch`` sequences
at a context of ``isl`` tokens (``generation_latency`` with ``osl = 2``), both in ms, and AIC's
per-op breakdown of each (JSON), plus whether the point runs out of GPU memory by AIC's own
check (weights, activations and the KV of ``batch x (isl + osl)`` tokens).

It needs ``aiconfigurator`` (the CLI/SDK) and ``aiconfigurator-core`` (the silicon database),
installed in their own environment, not the project's:

    python -m venv AIC && AIC/bin/pip install aiconfigurator==0.12.0 aiconfigurator-core==0.12.0
    AIC/bin/pip install -e . --no-deps
    AIC/bin/python benchmarks/aic_sweep.py --grid benchmark -o aic_benchmark.parquet
    AIC/bin/python benchmarks/aic_sweep.py --grid fit -o aic_fit.parquet

``--grid benchmark`` is the issue-15 sweep (the models the benchmark table reports); ``--grid
fit`` is the grid the default coefficients are fitted on: other models (so the benchmark's
models stay held out), in-between ISLs and batches.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass

import pandas as pd

BACKEND = "vllm"
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "a100_sxm", "l40s")
TPS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Grid:
    """Models (AIC's HF ids), ISLs and batches of one sweep."""

    models: tuple[str, ...]
    isls: tuple[int, ...]
    batches: tuple[int, ...]


GRIDS = {
    "benchmark": Grid(
        models=(
            "Qwen/Qwen3-32B",
            "meta-llama/Meta-Llama-3.1-8B",
            "meta-llama/Meta-Llama-3.1-70B",
            "Qwen/Qwen3-235B-A22B",
            "deepseek-ai/DeepSeek-V3",
            "openai/gpt-oss-120b",
        ),
        isls=(1024, 2048, 4096, 8192, 16384, 32768),
        batches=(1, 2, 4, 8, 16, 32, 64),
    ),
    "fit": Grid(
        models=(
            "Qwen/Qwen3-1.7B",
            "Qwen/Qwen3-8B",
            "meta-llama/Meta-Llama-3.1-405B",
            "Qwen/Qwen3-30B-A3B",
            "Qwen/Qwen3-30B-A3B-FP8",
            "mistralai/Mixtral-8x7B-v0.1",
            "mistralai/Mixtral-8x22B-v0.1",
            "Qwen/Qwen3-Coder-480B-A35B-Instruct",
            "moonshotai/Kimi-K2-Instruct",
            "openai/gpt-oss-20b",
        ),
        isls=(512, 1536, 3072, 6144, 12288, 24576),
        batches=(1, 3, 6, 12, 24, 48),
    ),
}


def model_path(model: str, workdir: str) -> str:
    """AIC's name for the model, or a folder holding the config.json AIC vendors for it.

    AIC reads its pre-downloaded configs only for its default models and otherwise fetches
    config.json from the Hub; configs it ships but does not list (Mixtral, Kimi-K2) are
    handed over as a local folder, so the sweep needs no network.
    """
    import os
    import shutil
    from importlib.resources import files

    from aiconfigurator.sdk.common import DefaultHFModels

    if model in DefaultHFModels:
        return model
    vendored = (
        files("aiconfigurator_core") / "model_configs" / (model.replace("/", "--") + "_config.json")
    )
    folder = os.path.join(workdir, model.replace("/", "--"))
    os.makedirs(folder, exist_ok=True)
    shutil.copyfile(str(vendored), os.path.join(folder, "config.json"))
    return folder


def moe_layouts(model: str, tp: int) -> list[tuple[int | None, int | None]]:
    """(moe_tp, moe_ep) pairs to run: experts split by TP, and by expert parallelism."""
    from aiconfigurator.sdk.models import check_is_moe

    if not check_is_moe(model):
        return [(None, None)]
    if tp == 1:
        return [(1, 1)]
    return [(tp, 1), (1, tp)]


def sweep(grid: Grid, systems: tuple[str, ...], tps: tuple[int, ...]) -> pd.DataFrame:
    """One row per point (errors recorded, not raised: AIC lacks some kernels on some GPUs)."""
    import tempfile

    from aiconfigurator.cli.api import cli_estimate
    from aiconfigurator.sdk.perf_database import get_latest_database_version

    workdir = tempfile.mkdtemp(prefix="aic-models-")
    rows = []
    for system in systems:
        version = get_latest_database_version(system=system, backend=BACKEND)
        for model in grid.models:
            path = model_path(model, workdir)
            for tp in tps:
                for moe_tp, moe_ep in moe_layouts(path, tp):
                    for isl in grid.isls:
                        for bs in grid.batches:
                            row = {
                                "model": model,
                                "system": system,
                                "backend": BACKEND,
                                "version": version,
                                "tp": tp,
                                "moe_tp": moe_tp,
                                "moe_ep": moe_ep,
                                "isl": isl,
                                "batch": bs,
                            }
                            try:
                                r = cli_estimate(
                                    path,
                                    system,
                                    mode="static",
                                    backend_name=BACKEND,
                                    backend_version=version,
                                    isl=isl,
                                    osl=2,
                                    batch_size=bs,
                                    tp_size=tp,
                                    moe_tp_size=moe_tp,
                                    moe_ep_size=moe_ep,
                                )
                            except Exception as exc:
                                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                                rows.append(row)
                                continue
                            s = r.summary
                            row.update(
                                prefill_ms=float(r.raw["context_latency"]),
                                decode_ms=float(r.raw["generation_latency"]),
                                oom=bool(s.check_oom()),
                                gemm=r.raw.get("gemm"),
                                kvcache=r.raw.get("kvcache"),
                                moe=r.raw.get("moe"),
                                prefill_ops=json.dumps(s.get_context_latency_dict()),
                                decode_ops=json.dumps(s.get_generation_latency_dict()),
                                error=None,
                            )
                            rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    """Run the sweep and write it (parquet or CSV by the output's extension)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", choices=sorted(GRIDS), default="benchmark")
    ap.add_argument("--systems", nargs="*", default=list(SYSTEMS))
    ap.add_argument("--tp", nargs="*", type=int, default=list(TPS))
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    logging.disable(logging.WARNING)  # AIC logs every interpolation fallback
    import aiconfigurator
    import aiconfigurator_core

    start = time.perf_counter()
    df = sweep(GRIDS[args.grid], tuple(args.systems), tuple(args.tp))
    df["aic_version"] = f"aiconfigurator {aiconfigurator.__version__}"
    df["aic_core_version"] = getattr(aiconfigurator_core, "__version__", "0.12.0")
    if args.output.endswith(".csv"):
        df.to_csv(args.output, index=False)
    else:
        df.to_parquet(args.output, index=False)
    ok = df["error"].isna()
    print(
        f"{len(df)} points ({int(ok.sum())} estimated, {int((~ok).sum())} failed) in "
        f"{time.perf_counter() - start:.0f} s -> {args.output}"
    )


if __name__ == "__main__":
    main()
