"""The figures issue 14 found wrong or stale, each checked against the source the catalog cites.

Every test names the source key (see the `sources` block of the catalog file) and asserts that
the entry cites it, so a figure cannot drift from its source silently.
"""

from __future__ import annotations

import pytest

from kvadvisor.catalog.gpus import GPUS_YAML, get_gpu
from kvadvisor.catalog.instances import load_instances
from kvadvisor.catalog.storage import PRICE_FIGURES, load_storage
from kvadvisor.io.yamlio import load_yaml
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_TIB

STORAGE = load_storage()
INSTANCES = load_instances()
MIB_PER_S = 1.048576  # MB/s per MiB/s


def cites(entry: object, key: str) -> bool:
    """Whether a catalog entry cites the source key."""
    return key in getattr(entry, "source", ())


def test_gp3_current_limits() -> None:
    """gp3: 80,000 IOPS, 2,000 MiB/s, 64 TiB per volume, not 16,000 IOPS / 1,000 MiB/s.

    W3g: EC2 API, 3,000-80,000 IOPS, throughput up to 2,000 MiB/s, 1-65,536 GiB.
    """
    gp3 = STORAGE["aws-ebs-gp3"]
    assert cites(gp3, "W3g")
    assert (gp3.read_iops, gp3.write_iops) == (80_000, 80_000)
    assert gp3.write_mbps == pytest.approx(2000 * MIB_PER_S, abs=0.1)
    assert gp3.capacity_max_gib == 64 * 1024 and not gp3.unconfirmed


def test_io2_throughput_is_sourced() -> None:
    """io2 Block Express: 4,000 MiB/s and 256,000 IOPS per volume, 4 GiB-64 TiB (W2b)."""
    io2 = STORAGE["aws-ebs-io2-block-express"]
    assert cites(io2, "W2b") and "read_mbps" not in io2.unconfirmed
    assert io2.read_mbps == pytest.approx(4000 * MIB_PER_S, abs=0.1)
    assert (io2.capacity_min_gib, io2.capacity_max_gib) == (4, 65536)


def test_nd_h200_v5_local_nvme_and_infiniband() -> None:
    """ND H200 v5: 8 NVMe disks of 28 TiB, 8 x 400 Gb/s InfiniBand beside 80 Gbps Ethernet.

    Z4: Azure ND H200 v5 size page and summary.
    """
    nd = INSTANCES["Standard_ND96isr_H200_v5"]
    assert cites(nd, "Z4")
    assert nd.local_nvme_count == 8
    assert nd.local_nvme_total_gb * BYTES_PER_GB == pytest.approx(28 * BYTES_PER_TIB, rel=1e-4)
    assert (nd.frontend_network_gbit, nd.backend_network_gbit) == (80, 3200)
    assert "InfiniBand" in (nd.backend_network or "")
    assert (nd.max_data_disks, nd.disk_cap_mbps, nd.disk_cap_iops) == (16, 612, 40800)
    assert not {"local_nvme_count", "local_nvme_each_gb"} & set(nd.unconfirmed)


def test_azure_managed_lustre_is_tib_in_4_tib_steps() -> None:
    """AMLFS-Durable-Premium-500: 4 to 128 TiB in 4 TiB steps (Z6; the size field is TiB)."""
    aml = STORAGE["azure-managed-lustre-premium-500"]
    assert cites(aml, "Z6")
    assert (aml.capacity_min_gib, aml.capacity_max_gib, aml.capacity_step_gib) == (
        4 * 1024,
        128 * 1024,
        4 * 1024,
    )
    # 500 MB/s per TiB: 64 TiB deliver 32,000 MB/s.
    assert aml.perf_at(64 * 1024).read_mbps == pytest.approx(32_000)


