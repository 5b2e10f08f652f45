"""Issue 14, second part: the GPUs instances named but the GPU catalog lacked, and the prices.

Every test names the source key the figure comes from (the `sources` block of the catalog
file) and asserts the entry cites it; a figure from a secondary source must be marked
unconfirmed, so it cannot lose that mark silently either.
"""

from __future__ import annotations

import pytest

from kvadvisor.catalog.gpus import GPUS_YAML, get_gpu, load_gpus
from kvadvisor.catalog.instances import load_instances
from kvadvisor.catalog.storage import load_storage
from kvadvisor.deploy import instance_cost, tier_cost
from kvadvisor.io.yamlio import load_yaml

GPUS = load_gpus()
INSTANCES = load_instances()
STORAGE = load_storage()
GPU_ENTRIES = load_yaml(GPUS_YAML, Exception)["entries"]

# Instance fields that repeat a GPU figure, and the GPU figure they repeat.
MIRRORED = {
    "gpu_bf16_tflops": "bf16_dense_tflops",
    "gpu_memory_bandwidth_gbps": "memory_bandwidth_gbps",
}


def gpu_cites(name: str, key: str) -> bool:
    """Whether the GPU entry cites the source key."""
    return key in GPU_ENTRIES[name]["source"]


def test_every_instance_gpu_is_in_the_gpu_catalog() -> None:
    """The replay and the advisor look each instance's GPU up: none may be missing.

    p6e-gb200, a4x and ND GB200 v6 (gb200), p6-b300 (b300), ND GB300 v6 (gb300), g5 (a10g) and
    ebmgn9ge (blackwell-pro-72gb) named GPUs the catalog lacked.
    """
    for inst in INSTANCES.values():
        assert get_gpu(inst.gpu).name, inst.name


def test_instance_gpu_figures_repeat_the_gpu_catalog() -> None:
    """An instance's per-GPU TFLOPS and bandwidth are the GPU catalog's, and so is their doubt.

    A figure the GPU catalog marks unconfirmed is unconfirmed on every instance repeating it,
    so the advisor's notes (which list an instance's unconfirmed figures) name it.
    """
    for inst in INSTANCES.values():
        gpu = get_gpu(inst.gpu)
        for field, gpu_field in MIRRORED.items():
            assert getattr(inst, field) == getattr(gpu, gpu_field), (inst.name, field)
            if gpu_field in gpu.unconfirmed:
                assert field in inst.unconfirmed, (inst.name, field)


def test_gb200_from_the_blackwell_datasheet() -> None:
    """GB200 NVL72, per GPU: 5 / 10 PFLOPS BF16 / FP8 sparse, dense half; 186 GB at 8 TB/s.

    NV-BW: NVIDIA Blackwell datasheet ("dense is one-half of the sparse value"); N4 gives the
    same dense 2,500 / 5,000. 185 GiB as EC2 reports it (WE-GPU).
    """
    g = get_gpu("gb200")
    assert gpu_cites("gb200", "NV-BW") and gpu_cites("gb200", "N4")
    assert (g.bf16_dense_tflops, g.fp8_dense_tflops) == (5000 / 2, 10000 / 2)
    assert (g.memory_gb, g.memory_gib, g.memory_bandwidth_gbps) == (186, 185, 8000)
    assert g.nvlink_gbps == 1800 and not g.unconfirmed


def test_grace_hosts_reach_their_gpus_over_nvlink_c2c() -> None:
    """GB200's host link is NVLink-C2C: 900 GB/s both ways per superchip of two GPUs (C2C).

    MLC-GB: MLCommons GB200 system, accelerator_host_interconnect NVLink-C2C. Each GPU's share
    per direction is 900 / 2 / 2 = 225 GB/s, the same as the Grace memory tier's 450 GB/s each
    way per superchip (storage catalog S7) split over its two GPUs.
    """
    g = get_gpu("gb200")
    assert gpu_cites("gb200", "C2C") and gpu_cites("gb200", "MLC-GB")
    assert g.host_link == "NVLink-C2C" and g.pcie_gen is None
    assert g.pcie_gbps == 900 / 2 / 2
    assert g.pcie_gbps == STORAGE["grace-lpddr5x"].read_mbps / 1000 / 2
    gb300 = get_gpu("gb300")
    assert gb300.host_link == "NVLink-C2C" and "pcie_gbps" in gb300.unconfirmed


