"""Shared by the AIConfigurator benchmark and fit: read a sweep, build models, predict its points.

A sweep (``benchmarks/aic_sweep.py``) has one row per variant (model and quant modes) x GPU x TP
x (MoE layout) x ISL x batch with AIConfigurator's static-mode prefill latency of ``batch``
prompts of ``isl`` tokens in one forward pass and the latency of one decode step of ``batch``
sequences at ``isl`` tokens of context, in ms. Here each row gets kvadvisor's prediction of the
same two numbers: prefill as one step of ``T = batch x isl`` tokens, ``batch`` logits and the
prompts' causal attention pairs; decode as one step of ``batch`` tokens and logits reading the
KV of ``batch`` contexts of ``isl + 1`` tokens.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd

from kvadvisor.catalog.efficiency import AllReduceTable, Efficiency
from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.catalog.models import ModelSpec, get_model, model_from_hf_config
from kvadvisor.errors import CatalogError
from kvadvisor.perfmodel.perf import PerfModel

# AIConfigurator system name -> kvadvisor GPU catalog name.
SYSTEM_GPU = {
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "a100_sxm": "a100-80gb",
    "l40s": "l40s",
}
MS_PER_S = 1e3
US_PER_MS = 1e3
BYTES_PER_GB = 1e9
# The message sizes of AIC's vLLM custom all-reduce tables (custom_allreduce_perf.parquet):
# 2^7 to 2^29 bf16 elements per GPU.
ALLREDUCE_ELEMENTS = tuple(2**k for k in range(7, 30))
ALLREDUCE_TPS = (2, 4, 8)
BF16_BYTES = 2
# AIC's GEMM quant mode -> kvadvisor weight dtype where a sweep variant overrides the
# checkpoint's ("fp8" per-tensor, "fp8_block" 128 x 128 block scales); others keep the model's.
GEMM_WEIGHT_DTYPE = {"fp8": "fp8-tensor", "fp8_block": "fp8"}


def aic_allreduce(system: str, version: str) -> dict:
    """AIC's all-reduce times for one system as an efficiency-catalog ``allreduce`` mapping.

    Asks AIC's own query (``CustomAllReduce``, the op its static mode charges for vLLM's TP
    all-reduces, CUDA-graph kernel) at the sizes its table was measured at, so the entry holds
    exactly what AIC interpolates; ``link_gbps`` is the system file's ``intra_node_bw`` (one
    way). Runs only where aiconfigurator-core is installed.
    """
    from aiconfigurator_core.sdk import operations as ops
    from aiconfigurator_core.sdk.perf_database import get_database

    db = get_database(system, "vllm", version)
    out: dict = {
        "link_gbps": float(db.system_spec["node"]["intra_node_bw"]) / BYTES_PER_GB,
        "message_bytes": [n * BF16_BYTES for n in ALLREDUCE_ELEMENTS],
    }
    for tp in ALLREDUCE_TPS:
        # hidden size 1: a query of x tokens is a message of x elements.
        op = ops.CustomAllReduce("allreduce", 1, 1, tp)
        out[f"tp{tp}_us"] = [
            float(f"{float(op._engine_query(db, x=n)) * US_PER_MS:.4g}") for n in ALLREDUCE_ELEMENTS
        ]
    return out


def allreduce_table(mapping: dict) -> AllReduceTable:
    """The mapping of :func:`aic_allreduce` as the step model's table."""
    return AllReduceTable(
        link_bytes_per_s=mapping["link_gbps"] * BYTES_PER_GB,
        message_bytes=tuple(float(x) for x in mapping["message_bytes"]),
        tps=ALLREDUCE_TPS,
        times_us=tuple(tuple(mapping[f"tp{tp}_us"]) for tp in ALLREDUCE_TPS),
    )


def load_sweep(path: str | Path, keep_oom: Callable[[str], bool] | None = None) -> pd.DataFrame:
    """The points AIC estimated that fit in GPU memory by its own check (others are dropped).

    ``keep_oom``: also, for a model it accepts none of whose points fit on a GPU, its points
    there (AIC still times their kernels; a fit may use them, a benchmark of deployable points
    does not).
    """
    df = pd.read_parquet(path) if str(path).endswith(".parquet") else pd.read_csv(path)
    fits = ~df["oom"].astype("boolean").fillna(True).astype(bool)
    ok = df["error"].isna() & fits
    if keep_oom:
        any_fit = (fits & df["error"].isna()).groupby([df["model"], df["system"]]).transform("any")
        wanted = df["model"].map({m: bool(keep_oom(m)) for m in df["model"].unique()})
        ok |= df["error"].isna() & ~any_fit & wanted
    df = df[ok].copy()
    df["gpu"] = df["system"].map(SYSTEM_GPU)
    df["ep"] = np.where(df["moe_ep"].fillna(1) > 1, df["moe_ep"].fillna(1), 1).astype(int)
    return df.reset_index(drop=True)


