"""GPU catalog: the requested GPUs load with sourced figures; names and aliases resolve."""

from __future__ import annotations

import pytest

from kvadvisor.catalog.gpus import get_gpu, load_gpus
from kvadvisor.errors import CatalogError

REQUIRED = {
    "h100-sxm",
    "h100-pcie",
    "h800",
    "h200",
    "h20",
    "a100-40gb",
    "a100-80gb",
    "a800",
    "l20",
    "l40s",
    "l4",
    "a10",
    "b200",
    "mi300x",
}


def test_every_requested_gpu_with_sources() -> None:
    """All GPUs the issue names, each with sources and positive rates."""
    gpus = load_gpus()
    assert REQUIRED <= set(gpus)
    for g in gpus.values():
        assert g.source, g.name
        assert g.bf16_dense_tflops > 0 and g.memory_bandwidth_gbps > 0 and g.pcie_gbps > 0


def test_figures_match_research_catalog() -> None:
    """Spot checks against research/catalog.md section 1 (dense, decimal units)."""
    h200 = get_gpu("h200")
    assert (h200.bf16_dense_tflops, h200.fp8_dense_tflops, h200.memory_bandwidth_gbps) == (
        989.4,
        1978.9,
        4800,
    )
    h20 = get_gpu("h20")
    assert (h20.bf16_dense_tflops, h20.memory_gb, h20.memory_bandwidth_gbps) == (148, 96, 4000)
    assert get_gpu("l20").memory_bandwidth_gbps == 864
    assert get_gpu("a100-80gb").memory_bandwidth_gbps == 2039
    assert get_gpu("mi300x").bf16_dense_tflops == 1307.4


def test_unconfirmed_are_marked() -> None:
    """Figures the research catalog could not confirm say so."""
    assert "unconfirmed" in get_gpu("h20").notes
    assert "unconfirmed" in get_gpu("b200").notes
    assert "unconfirmed" in get_gpu("h800").notes


def test_aliases_and_units() -> None:
    """h100 means the SXM part; bytes and FLOP/s derive from the decimal figures."""
    h100 = get_gpu("H100")
    assert h100.name == "h100-sxm"
    assert h100.memory_bandwidth_bytes_per_s == 3.35e12
    assert h100.peak_flops("bf16") == pytest.approx(989.4e12)
    assert h100.memory_bytes == 80 * 1024**3  # the cloud's GiB figure where known


def test_fp8_falls_back_without_fp8_units() -> None:
    """A100 has no FP8 tensor cores: FP8 weights run at the BF16 rate."""
    a100 = get_gpu("a100-80gb")
    assert a100.fp8_dense_tflops is None
    assert a100.peak_flops("fp8") == a100.peak_flops("bf16") == 312e12


def test_unknown_gpu_suggests() -> None:
    """A typo gets a suggestion."""
    with pytest.raises(CatalogError, match="did you mean.*h200"):
        get_gpu("h2000")
