"""Per-GPU efficiency coefficients of the step-time model, fitted to silicon data and sourced.

Each entry of ``data/efficiency.yaml`` holds the coefficients ``perfmodel`` turns a roofline
into step times with (docs/stage-profiler.md defines each): achieved fractions of peak for
GEMMs, routed experts, prefill attention, memory and KV reads, a roofline knee, fixed overheads
per step and per layer, and the tensor-parallel all-reduce as a table of measured times by
message size and TP degree (:class:`AllReduceTable`). They were fitted to NVIDIA
AIConfigurator's silicon-measured kernel database, whose all-reduce tables are copied as they
are (the file's ``sources`` give version, database and date; ``benchmarks/fit_perfmodel.py``
refits them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from kvadvisor.catalog.gpus import GpuSpec, get_gpu, load_gpus
from kvadvisor.catalog.loader import check_entries
from kvadvisor.checker import Field
from kvadvisor.errors import CatalogError
from kvadvisor.io.yamlio import load_yaml
from kvadvisor.units import BYTES_PER_GB

EFFICIENCY_YAML = Path(__file__).with_name("data") / "efficiency.yaml"
US_PER_S = 1e6


def _fraction(help_text: str) -> Field:
    return Field("number", required=True, minimum=0.001, help=help_text)


ALLREDUCE_TPS = (2, 4, 8)
ALLREDUCE_FIELDS: dict[str, Field] = {
    "link_gbps": Field(
        "number", required=True, minimum=0.001, help="link the times were measured over, one way"
    ),
    "message_bytes": Field(
        "list[number]", required=True, help="message sizes per GPU, ascending, bytes"
    ),
    **{
        f"tp{tp}_us": Field(
            "list[number]", required=True, help=f"one all-reduce over {tp} GPUs, per message size"
        )
        for tp in ALLREDUCE_TPS
    },
}

EFFICIENCY_FIELDS: dict[str, Field] = {
    "gemm_efficiency": _fraction("large bf16 GEMMs: fraction of dense bf16 peak"),
    "gemm_fp8_efficiency": _fraction("large block-scaled fp8 GEMMs: fraction of dense fp8 peak"),
    "fp8_memory_efficiency": _fraction(
        "block-scaled fp8 weight reads (small-batch GEMMs): fraction of peak bandwidth"
    ),
    "gemm_fp8_tensor_efficiency": _fraction(
        "large per-tensor-scaled fp8 GEMMs: fraction of dense fp8 peak"
    ),
    "fp8_tensor_memory_efficiency": _fraction(
        "per-tensor-scaled fp8 weight reads: fraction of peak bandwidth"
    ),
    "moe_efficiency": _fraction("16-bit routed-expert GEMMs: fraction of bf16 peak"),
    "moe_quant_efficiency": _fraction(
        "quantised (FP8, MXFP4) routed-expert GEMMs: fraction of bf16 peak"
    ),
    "prefill_attention_efficiency": _fraction("prefill attention FLOPs: fraction of bf16 peak"),
    "memory_efficiency": _fraction("weight reads and elementwise: fraction of peak bandwidth"),
    "moe_memory_efficiency": _fraction("routed-expert weight reads: fraction of peak bandwidth"),
    "decode_attention_efficiency": _fraction("decode KV reads: fraction of peak bandwidth"),
    "roofline_sharpness": Field(
        "number",
        required=True,
        minimum=1.0,
        help="p of the routed experts' soft roofline (t_c^p + t_m^p)^(1/p)",
    ),
    "gemm_sharpness": Field(
        "number",
        required=True,
        minimum=1.0,
        help="p of the dense GEMMs' soft roofline (its tile floor sets the small-GEMM cost)",
    ),
    "gemm_tile_tokens": Field(
        "number",
        required=True,
        minimum=0.0,
        help="rows below which a dense GEMM's tiles run part-empty (costs ~this many rows)",
    ),
    "moe_half_efficiency_width": Field(
        "number", required=True, minimum=0.0, help="per-rank expert width halving eta_moe"
    ),
    "expert_imbalance": Field(
        "number", required=True, minimum=0.0, help="busiest EP rank's extra load per EP doubling"
    ),
    "expert_imbalance_exponent": Field(
        "number",
        required=True,
        minimum=0.0,
        help="how the busiest EP rank's excess shrinks with experts per rank, (E/ep)^-a",
    ),
    "attention_ns_per_token_head": Field(
        "number", required=True, minimum=0.0, help="attention cost per query token, head, layer"
    ),
    "layer_overhead_us": Field("number", required=True, minimum=0.0),
    "prefill_attention_layer_us": Field(
        "number", required=True, minimum=0.0, help="per layer, in a step with prefill chunks"
    ),
    "decode_attention_layer_us": Field(
        "number", required=True, minimum=0.0, help="per layer, in a step with decode tokens"
    ),
    "moe_layer_overhead_us": Field("number", required=True, minimum=0.0),
    "moe_dispatch_ps_per_element": Field(
        "number",
        required=True,
        minimum=0.0,
        help="MoE token dispatch + combine per token, hidden element and MoE layer",
    ),
    "mla_layer_overhead_us": Field("number", required=True, minimum=0.0),
    "fp8_layer_overhead_us": Field(
        "number", required=True, minimum=0.0, help="per layer of block-scaled fp8 weights"
    ),
    "fp8_tensor_layer_overhead_us": Field(
        "number", required=True, minimum=0.0, help="per layer of per-tensor-scaled fp8 weights"
    ),
    "step_overhead_us": Field("number", required=True, minimum=0.0),
    "allreduce": Field(
        "mapping",
        required=True,
        fields=ALLREDUCE_FIELDS,
        help="measured all-reduce times by message size and TP degree",
    ),
    "fit_points": Field("int", minimum=0, help="silicon points the entry was fitted on"),
}


@dataclass(frozen=True)
class AllReduceTable:
    """One all-reduce's time by message size and TP degree, as measured on one GPU's link.

    ``times_us[i][j]`` is the time of one all-reduce of ``message_bytes[j]`` bytes per GPU over
    ``tps[i]`` GPUs, measured over a link of ``link_bytes_per_s`` one way. AIConfigurator's
    static mode reads its measured tables the same way (linear between sizes, proportional
    beyond the largest); :meth:`time_s` adds what AIC has no table for: other TP degrees and
    other links.
    """

    link_bytes_per_s: float
    message_bytes: tuple[float, ...]
    tps: tuple[int, ...]
    times_us: tuple[tuple[float, ...], ...]

    def _curve_s(self, i: int, message: np.ndarray) -> np.ndarray:
        """The measured curve of ``tps[i]``: linear between sizes, proportional past the last.

        Below the smallest size, the smallest's time (a message is not faster than the
        all-reduce's latency).
        """
        x = np.asarray(self.message_bytes)
        y = np.asarray(self.times_us[i]) / US_PER_S
        out = np.interp(message, x, y)
        return np.where(message > x[-1], y[-1] * message / x[-1], out)

    def time_s(self, tp: int, message_bytes: np.ndarray, link_bytes_per_s: float) -> np.ndarray:
        """One all-reduce of ``message_bytes`` per GPU over ``tp`` GPUs on a given link, s.

        * TP 1: no all-reduce (0).
        * A TP degree between two measured ones: interpolated linearly in ``log2(tp)``; below
          the smallest measured, the smallest's; above the largest, the largest's with its
          part above the latency scaled by the ring's ``(tp - 1) / tp`` (data each GPU sends).
        * Another link than the one measured: the part above the latency (the time of the
          smallest message) scaled by ``link_bytes_per_s / link``: latency plus size over a
          bus bandwidth with the measured per-size efficiency.
        """
        m = np.asarray(message_bytes, dtype=np.float64)
        if tp <= 1:
            return np.zeros_like(m)
        x = math.log2(tp)
        levels = [math.log2(t) for t in self.tps]
        if x <= levels[0]:
            t = self._curve_s(0, m)
        elif x >= levels[-1]:
            ring = ((tp - 1) / tp) / ((self.tps[-1] - 1) / self.tps[-1])
            top = self._curve_s(len(self.tps) - 1, m)
            floor = self.times_us[-1][0] / US_PER_S
            t = floor + (top - floor) * ring
        else:
            hi = next(i for i, lv in enumerate(levels) if lv >= x)
            w = (x - levels[hi - 1]) / (levels[hi] - levels[hi - 1])
            t = (1 - w) * self._curve_s(hi - 1, m) + w * self._curve_s(hi, m)
        floor = float(np.interp(x, levels, [row[0] for row in self.times_us])) / US_PER_S
        return floor + (t - floor) * (self.link_bytes_per_s / link_bytes_per_s)

    def latency_s(self, tp: int, link_bytes_per_s: float) -> float:
        """The time of the smallest message: what an all-reduce costs whatever it carries, s."""
        return float(self.time_s(tp, np.asarray(self.message_bytes[0]), link_bytes_per_s))


@dataclass(frozen=True)
class Efficiency:
    """Achieved fractions of peak and fixed costs for one GPU (see the module docstring).

    Fractions are in (0, 1] (``roofline_sharpness`` >= 1); times in the unit their name says.
    ``source`` names the catalog entry and its citation, "calibrated" after a fit to measured
    latencies, or "user".
    """

    gemm_efficiency: float
    gemm_fp8_efficiency: float
    fp8_memory_efficiency: float
    gemm_fp8_tensor_efficiency: float
    fp8_tensor_memory_efficiency: float
    moe_efficiency: float
    moe_quant_efficiency: float
    prefill_attention_efficiency: float
    memory_efficiency: float
    moe_memory_efficiency: float
    decode_attention_efficiency: float
    roofline_sharpness: float
    gemm_sharpness: float
    gemm_tile_tokens: float
    moe_half_efficiency_width: float
    expert_imbalance: float
    expert_imbalance_exponent: float
    attention_ns_per_token_head: float
    layer_overhead_us: float
    prefill_attention_layer_us: float
    decode_attention_layer_us: float
    moe_layer_overhead_us: float
    moe_dispatch_ps_per_element: float
    mla_layer_overhead_us: float
    fp8_layer_overhead_us: float
    fp8_tensor_layer_overhead_us: float
    step_overhead_us: float
    allreduce: AllReduceTable
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
            gemm_fp8_tensor_efficiency=cap(self.gemm_fp8_tensor_efficiency * compute),
            moe_efficiency=cap(self.moe_efficiency * compute),
            moe_quant_efficiency=cap(self.moe_quant_efficiency * compute),
            prefill_attention_efficiency=cap(self.prefill_attention_efficiency * compute),
            memory_efficiency=cap(self.memory_efficiency * memory),
            fp8_memory_efficiency=cap(self.fp8_memory_efficiency * memory),
            fp8_tensor_memory_efficiency=cap(self.fp8_tensor_memory_efficiency * memory),
            moe_memory_efficiency=cap(self.moe_memory_efficiency * memory),
            decode_attention_efficiency=cap(self.decode_attention_efficiency * memory),
            step_overhead_us=overhead_us,
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain values for reports: every coefficient and the source.

        The all-reduce table is summarised by its TP degrees, sizes and link (the catalog holds
        the times).
        """
        out = {k: v for k, v in asdict(self).items() if k != "allreduce"}
        ar = self.allreduce
        out["allreduce"] = {
            "tps": list(ar.tps),
            "message_bytes_min": ar.message_bytes[0],
            "message_bytes_max": ar.message_bytes[-1],
            "link_bytes_per_s": ar.link_bytes_per_s,
        }
        return out