def aic_config_model(model_id: str) -> ModelSpec:
    """The model as read from the config.json AIC vendors for it (kvadvisor's HF-config path)."""
    name = model_id.split("/")[-1].replace("--", "/")
    path = (
        files("aiconfigurator_core")
        / "model_configs"
        / (model_id.replace("/", "--") + "_config.json")
    )
    return model_from_hf_config(json.loads(path.read_text()), name=name, where=str(path))


def catalog_model(model_id: str) -> ModelSpec:
    """The packaged catalog's entry for an AIC model id (what the product uses).

    An FP8 checkpoint of a catalog model is the model (its dtype comes from the sweep row's
    GEMM quant mode, as a user's ``--weight-dtype`` would give it).
    """
    return get_model(model_id.replace("Meta-Llama", "Llama").removesuffix("-FP8"))


def resolver(use_catalog: bool) -> Callable[[str], ModelSpec]:
    """Model lookup for a sweep: the catalog where it has the model, else AIC's config.json."""
    cache: dict[str, ModelSpec] = {}

    def resolve(model_id: str) -> ModelSpec:
        if model_id not in cache:
            spec = None
            if use_catalog:
                try:
                    spec = catalog_model(model_id)
                except CatalogError:
                    spec = None
            cache[model_id] = spec or aic_config_model(model_id)
        return cache[model_id]

    return resolve


def predict(
    df: pd.DataFrame,
    resolve: Callable[[str], ModelSpec],
    efficiency: Callable[[str], Efficiency | None] = lambda gpu: None,
    silicon: bool = False,
) -> pd.DataFrame:
    """Predicted prefill and decode-step latency (ms) for every row of a sweep.

    ``silicon``: through ``silicon_step_table`` (the [silicon] extra) as the product runs with
    it installed; ``step_model`` says per row whether it gave the silicon table or fell back.
    """
    out = df.copy()
    out["pred_prefill_ms"] = np.nan
    out["pred_decode_ms"] = np.nan
    out["step_model"] = "roofline"
    keys = ["model", "gpu", "tp", "ep", "kvcache", "gemm"]
    groups = out.groupby(keys, dropna=False).groups.items()
    for (model_id, gpu, tp, ep, kvcache, gemm), idx in groups:
        rows = out.loc[idx]
        kv_dtype = "fp8" if str(kvcache).startswith("fp8") else "bf16"
        pm = PerfModel.build(
            resolve(model_id),
            get_gpu(gpu),
            tp=int(tp),
            ep=int(ep),
            kv_dtype=kv_dtype,
            weight_dtype=GEMM_WEIGHT_DTYPE.get(str(gemm)),
            efficiency=efficiency(gpu),
        )
        if silicon:
            from kvadvisor.perfmodel.silicon import silicon_step_table

            choice = silicon_step_table(pm)
            pm = choice.perf
            out.loc[idx, "step_model"] = choice.step_model
        out.loc[idx, "pred_prefill_ms"] = prefill_ms(pm, rows["isl"], rows["batch"])
        out.loc[idx, "pred_decode_ms"] = decode_ms(pm, rows["isl"], rows["batch"])
    return out


def prefill_ms(pm: PerfModel, isl: pd.Series, batch: pd.Series) -> np.ndarray:
    """``batch`` prompts of ``isl`` tokens prefilled in one step, ms."""
    t = pm.step_table
    n = isl.to_numpy(dtype=np.float64)
    b = batch.to_numpy(dtype=np.float64)
    pairs = b * t.attention_pairs(n, np.zeros_like(n))
    return t.step_s(b * n, pairs, np.zeros_like(n), b) * MS_PER_S


def decode_ms(pm: PerfModel, isl: pd.Series, batch: pd.Series) -> np.ndarray:
    """One decode step of ``batch`` sequences at ``isl + 1`` tokens of context, ms."""
    n = isl.to_numpy(dtype=np.float64)
    b = batch.to_numpy(dtype=np.float64)
    return pm.decode_step_s(b, b * pm.kv_rank_bytes(n + 1)) * MS_PER_S
