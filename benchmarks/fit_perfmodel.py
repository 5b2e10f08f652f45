"""Fit the step-time model's per-GPU coefficients to AIConfigurator's silicon data.

For each GPU, robust least squares (scipy ``least_squares``, ``soft_l1`` loss on log ratios)
picks the coefficients of ``kvadvisor/catalog/data/efficiency.yaml`` that make kvadvisor's
prefill and decode-step latencies match AIConfigurator's static-mode estimates over a sweep
of other models than the benchmark's (``aic_sweep.py --grid fit``: Qwen3-1.7B/8B/30B-A3B,
Qwen3-8B and Llama-3.1-405B in FP8 too, Qwen3-Coder-480B, Llama-3.1-405B, Mixtral-8x22B,
Kimi-K2, gpt-oss-20b), so the benchmark
table (``bench_perfmodel.py``) reports held-out models. Writes the YAML with its sources.

    AIC/bin/python benchmarks/aic_sweep.py --grid fit -o benchmarks/data/aic_fit.parquet
    AIC/bin/python benchmarks/fit_perfmodel.py benchmarks/data/aic_fit.parquet \
        -o kvadvisor/catalog/data/efficiency.yaml

``--only fp8 moe`` refits just those coefficient groups (each on its own points: FP8-weight
variants, MoE models) into the existing catalog and keeps every other value, so dense BF16 step
times do not move; that is how the FP8 and MoE coefficients of the packaged catalog were made.
``--only dense`` refits the dense GEMM's shape (``gemm_efficiency``, ``gemm_tile_tokens``,
``gemm_sharpness``) on the BF16 dense points the same way; the packaged catalog's were made so.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _aic import (
    SYSTEM_GPU,
    aic_allreduce,
    aic_config_model,
    allreduce_table,
    load_sweep,
    predict,
    resolver,
)

from kvadvisor.catalog.efficiency import (
    COEFFICIENT_NAMES,
    EFFICIENCY_YAML,
    AllReduceTable,
    Efficiency,
    load_efficiencies,
)
from kvadvisor.catalog.gpus import get_gpu

# Starting point and bounds of each coefficient (the fit moves within them).
START = {
    "gemm_efficiency": 0.75,
    "gemm_fp8_efficiency": 0.6,
    "fp8_memory_efficiency": 0.7,
    "gemm_fp8_tensor_efficiency": 0.6,
    "fp8_tensor_memory_efficiency": 0.7,
    "moe_efficiency": 0.5,
    "moe_quant_efficiency": 0.5,
    "prefill_attention_efficiency": 0.6,
    "memory_efficiency": 0.8,
    "moe_memory_efficiency": 0.6,
    "decode_attention_efficiency": 0.7,
    "roofline_sharpness": 3.0,
    "gemm_sharpness": 4.0,
    "gemm_tile_tokens": 200.0,
    "moe_half_efficiency_width": 200.0,
    "expert_imbalance": 0.3,
    "expert_imbalance_exponent": 0.5,
    "attention_ns_per_token_head": 0.3,
    "layer_overhead_us": 20.0,
    "prefill_attention_layer_us": 30.0,
    "decode_attention_layer_us": 10.0,
    "moe_layer_overhead_us": 20.0,
    "moe_dispatch_ps_per_element": 5.0,
    "mla_layer_overhead_us": 20.0,
    "fp8_layer_overhead_us": 20.0,
    "fp8_tensor_layer_overhead_us": 20.0,
    "step_overhead_us": 50.0,
}
BOUNDS = {
    "gemm_efficiency": (0.05, 1.0),
    "gemm_fp8_efficiency": (0.05, 1.0),
    "fp8_memory_efficiency": (0.05, 1.0),
    "gemm_fp8_tensor_efficiency": (0.05, 1.0),
    "fp8_tensor_memory_efficiency": (0.05, 1.0),
    "moe_efficiency": (0.02, 1.0),
    "moe_quant_efficiency": (0.02, 1.0),
    "prefill_attention_efficiency": (0.05, 1.0),
    "memory_efficiency": (0.05, 1.0),
    "moe_memory_efficiency": (0.02, 1.0),
    "decode_attention_efficiency": (0.02, 1.0),
    "roofline_sharpness": (1.0, 20.0),
    "gemm_sharpness": (1.0, 20.0),
    "gemm_tile_tokens": (0.0, 2000.0),
    "moe_half_efficiency_width": (0.0, 5000.0),
    "expert_imbalance": (0.0, 3.0),
    "expert_imbalance_exponent": (0.0, 1.0),
    "attention_ns_per_token_head": (0.0, 50.0),
    "layer_overhead_us": (0.0, 300.0),
    "prefill_attention_layer_us": (0.0, 300.0),
    "decode_attention_layer_us": (0.0, 300.0),
    "moe_layer_overhead_us": (0.0, 500.0),
    "moe_dispatch_ps_per_element": (0.0, 100.0),
    "mla_layer_overhead_us": (0.0, 500.0),
    "fp8_layer_overhead_us": (0.0, 3000.0),
    "fp8_tensor_layer_overhead_us": (0.0, 3000.0),
    "step_overhead_us": (0.0, 20000.0),
}
SOFT_L1_SCALE = 0.1
# Coefficient groups ``--only`` refits alone, the others kept from the catalog (so a refit of
# the FP8 or MoE terms leaves dense BF16 step times where they were).
BLOCK_FP8 = ("gemm_fp8_efficiency", "fp8_memory_efficiency", "fp8_layer_overhead_us")
TENSOR_FP8 = (
    "gemm_fp8_tensor_efficiency",
    "fp8_tensor_memory_efficiency",
    "fp8_tensor_layer_overhead_us",
)
MOE = (
    "moe_efficiency",
    "moe_quant_efficiency",
    "moe_memory_efficiency",
    "moe_half_efficiency_width",
    "expert_imbalance",
    "expert_imbalance_exponent",
    "moe_layer_overhead_us",
    "moe_dispatch_ps_per_element",
    "mla_layer_overhead_us",
)
# The dense GEMM's shape: large-GEMM efficiency, the small-GEMM tile floor and the roofline's
# knee, fitted together on BF16 dense points (they trade against one another).
DENSE = ("gemm_efficiency", "gemm_tile_tokens", "gemm_sharpness")
GROUPS = {"fp8": BLOCK_FP8 + TENSOR_FP8, "moe": MOE, "dense": DENSE}
# Coefficients a GPU's sweep cannot pin down take a sibling's (same compute silicon).
SIBLING = {
    "h100-sxm": "h200",
    "h200": "h100-sxm",
    "b200": "h200",
    "l40s": "a100-80gb",
    "a100-80gb": "l40s",
}


def identifiable(df: pd.DataFrame) -> set[str]:
    """Coefficients the GPU's points constrain (FP8 GEMMs need FP8 models, experts MoE ones)."""
    names = set(COEFFICIENT_NAMES)
    gemm = df["gemm"].astype(str)
    if not (gemm == "fp8_block").any():
        names -= set(BLOCK_FP8)
    if not (gemm == "fp8").any():
        names -= set(TENSOR_FP8)
    if not (df["ep"] > 1).any():
        names -= {"expert_imbalance", "expert_imbalance_exponent"}
    if not df["moe_tp"].notna().any():
        names -= {
            "moe_efficiency",
            "moe_memory_efficiency",
            "moe_layer_overhead_us",
            "moe_dispatch_ps_per_element",
            "moe_half_efficiency_width",
        }
    moe = df["moe"].astype(str)
    if not (df["moe_tp"].notna() & moe.ne("bfloat16") & df["moe"].notna()).any():
        names.discard("moe_quant_efficiency")  # no quantised experts (FP8, MXFP4) here
    if not df["model"].str.contains("Kimi|DeepSeek").any():
        names.discard("mla_layer_overhead_us")
    return names


