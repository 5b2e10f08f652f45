"""AIConfigurator static-mode sweep: silicon-calibrated prefill and decode-step latencies.

Runs NVIDIA AIConfigurator's compiled static-mode engine (``aiconfigurator_core.sdk.engine.
EngineHandle``, no latency corrections applied) for every variant x GPU x TP x (MoE layout) x
ISL x batch point of a grid and writes one row per point: the prefill latency of ``batch``
prompts of ``isl`` tokens in one forward pass (``predict_prefill_latency``) and the latency of
one decode step of ``batch`` sequences at a context of ``isl`` tokens
(``predict_decode_latency`` with ``osl = 2``), both in ms; the quantization AIC ran each point
with (``gemm``, ``moe``, ``kvcache``: its GEMM, MoE and KV-cache quant modes, the checkpoint's
unless the variant overrides them); and whether the point runs out of GPU memory by AIC's own
memory model (``estimate_kv_cache``, vLLM's 0.9 of total memory: the KV of ``batch x (isl +
2)`` tokens must fit).

A variant is a model (AIC's HF id; its vendored config.json, no network) with optional quant
overrides, so one config yields its BF16, FP8 (per-tensor ``fp8``, block-scaled ``fp8_block``)
and FP8-KV points. It needs ``aiconfigurator-core`` (the ``[silicon]`` extra), installed in its
own environment, not the project's (the extra switches the suite's step times to silicon):

    python -m venv AIC && AIC/bin/pip install -e '.[silicon]'
    PYTHONPATH=. AIC/bin/python benchmarks/aic_sweep.py --grid benchmark \
        -o benchmarks/data/aic_benchmark.parquet
    PYTHONPATH=. AIC/bin/python benchmarks/aic_sweep.py --grid fit -o aic_fit.parquet

``--grid benchmark`` is what ``bench_perfmodel.py`` reports (dense BF16, FP8 dense, FP8 KV and
MoE models; stored in ``benchmarks/data/`` with the command in ``benchmarks/data/README.md``);
``--grid fit`` is the grid the default coefficients are fitted on: other models (so the
benchmark's stay held out), in-between ISLs and batches.
"""

from __future__ import annotations

import argparse
import logging
import re
import time
from dataclasses import dataclass

import pandas as pd

BACKEND = "vllm"
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "a100_sxm", "l40s")
TPS = (1, 2, 4, 8)
# vLLM's default gpu_memory_utilization: the fraction of total memory the engine may take.
VLLM_MEMORY_FRACTION = 0.9
# vLLM's default max_num_batched_tokens (the activations AIC's memory model reserves for).
VLLM_BATCHED_TOKENS = 8192


@dataclass(frozen=True)
class Variant:
    """A model and the quant modes that override its checkpoint's (None: the checkpoint's)."""

    model: str
    gemm: str | None = None
    moe: str | None = None
    kv: str | None = None


@dataclass(frozen=True)
class Grid:
    """Variants, ISLs and batches of one sweep."""

    variants: tuple[Variant, ...]
    isls: tuple[int, ...]
    batches: tuple[int, ...]


GRIDS = {
    "benchmark": Grid(
        variants=(
            Variant("Qwen/Qwen3-32B"),
            Variant("meta-llama/Meta-Llama-3.1-8B"),
            Variant("meta-llama/Meta-Llama-3.1-70B"),
            # FP8 dense: the block-scaled checkpoint, and per-tensor FP8 of the same shapes.
            Variant("Qwen/Qwen3-32B-FP8"),
            Variant("Qwen/Qwen3-32B", gemm="fp8"),
            Variant("meta-llama/Meta-Llama-3.1-70B", gemm="fp8_block"),
            # FP8 KV cache on BF16 weights.
            Variant("Qwen/Qwen3-32B", kv="fp8"),
            Variant("meta-llama/Meta-Llama-3.1-8B", kv="fp8"),
            # MoE: checkpoint dtypes (DeepSeek block FP8, gpt-oss MXFP4 experts).
            Variant("Qwen/Qwen3-235B-A22B"),
            Variant("deepseek-ai/DeepSeek-V3"),
            Variant("openai/gpt-oss-120b"),
            Variant("mistralai/Mixtral-8x7B-v0.1"),
        ),
        isls=(1024, 4096, 16384),
        batches=(1, 4, 16, 64),
    ),
    "fit": Grid(
        variants=(
            Variant("Qwen/Qwen3-1.7B"),
            Variant("Qwen/Qwen3-8B"),
            Variant("meta-llama/Meta-Llama-3.1-405B"),
            Variant("Qwen/Qwen3-8B", gemm="fp8"),
            Variant("Qwen/Qwen3-8B", gemm="fp8_block"),
            Variant("meta-llama/Meta-Llama-3.1-405B", gemm="fp8"),
            Variant("meta-llama/Meta-Llama-3.1-405B", gemm="fp8_block"),
            Variant("Qwen/Qwen3-8B", kv="fp8"),
            Variant("Qwen/Qwen3-30B-A3B"),
            Variant("Qwen/Qwen3-30B-A3B-FP8"),
            Variant("mistralai/Mixtral-8x22B-v0.1"),
            Variant("Qwen/Qwen3-Coder-480B-A35B-Instruct"),
            Variant("moonshotai/Kimi-K2-Instruct"),
            Variant("openai/gpt-oss-20b"),
        ),
        isls=(512, 1536, 3072, 6144, 12288),
        batches=(1, 3, 6, 12, 24, 48),
    ),
}


def error_text(exc: Exception) -> str:
    """The exception as one short line, without this machine's install paths."""
    text = re.sub(r"\S*/site-packages/", "", f"{type(exc).__name__}: {exc}")
    return re.sub(r"\S*aic-models-\w+/", "", text)[:300]


