"""The efficiency catalog: its all-reduce tables, and coefficients for GPUs it has no entry for."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from kvadvisor.catalog.efficiency import (
    EFFICIENCY_YAML,
    load_efficiencies,
    parse_efficiency,
    spec_distance,
)
from kvadvisor.catalog.gpus import GpuSpec, load_gpus
from kvadvisor.catalog.models import get_model
from kvadvisor.catalog.perfcatalogs import PerfCatalogs, load_perf_catalogs
from kvadvisor.errors import CatalogError
from kvadvisor.perfmodel.perf import PerfModel

PACKAGED = PerfCatalogs.packaged()


def _gpu(name: str, tflops: float, bw: float, nvlink: float, arch: str | None) -> GpuSpec:
    """A GPU like the ones the catalog is adding (issue 14's branch), with no fitted entry."""
    return GpuSpec(
        name=name,
        display_name=name,
        bf16_dense_tflops=tflops,
        fp8_dense_tflops=2 * tflops,
        memory_gb=186.0,
        memory_bandwidth_gbps=bw,
        pcie_gbps=64.0,
        nvlink_gbps=nvlink,
        architecture=arch,
    )


# The GPUs being added without fitted coefficients, with their published figures.
GB200 = _gpu("gb200", 2500.0, 8000.0, 1800.0, "blackwell")
B300 = _gpu("b300", 2250.0, 8000.0, 1800.0, "blackwell")
GB300 = _gpu("gb300", 2500.0, 8000.0, 1800.0, "blackwell")
A10G = _gpu("a10g", 70.0, 600.0, 0.0, "ampere")
BLACKWELL_PRO = _gpu("blackwell-pro-72gb", 266.0, 1344.0, 0.0, "blackwell")


def test_every_packaged_gpu_names_its_architecture() -> None:
    """A new GPU states its architecture, so it can borrow a fitted sibling's coefficients."""
    missing = [n for n, g in load_gpus().items() if g.architecture is None]
    assert not missing, f"GPU catalog entries without `architecture`: {missing}"


@pytest.mark.parametrize(
    ("gpu", "lender"),
    [
        (GB200, "b200"),
        (B300, "b200"),
        (GB300, "b200"),
        (A10G, "a100-80gb"),
        (BLACKWELL_PRO, "b200"),
    ],
)
def test_unfitted_gpu_borrows_the_closest_fitted_gpu_of_its_architecture(
    gpu: GpuSpec, lender: str
) -> None:
    """No entry and no alias: the fitted GPU of the same architecture lends its coefficients.

    Blackwell has one fitted GPU (B200), Ampere one (A100 80 GB); the sentence says which.
    """
    eff, why = PACKAGED.efficiency_for(gpu)
    assert eff.gemm_efficiency == PACKAGED.efficiency.entries[lender].gemm_efficiency
    assert why == (
        f"{gpu.name} has no fitted coefficients; those of {lender}, the closest fitted "
        f"{gpu.architecture} GPU, are used"
    )
    assert eff.source.startswith(why)


def test_closest_within_an_architecture_by_flops_bandwidth_and_nvlink() -> None:
    """Two fitted Hopper GPUs: an H200-like part (4.8 TB/s) goes to H200, not H100 SXM.

    Distances by hand: to H200 |ln(989.4/989.4)| + |ln(4800/4800)| = 0; to H100 SXM
    |ln(4800/3350)| = 0.36.
    """
    h200_like = _gpu("h200-nvl", 989.4, 4800.0, 900.0, "hopper")
    _, why = PACKAGED.efficiency_for(h200_like)
    assert "those of h200, the closest fitted hopper GPU" in why
    gpus = load_gpus()
    assert spec_distance(h200_like, gpus["h100-sxm"]) == pytest.approx(math.log(4800 / 3350))
    # NVLink on one side only adds 1.
    no_link = dataclasses.replace(h200_like, nvlink_gbps=0.0)
    assert spec_distance(no_link, gpus["h200"]) == pytest.approx(1.0)


def test_no_fitted_gpu_of_its_architecture_takes_the_closest_of_any() -> None:
    """MI300X (CDNA3) and a GPU without architecture: the closest fitted GPU of any kind.

    MI300X: to H200 |ln(1307.4/989.4)| + |ln(5300/4800)| = 0.378, to H100 SXM 0.737, to B200
    0.955: H200. A GB200 with no architecture given: B200 (0.105).
    """
    gpus = load_gpus()
    mi300x = gpus["mi300x"]
    assert spec_distance(mi300x, gpus["h200"]) == pytest.approx(
        math.log(1307.4 / 989.4) + math.log(5300 / 4800)
    )
    _, why = PACKAGED.efficiency_for(mi300x)
    assert why == (
        "mi300x has no fitted coefficients and no fitted GPU shares its architecture (cdna3); "
        "those of h200, the closest fitted GPU by peak FLOP/s, memory bandwidth and NVLink, "
        "are used"
    )
    _, why = PACKAGED.efficiency_for(dataclasses.replace(GB200, architecture=None))
    assert "architecture (not given); those of b200" in why


def test_own_entry_and_listed_sibling() -> None:
    """A fitted GPU takes its own entry; one listed in an entry's aliases takes that entry."""
    gpus = load_gpus()
    eff, why = PACKAGED.efficiency_for(gpus["h200"])
    assert why == "fitted for h200" and "aiconfigurator" in eff.source
    eff, why = PACKAGED.efficiency_for(gpus["h800"])
    assert why == "h800 takes h100-sxm's fitted coefficients (listed as its sibling)"
    assert eff.gemm_efficiency == PACKAGED.efficiency.entries["h100-sxm"].gemm_efficiency


def test_a_gpu_without_fitted_coefficients_builds_a_step_model() -> None:
    """No crash: GB200 runs on B200's coefficients, the all-reduce table rescaled to its link.

    Both have 900 GB/s one way, so GB200's all-reduces equal B200's; a PCIe part (the
    Blackwell professional GPU, 64 GB/s) takes 900 / 64 times B200's time above the latency.
    """
    model = get_model("qwen3-32b")
    pm = PerfModel.build(model, GB200, tp=4)
    assert "those of b200" in pm.efficiency_note
    b200 = PerfModel.build(model, load_gpus()["b200"], tp=4)
    t = pm.allreduce_one_s(4096.0)
    assert t == pytest.approx(b200.allreduce_one_s(4096.0))
    pro = PerfModel.build(model, BLACKWELL_PRO, tp=4)
    lat = b200.allreduce_latency_s()
    assert pro.allreduce_one_s(4096.0) == pytest.approx(lat + (t - lat) * 900 / 64)
    assert float(pro.prefill_s(4096.0, 0.0)) > 0


def test_packaged_tables_are_aics_and_read_as_aic_reads_them() -> None:
    """B200 at TP 8: AIC's own points, and a message between two of them on the straight line.

    262,144 and 524,288 bytes (131,072 and 262,144 bf16 elements) take about 26 us: the bump a
    decode step of 16-32 Qwen3-32B sequences hits.
    """
    ar = load_efficiencies()["b200"].allreduce
    assert ar.link_bytes_per_s == 900e9
    i = ar.message_bytes.index(262_144.0)
    lo, hi = ar.times_us[2][i], ar.times_us[2][i + 1]
    assert 20 < lo < 30 and 20 < hi < 30
    # 32 sequences x 5,120 x 2 bytes = 327,680 bytes, a quarter of the way to 524,288.
    got = ar.time_s(8, 327_680.0, 900e9) * 1e6
    assert got == pytest.approx(lo + (hi - lo) * (327_680 - 262_144) / 262_144)


def _entry(**changes: object) -> dict:
    doc = yaml.safe_load(EFFICIENCY_YAML.read_text())
    entry = dict(doc["entries"]["h200"])
    entry["allreduce"] = dict(entry["allreduce"])
    entry.update(changes)
    return {"kind": "efficiency", "sources": {"LAB": "our lab"}, "entries": {"lab": entry}}


def test_allreduce_table_is_checked() -> None:
    """Sizes must ascend and each TP row hold one time per size: refused with the key path."""
    good = _entry()
    good["entries"]["lab"]["source"] = ["LAB"]
    assert parse_efficiency(good, "lab.yaml").entries["lab"].allreduce.tps == (2, 4, 8)
    bad = _entry(source=["LAB"])
    bad["entries"]["lab"]["allreduce"]["tp4_us"] = [5.0, 6.0]
    with pytest.raises(CatalogError, match=r"lab.yaml: entries.lab.allreduce.tp4_us: one time"):
        parse_efficiency(bad, "lab.yaml")
    bad = _entry(source=["LAB"])
    sizes = bad["entries"]["lab"]["allreduce"]["message_bytes"]
    bad["entries"]["lab"]["allreduce"]["message_bytes"] = list(reversed(sizes))
    with pytest.raises(CatalogError, match="message_bytes: at least two sizes, strictly"):
        parse_efficiency(bad, "lab.yaml")
    missing = _entry(source=["LAB"])
    del missing["entries"]["lab"]["allreduce"]
    with pytest.raises(CatalogError, match=r"entries.lab.allreduce: is required"):
        parse_efficiency(missing, "lab.yaml")


def test_user_efficiency_file_replaces_an_entry_whole(tmp_path: Path) -> None:
    """A user's entry named h200 replaces the packaged one; other entries stay packaged."""
    doc = _entry(source=["LAB"], gemm_efficiency=0.5)
    doc["entries"] = {"h200": doc["entries"]["lab"]}
    path = tmp_path / "eff.yaml"
    path.write_text(yaml.safe_dump(doc))
    cats = load_perf_catalogs(efficiency_files=[path])
    eff, why = cats.efficiency_for(cats.gpu("h200"))
    assert eff.gemm_efficiency == 0.5 and eff.source == "efficiency catalog entry h200: our lab"
    assert why == "fitted for h200"
    assert cats.efficiency.entries["b200"] == PACKAGED.efficiency.entries["b200"]
