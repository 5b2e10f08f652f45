"""Storage catalog: schema checks, sources, and the per-GiB formulas against hand computation."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvadvisor.catalog.storage import CATEGORIES, find_storage, load_storage, parse_storage
from kvadvisor.errors import CatalogError

SPECS = load_storage()


def _doc(**entry: object) -> dict:
    base = {
        "category": "local_nvme",
        "provider": "generic",
        "read_mbps": 7000,
        "source": ["S"],
        "as_of": "2026-12-01",
    }
    base.update(entry)
    return {"kind": "storage", "sources": {"S": "a datasheet"}, "entries": {"x": base}}


def test_every_topic_of_the_issue_is_present() -> None:
    """Every storage class the issue names is present.

    Host DRAM, CXL, NVMe Gen4/Gen5, each cloud's block storage, file systems, 3FS, Mooncake,
    object storage.
    """
    for name in (
        "host-dram-ddr5-spr",
        "cxl-micron-cz120",
        "nvme-gen4-x4",
        "nvme-gen5-x4",
        "alibaba-essd-pl0",
        "alibaba-essd-pl1",
        "alibaba-essd-pl2",
        "alibaba-essd-pl3",
        "alibaba-essd-autopl",
        "alibaba-ephemeral-standard",
        "alibaba-ephemeral-premium",
        "aws-ebs-gp3",
        "aws-ebs-io2-block-express",
        "gcp-hyperdisk-balanced",
        "azure-ultra-disk",
        "azure-premium-ssd-v2",
        "alibaba-cpfs-200",
        "aws-fsx-lustre-persistent2-1000",
        "gcp-managed-lustre-1000",
        "deepseek-3fs",
        "mooncake-store",
        "object-storage",
    ):
        assert name in SPECS, name
    assert {s.category for s in SPECS.values()} == set(CATEGORIES)


def test_every_entry_cites_a_source_with_text() -> None:
    """Sources are mandatory and resolve to citation text."""
    for spec in SPECS.values():
        assert spec.source and all(t.strip() for t in spec.source_text), spec.name


@pytest.mark.parametrize(
    ("name", "capacity", "expected"),
    [
        # Alibaba "Block storage performance": PL1 IOPS min{1,800 + 50C, 50,000},
        # MB/s min{120 + 0.5C, 350}.
        ("alibaba-essd-pl1", 100, (170.0, 6800.0)),
        ("alibaba-essd-pl1", 1000, (350.0, 50000.0)),
        # PL0: min{100 + 0.25C, 180}, min{1,800 + 12C, 10,000}.
        ("alibaba-essd-pl0", 200, (150.0, 4200.0)),
        # PL2 below its 461 GiB minimum is sized up to 461: 120 + 230.5, 1,800 + 23,050.
        ("alibaba-essd-pl2", 100, (350.5, 24850.0)),
        # PL3 at 10,000 GiB: min{5,120, 4,000}, min{501,800, 1,000,000}.
        ("alibaba-essd-pl3", 10000, (4000.0, 501800.0)),
        # AutoPL baseline floors: max{min{120 + 0.5C, 350}, 125}, max{min{...}, 3,000}.
        ("alibaba-essd-autopl", 1, (125.0, 3000.0)),
        ("alibaba-essd-autopl", 300, (270.0, 16800.0)),
    ],
)
def test_essd_formulas(name: str, capacity: float, expected: tuple[float, float]) -> None:
    """ESSD bandwidth and IOPS at a size equal the vendor's formulas computed by hand."""
    perf = SPECS[name].perf_at(capacity)
    assert (perf.write_mbps, perf.write_iops) == pytest.approx(expected)
    assert (perf.read_mbps, perf.read_iops) == pytest.approx(expected)


def test_ephemeral_premium_directions() -> None:
    """Premium ephemeral disk at 1,000 GiB: read 300C IOPS / 1.6C MB/s, write 150C / 1.0C."""
    perf = SPECS["alibaba-ephemeral-premium"].perf_at(1000)
    assert perf.read_iops == 300_000 and perf.write_iops == 150_000
    assert perf.read_mbps == pytest.approx(1600) and perf.write_mbps == pytest.approx(1000)
    top = SPECS["alibaba-ephemeral-premium"].perf_at(8192)
    assert top.read_mbps == 4096 and top.write_mbps == 2048


def test_fixed_figures_from_the_research_catalog() -> None:
    """Spot checks against research figures: PM1743 13,000/6,600 MB/s; io2 256,000 IOPS."""
    pm = SPECS["samsung-pm1743"]
    assert (pm.read_mbps, pm.write_mbps, pm.read_iops) == (13000, 6600, 2_500_000)
    assert SPECS["aws-ebs-io2-block-express"].read_iops == 256_000
    assert SPECS["object-storage"].latency_us == 100_000