def test_blackwell_ultra_memory_from_nvidia() -> None:
    """B300 and GB300: 288 GB HBM3E at 8 TB/s, NVLink 1.8 TB/s (NV-BU, NVIDIA's post).

    Dense BF16 / FP8 from secondary copies of NVIDIA's tables (N-B300: HGX B300 2,250 / 4,500;
    N14: GB300 2,500 / 5,000), hence unconfirmed. EC2 reports 275,040 MiB per B300 (WE-GPU).
    """
    b300, gb300 = get_gpu("b300"), get_gpu("gb300")
    assert gpu_cites("b300", "NV-BU") and gpu_cites("gb300", "NV-BU")
    assert gpu_cites("b300", "N-B300") and gpu_cites("gb300", "N14")
    for g in (b300, gb300):
        assert (g.memory_gb, g.memory_bandwidth_gbps, g.nvlink_gbps) == (288, 8000, 1800)
        assert {"bf16_dense_tflops", "fp8_dense_tflops"} <= set(g.unconfirmed)
        assert "memory_bandwidth_gbps" not in g.unconfirmed
    assert (b300.bf16_dense_tflops, b300.fp8_dense_tflops) == (2250, 4500)
    assert (gb300.bf16_dense_tflops, gb300.fp8_dense_tflops) == (2500, 5000)
    assert b300.memory_gib == pytest.approx(275_040 / 1024, abs=0.01)
    # The chip speaks PCIe Gen6; HGX B300's x86 hosts run Gen5 root ports: taken as Gen5, doubted.
    assert (b300.pcie_gen, b300.pcie_gbps) == (5, 64)
    assert {"pcie_gen", "pcie_gbps"} <= set(b300.unconfirmed)


def test_a10g_is_secondary_and_says_so() -> None:
    """A10G (AWS only, no NVIDIA datasheet): 24 GB at 600 GB/s per Baseten (BT), about 70 TFLOPS.

    Both figures come from secondary pages and are marked; no FP8 units (Ampere).
    """
    g = get_gpu("a10g")
    assert gpu_cites("a10g", "BT")
    assert (g.memory_gb, g.memory_bandwidth_gbps, g.bf16_dense_tflops) == (24, 600, 70)
    assert {"bf16_dense_tflops", "memory_bandwidth_gbps"} <= set(g.unconfirmed)
    assert g.fp8_dense_tflops is None and g.peak_flops("fp8") == g.peak_flops("bf16")


def test_alibaba_blackwell_pro_from_alibaba() -> None:
    """ebmgn9ge's GPU per Alibaba (A1): 72 GB, 1,344 GB/s, 266 BF16 / 533 FP8 TFLOPS, Gen5 x16.

    Alibaba states neither the SKU nor whether the TFLOPS are dense: both are unconfirmed.
    """
    g = get_gpu("blackwell-pro-72gb")
    assert gpu_cites("blackwell-pro-72gb", "A1")
    assert (g.memory_gb, g.memory_bandwidth_gbps) == (72, 1344)
    assert (g.bf16_dense_tflops, g.fp8_dense_tflops, g.nvlink_gbps) == (266, 533, 0)
    assert (g.pcie_gen, g.pcie_gbps) == (5, 128 / 2)
    assert {"bf16_dense_tflops", "fp8_dense_tflops"} <= set(g.unconfirmed)


def test_gpu_unconfirmed_names_real_fields(tmp_path) -> None:
    """`unconfirmed` may only name figures of a GPU entry; `catalog check` says which is not."""
    from kvadvisor.catalog.checkfile import check_catalog_file

    path = tmp_path / "gpus.yaml"
    path.write_text(
        "kind: gpus\nsources:\n  X: a sheet\nentries:\n  g1:\n    bf16_dense_tflops: 1\n"
        "    memory_gb: 1\n    memory_bandwidth_gbps: 1\n    pcie_gbps: 1\n    source: [X]\n"
        "    unconfirmed: [bf16_tflops]\n"
    )
    result = check_catalog_file(path)
    assert not result.ok
    assert any("entries.g1.unconfirmed: 'bf16_tflops'" in p for p in result.problems)


def test_gpu_doubt_reaches_the_review_notes() -> None:
    """A plan on an unconfirmed GPU figure says so in the review's notes (planreview.perf)."""
    from kvadvisor.plan import check_plan
    from kvadvisor.planreview.perf import plan_perf

    plan = check_plan(
        "p.yaml",
        {
            "model": {"name": "llama-3.1-70b", "tp": 8},
            "stages": {"prefill": {"instance": "p6-b300.48xlarge"}},
        },
    )
    notes = plan_perf(plan).stages["prefill"].notes
    assert any("b300: GPU catalog figures not confirmed: bf16_dense_tflops" in n for n in notes)


# -- prices ----------------------------------------------------------------------------------


def price_cites(spec: object, key: str) -> bool:
    """Whether the entry's price cites the source key."""
    price = getattr(spec, "price", None)
    return price is not None and key in price.source


@pytest.mark.parametrize(
    ("name", "usd_per_hour", "region", "keys"),
    [
        # ZP2: Azure Retail Prices API pay-as-you-go, as copied on 2026-09-27 (secondary);
        # ZP3 (a fixture captured 2026-09-16) agrees on ND H100 v5.
        ("Standard_ND96amsr_A100_v4", 32.77, "eastus", ("ZP2",)),
        ("Standard_ND96isr_H100_v5", 98.32, "eastus", ("ZP2", "ZP3")),
        ("Standard_ND96isr_H200_v5", 84.8, "eastus2", ("ZP2",)),
        # ZP2: Google's accelerator-optimized pricing page as copied; GP2: a public tracker.
        ("a3-ultragpu-8g", 84.8069, "us-central1", ("ZP2",)),
        ("a3-megagpu-8g", 93.40, "us-central1", ("GP2",)),
    ],
)
def test_secondary_instance_prices(name, usd_per_hour, region, keys) -> None:
    """Prices read from public copies of the price lists: figure, region, date, and the doubt."""
    inst = INSTANCES[name]
    assert inst.price is not None
    assert all(price_cites(inst, k) for k in keys)
    assert (inst.price.usd_per_hour, inst.price.region) == (usd_per_hour, region)
    assert inst.price.as_of is not None and inst.price.unconfirmed
    cost = instance_cost(inst)
    assert cost.usd_per_hour == usd_per_hour and cost.unconfirmed