def test_gcp_managed_lustre_tier_maxima() -> None:
    """The 1,000 MBps/TiB tier ends at 10,008,000 GiB (9.5 PiB), not 80.1 PiB.

    80.1 PiB is the Dynamic tier's maximum (G6: Managed Lustre performance tiers).
    """
    fast = STORAGE["gcp-managed-lustre-1000"]
    assert cites(fast, "G6")
    assert (fast.capacity_min_gib, fast.capacity_max_gib) == (9000, 10_008_000)
    assert STORAGE["gcp-managed-lustre-250"].capacity_max_gib == 40_032_000
    assert fast.perf_at(18_000).write_mbps == pytest.approx(18_000 / 1024 * 1000)


def test_kioxia_cm6_write_iops() -> None:
    """CM6 write IOPS: 170,000 (1-DWPD CM6-R at 30.72 TB), 350,000 (3-DWPD CM6-V) (S5g)."""
    assert cites(STORAGE["kioxia-cm6"], "S5g") and cites(STORAGE["kioxia-cm6-v"], "S5g")
    assert STORAGE["kioxia-cm6"].write_iops == 170_000
    assert STORAGE["kioxia-cm6-v"].write_iops == 350_000
    assert (STORAGE["kioxia-cm6"].endurance_dwpd, STORAGE["kioxia-cm6-v"].endurance_dwpd) == (1, 3)


def test_solidigm_p5810_latency_capacities_endurance() -> None:
    """D7-P5810: 10 us is sequential-read latency; 800 GB and 1.6 TB; about 50 DWPD.

    S5e. The 50 DWPD is marked unconfirmed: not from a primary source.
    """
    p5810 = STORAGE["solidigm-d7-p5810"]
    assert cites(p5810, "S5e")
    assert p5810.read_latency_us is None and "read_latency_us" in p5810.unconfirmed
    assert "sequential-read latency" in p5810.notes
    assert p5810.capacities_gb == (800, 1600)
    assert p5810.endurance_dwpd == 50 and "endurance_dwpd" in p5810.unconfirmed
    assert p5810.write_latency_us == 15  # random write


def test_b200_host_link_is_pcie_gen5() -> None:
    """HGX B200 runs its host link at PCIe Gen5 x16, 64 GB/s each way, not 128 GB/s.

    MLC: MLCommons B200 system description, accelerator_host_interconnect 'PCIe Gen5 x16'.
    """
    b200 = get_gpu("b200")
    assert (b200.pcie_gen, b200.pcie_gbps) == (5, 64)
    assert "MLC" in load_yaml(GPUS_YAML, Exception)["entries"]["b200"]["source"]


def test_mooncake_and_3fs_figures_are_per_client() -> None:
    """3FS's 40 GiB/s (S1) and Mooncake's 87 GB/s (S2) are what one client node reaches."""
    for name, key, mbps in (("deepseek-3fs", "S1", 42_949.7), ("mooncake-store", "S2", 87_000)):
        spec = STORAGE[name]
        assert cites(spec, key) and spec.scope == "per_client" and spec.read_mbps == mbps


def test_fsx_lustre_has_gds() -> None:
    """FSx for Lustre PERSISTENT_2 supports EFA and GPUDirect Storage (W7: EfaEnabled)."""
    for name in ("aws-fsx-lustre-persistent2-125", "aws-fsx-lustre-persistent2-1000"):
        spec = STORAGE[name]
        assert cites(spec, "W7") and spec.gds_support is True
        assert spec.client_network == "backend" and spec.scope == "per_tib"


def test_dram_generations_per_host() -> None:
    """DDR4 hosts are not DDR5 Sapphire Rapids; GB200's host memory is Grace LPDDR5X.

    p4d Cascade Lake (W10), a2 and g2 Cascade Lake (G3), ND A100 v4 Rome (Z1); Sapphire
    Rapids hosts (ND H100 v5 Z3, p5en) are DDR5.
    """
    ddr4 = ("p4d.24xlarge", "p4de.24xlarge", "a2-highgpu-8g", "g2-standard-96", "g5.48xlarge")
    for name in (*ddr4, "Standard_ND96amsr_A100_v4"):
        assert INSTANCES[name].host_memory_type == "DDR4", name
    assert cites(INSTANCES["p4d.24xlarge"], "W10") and cites(INSTANCES["a2-highgpu-8g"], "G3")
    assert cites(INSTANCES["Standard_ND96amsr_A100_v4"], "Z1")
    assert INSTANCES["Standard_ND96isr_H100_v5"].host_memory_type == "DDR5"
    assert INSTANCES["Standard_ND128isr_NDR_GB200_v6"].host_memory_type == "LPDDR5X"