def test_unconfirmed_figures_are_marked() -> None:
    """Figures no source read here publishes are listed as such, and carry no number."""
    assert "write_mbps" in SPECS["deepseek-3fs"].unconfirmed
    store = SPECS["aws-instance-store-nvme"]
    assert {"read_mbps", "write_mbps", "read_iops", "write_iops"} <= set(store.unconfirmed)
    assert (store.read_mbps, store.write_mbps) == (None, None)


def test_value_with_a_unit_is_rejected() -> None:
    """'4.8 TB/s' in a MB/s field is a type error that names the unit expected."""
    with pytest.raises(CatalogError, match=r"entries\.x\.read_mbps: expected a number.*MB/s"):
        parse_storage(_doc(read_mbps="4.8 TB/s"), "t.yaml")


def test_missing_source_is_rejected() -> None:
    """Every entry cites a source."""
    doc = _doc()
    del doc["entries"]["x"]["source"]
    with pytest.raises(CatalogError, match=r"entries\.x\.source: is required"):
        parse_storage(doc, "t.yaml")


def test_unknown_source_key_is_rejected() -> None:
    """A source key must be in `sources` (or be a URL)."""
    with pytest.raises(CatalogError, match="neither a key of 'sources' nor a URL"):
        parse_storage(_doc(source=["NOPE"]), "t.yaml")


def test_bad_formula_is_rejected() -> None:
    """Formulas are data with known keys and plain numbers."""
    with pytest.raises(CatalogError, match="unknown target"):
        parse_storage(_doc(per_gib={"speed": {"per_gib": 1}}), "t.yaml")
    with pytest.raises(CatalogError, match=r"per_gib\.mbps\.max: expected a plain"):
        parse_storage(_doc(per_gib={"mbps": {"per_gib": 0.5, "max": "350 MB/s"}}), "t.yaml")
    with pytest.raises(CatalogError, match="unknown key"):
        parse_storage(_doc(per_gib={"mbps": {"per_gib": 0.5, "cap": 3}}), "t.yaml")


def test_unknown_field_gets_a_suggestion() -> None:
    """A typo in a field name is caught with the closest field."""
    with pytest.raises(CatalogError, match="did you mean 'read_iops'"):
        parse_storage(_doc(read_iop=5), "t.yaml")


def test_extra_file_adds_and_overrides(tmp_path: Path) -> None:
    """--catalog FILE adds new entries and replaces same-named ones."""
    f = tmp_path / "mine.yaml"
    f.write_text(
        "kind: storage\nsources: {V: vendor sheet}\nentries:\n"
        "  nvme-gen4-x4: {category: local_nvme, provider: generic, read_mbps: 7100, source: [V],"
        " as_of: 2026-11-30}\n"
        "  my-array: {category: local_nvme, provider: generic, write_mbps: 50000, source: [V],"
        " as_of: 2026-11-30}\n",
        encoding="utf-8",
    )
    specs = load_storage([f])
    assert specs["nvme-gen4-x4"].read_mbps == 7100
    assert specs["my-array"].write_mbps == 50000
    assert len(specs) == len(SPECS) + 1


@pytest.mark.parametrize(
    "text",
    [
        "kind: storage\nentries: !!python/object/apply:os.system ['echo hacked']\n",
        "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
        "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n",
        "kind: storage\nentries: " + "[" * 200 + "]" * 200 + "\n",
        "kind: storage\n  entries: [\n",
    ],
    ids=["python-tag", "aliases", "deep-nesting", "malformed"],
)
def test_hostile_catalog_files_fail_cleanly(tmp_path: Path, text: str) -> None:
    """Object tags, alias bombs, deep nesting and broken YAML end in CatalogError."""
    f = tmp_path / "evil.yaml"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(CatalogError):
        load_storage([f])


def test_find_storage_suggests() -> None:
    """Unknown names get the closest ones."""
    assert find_storage(SPECS, "ALIBABA-ESSD-PL1").name == "alibaba-essd-pl1"
    with pytest.raises(CatalogError, match="did you mean 'alibaba-essd-pl1'"):
        find_storage(SPECS, "alibaba-essd-p1")


@pytest.mark.parametrize(
    "text",
    [
        "kind: storage\nentries: !!python/object/apply:os.system ['touch {marker}']\n",
        "kind: storage\na: &a [1,1,1,1,1,1,1,1,1]\nb: [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n",
        "kind: storage\nentries: " + "{a: " * 100 + "1" + "}" * 100 + "\n",
    ],
    ids=["python-tag", "aliases", "deep-nesting"],
)
def test_hostile_catalog_through_the_cli(tmp_path: Path, text: str) -> None:
    """--catalog with hostile YAML: exit 2, one line, no traceback, nothing run."""
    from typer.testing import CliRunner

    from kvadvisor.cli import EXIT_USER_ERROR, app

    marker = tmp_path / "ran"
    f = tmp_path / "evil.yaml"
    f.write_text(text.replace("{marker}", str(marker)), encoding="utf-8")
    result = CliRunner().invoke(app, ["catalog", "list", "--catalog", str(f)])
    assert result.exit_code == EXIT_USER_ERROR
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "evil.yaml" in lines[0]
    assert not marker.exists()
