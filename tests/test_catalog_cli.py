"""`kvadvisor catalog list|show|check`: every kind listed, one entry shown, user files checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import kvadvisor
from kvadvisor.cli import EXIT_OK, EXIT_USER_ERROR, app

runner = CliRunner()

GOOD = """\
kind: instances
sources: {L: "our lab inventory, 2026-11"}
entries:
  lab-h100:
    provider: onprem
    family: lab
    gpu: h100
    gpu_count: 8
    gpu_memory_gib: 80
    host_memory_tier: host-dram-ddr5-spr
    drive_bays: 8
    backend_network_gbit: 3200
    source: [L]
    as_of: 2026-11-30
"""

BAD = """\
kind: instances
sources: {L: "our lab inventory"}
entries:
  lab-box:
    provider: onprem
    family: lab
    gpu: h100
    gpu_count: 8
    gpu_memory_gib: 80
    network_gbit: 100
    drive_bays: eight
    source: [L, X]
  cloud-box:
    provider: aws
    family: p5
    gpu: h100
    gpu_count: 0
    gpu_memory_gib: 80
    drive_bays: 4
    as_of: 2026-11-31x
    source: [L]
    price: {usd_per_hour: 12.5}
"""


def test_catalog_list_every_kind() -> None:
    """storage, instances, gpus and models each list their entries with key figures."""
    cases = {
        "storage": ("aws-ebs-gp3", "per", "DWPD"),
        "instances": ("p6-b300.48xlarge", "back Gbit/s", "$142.42/h"),  # to the cent
        "gpus": ("b200", "Gen5 64 GB/s", "host link"),
        "models": ("llama-3.1-70b", "KV heads", "gqa"),
    }
    for kind, needles in cases.items():
        result = runner.invoke(app, ["catalog", "list", kind])
        assert result.exit_code == EXIT_OK, result.output
        for needle in needles:
            assert needle in result.output, (kind, needle)


def test_catalog_show_finds_gpus_and_models_and_prints_prices() -> None:
    """Show looks a name up in every catalog; an instance shows its price with source and date."""
    shown = runner.invoke(app, ["catalog", "show", "p5.48xlarge"])
    assert shown.exit_code == EXIT_OK
    assert "price.usd_per_hour: 55.04" in shown.output and "price.as_of: 2026-07-28" in shown.output
    assert "[WP]" in shown.output
    assert "pcie_gbps: 64" in runner.invoke(app, ["catalog", "show", "b200"]).output
    assert "kv_heads: 8" in runner.invoke(app, ["catalog", "show", "llama-3.1-70b"]).output


def test_catalog_check_ok(tmp_path: Path) -> None:
    """A valid file: one ok line, exit 0."""
    path = tmp_path / "lab.yaml"
    path.write_text(GOOD, encoding="utf-8")
    result = runner.invoke(app, ["catalog", "check", str(path)])
    assert result.exit_code == EXIT_OK, result.output
    assert result.output.strip() == f"{path}: ok (1 instances entries)"


def test_catalog_check_lists_every_problem_with_its_key_path(tmp_path: Path) -> None:
    """Every problem of the file, one line each with file and key path; exit 2, no traceback."""
    path = tmp_path / "bad.yaml"
    path.write_text(BAD, encoding="utf-8")
    result = runner.invoke(app, ["catalog", "check", str(path)])
    assert result.exit_code == EXIT_USER_ERROR
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    # Each with the line of BAD it is on (a missing field: its entry's line).
    expected = [
        ":10: entries.lab-box.network_gbit: unknown field; did you mean 'backend_network_gbit'?",
        ":4: entries.lab-box.as_of: is required",
        ":11: entries.lab-box.drive_bays: expected a number, got 'eight'",
        ":12: entries.lab-box.source: 'X' is neither a key of 'sources' nor a URL",
        ":20: entries.cloud-box.as_of: expected a date written YYYY-MM-DD",
        ":17: entries.cloud-box.gpu_count: must be >= 1, got 0",
        ":19: entries.cloud-box.drive_bays: only on-premises servers take parts you buy",
        ":22: entries.cloud-box.price.source: is required with a price figure",
        ":22: entries.cloud-box.price.as_of: is required with a price figure",
    ]
    for needle in expected:
        assert sum(needle in line for line in lines) == 1, (needle, lines)
    assert len(lines) == len(expected)
    assert all(line.startswith(f"error: {path}:") for line in lines)
    # The same file given to another command: every problem on its own line, then a count.
    one = runner.invoke(app, ["catalog", "list", "instances", "--catalog", str(path)])
    assert one.exit_code == EXIT_USER_ERROR and "Traceback" not in one.output
    *each, last = one.output.strip().splitlines()
    assert len(each) == len(expected)
    for needle in expected:
        assert sum(needle in line for line in each) == 1, (needle, each)
    assert last == f"error: {len(expected)} problems (see `kvadvisor docs errors#catalog`)"


def test_catalog_check_resolves_names_against_the_packaged_catalogs(tmp_path: Path) -> None:
    """An instance naming a storage entry that does not exist is a problem, with its key path."""
    path = tmp_path / "lab.yaml"
    path.write_text(
        GOOD.replace("host-dram-ddr5-spr", "host-dram-ddr6")
        + "    local_nvme_count: 2\n    local_nvme_each_gb: 3840\n"
        "    local_nvme_drive: aws-ebs-gp3\n",
        encoding="utf-8",
    )
    result = runner.invoke(app, ["catalog", "check", str(path)])
    assert result.exit_code == EXIT_USER_ERROR
    assert "entries.lab-h100.host_memory_tier: no storage entry named 'host-dram-ddr6'" in (
        result.output
    )
    assert "entries.lab-h100.local_nvme_drive: 'aws-ebs-gp3' is a block entry" in result.output


def test_catalog_check_every_shipped_catalog() -> None:
    """The packaged catalogs pass their own check."""
    root = Path(__file__).resolve().parents[1] / "kvadvisor" / "catalog" / "data"
    files = sorted(str(p) for p in root.glob("*.yaml"))
    result = runner.invoke(app, ["catalog", "check", *files])
    assert result.exit_code == EXIT_OK, result.output
    assert result.output.count(": ok (") == len(files) == 6


def test_docs_catalog_examples_pass_the_check(tmp_path: Path) -> None:
    """The example files in docs/catalog.md are valid, and their entries take effect.

    Two storage files (the second overrides a packaged entry) and a GPU file whose GPU, having
    no fitted coefficients, borrows those of the closest fitted GPU of its architecture.
    """
    import re

    from kvadvisor.catalog.perfcatalogs import load_perf_catalogs
    from kvadvisor.catalog.storage import load_storage

    doc = (Path(__file__).resolve().parents[1] / "docs" / "catalog.md").read_text("utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", doc, flags=re.S)
    assert len(blocks) == 3
    for i, block in enumerate(blocks):
        path = tmp_path / f"example{i}.yaml"
        path.write_text(block, encoding="utf-8")
        result = runner.invoke(app, ["catalog", "check", str(path)])
        assert result.exit_code == EXIT_OK, result.output
    measured = load_storage([tmp_path / "example0.yaml"])["aws-instance-store-nvme"]
    assert (measured.read_mbps, measured.built_in) == (6100, True)
    perf = load_perf_catalogs([tmp_path / "example2.yaml"])
    _, why = perf.efficiency_for(perf.gpu("lab-gpu"))
    assert why.startswith("lab-gpu has no fitted coefficients; those of h200")


LAB_GPU = """\
kind: gpus
sources: {SHEET: "vendor datasheet, 2026-11"}
entries:
  lab-gpu:
    display_name: Lab GPU 96GB
    architecture: hopper
    bf16_dense_tflops: 900
    memory_gb: 96
    memory_bandwidth_gbps: 4800
    pcie_gbps: 64
    source: [SHEET]
    as_of: 2026-11-30