COEFFICIENT_NAMES: tuple[str, ...] = tuple(
    f for f in Efficiency.__dataclass_fields__ if f not in ("source", "allreduce")
)


def _efficiency(name: str, e: Mapping[str, Any]) -> Efficiency:
    for field in (
        "gemm_efficiency",
        "gemm_fp8_efficiency",
        "fp8_memory_efficiency",
        "gemm_fp8_tensor_efficiency",
        "fp8_tensor_memory_efficiency",
        "moe_efficiency",
        "moe_quant_efficiency",
        "prefill_attention_efficiency",
        "memory_efficiency",
        "moe_memory_efficiency",
        "decode_attention_efficiency",
    ):
        if e[field] > 1:
            raise CatalogError(f"entries.{name}.{field}: a fraction of peak, at most 1")
    cite = "; ".join(e.get("source_text") or ())
    return Efficiency(
        **{k: float(e[k]) for k in COEFFICIENT_NAMES},
        allreduce=_allreduce(f"entries.{name}.allreduce", e["allreduce"]),
        source=f"efficiency catalog entry {name}: {cite}",
    )


def _allreduce(where: str, a: Mapping[str, Any]) -> AllReduceTable:
    """The checked all-reduce table (sizes ascending, one positive time per size and TP)."""
    sizes = [float(v) for v in a["message_bytes"]]
    if len(sizes) < 2 or any(b <= x for x, b in zip(sizes, sizes[1:], strict=False)):
        raise CatalogError(f"{where}.message_bytes: at least two sizes, strictly ascending")
    rows = []
    for tp in ALLREDUCE_TPS:
        times = [float(v) for v in a[f"tp{tp}_us"]]
        if len(times) != len(sizes) or min(times) <= 0:
            raise CatalogError(
                f"{where}.tp{tp}_us: one time above 0 per message size ({len(sizes)}), "
                f"got {len(times)}"
            )
        rows.append(tuple(times))
    return AllReduceTable(
        link_bytes_per_s=float(a["link_gbps"]) * BYTES_PER_GB,
        message_bytes=tuple(sizes),
        tps=ALLREDUCE_TPS,
        times_us=tuple(rows),
    )


