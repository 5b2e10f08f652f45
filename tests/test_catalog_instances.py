"""Instance catalog: the families the issue names, sources, derived totals, schema errors."""

from __future__ import annotations

import pytest

from kvadvisor.catalog.instances import find_instance, load_instances, parse_instances
from kvadvisor.errors import CatalogError

SPECS = load_instances()


def test_families_of_the_issue_are_present() -> None:
    """Alibaba, AWS, GCP and Azure families named in the issue."""
    families = {s.family for s in SPECS.values()}
    for family in (
        "gn7i",
        "gn7e",
        "gn8is",
        "gn8v",
        "ebmgn8v",
        "ebmgn8is",
        "p4d",
        "p4de",
        "p5",
        "p5e",
        "p5en",
        "p6-b200",
        "g5",
        "g6",
        "g6e",
        "a2",
        "a3",
        "g2",
        "ND A100 v4",
        "ND H100 v5",
        "ND H200 v5",
    ):
        assert family in families, family


def test_figures_match_sources() -> None:
    """Spot checks: p5e 8 x 141 GiB, 10,000 MB/s EBS cap; gn8v-8x 6 GB/s disk cap."""
    p5e = SPECS["p5e.48xlarge"]
    assert p5e.gpu_memory_total_gib == 8 * 141
    assert p5e.disk_cap_mbps == 10_000 and p5e.local_nvme_total_gb == 8 * 3800
    assert SPECS["ecs.gn8v-8x.48xlarge"].disk_cap_mbps == 6000
    assert SPECS["Standard_ND96isr_H100_v5"].disk_cap_mbps == 612
    assert "disk_cap_mbps" in SPECS["ecs.ebmgn8v.48xlarge"].unconfirmed


def test_every_entry_has_a_source() -> None:
    """Sources are mandatory."""
    for spec in SPECS.values():
        assert spec.source, spec.name


def test_wrong_unit_and_missing_source() -> None:
    """A value with a unit and an entry without source are rejected, naming the field."""
    entry = {
        "provider": "aws",
        "family": "p5",
        "gpu": "h100",
        "gpu_count": 8,
        "gpu_memory_gib": 80,
        "source": ["W1"],
        "as_of": "2026-12-01",
    }
    doc = {"kind": "instances", "sources": {"W1": "EC2"}, "entries": {"x": dict(entry)}}
    doc["entries"]["x"]["gpu_memory_bandwidth_gbps"] = "3.35 TB/s"
    with pytest.raises(CatalogError, match="gpu_memory_bandwidth_gbps: expected a number.*GB/s"):
        parse_instances(doc, "t.yaml")
    doc["entries"]["x"] = {k: v for k, v in entry.items() if k != "source"}
    with pytest.raises(CatalogError, match=r"x\.source: is required"):
        parse_instances(doc, "t.yaml")
    doc["entries"]["x"] = dict(entry, local_nvme_count=8)
    with pytest.raises(CatalogError, match="together"):
        parse_instances(doc, "t.yaml")


def test_lookup_by_alias_and_suggestion() -> None:
    """Aliases resolve; typos get suggestions."""
    assert find_instance(SPECS, "nd-h200-v5").name == "Standard_ND96isr_H200_v5"
    with pytest.raises(CatalogError, match="did you mean 'p5e.48xlarge'"):
        find_instance(SPECS, "p5e.48xlarg")


def test_gpu_figures_agree_with_the_gpu_catalog() -> None:
    """Instance GPU figures agree with the GPU catalog.

    Per-GPU TFLOPS and bandwidth in instance entries match the GPU catalog where it has the
    GPU (two catalogs, one truth).
    """
    from kvadvisor.catalog.gpus import load_gpus

    gpus = load_gpus()
    checked = 0
    for spec in SPECS.values():
        gpu = gpus.get(spec.gpu)
        if gpu is None or spec.gpu_bf16_tflops is None:
            continue
        assert spec.gpu_bf16_tflops == pytest.approx(gpu.bf16_dense_tflops, rel=0.01), spec.name
        assert spec.gpu_memory_bandwidth_gbps == pytest.approx(
            gpu.memory_bandwidth_gbps, rel=0.01
        ), spec.name
        checked += 1
    assert checked >= 20