def residuals_for(
    df: pd.DataFrame, names: list[str], base: dict[str, float], allreduce: AllReduceTable
):
    """The fit's residual function over the free coefficients ``names``.

    The all-reduce is AIC's own table (``allreduce``), not fitted.
    """
    resolve = resolver(use_catalog=False)
    log_p = np.log(df["prefill_ms"].to_numpy())
    log_d = np.log(df["decode_ms"].to_numpy())

    def eff(x: np.ndarray) -> Efficiency:
        values = {**base, **dict(zip(names, map(float, x), strict=True))}
        return Efficiency(**values, allreduce=allreduce, source="fit")

    def res(x: np.ndarray) -> np.ndarray:
        e = eff(x)
        pred = predict(df, resolve, lambda g: e)
        return np.concatenate(
            [
                np.log(pred["pred_prefill_ms"].to_numpy()) - log_p,
                np.log(pred["pred_decode_ms"].to_numpy()) - log_d,
            ]
        )

    return res, eff


def group_rows(df: pd.DataFrame, group: str) -> pd.DataFrame:
    """The points that pin a coefficient group: FP8-weight points, or MoE models'."""
    if group == "fp8":
        return df[df["gemm"].astype(str).str.startswith("fp8")]
    if group == "dense":
        return df[df["moe_tp"].isna() & ~df["gemm"].astype(str).str.startswith("fp8")]
    return df[df["moe_tp"].notna()]