def check_efficiency_entries(
    entries: Mapping[str, Mapping[str, Any]], path: str = "efficiency catalog"
) -> dict[str, Efficiency]:
    """Checked catalog entries as coefficients (fractions of peak at most 1, whole tables)."""
    try:
        return {name: _efficiency(name, e) for name, e in entries.items()}
    except CatalogError as exc:
        raise CatalogError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class EfficiencyCatalog:
    """Every efficiency entry by name, and the GPU names each entry also serves (``aliases``)."""

    entries: Mapping[str, Efficiency]
    aliases: Mapping[str, tuple[str, ...]]

    def own_entry(self, gpu: GpuSpec) -> tuple[str, Efficiency] | None:
        """The entry named after the GPU (or one of its aliases), or listing it as an alias."""
        names = {gpu.name.lower(), *(a.lower() for a in gpu.aliases)}
        for key, eff in self.entries.items():
            if key.lower() in names:
                return key, eff
        for key, eff in self.entries.items():
            if names & {a.lower() for a in self.aliases.get(key, ())}:
                return key, eff
        return None

    def for_gpu(self, gpu: GpuSpec, gpus: Mapping[str, GpuSpec]) -> tuple[Efficiency, str]:
        """The coefficients for ``gpu`` and a sentence saying where they come from.

        In this order: the GPU's own entry; an entry listing it in ``aliases``; else the
        entry of the closest fitted GPU (``gpus`` gives each entry's GPU) of the same
        ``architecture``; else, when its architecture is unknown or has no fitted GPU, the
        closest fitted GPU of any architecture. Closest: the smallest ``|ln(F / F_e)| +
        |ln(BW / BW_e)|`` over dense bf16 peak ``F`` and memory bandwidth ``BW``, plus 1 when
        one has NVLink and the other not (a different all-reduce path). A borrowed entry's
        all-reduce table is rescaled to the GPU's own link by the step model.
        """
        own = self.own_entry(gpu)
        if own is not None:
            key, eff = own
            if key.lower() == gpu.name.lower():
                return eff, f"fitted for {key}"
            why = f"{gpu.name} takes {key}'s fitted coefficients (listed as its sibling)"
            return eff.with_values(f"{why} ({eff.source})"), why
        fitted = {k: gpus[k] for k in self.entries if k in gpus}
        same = {
            k: g
            for k, g in fitted.items()
            if gpu.architecture and g.architecture == gpu.architecture
        }
        pool = same or fitted
        if not pool:
            raise CatalogError(
                f"no efficiency entry names a GPU of the GPU catalog: {gpu.name} has no "
                "coefficients to borrow"
            )
        key = min(pool, key=lambda k: (spec_distance(gpu, pool[k]), k))
        if same:
            why = (
                f"{gpu.name} has no fitted coefficients; those of {key}, the closest fitted "
                f"{gpu.architecture} GPU, are used"
            )
        else:
            arch = gpu.architecture or "not given"
            why = (
                f"{gpu.name} has no fitted coefficients and no fitted GPU shares its "
                f"architecture ({arch}); those of {key}, the closest fitted GPU by peak FLOP/s, "
                "memory bandwidth and NVLink, are used"
            )
        eff = self.entries[key]
        return eff.with_values(f"{why} ({eff.source})"), why


