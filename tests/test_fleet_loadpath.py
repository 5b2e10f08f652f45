"""The load path as engines run it (docs/replay.md, R5 and R13), each against a hand computation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner

from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.cli import app
from kvadvisor.fleet.fromplan import resolve_plan
from kvadvisor.plan import load_plan
from kvadvisor.units import BYTES_PER_GB

REPO = Path(__file__).resolve().parents[1]
AZURE = REPO / "sample_traces" / "azure_code_head.csv.zst"

# p5e.48xlarge: 8 H200 (PCIe 5.0, 64 GB/s per GPU in the GPU catalog), front-end NIC 800 Gbit/s
PLAN = """\
name: lp
model: {{name: qwen3-32b}}
stages:
  serving:
    instance: p5e.48xlarge
    count: 2
    gpus_per_replica: 2
{extra}    tiers:
{tiers}"""


def stage_of(tmp_path: Path, tiers: str, extra: str = ""):  # type: ignore[no-untyped-def]
    """The serving stage a plan with these tiers replays, and the plan's notes."""
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.format(tiers=tiers, extra=extra), encoding="utf-8")
    dep, notes = resolve_plan(load_plan(path))
    return dep.stages[0], notes


def test_host_tier_is_the_ranks_pcie_links_at_dma_efficiency(tmp_path: Path) -> None:
    """A replica of 2 ranks reaches host DRAM over 2 x 64 GB/s, at vLLM's DMA share 50/64."""
    pcie = get_gpu("h200").pcie_bytes_per_s
    assert pcie == 64 * BYTES_PER_GB  # the figure the hand computation uses
    stage, notes = stage_of(
        tmp_path,
        "      - {name: mine, scope: replica, capacity: 100 GB,\n"
        "         storage: {kind: dram, read_bandwidth: 500 GB/s, write_bandwidth: 500 GB/s}}\n"
        "      - {name: ours, scope: instance, capacity: 400 GB,\n"
        "         storage: {kind: dram, read_bandwidth: 300 GB/s, write_bandwidth: 300 GB/s}}\n",
    )
    mine, ours = stage.tiers
    # replica scope: min(500, 2 x 64) x 50/64 = 100 GB/s
    assert mine.read_bytes_per_s == pytest.approx(100 * BYTES_PER_GB, rel=1e-12)
    assert mine.write_bytes_per_s == pytest.approx(100 * BYTES_PER_GB, rel=1e-12)
    # instance scope, 4 replicas of 2 ranks: min(300, 8 x 64) x 50/64 = 234.375 GB/s
    assert ours.read_bytes_per_s == pytest.approx(234.375 * BYTES_PER_GB, rel=1e-12)
    assert any("2 PCIe links" in n for n in notes) and any("8 PCIe links" in n for n in notes)


def test_pool_tier_at_mooncake_transfer_share_and_plan_override(tmp_path: Path) -> None:
    """A pooled store over RDMA reaches 190 of 400 GB/s; a plan's efficiency replaces it."""
    stage, _ = stage_of(
        tmp_path,
        "      - {name: pool, shared: true, capacity: 10 TB,\n"
        "         storage: {kind: pool, read_bandwidth: 100 GB/s, write_bandwidth: 40 GB/s}}\n"
        "      - {name: nvme, capacity: 10 TB, efficiency: 0.5,\n"
        "         storage: {kind: ssd, read_bandwidth: 10 GB/s, write_bandwidth: 6 GB/s}}\n",
    )
    pool, nvme = stage.tiers
    assert pool.read_bytes_per_s == pytest.approx(100 * 190 / 400 * BYTES_PER_GB, rel=1e-12)
    assert pool.write_bytes_per_s == pytest.approx(40 * 190 / 400 * BYTES_PER_GB, rel=1e-12)
    assert nvme.read_bytes_per_s == pytest.approx(5 * BYTES_PER_GB, rel=1e-12)