def fit_gpu(
    df: pd.DataFrame,
    base: dict[str, float],
    allreduce: AllReduceTable,
    only: tuple[str, ...] = (),
) -> tuple[dict[str, float], dict]:
    """Fitted coefficients for one GPU and the fit's error summary.

    ``only``: coefficient groups (``GROUPS``) to refit on their own points, ``base`` the rest.
    """
    if only:
        df = pd.concat([group_rows(df, g) for g in only]).drop_duplicates()
        wanted = {n for g in only for n in GROUPS[g]}
        names = sorted(identifiable(df) & wanted) if len(df) else []
        if not names:
            return dict(base), {"points": 0, "free": [], "converged": True}
    else:
        names = sorted(identifiable(df))
    res, _ = residuals_for(df, names, base, allreduce)
    x0 = np.array([base[n] for n in names])
    lo = np.array([BOUNDS[n][0] for n in names])
    hi = np.array([BOUNDS[n][1] for n in names])
    result = least_squares(
        res,
        np.clip(x0, lo, hi),
        bounds=(lo, hi),
        loss="soft_l1",
        f_scale=SOFT_L1_SCALE,
        x_scale=(hi - lo) / 10.0,
        diff_step=1e-3,
    )
    values = {**base, **dict(zip(names, map(float, result.x), strict=True))}
    r = res(result.x)
    n = len(df)
    err = np.abs(np.expm1(r))
    summary = {
        "points": n,
        "prefill_median": float(np.median(err[:n])),
        "decode_median": float(np.median(err[n:])),
        "prefill_p90": float(np.quantile(err[:n], 0.9)),
        "decode_p90": float(np.quantile(err[n:], 0.9)),
        "free": names,
        "converged": bool(result.success),
    }
    if only:
        summary["only"] = list(only)
    return values, summary


def rounded(values: dict[str, float]) -> dict[str, float]:
    """Coefficients to 4 significant digits (the fit is not more precise than that)."""
    return {k: float(f"{v:.4g}") for k, v in values.items()}


class _Dumper(yaml.SafeDumper):
    """Block style, except lists of plain values on one line (aliases, the all-reduce rows)."""


def _list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = all(isinstance(x, (int, float, str)) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _list)


def catalog_text(doc: dict) -> str:
    """The efficiency catalog as YAML, with the header that says where it comes from."""
    header = (
        "# Generated by benchmarks/fit_perfmodel.py from an AIConfigurator sweep; refit rather "
        "than edit.\n# Units are in the field names; fractions are of the GPU catalog's peaks.\n"
    )
    return header + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100)


