"""Deployment rules: which storage an instance can have, and what a capped path delivers.

Figures checked by hand against the catalog entries they come from (EC2 DescribeInstanceTypes
for EBS caps, the Azure size pages for the ND caps, the gp3 limits from the EC2 API docs).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvadvisor.catalog.instances import load_instances
from kvadvisor.catalog.storage import load_storage
from kvadvisor.deploy import (
    Via,
    access,
    host_tier_name,
    reach,
    refusals,
    same_deployment,
    storage_options,
    tier_cost,
)
from kvadvisor.units import BYTES_PER_MB

STORAGE = load_storage()
INSTANCES = load_instances()
CLOUD = [i for i in INSTANCES.values() if i.cloud]
ONPREM = [i for i in INSTANCES.values() if not i.cloud]


def test_cloud_instances_get_their_own_nvme_and_their_providers_storage_only() -> None:
    """The issue's rule: own NVMe, the provider's volumes and file systems, nothing else."""
    for inst in CLOUD:
        for opt in storage_options(inst, STORAGE):
            spec = opt.spec
            if spec.built_in:
                assert spec.name == inst.local_nvme_drive, (inst.name, spec.name)
            else:
                assert inst.provider in spec.available_on, (inst.name, spec.name)
                assert spec.provider in (inst.provider, "generic"), (inst.name, spec.name)
                assert spec.category != "local_nvme", (inst.name, spec.name)
                if spec.provider == "generic":  # only what every cloud has (object storage)
                    assert spec.category == "object", (inst.name, spec.name)


def test_no_bought_drive_in_a_cloud_vm_and_why() -> None:
    """A Kioxia CD7 in an Azure ND VM (the issue's example) is refused, naming its own disks."""
    nd = INSTANCES["Standard_ND96isr_H200_v5"]
    acc = access(nd, STORAGE["kioxia-cd7"])
    assert not acc.ok
    assert "local NVMe is fixed (8 x azure-nvme-local)" in acc.reason
    # And another provider's storage is refused too.
    assert not access(nd, STORAGE["aws-ebs-gp3"]).ok
    assert not access(INSTANCES["p5.48xlarge"], STORAGE["gcp-managed-lustre-1000"]).ok
    refused = {s.name for s, _ in refusals(nd, STORAGE)}
    assert {"kioxia-cd7", "solidigm-d7-p5810", "aws-ebs-gp3", "weka", "deepseek-3fs"} <= refused


def test_onprem_takes_bought_drives_into_its_bays() -> None:
    """An on-premises server takes drives you buy, up to its bays, and self-run systems."""
    dgx = INSTANCES["dgx-h200"]
    acc = access(dgx, STORAGE["solidigm-d7-p5810"])
    assert acc.ok and acc.via == Via.BAYS and acc.max_devices == 8
    assert access(dgx, STORAGE["deepseek-3fs"]).ok
    assert not access(dgx, STORAGE["aws-ebs-gp3"]).ok
    assert not access(dgx, STORAGE["aws-instance-store-nvme"]).ok


def test_host_tier_is_the_instances_own_memory() -> None:
    """DDR4 hosts are not labelled DDR5 Sapphire Rapids; GB200's host tier is Grace memory."""
    assert host_tier_name(INSTANCES["p4d.24xlarge"]) == "host-dram-ddr4"
    assert host_tier_name(INSTANCES["a2-highgpu-8g"]) == "host-dram-ddr4"
    assert host_tier_name(INSTANCES["g2-standard-96"]) == "host-dram-ddr4"
    assert host_tier_name(INSTANCES["Standard_ND96isr_H100_v5"]) == "host-dram-ddr5-spr"
    for name in ("p6e-gb200.36xlarge", "a4x-highgpu-4g", "Standard_ND128isr_NDR_GB200_v6"):
        assert host_tier_name(INSTANCES[name]) == "grace-lpddr5x"
    ddr4 = [i for i in INSTANCES.values() if i.host_memory_type == "DDR4"]
    assert all(host_tier_name(i) == "host-dram-ddr4" for i in ddr4)
    assert not access(INSTANCES["p4d.24xlarge"], STORAGE["host-dram-ddr5-spr"]).ok


def test_gcp_local_ssd_partitions_are_not_whole_drives() -> None:
    """A3 Ultra's local SSD: 32 partitions of 375 GiB, each one unit (not a 12 TB drive)."""
    a3u = INSTANCES["a3-ultragpu-8g"]
    acc = access(a3u, STORAGE["gcp-local-ssd"])
    assert acc.ok and acc.max_devices == 32 and acc.device_gib == pytest.approx(375, rel=1e-3)
    assert "partition" in acc.reason
    # Per-partition read IOPS (100,000, G5) times the partitions used.
    assert reach(a3u, STORAGE["gcp-local-ssd"], 16, 375).read_iops == 16 * 100_000


def test_block_volumes_are_capped_by_the_instance_disk_cap() -> None:
    """8 gp3 volumes of 2,097.2 MB/s on a p5 reach its 10,000 MB/s EBS cap, not 16.8 GB/s."""
    p5 = INSTANCES["p5.48xlarge"]
    r = reach(p5, STORAGE["aws-ebs-gp3"], 8, 1000)
    assert r.write_bytes_per_s == 10_000 * BYTES_PER_MB and r.capped
    assert "disk cap 10 GB/s" in r.write_limit
    assert r.write_iops == 260_000  # 8 x 80,000 IOPS capped at the p5's 260,000
    one = reach(p5, STORAGE["aws-ebs-gp3"], 1, 1000)
    assert one.write_bytes_per_s == pytest.approx(2097.2 * BYTES_PER_MB) and not one.capped
    # ND H200 v5: Premium SSD v2 at 1,200 MB/s per volume is held to the VM's 612 MB/s.
    nd = reach(INSTANCES["Standard_ND96isr_H200_v5"], STORAGE["azure-premium-ssd-v2"], 4, 1000)
    assert nd.read_bytes_per_s == 612 * BYTES_PER_MB


def test_shared_systems_are_capped_by_the_nic_and_per_client_figures_are_not_pooled() -> None:
    """3FS's 40 GiB/s is what one client reaches; a pool's share never exceeds the NIC."""
    dgx = INSTANCES["dgx-h200"]
    for clients in (1, 4, 64):
        r = reach(dgx, STORAGE["deepseek-3fs"], clients=clients)
        assert r.read_bytes_per_s == pytest.approx(42_949.7 * BYTES_PER_MB)
    # A ND H200 v5 client of a 128 TiB, 500 MB/s/TiB Managed Lustre: the pool gives 64 GB/s,
    # one node's share is bounded by its 80 Gbit/s front-end NIC (10 GB/s).
    nd = INSTANCES["Standard_ND96isr_H200_v5"]
    r = reach(nd, STORAGE["azure-managed-lustre-premium-500"], device_gib=131072, clients=1)
    assert r.read_bytes_per_s == 80e9 / 8 and r.capped and "front-end network" in r.read_limit
    shared = reach(nd, STORAGE["azure-managed-lustre-premium-500"], device_gib=131072, clients=8)
    assert shared.read_bytes_per_s == pytest.approx(64_000e6 / 8)


@settings(max_examples=200, deadline=None)
@given(
    inst=st.sampled_from(list(INSTANCES.values())),
    spec=st.sampled_from([s for s in STORAGE.values() if s.category != "memory"]),
    devices=st.integers(1, 64),
    size=st.one_of(st.none(), st.floats(1, 2_000_000)),
    clients=st.integers(1, 128),
)
def test_a_capped_path_never_exceeds_its_cap(inst, spec, devices, size, clients) -> None:  # type: ignore[no-untyped-def]
    """Whatever the option, devices and size: volumes stay under the disk cap, pools under NIC."""
    acc = access(inst, spec)
    if not acc.ok:
        return
    r = reach(inst, spec, devices, size, clients)
    for value in (r.read_bytes_per_s, r.write_bytes_per_s):
        if value is None:
            continue
        if acc.via == Via.VOLUMES and inst.disk_cap_mbps is not None:
            assert value <= inst.disk_cap_mbps * BYTES_PER_MB + 1e-6
        if acc.via == Via.FRONTEND and inst.frontend_network_gbit is not None:
            assert value <= inst.frontend_network_gbit * 1e9 / 8 + 1e-6
        if acc.via == Via.BACKEND and inst.backend_network_gbit is not None:
            assert value <= inst.backend_network_gbit * 1e9 / 8 + 1e-6
    for value in (r.read_iops, r.write_iops):
        if value is not None and acc.via == Via.VOLUMES and inst.disk_cap_iops is not None:
            assert value <= inst.disk_cap_iops


def test_unconfirmed_figures_are_named_by_reach() -> None:
    """A figure marked unconfirmed that a reach uses is named, so a verdict can say so."""
    r = reach(INSTANCES["dgx-h200"], STORAGE["solidigm-d7-ps1010"], 2)
    assert "solidigm-d7-ps1010.write_mbps" in r.unconfirmed
    r = reach(INSTANCES["ecs.ebmgn8v.48xlarge"], STORAGE["alibaba-essd-pl3"], 4, 4000)
    assert "ecs.ebmgn8v.48xlarge.disk_cap_mbps" in r.unconfirmed


def test_tier_cost_gp3_by_hand() -> None:
    """gp3, 1,000 GiB at 10,000 IOPS and 500 MiB/s, us-east-1, 730 h a month.

    1,073.74 GB x $0.08 + (10,000 - 3,000) x $0.005 + (500 - 125) x $0.04 per month
    = 85.90 + 35 + 15 = $135.90/month = $0.18616/h.
    """
    gp3 = STORAGE["aws-ebs-gp3"]
    cost = tier_cost(gp3, 1000, 1, iops=10_000, bytes_per_s=500 * 1024**2)
    gb = 1000 * 1024**3 / 1e9
    assert cost.usd_per_hour == pytest.approx((gb * 0.08 + 7000 * 0.005 + 375 * 0.04) / 730)
    assert cost.unconfirmed and "us-east-1" in cost.basis
    assert tier_cost(STORAGE["aws-instance-store-nvme"], 30_000, 8).usd_per_hour == 0.0
    assert tier_cost(STORAGE["alibaba-essd-pl1"], 100).usd_per_hour is None


def test_options_and_prices_change_with_the_catalog() -> None:
    """A user override that makes a drive built-in for an instance is reflected in its options."""
    p5 = INSTANCES["p5.48xlarge"]
    measured = replace(STORAGE["aws-instance-store-nvme"], read_mbps=6000.0, write_mbps=3000.0)
    storage = {**STORAGE, measured.name: measured}
    (opt,) = [o for o in storage_options(p5, storage) if o.spec.built_in]
    assert opt.devices == 8
    assert opt.ceiling.read_bytes_per_s == 8 * 6000 * BYTES_PER_MB


def test_prefill_and_decode_run_in_one_deployment() -> None:
    """The KV cache moves from prefill to decode: one provider's network, or your own."""
    assert same_deployment(INSTANCES["p5.48xlarge"], INSTANCES["p6-b200.48xlarge"]).ok
    apart = same_deployment(INSTANCES["p5.48xlarge"], INSTANCES["a4-highgpu-8g"])
    assert not apart.ok and "(aws)" in apart.reason and "(gcp)" in apart.reason
    assert not same_deployment(INSTANCES["dgx-h200"], INSTANCES["p5.48xlarge"]).ok