@pytest.mark.parametrize(
    ("engines", "derated"),
    [
        ("    engines: {lmcache: {local_disk: 'file:///mnt/lustre/kv'}}\n", True),
        ("    engines: {sglang-hicache: {hicache-storage-backend: file}}\n", True),
        ("    engines: {sglang-hicache: {hicache-storage-backend: hf3fs}}\n", False),
        ("", False),
    ],
)
def test_file_system_through_a_local_disk_backend_gets_one_client_link_per_instance(
    tmp_path: Path, engines: str, derated: bool
) -> None:
    """A 400 GB/s parallel file system over 2 instances: 2 client NICs of 100 GB/s, or all.

    Through a local-disk backend each instance is one POSIX client on its 800 Gbit/s front-end
    NIC; a native backend (3FS) or no engine named reaches the rated figure.
    """
    stage, _ = stage_of(
        tmp_path,
        "      - {name: lustre, shared: true, capacity: 100 TB,\n"
        "         storage: {kind: filesystem, read_bandwidth: 400 GB/s,\n"
        "                   write_bandwidth: 300 GB/s}}\n",
        engines,
    )
    (fs,) = stage.tiers
    # then 3FS's file-system share: 6.6 TiB/s of 180 nodes x 2 x 200 Gbit/s = 9,000 GB/s
    share = 6.6 * 2**40 / 9000e9
    expected = 200.0 if derated else 400.0
    assert fs.read_bytes_per_s == pytest.approx(expected * share * BYTES_PER_GB, rel=1e-12)
    assert fs.write_bytes_per_s == pytest.approx(
        (200.0 if derated else 300.0) * share * BYTES_PER_GB, rel=1e-12
    )


@pytest.mark.parametrize(
    ("kind", "share"),
    [
        ("ssd", 6.6 * 2**40 / 9000e9),  # estimate: 3FS's file-system share
        ("block", 6.6 * 2**40 / 9000e9),
        ("filesystem", 6.6 * 2**40 / 9000e9),
        ("object", 36.25 / 100),  # TCP: Mooncake's 87 GB/s over 4 x 200 Gbps / 2.4
    ],
)
def test_storage_kinds_at_their_published_or_estimated_share(
    tmp_path: Path, kind: str, share: float
) -> None:
    """10 GB/s rated of each kind replays at 10 GB/s x its share (docs/replay.md, R5)."""
    stage, notes = stage_of(
        tmp_path,
        "      - {name: t, capacity: 10 TB,\n"
        f"         storage: {{kind: {kind}, read_bandwidth: 10 GB/s, write_bandwidth: 4 GB/s}}}}\n",
    )
    (tier,) = stage.tiers
    assert tier.read_bytes_per_s == pytest.approx(10 * share * BYTES_PER_GB, rel=1e-12)
    assert tier.write_bytes_per_s == pytest.approx(4 * share * BYTES_PER_GB, rel=1e-12)
    assert any(f"efficiency {share:.3g}" in n for n in notes)


def test_a_measured_catalog_figure_takes_no_share_on_top(tmp_path: Path) -> None:
    """Mooncake's 87 GB/s per node is its Transfer Engine's measurement: replayed as is.

    The catalog has no write figure for it, so the test gives one (40 GB/s) to the loaded plan.
    """
    path = tmp_path / "plan.yaml"
    tiers = "      - {name: mc, storage: mooncake-store, shared: true, capacity: 10 TB}\n"
    path.write_text(PLAN.format(tiers=tiers, extra=""), encoding="utf-8")
    plan = load_plan(path)
    (stage_plan,) = plan.stages
    (tier_plan,) = stage_plan.tiers
    assert tier_plan.storage.measured and tier_plan.storage.kind == "pool"
    storage = replace(tier_plan.storage, write_bytes_per_s=40 * BYTES_PER_GB)
    stage_plan = replace(stage_plan, tiers=(replace(tier_plan, storage=storage),))
    dep, notes = resolve_plan(replace(plan, stages=(stage_plan,)))
    (tier,) = dep.stages[0].tiers
    assert tier.read_bytes_per_s == pytest.approx(87 * BYTES_PER_GB, rel=1e-12)
    assert tier.write_bytes_per_s == pytest.approx(40 * BYTES_PER_GB, rel=1e-12)
    assert any("measured per client" in n for n in notes)


# Front-end figures by hand: tokenization 43.7 ms per ~38k-token prompt (TensorRT-LLM #18389),
# SHA-256 block hashing 6 ms per 50k tokens (vLLM prefix-caching design doc), HTTP 1 / 420.87 s
# per request less its 69 tokens of tokenization (a vLLM-derived server's /tokenize endpoint).
TOKENIZE = 43.7e-3 / 38_000
SHA256 = 6e-3 / 50_000
HTTP = 1 / 420.87 - 69 * TOKENIZE


