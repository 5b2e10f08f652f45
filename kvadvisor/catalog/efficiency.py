"""Per-GPU efficiency coefficients of the step-time model, fitted to silicon data and sourced.

Each entry of ``data/efficiency.yaml`` holds the coefficients ``perfmodel`` turns a roofline
into step times with (docs/stage-profiler.md defines each): achieved fractions of peak for
GEMMs, routed experts, prefill attention, memory and KV reads, a roofline knee, fixed overheads
per step and per layer, and the all-reduce latency and link efficiency by TP degree. They were
fitted to NVIDIA AIConfigurator's silicon-measured kernel database (the file's ``sources`` give
version, database and date; ``benchmarks/fit_perfmodel.py`` refits them). A GPU without its own
entry takes the entry that lists it in ``aliases`` (same architecture), else the fallback entry,
and the report says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvadvisor.catalog.loader import FieldSpec, load_catalog_file, lookup
from kvadvisor.errors import CatalogError

EFFICIENCY_YAML = Path(__file__).with_name("data") / "efficiency.yaml"
# The entry used for a GPU no entry names (the most common serving GPU; stated in the report).
FALLBACK_ENTRY = "h100-sxm"


def _fraction(help_text: str) -> FieldSpec:
    return FieldSpec("number", required=True, minimum=0.001, help=help_text)


EFFICIENCY_FIELDS: dict[str, FieldSpec] = {
    "gemm_efficiency": _fraction("large bf16 GEMMs: fraction of dense bf16 peak"),
    "gemm_fp8_efficiency": _fraction("large fp8 GEMMs: fraction of dense fp8 peak"),
    "moe_efficiency": _fraction("routed-expert GEMMs: fraction of peak"),
    "prefill_attention_efficiency": _fraction("prefill attention FLOPs: fraction of bf16 peak"),
    "memory_efficiency": _fraction("weight reads and elementwise: fraction of peak bandwidth"),
    "moe_memory_efficiency": _fraction("routed-expert weight reads: fraction of peak bandwidth"),
    "decode_attention_efficiency": _fraction("decode KV reads: fraction of peak bandwidth"),
    "link_efficiency_tp2": _fraction("all-reduce bus bandwidth at TP 2: fraction of the link"),
    "link_efficiency_tp4": _fraction("all-reduce bus bandwidth at TP 4: fraction of the link"),
    "link_efficiency_tp8": _fraction("all-reduce bus bandwidth at TP 8: fraction of the link"),
    "roofline_sharpness": FieldSpec(
        "number", required=True, minimum=1.0, help="p of the soft roofline (t_c^p + t_m^p)^(1/p)"
    ),
    "moe_half_efficiency_width": FieldSpec(
        "number", required=True, minimum=0.0, help="per-rank expert width halving eta_moe"
    ),
    "expert_imbalance": FieldSpec(
        "number", required=True, minimum=0.0, help="busiest EP rank's extra load per EP doubling"
    ),
    "attention_ns_per_token_head": FieldSpec(
        "number", required=True, minimum=0.0, help="attention cost per query token, head, layer"
    ),
    "layer_overhead_us": FieldSpec("number", required=True, minimum=0.0),
    "prefill_attention_layer_us": FieldSpec(
        "number", required=True, minimum=0.0, help="per layer, in a step with prefill chunks"
    ),
    "decode_attention_layer_us": FieldSpec(
        "number", required=True, minimum=0.0, help="per layer, in a step with decode tokens"
    ),
    "moe_layer_overhead_us": FieldSpec("number", required=True, minimum=0.0),
    "mla_layer_overhead_us": FieldSpec("number", required=True, minimum=0.0),
    "fp8_layer_overhead_us": FieldSpec("number", required=True, minimum=0.0),
    "step_overhead_us": FieldSpec("number", required=True, minimum=0.0),
    "allreduce_latency_us_tp2": FieldSpec("number", required=True, minimum=0.0),
    "allreduce_latency_us_tp4": FieldSpec("number", required=True, minimum=0.0),
    "allreduce_latency_us_tp8": FieldSpec("number", required=True, minimum=0.0),
    "fit_points": FieldSpec("int", minimum=0, help="silicon points the entry was fitted on"),
}


@dataclass(frozen=True)
class Efficiency:
    """Achieved fractions of peak and fixed costs for one GPU (see the module docstring).

    Fractions are in (0, 1] (``roofline_sharpness`` >= 1); times in the unit their name says.
    ``source`` names the catalog entry and its citation, "calibrated" after a fit to measured
    latencies, or "user".
    """

    gemm_efficiency: float
    gemm_fp8_efficiency: float
    moe_efficiency: float
    prefill_attention_efficiency: float
    memory_efficiency: float
    moe_memory_efficiency: float
    decode_attention_efficiency: float
    link_efficiency_tp2: float
    link_efficiency_tp4: float
    link_efficiency_tp8: float
    roofline_sharpness: float
    moe_half_efficiency_width: float
    expert_imbalance: float
    attention_ns_per_token_head: float
    layer_overhead_us: float
    prefill_attention_layer_us: float
    decode_attention_layer_us: float
    moe_layer_overhead_us: float
    mla_layer_overhead_us: float
    fp8_layer_overhead_us: float
    step_overhead_us: float
    allreduce_latency_us_tp2: float
    allreduce_latency_us_tp4: float
    allreduce_latency_us_tp8: float
    source: str

    def with_values(self, source: str, **values: float) -> Efficiency:
        """A copy with some coefficients replaced (calibration, user overrides)."""
        return replace(self, source=source, **values)

    def scaled(self, source: str, compute: float, memory: float, overhead_us: float) -> Efficiency:
        """Compute-side fractions times ``compute``, memory-side times ``memory``, overheads set.

        The three knobs calibration fits to measured latencies: prefill is mostly compute,
        decode mostly memory, short steps mostly fixed cost. Fractions are capped at 1.
        """

        def cap(x: float) -> float:
            return min(x, 1.0)

        return replace(
            self,
            source=source,
            gemm_efficiency=cap(self.gemm_efficiency * compute),
            gemm_fp8_efficiency=cap(self.gemm_fp8_efficiency * compute),
            moe_efficiency=cap(self.moe_efficiency * compute),
            prefill_attention_efficiency=cap(self.prefill_attention_efficiency * compute),
            memory_efficiency=cap(self.memory_efficiency * memory),
            moe_memory_efficiency=cap(self.moe_memory_efficiency * memory),
            decode_attention_efficiency=cap(self.decode_attention_efficiency * memory),
            step_overhead_us=overhead_us,
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain values for reports."""
        return asdict(self)