def refit_groups(df: pd.DataFrame, only: tuple[str, ...], base_path: str, output: str) -> None:
    """Refit coefficient groups in an existing catalog file, every other value kept.

    A GPU without points for a group (no FP8 kernels in AIC's data) takes its sibling's values
    (``SIBLING``), said so in its notes.
    """
    doc = yaml.safe_load(Path(base_path).read_text())
    # A refit replaces the notes and source line of the one before.
    stale = tuple(f"{g} coefficients refitted alone" for g in only)
    stale += tuple(f"{g} refit:" for g in only)
    refitted = set(df["gpu"])
    for gpu, entry in doc["entries"].items():
        if gpu in refitted:
            parts = str(entry["notes"]).split("; ")
            entry["notes"] = "; ".join(p for p in parts if not p.startswith(stale))
    current = load_efficiencies(base_path)
    fitted: dict[str, dict[str, float]] = {}
    free: dict[str, list[str]] = {}
    for gpu, eff in current.items():
        part = df[df["gpu"] == gpu]
        base = {n: getattr(eff, n) for n in COEFFICIENT_NAMES}
        if "dense" in only:
            # The dense GEMM's shape has a second minimum with no tile floor and a soft knee
            # (H200: p 1.4, worst held-out decode -25 %); from START the fit finds the floor.
            base.update({n: START[n] for n in DENSE})
        values, summary = fit_gpu(part, base, eff.allreduce, only) if len(part) else (base, {})
        fitted[gpu], free[gpu] = values, summary.get("free", [])
        print(gpu, {n: round(values[n], 4) for n in summary.get("free", [])}, summary, flush=True)
        if summary.get("points"):
            doc["entries"][gpu]["notes"] += (
                f"; {', '.join(only)} coefficients refitted alone on {summary['points']} "
                f"{'/'.join(only)} points of the fit sweep (others held): median error "
                f"{summary['prefill_median']:.1%} prefill / {summary['decode_median']:.1%} decode"
            )
    wanted = {n for g in only for n in GROUPS[g]}
    for gpu, values in fitted.items():
        if gpu not in refitted:  # left out by --gpus: keeps every value it had
            continue
        sib = SIBLING.get(gpu)
        borrowed = sorted(n for n in wanted - set(free[gpu]) if sib in fitted and n in free[sib])
        for n in borrowed:
            values[n] = fitted[sib][n]
        if borrowed:
            doc["entries"][gpu]["notes"] += (
                f"; {'/'.join(only)} refit: {', '.join(borrowed)} from {sib} (no such points)"
            )
    for gpu, values in fitted.items():
        old = doc["entries"][gpu]
        head = {"aliases": old["aliases"]} if "aliases" in old else {}
        rest = {k: old[k] for k in ("allreduce", "fit_points", "source", "notes") if k in old}
        doc["entries"][gpu] = {**head, **rounded(values), **rest}
    said = [p for p in doc["sources"]["AIC"].split("; ") if not p.startswith(stale)]
    doc["sources"]["AIC"] = "; ".join(said) + (
        f"; {', '.join(only)} coefficients refitted alone {dt.date.today().isoformat()} on "
        "benchmarks/aic_sweep.py --grid fit (aiconfigurator-core's compiled static engine)"
    )
    Path(output).write_text(catalog_text(doc))
    print(f"wrote {output}")