def test_a4_rate_is_dws_calendar_mode() -> None:
    """A4 has no on-demand rate: $90.22/h is its DWS calendar-mode rate (ZP2), so it says so."""
    price = INSTANCES["a4-highgpu-8g"].price
    assert price is not None and price_cites(INSTANCES["a4-highgpu-8g"], "ZP2")
    assert price.usd_per_hour == 90.22 and price.unconfirmed and "calendar-mode" in price.note


def test_unpriced_instances_say_why() -> None:
    """No figure without a source: A4X is reservation-only (GP2), the others not found."""
    a4x = INSTANCES["a4x-highgpu-4g"].price
    assert a4x is not None and not a4x.offered and price_cites(INSTANCES["a4x-highgpu-4g"], "GP2")
    for name in ("Standard_ND128isr_NDR_GB200_v6", "Standard_ND128isr_GB300_v6"):
        price = INSTANCES[name].price
        assert price is not None and price.usd_per_hour is None and "no price found" in price.note
    alibaba = [i for i in INSTANCES.values() if i.provider == "alibaba"]
    assert alibaba and all(i.price_usd_per_hour is None for i in alibaba)


def test_fsx_1000_price_from_the_tokyo_table() -> None:
    """FSx for Lustre 1,000 MB/s/TiB: $1.39/h for 1,200 GiB in ap-northeast-1 (W12, 2022).

    $1.39 x 730 h / 1,200 GB = $0.846 per GB-month; secondary and in another region: marked.
    """
    spec = STORAGE["aws-fsx-lustre-persistent2-1000"]
    assert price_cites(spec, "W12") and spec.price is not None
    assert spec.price.usd_per_gb_month == pytest.approx(1.39 * 730 / 1200, abs=5e-4)
    assert (spec.price.region, spec.price.unconfirmed) == ("ap-northeast-1", True)
    cost = tier_cost(spec, capacity_gib=1200)
    gb = 1200 * 1024**3 / 1e9
    assert cost.usd_per_hour == pytest.approx(gb * 0.846 / 730)


def test_gp3_prices_and_their_2025_corroboration() -> None:
    """gp3 us-east-1: $0.08/GB-month, 3,000 IOPS and 125 MiB/s free, $0.005 and $0.04 beyond.

    W6 (2020 launch post) and W6b (a 2025 secondary page giving the same figures).
    """
    gp3 = STORAGE["aws-ebs-gp3"]
    assert price_cites(gp3, "W6") and price_cites(gp3, "W6b") and gp3.price is not None
    p = gp3.price
    assert (p.usd_per_gb_month, p.usd_per_provisioned_iops_month) == (0.08, 0.005)
    assert (p.usd_per_provisioned_mibps_month, p.included_iops, p.included_mibps) == (
        0.04,
        3000,
        125,
    )
    # 1,000 GB with 10,000 IOPS and 500 MiB/s: 80 + 7,000 x 0.005 + 375 x 0.04 = $130 a month.
    cost = tier_cost(gp3, 1000 * 1e9 / 1024**3, iops=10_000, bytes_per_s=500 * 1024**2)
    assert cost.usd_per_hour == pytest.approx(130 / 730)


def test_hyperdisk_balanced_billing_without_rates() -> None:
    """Hyperdisk Balanced includes 3,000 IOPS and 140 MiB/s (G4); its rates were not found."""
    hd = STORAGE["gcp-hyperdisk-balanced"]
    assert hd.price is not None and not hd.price.known
    assert (hd.price.included_iops, hd.price.included_mibps) == (3000, 140)
    assert "G4" in hd.source and tier_cost(hd, 1000).usd_per_hour is None


@pytest.mark.parametrize("kind", ["gpus", "models", "storage", "instances"])
def test_every_packaged_entry_cites_a_source_and_a_date(kind: str) -> None:
    """Every entry of every packaged hardware and model catalog: a source key and an as_of.

    The source keys must be those the file's `sources` block defines (with a citation text),
    so a figure cannot cite a source nobody can look up.
    """
    doc = load_yaml(GPUS_YAML.with_name(f"{kind}.yaml"), Exception)
    sources = doc["sources"]
    for name, entry in doc["entries"].items():
        cited = entry.get("source")
        cited = [cited] if isinstance(cited, str) else cited
        assert cited and all(sources.get(k, "").strip() for k in cited), (kind, name)
        assert entry.get("as_of"), (kind, name)