COEFFICIENT_NAMES: tuple[str, ...] = tuple(
    f for f in Efficiency.__dataclass_fields__ if f != "source"
)


def _efficiency(name: str, e: Mapping[str, Any]) -> Efficiency:
    for field in (
        "gemm_efficiency",
        "gemm_fp8_efficiency",
        "moe_efficiency",
        "prefill_attention_efficiency",
        "memory_efficiency",
        "moe_memory_efficiency",
        "decode_attention_efficiency",
        "link_efficiency_tp2",
        "link_efficiency_tp4",
        "link_efficiency_tp8",
    ):
        if e[field] > 1:
            raise CatalogError(f"entries.{name}.{field}: a fraction of peak, at most 1")
    cite = "; ".join(e.get("source_text") or ())
    return Efficiency(
        **{k: float(e[k]) for k in COEFFICIENT_NAMES},
        source=f"efficiency catalog entry {name}: {cite}",
    )


def check_efficiency_entries(entries: Mapping[str, Mapping[str, Any]]) -> dict[str, Efficiency]:
    """Checked catalog entries as coefficients (fractions of peak at most 1)."""
    return {name: _efficiency(name, e) for name, e in entries.items()}


@lru_cache(maxsize=4)
def _load(path: str) -> tuple[dict[str, dict[str, Any]], dict[str, Efficiency]]:
    entries = load_catalog_file(path, "efficiency", EFFICIENCY_FIELDS)
    return entries, check_efficiency_entries(entries)


def load_efficiencies(path: str | Path | None = None) -> dict[str, Efficiency]:
    """Every entry of an efficiency catalog (the packaged one by default), by GPU name."""
    return dict(_load(str(path or EFFICIENCY_YAML))[1])


def efficiency_for(gpu_name: str, path: str | Path | None = None) -> tuple[Efficiency, str]:
    """The coefficients for ``gpu_name`` and a sentence saying which entry they come from.

    The GPU's own entry, or the entry listing it among its ``aliases``; else the fallback
    entry (H100 SXM), said so.
    """
    entries, specs = _load(str(path or EFFICIENCY_YAML))
    try:
        key, _ = lookup(entries, gpu_name, "GPU")
    except CatalogError:
        eff = specs[FALLBACK_ENTRY]
        why = f"{gpu_name} has no silicon-fitted entry; {FALLBACK_ENTRY}'s coefficients used"
        return eff.with_values(f"{why} ({eff.source})"), why
    if key == gpu_name:
        return specs[key], f"fitted for {key}"
    why = f"{gpu_name} takes {key}'s fitted coefficients (same architecture)"
    return specs[key].with_values(f"{why} ({specs[key].source})"), why