def test_grace_memory_is_a_kv_tier() -> None:
    """GB200's Grace memory: 900 GB/s NVLink-C2C per superchip, 450 GB/s each way (S7)."""
    grace = STORAGE["grace-lpddr5x"]
    assert cites(grace, "S7") and grace.category == "memory" and grace.scope == "per_superchip"
    assert grace.read_mbps == 450_000


def test_missing_current_systems_are_present() -> None:
    """The systems the issue lists as missing, each sourced."""
    for name, key in (
        ("p6-b300.48xlarge", "W1"),
        ("p6e-gb200.36xlarge", "WE"),
        ("a4-highgpu-8g", "G1"),
        ("a4x-highgpu-4g", "G7"),
        ("Standard_ND128isr_NDR_GB200_v6", "Z8"),
        ("Standard_ND128isr_GB300_v6", "Z8"),
        ("Standard_ND96isr_MI300X_v5", "Z8"),
    ):
        assert cites(INSTANCES[name], key), name
    for name, key in (
        ("samsung-pm9d3a", "S5h"),
        ("kioxia-cm7-r", "S5i"),
        ("kioxia-cd8-r", "S5i"),
        ("solidigm-d7-ps1010", "S5j"),
        ("weka", "S8"),
        ("vast-data", "S9"),
        ("ddn-exascaler", "S10"),
        ("lustre-self-managed", "S11"),
        ("nvidia-cmx", "S4"),
    ):
        assert cites(STORAGE[name], key), name
    assert STORAGE["nvidia-cmx"].announced_only  # no published figure: compared, not offered


def test_p6_b300_and_p6e_gb200_figures() -> None:
    """p6-b300 and p6e-gb200 as EC2 describes them.

    p6-b300 (W1, WE): 8 x B300 of 275,040 MiB, 4 TiB host memory, 6,400 Gbps EFA, 12,500 MB/s
    EBS; p6e-gb200 (WE): 4 GPUs of 185 GiB, 144 Grace vCPUs, 960 GiB, 1,600 Gbps EFA.
    """
    b300 = INSTANCES["p6-b300.48xlarge"]
    assert b300.gpu_memory_gib == pytest.approx(275_040 / 1024, abs=0.01)
    assert (b300.host_memory_gib, b300.backend_network_gbit, b300.disk_cap_mbps) == (
        4096,
        6400,
        12_500,
    )
    gb = INSTANCES["p6e-gb200.36xlarge"]
    assert (gb.gpu_count, gb.gpu_memory_gib, gb.vcpus, gb.host_memory_gib) == (4, 185, 144, 960)
    assert gb.backend_network_gbit == 1600 and gb.price is not None and not gb.price.offered


def test_prices_carry_region_date_and_source() -> None:
    """Every price figure has its source and as_of date; AWS p5 is $55.04/h in us-east-1 (WP)."""
    for entries in (STORAGE, INSTANCES):
        for spec in entries.values():
            price = spec.price
            if price is not None and any(getattr(price, k) is not None for k in PRICE_FIGURES):
                assert price.source and price.as_of, spec.name
    p5 = INSTANCES["p5.48xlarge"].price
    assert p5 is not None
    assert (p5.usd_per_hour, p5.region, p5.as_of, p5.source) == (
        55.04,
        "us-east-1",
        "2026-07-28",
        ("WP",),
    )


def test_every_entry_has_a_source_and_a_date() -> None:
    """Every storage and instance entry cites a source with text and says when it was checked."""
    for entries in (STORAGE, INSTANCES):
        for spec in entries.values():
            assert spec.source and all(t.strip() for t in spec.source_text), spec.name
            assert spec.as_of, spec.name