def spec_distance(a: GpuSpec, b: GpuSpec) -> float:
    """How far apart two GPUs are for borrowing coefficients (see ``EfficiencyCatalog.for_gpu``)."""
    d = abs(math.log(a.bf16_dense_tflops / b.bf16_dense_tflops))
    d += abs(math.log(a.memory_bandwidth_gbps / b.memory_bandwidth_gbps))
    return d + float((a.nvlink_gbps > 0) != (b.nvlink_gbps > 0))


def parse_efficiency(data: Any, path: str) -> EfficiencyCatalog:
    """Check a parsed efficiency catalog document and build its entries."""
    entries = check_entries(path, "efficiency", data, EFFICIENCY_FIELDS)
    return EfficiencyCatalog(
        check_efficiency_entries(entries, path),
        {k: tuple(e.get("aliases") or ()) for k, e in entries.items()},
    )


def load_efficiency_catalog(extra_files: Iterable[str | Path] = ()) -> EfficiencyCatalog:
    """The packaged efficiency catalog with ``extra_files`` layered on.

    A file's entry replaces the entry of the same name whole.
    """
    out = _packaged()
    for path in extra_files:
        more = parse_efficiency(load_yaml(path, CatalogError), str(path))
        out = EfficiencyCatalog({**out.entries, **more.entries}, {**out.aliases, **more.aliases})
    return out


@lru_cache(maxsize=1)
def _packaged() -> EfficiencyCatalog:
    return parse_efficiency(load_yaml(EFFICIENCY_YAML, CatalogError), str(EFFICIENCY_YAML))


def load_efficiencies(path: str | Path | None = None) -> dict[str, Efficiency]:
    """Every entry of an efficiency catalog (the packaged one by default), by GPU name."""
    if path is None:
        return dict(_packaged().entries)
    return dict(parse_efficiency(load_yaml(path, CatalogError), str(path)).entries)


def efficiency_for(gpu_name: str) -> tuple[Efficiency, str]:
    """The packaged coefficients for a packaged GPU, and where they come from (``for_gpu``)."""
    gpus = load_gpus()
    return _packaged().for_gpu(get_gpu(gpu_name), gpus)