def main() -> None:
    """Fit every GPU of the sweep and write the efficiency catalog."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", help="output of aic_sweep.py --grid fit")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--gpus", nargs="*", default=list(SYSTEM_GPU.values()))
    ap.add_argument(
        "--only",
        nargs="*",
        choices=sorted(GROUPS),
        default=[],
        help="refit only these coefficient groups in --base, keeping its other values",
    )
    ap.add_argument("--base", default=str(EFFICIENCY_YAML), help="catalog --only starts from")
    ap.add_argument(
        "--keep-oom",
        action="store_true",
        help="also fit on the points of MLA models that fit nowhere on a GPU (AIC still times "
        "their kernels: Kimi-K2, the fit's only MLA model, fits on no H100 or H200)",
    )
    args = ap.parse_args()
    mla = (lambda m: aic_config_model(m).is_mla) if args.keep_oom else None
    df = load_sweep(args.sweep, keep_oom=mla)
    if args.only:
        refit_groups(df[df["gpu"].isin(args.gpus)], tuple(args.only), args.base, args.output)
        return
    fitted: dict[str, dict[str, float]] = {}
    summaries: dict[str, dict] = {}
    tables: dict[str, dict] = {}
    for gpu in args.gpus:
        part = df[df["gpu"] == gpu]
        if part.empty:
            continue
        system = str(part["system"].iloc[0])
        tables[gpu] = aic_allreduce(system, str(part["version"].iloc[0]))
        values, summary = fit_gpu(part, dict(START), allreduce_table(tables[gpu]))
        fitted[gpu], summaries[gpu] = values, summary
        print(gpu, {k: round(v, 4) for k, v in values.items()}, summary, flush=True)
    for gpu, values in fitted.items():
        sib = SIBLING.get(gpu)
        if get_gpu(gpu).fp8_dense_tflops is None:
            summaries[gpu]["no_fp8"] = True
            summaries[gpu]["free"] += [*BLOCK_FP8, *TENSOR_FP8]
        for name in set(COEFFICIENT_NAMES) - set(summaries[gpu]["free"]):
            if sib in fitted and name in summaries[sib]["free"]:
                values[name] = fitted[sib][name]
                summaries[gpu].setdefault("from_sibling", []).append(name)
    versions = df.groupby("gpu")["version"].first().to_dict()
    aic = str(df["aic_version"].iloc[0])
    doc = {
        "kind": "efficiency",
        "description": (
            "Per-GPU coefficients of kvadvisor's step-time model (docs/stage-profiler.md), fitted "
            "by benchmarks/fit_perfmodel.py to AIConfigurator's static-mode prefill and "
            "decode-step latencies (vLLM backend, silicon database)."
        ),
        "sources": {
            "AIC": (
                f"{aic} with aiconfigurator-core 0.12.0 (PyPI), static mode (cli_estimate "
                "mode='static', no latency corrections), database_mode SILICON, backend vllm: "
                "aiconfigurator_core/systems/<system>.yaml and systems/data/<system>/*/vllm/"
                "<version>/*_perf.parquet (all-reduce: comm/vllm/<version>/"
                "custom_allreduce_perf.parquet, kernel vLLM_custom_graph, read through AIC's "
                "CustomAllReduce query; link: the system file's intra_node_bw); sweep "
                f"benchmarks/aic_sweep.py --grid fit; fitted {dt.date.today().isoformat()}"
            ),
        },
        "entries": {},
    }
    aliases = {
        "h100-sxm": ["h800", "h20", "h100-pcie"],
        "a100-80gb": ["a100-40gb", "a800", "a10"],
        "l40s": ["l20", "l4"],
    }
    for gpu, values in fitted.items():
        s = summaries[gpu]
        system = next(k for k, v in SYSTEM_GPU.items() if v == gpu)
        note = (
            f"{system} vllm {versions[gpu]}: {s['points']} points; fit error median "
            f"{s['prefill_median']:.1%} prefill / {s['decode_median']:.1%} decode step "
            f"(p90 {s['prefill_p90']:.1%} / {s['decode_p90']:.1%})"
        )
        if s.get("no_fp8"):
            note += "; the FP8 coefficients are unused (no FP8 units: FP8 weights run as bf16)"
        if s.get("from_sibling"):
            note += f"; {', '.join(sorted(s['from_sibling']))} from {SIBLING[gpu]} (no such points)"
        unset = set(COEFFICIENT_NAMES) - set(s["free"]) - set(s.get("from_sibling", []))
        if unset:
            note += f"; {', '.join(sorted(unset))} not constrained by the sweep (start value)"
        note += (
            "; allreduce: AIC's vLLM custom all-reduce (CUDA graph) times for "
            f"{system} vllm {versions[gpu]} as its static mode reads them, not fitted"
        )
        entry = {
            **rounded(values),
            "allreduce": tables[gpu],
            "fit_points": s["points"],
            "source": ["AIC"],
            "notes": note,
        }
        if gpu in aliases:
            entry = {"aliases": aliases[gpu], **entry}
        doc["entries"][gpu] = entry
    Path(args.output).write_text(catalog_text(doc))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