@pytest.mark.parametrize(
    ("engines", "per_token"),
    [
        ("", TOKENIZE + SHA256),  # vLLM: tokenizes and hashes every block
        ("    engines: {lmcache: {chunk_size: 256}}\n", TOKENIZE + SHA256),  # inside vLLM
        ("    engines: {dynamo-kvbm: {}}\n", TOKENIZE + SHA256),
        ("    engines: {sglang-hicache: {page-size: 64}}\n", TOKENIZE),  # radix tree, no hash
        (
            "    engines: {sglang-hicache: {hicache-storage-backend: mooncake}}\n",
            TOKENIZE + SHA256,  # HiCache hashes pages for its storage backend
        ),
    ],
)
def test_frontend_defaults_by_engine(tmp_path: Path, engines: str, per_token: float) -> None:
    """Without a plan figure, a stage pays its engine's HTTP, tokenization and hashing cost."""
    assert HTTP == pytest.approx(2.297e-3, abs=1e-6)  # the figure docs/replay.md gives
    stage, notes = stage_of(
        tmp_path,
        "      - {name: mine, scope: replica, capacity: 100 GB,\n"
        "         storage: {kind: dram, read_bandwidth: 500 GB/s, write_bandwidth: 500 GB/s}}\n",
        engines,
    )
    assert stage.frontend_fixed_s == pytest.approx(HTTP, rel=1e-12)
    assert stage.frontend_per_token_s == pytest.approx(per_token, rel=1e-12)
    assert any("front end" in n for n in notes)


def test_a_plan_frontend_key_replaces_only_its_figure(tmp_path: Path) -> None:
    """`frontend: {fixed: 5 ms}` keeps vLLM's per-token figure."""
    stage, _ = stage_of(
        tmp_path,
        "      - {name: mine, scope: replica, capacity: 100 GB,\n"
        "         storage: {kind: dram, read_bandwidth: 500 GB/s, write_bandwidth: 500 GB/s}}\n",
        "    frontend: {fixed: 5 ms}\n",
    )
    assert stage.frontend_fixed_s == pytest.approx(0.005, rel=1e-12)
    assert stage.frontend_per_token_s == pytest.approx(TOKENIZE + SHA256, rel=1e-12)


def test_frontend_cost_reaches_the_stage(tmp_path: Path) -> None:
    """`frontend: {fixed, per_ki_token}` becomes seconds per request and per prompt token."""
    stage, _ = stage_of(
        tmp_path,
        "      - {name: mine, scope: replica, capacity: 100 GB,\n"
        "         storage: {kind: dram, read_bandwidth: 500 GB/s, write_bandwidth: 500 GB/s}}\n",
        "    frontend: {fixed: 3 ms, per_ki_token: 2 ms}\n",
    )
    assert stage.frontend_fixed_s == pytest.approx(0.003, rel=1e-12)
    assert stage.frontend_per_token_s == pytest.approx(0.002 / 1024, rel=1e-12)


@pytest.mark.parametrize(
    ("extra", "tier_extra", "needle"),
    [
        ("    frontend: {fixed: -1 ms}\n", "", "frontend.fixed"),
        ("    frontend: {fixd: 1 ms}\n", "", "did you mean 'fixed'"),
        ("", ", efficiency: 1.5", "efficiency"),
    ],
)
def test_bad_load_path_keys_are_one_line_errors(
    tmp_path: Path, extra: str, tier_extra: str, needle: str
) -> None:
    """A negative front-end time, a misspelt key, an efficiency above 1: exit 2, one line."""
    path = tmp_path / "plan.yaml"
    tiers = (
        "      - {name: mine, scope: replica, capacity: 100 GB" + tier_extra + ",\n"
        "         storage: {kind: dram, read_bandwidth: 500 GB/s, write_bandwidth: 500 GB/s}}\n"
    )
    path.write_text(PLAN.format(tiers=tiers, extra=extra), encoding="utf-8")
    result = CliRunner().invoke(app, ["replay", str(AZURE), "--plan", str(path)])
    assert result.exit_code == 2
    line = one_error_line(result)
    assert needle in line