def model_path(model: str, workdir: str) -> str:
    """A folder holding the config.json AIC vendors for the model (read offline)."""
    import os
    import shutil
    from importlib.resources import files

    base = files("aiconfigurator_core") / "model_configs"
    folder = os.path.join(workdir, model.replace("/", "--"))
    os.makedirs(folder, exist_ok=True)
    stem = model.replace("/", "--")
    shutil.copyfile(str(base / f"{stem}_config.json"), os.path.join(folder, "config.json"))
    quant = base / f"{stem}_hf_quant_config.json"
    if quant.is_file():
        shutil.copyfile(str(quant), os.path.join(folder, "hf_quant_config.json"))
    return folder


def moe_layouts(is_moe: bool, tp: int) -> list[tuple[int, int]]:
    """(moe_tp, moe_ep) pairs to run: experts split by TP, and by expert parallelism."""
    if not is_moe:
        return [(1, 1)]
    if tp == 1:
        return [(1, 1)]
    return [(tp, 1), (1, tp)]


def resolved_quant(path: str, kwargs: dict) -> tuple[str, str | None, str]:
    """(gemm, moe, kvcache): the quant modes AIC runs the model with."""
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import get_model

    cfg = build_model_config(
        tp_size=kwargs["tp_size"],
        pp_size=1,
        attention_dp_size=1,
        moe_tp_size=kwargs["moe_tp_size"],
        moe_ep_size=kwargs["moe_ep_size"],
        gemm_quant_mode=kwargs.get("gemm_quant_mode"),
        kvcache_quant_mode=kwargs.get("kvcache_quant_mode"),
        moe_quant_mode=kwargs.get("moe_quant_mode"),
    )
    c = get_model(path, cfg, BACKEND).config
    moe = c.moe_quant_mode.name if c.moe_quant_mode is not None else None
    return c.gemm_quant_mode.name, moe, c.kvcache_quant_mode.name


def kv_tokens(path: str, system: str, version: str, kwargs: dict, batch: int) -> float:
    """KV tokens that fit beside weights and activations by AIC's memory model."""
    from aiconfigurator_core.sdk.memory import estimate_kv_cache

    try:
        est = estimate_kv_cache(
            path,
            system,
            BACKEND,
            version,
            max_num_tokens=VLLM_BATCHED_TOKENS,
            max_batch_size=batch,
            memory_fraction_kind="of_total",
            memory_fraction_value=VLLM_MEMORY_FRACTION,
            **kwargs,
        )
    except ValueError as exc:
        if "no KV budget" in str(exc):  # the weights alone do not fit: every point is OOM
            return 0.0
        raise
    return float(est["total_kv_size_tokens"])


def sweep(grid: Grid, systems: tuple[str, ...], tps: tuple[int, ...]) -> pd.DataFrame:
    """One row per point (errors recorded, not raised: AIC lacks some kernels on some GPUs)."""
    import tempfile

    from aiconfigurator_core.sdk.engine import EngineHandle
    from aiconfigurator_core.sdk.models.helpers import check_is_moe
    from aiconfigurator_core.sdk.perf_database import get_latest_database_version

    workdir = tempfile.mkdtemp(prefix="aic-models-")
    rows = []
    for system in systems:
        version = get_latest_database_version(system=system, backend=BACKEND)
        for v in grid.variants:
            path = model_path(v.model, workdir)
            for tp in tps:
                quant = {"gemm_quant_mode": v.gemm, "moe_quant_mode": v.moe}
                quant["kvcache_quant_mode"] = v.kv
                quant = {k: q for k, q in quant.items() if q}
                base = {"tp_size": tp, "moe_tp_size": 1, "moe_ep_size": 1, **quant}
                is_moe = check_is_moe(path)
                for moe_tp, moe_ep in moe_layouts(is_moe, tp):
                    kwargs = {**base, "moe_tp_size": moe_tp, "moe_ep_size": moe_ep}
                    head = {
                        "model": v.model,
                        "variant": "+".join(f"{k}={q}" for k, q in sorted(quant.items())),
                        "system": system,
                        "backend": BACKEND,
                        "version": version,
                        "tp": tp,
                        "moe_tp": moe_tp if is_moe else None,
                        "moe_ep": moe_ep if is_moe else None,
                    }
                    try:
                        gemm, moe, kv = resolved_quant(path, kwargs)
                        handle = EngineHandle.compile(path, system, BACKEND, **kwargs)
                        capacity = kv_tokens(path, system, version, kwargs, max(grid.batches))
                    except Exception as exc:
                        err = error_text(exc)
                        rows += [
                            {**head, "isl": i, "batch": b, "error": err}
                            for i in grid.isls
                            for b in grid.batches
                        ]
                        continue
                    for isl in grid.isls:
                        for bs in grid.batches:
                            row = {**head, "isl": isl, "batch": bs, "gemm": gemm, "moe": moe}
                            row["kvcache"] = kv
                            try:
                                row["prefill_ms"] = float(handle.predict_prefill_latency(bs, isl))
                                row["decode_ms"] = float(handle.predict_decode_latency(bs, isl, 2))
                                row["oom"] = bs * (isl + 2) > capacity
                                row["error"] = None
                            except Exception as exc:
                                row["error"] = error_text(exc)
                            rows.append(row)
            print(system, v, len(rows), flush=True)
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
    from importlib.metadata import version

    start = time.perf_counter()
    df = sweep(GRIDS[args.grid], tuple(args.systems), tuple(args.tp))
    df["aic_core_version"] = version("aiconfigurator-core")
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