"""


def test_catalog_check_needs_each_instance_gpu_in_a_gpu_catalog(tmp_path: Path) -> None:
    """An instance's GPU must be a GPU entry: packaged (by name or alias) or a file checked with it.

    The replay and the advisor look the GPU up; a name that resolves nowhere would fail there,
    far from the file that has the typo.
    """
    lab = tmp_path / "lab.yaml"
    lab.write_text(GOOD.replace("gpu: h100", "gpu: lab-gpu"), encoding="utf-8")
    result = runner.invoke(app, ["catalog", "check", str(lab)])
    assert result.exit_code == EXIT_USER_ERROR
    assert "instances: entries.lab-h100.gpu: unknown GPU 'lab-gpu'" in result.output
    assert "`kvadvisor catalog list gpus` shows them all" in result.output
    # Checked together with the GPU file that defines it, both pass ...
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(LAB_GPU, encoding="utf-8")
    result = runner.invoke(app, ["catalog", "check", str(gpus), str(lab)])
    assert result.exit_code == EXIT_OK, result.output
    assert result.output.count(": ok (") == 2
    # ... and a packaged GPU's alias resolves as the loaders resolve it.
    lab.write_text(GOOD.replace("gpu: h100", "gpu: h100-sxm5"), encoding="utf-8")
    assert runner.invoke(app, ["catalog", "check", str(lab)]).exit_code == EXIT_OK


@pytest.mark.parametrize("kind", ["storage", "instances", "gpus", "models"])
def test_catalog_list_wraps_to_the_terminal(kind: str) -> None:
    """At COLUMNS=80 every line fits, and every figure and name is printed whole (not cut)."""
    from kvadvisor.catalog import listing

    catalogs = kvadvisor.load_catalogs()
    header, *rows = getattr(listing, f"{kind}_rows")(getattr(catalogs, kind))
    res = runner.invoke(app, ["catalog", "list", kind], env={"COLUMNS": "80"})
    assert res.exit_code == EXIT_OK, res.output
    lines = res.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    words = {w for line in lines for w in line.split()}
    for row in rows:
        for cell in row:
            # A cell wraps between its words at most: each word stands whole.
            assert set(cell.split()) <= words, (row[0], cell)
    assert {row[0] for row in rows} <= words  # each entry's name on a line of its own table


def test_catalog_list_piped_is_one_line_per_entry() -> None:
    """Without a terminal or COLUMNS: one line per entry, for grep and sort."""
    from kvadvisor.catalog.listing import instances_rows

    rows = instances_rows(kvadvisor.load_catalogs().instances)
    res = runner.invoke(app, ["catalog", "list", "instances"], env={"COLUMNS": None})
    assert res.exit_code == EXIT_OK
    lines = res.stdout.splitlines()
    assert len(lines) == len(rows)
    assert all(line.split()[0] == row[0] for line, row in zip(lines, rows, strict=True))
