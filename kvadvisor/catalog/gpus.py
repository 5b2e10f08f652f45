"""Accelerators: the packaged GPU catalog (dense TFLOPS, memory, bandwidths), all sourced."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvadvisor.catalog.loader import check_entries, load_catalog_file, lookup
from kvadvisor.checker import Field
from kvadvisor.errors import CatalogProblems
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_GIB, FLOPS_PER_TFLOPS

GPUS_YAML = Path(__file__).with_name("data") / "gpus.yaml"
# GPU architectures (the vendor's name for the chip generation); a GPU without fitted step-model
# coefficients borrows those of a fitted GPU of the same architecture (catalog/efficiency.py).
ARCHITECTURES = ("volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3")

GPU_FIELDS: dict[str, Field] = {
    "architecture": Field(
        "str", choices=ARCHITECTURES, help="chip generation, for borrowing fitted coefficients"
    ),
    "bf16_dense_tflops": Field("number", required=True, minimum=1),
    "fp8_dense_tflops": Field("number", minimum=1, help="absent when there are no FP8 units"),
    "memory_gb": Field("number", required=True, minimum=1, help="vendor's decimal GB"),
    "memory_gib": Field("number", minimum=1, help="as a cloud reports it"),
    "memory_bandwidth_gbps": Field("number", required=True, minimum=1),
    "pcie_gen": Field("int", minimum=1),
    "pcie_gbps": Field("number", required=True, minimum=0, help="host link, per direction"),
    "nvlink_gbps": Field(
        "number", minimum=0, positive=False, help="bidirectional total per GPU; 0 = none"
    ),
    "host_link": Field("str", help="what the host link is when it is not PCIe (NVLink-C2C)"),
    "unconfirmed": Field("list[str]", help="fields whose figure no primary source confirms"),
}


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator. Rates are per GPU, decimal units as the field names say."""

    name: str
    display_name: str
    bf16_dense_tflops: float
    fp8_dense_tflops: float | None
    memory_gb: float
    memory_bandwidth_gbps: float
    pcie_gbps: float
    nvlink_gbps: float = 0.0
    memory_gib: float | None = None
    pcie_gen: int | None = None
    host_link: str = ""
    source: tuple[str, ...] = ()
    notes: str = ""
    unconfirmed: tuple[str, ...] = ()
    architecture: str | None = None
    aliases: tuple[str, ...] = ()

    @property
    def memory_bytes(self) -> float:
        """Usable device memory in bytes (the cloud's GiB figure where known, else vendor GB)."""
        if self.memory_gib is not None:
            return self.memory_gib * BYTES_PER_GIB
        return self.memory_gb * BYTES_PER_GB

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        """Peak HBM/GDDR bandwidth, bytes per second."""
        return self.memory_bandwidth_gbps * BYTES_PER_GB

    @property
    def pcie_bytes_per_s(self) -> float:
        """Host link bandwidth per direction, bytes per second."""
        return self.pcie_gbps * BYTES_PER_GB

    def unconfirmed_note(self) -> str:
        """A sentence naming the figures no primary source confirmed ("" when there are none)."""
        if not self.unconfirmed:
            return ""
        return f"{self.name}: GPU catalog figures not confirmed: {', '.join(self.unconfirmed)}"

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor FLOP/s for matmuls in ``dtype`` ("bf16" or "fp8").

        FP8 falls back to BF16 on GPUs without FP8 units (engines then run FP8 weights
        through BF16 kernels).
        """
        if dtype == "fp8" and self.fp8_dense_tflops is not None:
            return self.fp8_dense_tflops * FLOPS_PER_TFLOPS
        return self.bf16_dense_tflops * FLOPS_PER_TFLOPS


def _spec(name: str, e: dict[str, Any]) -> GpuSpec:
    return GpuSpec(
        name=name,
        display_name=e.get("display_name", name),
        bf16_dense_tflops=float(e["bf16_dense_tflops"]),
        fp8_dense_tflops=float(e["fp8_dense_tflops"]) if e.get("fp8_dense_tflops") else None,
        memory_gb=float(e["memory_gb"]),
        memory_gib=float(e["memory_gib"]) if e.get("memory_gib") else None,
        memory_bandwidth_gbps=float(e["memory_bandwidth_gbps"]),
        pcie_gbps=float(e["pcie_gbps"]),
        pcie_gen=e.get("pcie_gen"),
        nvlink_gbps=float(e.get("nvlink_gbps") or 0.0),
        host_link=e.get("host_link") or "",
        source=tuple(e.get("source_text") or ()),
        notes=e.get("notes", ""),
        unconfirmed=tuple(e.get("unconfirmed") or ()),
        architecture=e.get("architecture"),
        aliases=tuple(e.get("aliases") or ()),
    )


def unconfirmed_problems(entries: dict[str, dict[str, Any]]) -> list[str]:
    """Every ``unconfirmed`` name that is not a figure of the GPU schema, as "entry: why"."""
    figures = set(GPU_FIELDS) - {"host_link", "unconfirmed", "architecture", "aliases"}
    return [
        f"entries.{name}.unconfirmed: '{field}' is not a figure of a GPU entry"
        for name, e in entries.items()
        for field in e.get("unconfirmed") or ()
        if field not in figures
    ]


def parse_gpus(data: Any, path: str, lines: Mapping[str, int] | None = None) -> dict[str, GpuSpec]:
    """Check a parsed GPU catalog document (every problem at once) and build its specs."""
    entries = check_entries(path, "gpus", data, GPU_FIELDS, lines=lines)
    problems = unconfirmed_problems(entries)
    if problems:
        raise CatalogProblems(path, problems)
    return {name: _spec(name, e) for name, e in entries.items()}


@lru_cache(maxsize=4)
def _load(path: str) -> tuple[dict[str, dict[str, Any]], dict[str, GpuSpec]]:
    entries = load_catalog_file(path, "gpus", GPU_FIELDS)
    problems = unconfirmed_problems(entries)
    if problems:
        raise CatalogProblems(path, problems)
    return entries, {name: _spec(name, e) for name, e in entries.items()}


def load_gpus(path: str | Path | None = None) -> dict[str, GpuSpec]:
    """All GPUs of a catalog file (the packaged one by default), by name."""
    return dict(_load(str(path or GPUS_YAML))[1])


def get_gpu(name: str, path: str | Path | None = None) -> GpuSpec:
    """A GPU by name or alias (``h200``, ``h100-sxm``, ``h20``, ``l20``), case-insensitive."""
    entries, specs = _load(str(path or GPUS_YAML))
    key, _ = lookup(entries, name, "GPU", "gpus")
    return specs[key]
