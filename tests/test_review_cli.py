"""`kvadvisor review`: exit codes, one-line plan errors, JUnit, Markdown, plans side by side."""

from __future__ import annotations

import importlib.util
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner

from kvadvisor.cli import EXIT_FINDINGS, EXIT_OK, EXIT_USER_ERROR, app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "mooncake_conversation.parquet"
GOOD_EXAMPLE = REPO / "examples" / "plans" / "good-p5e-prefill-p5-decode.yaml"
BAD_EXAMPLE = REPO / "examples" / "plans" / "bad-h20-cloud-disk.yaml"

GOOD = """\
name: roomy
model: {kv_bytes_per_token: 1000}
stages:
  prefill:
    count: 1
    engines: {lmcache: {chunk_size: 256}}
    tiers:
      - name: nvme
        storage: {kind: ssd, read_bandwidth: 100 MB/s, write_bandwidth: 100 MB/s}
        capacity: 1 TB
"""


@pytest.fixture()
def tiny_trace(tmp_path: Path) -> Path:
    """Mooncake-style JSONL without hashes: 4 requests, 1,000 prompt tokens a second."""
    path = tmp_path / "tiny.jsonl"
    rows = [{"timestamp": 1000 * i, "input_length": 1000, "output_length": 10} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _plan(tmp_path: Path, text: str, name: str = "plan.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_good_plan_exits_0(tiny_trace: Path, tmp_path: Path) -> None:
    """1 MB/s of writes on one 100 MB/s device: no finding (one device cannot shrink).

    Eight catalog drives for the same 1 MB/s are over-provisioned: a warning, so exit 0 at
    the default --fail-on error and 1 at --fail-on warning.
    """
    result = runner.invoke(app, ["review", str(tiny_trace), "--plan", _plan(tmp_path, GOOD)])
    assert result.exit_code == EXIT_OK, result.output
    assert "plan roomy: passes (" in result.output
    eight = _plan(
        tmp_path,
        GOOD.replace(
            "storage: {kind: ssd, read_bandwidth: 100 MB/s, write_bandwidth: 100 MB/s}",
            "storage: kioxia-cm6\n        devices: 8",
        ),
        "eight.yaml",
    )
    result = runner.invoke(app, ["review", str(tiny_trace), "--plan", str(eight)])
    assert result.exit_code == EXIT_OK and "passes with 1 warning(s)" in result.output
    result = runner.invoke(
        app, ["review", str(tiny_trace), "--plan", str(eight), "--fail-on", "warning"]
    )
    assert result.exit_code == EXIT_FINDINGS
    assert "RV04" in result.output


def test_error_finding_exits_1(tiny_trace: Path, tmp_path: Path) -> None:
    """An LMCache chunk that does not align with vLLM's blocks is an error: exit 1."""
    plan = _plan(tmp_path, GOOD.replace("chunk_size: 256", "chunk_size: 100"))
    result = runner.invoke(app, ["review", str(tiny_trace), "--plan", str(plan)])
    assert result.exit_code == EXIT_FINDINGS
    assert "EL05" in result.output


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("count: 1", "cuont: 1"), "stages.prefill.cuont: unknown field; did you mean 'count'?"),
        (("capacity: 1 TB", "capacity: 1 TB/s"), "capacity: 'TB/s' is a rate unit"),
        (("capacity: 1 TB", "capacity: -1 TB"), "capacity: must not be negative"),
        (
            (
                "name: nvme\n        storage: {kind: ssd, read_bandwidth: 100 MB/s,"
                " write_bandwidth: "
                "100 MB/s}",
                "name: nvme\n        storage: nvme-gen5-x5",
            ),
            "tiers[0].storage: unknown storage option 'nvme-gen5-x5'; did you mean 'nvme-gen5-x4'",
        ),
    ],
)
def test_invalid_plan_is_one_line_exit_2(
    tiny_trace: Path, tmp_path: Path, change, expected
) -> None:
    """Unknown field, wrong unit, negative capacity, unknown catalog name: one line, exit 2."""
    plan = _plan(tmp_path, GOOD.replace(*change))
    assert GOOD != plan.read_text()
    result = runner.invoke(app, ["review", str(tiny_trace), "--plan", str(plan)])
    assert result.exit_code == EXIT_USER_ERROR
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert expected in lines[0] and "Traceback" not in result.output


def test_junit_lists_every_check(tiny_trace: Path, tmp_path: Path) -> None:
    """One test case per check; failures and skips marked; the XML parses."""
    bad = _plan(tmp_path, GOOD.replace("chunk_size: 256", "chunk_size: 100"), "bad.yaml")
    out = tmp_path / "results.xml"
    result = runner.invoke(
        app, ["review", str(tiny_trace), "--plan", str(bad), "--junit", str(out)]
    )
    assert result.exit_code == EXIT_FINDINGS
    root = ET.parse(out).getroot()
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    names = [c.get("name") for c in cases]
    assert len(names) == len(set(names)) == int(suite.get("tests"))
    expected = {
        "RV01.prefill.nvme",
        "RV02.prefill.nvme",
        "RV03.prefill.nvme",
        "RV04.prefill.nvme",
        "RV06.prefill.nvme",
        "RV08.prefill.nvme",
        "RV11.prefill.nvme",
        "RV13.prefill.nvme",
        "EL08.prefill.nvme",
        "EL05.prefill",
        "EL11.prefill.lmcache",
        "RV10.both",  # skipped: the plan has no catalog model, so it is not replayed
    }
    assert {n.split()[0] for n in names} == expected
    failed = {
        c.get("name").split()[0]: c.find("failure") for c in cases if c.find("failure") is not None
    }
    assert set(failed) == {"EL05.prefill"}
    assert failed["EL05.prefill"].get("type") == "error"
    assert json.loads(failed["EL05.prefill"].text)["evidence"]["lmcache_chunk_tokens"] == 100
    assert int(suite.get("failures")) == 1
    # No hashes (RV01, RV03, RV06), no IOPS figure (RV08), no catalog drive to count devices
    # or an I/O unit (RV13 needs write IOPS), not replayed (RV10).
    skipped = {c.get("name").split()[0] for c in cases if c.find("skipped") is not None}
    assert skipped == {
        "RV01.prefill.nvme",
        "RV03.prefill.nvme",
        "RV06.prefill.nvme",
        "RV08.prefill.nvme",
        "RV13.prefill.nvme",
        "RV10.both",
    }
    assert int(suite.get("skipped")) == len(skipped)


def test_markdown_side_by_side(tiny_trace: Path, tmp_path: Path) -> None:
    """Two plans: one table with a column per plan, then each plan's findings."""
    bad = _plan(
        tmp_path,
        GOOD.replace("roomy", "misaligned").replace("chunk_size: 256", "chunk_size: 100"),
        "b.yaml",
    )
    md = tmp_path / "review.md"
    result = runner.invoke(
        app,
        [
            "review",
            str(tiny_trace),
            "--plan",
            _plan(tmp_path, GOOD),
            "--plan",
            str(bad),
            "-o",
            str(md),
        ],
    )
    assert result.exit_code == EXIT_FINDINGS
    text = md.read_text()
    assert "| | `roomy` | `misaligned` |" in text
    assert "| verdict | passes | fails: 1 error(s), 0 warning(s) |" in text
    assert "EL05 `lmcache.chunk_not_multiple`" in text
    assert "no block hashes" in text


def test_markdown_summary_rows(tiny_trace: Path, tmp_path: Path) -> None:
    """The per-stage summary rows: 1,000 tokens/s × 1,000 B/token = 1 MB/s on a 100 MB/s tier.

    Every 1 s window writes 1 MB, so mean, p99 and peak utilization are all 1%; the trace has
    no hashes, so the hit ratio is unknown and no decode stage is planned (no decode row).
    """
    md = tmp_path / "review.md"
    runner.invoke(app, ["review", str(tiny_trace), "--plan", _plan(tmp_path, GOOD), "-o", str(md)])
    text = md.read_text()
    assert "| prefix hit ratio, all tiers (steady) | – |" in text
    assert "| prefill storage utilization (mean / p99 / peak) | 1.0% / 1.0% / 1.0% |" in text
    assert "decode storage utilization" not in text


def test_markdown_escapes_html_from_the_plan(tiny_trace: Path, tmp_path: Path) -> None:
    """A tier name with HTML reaches the PR comment as text, never as a tag (as `analyze`'s)."""
    evil = GOOD.replace("name: nvme", 'name: "<img src=x onerror=alert(1)>"')
    md = tmp_path / "review.md"
    runner.invoke(app, ["review", str(tiny_trace), "--plan", _plan(tmp_path, evil), "-o", str(md)])
    text = md.read_text()
    assert "<img" not in text
    assert "| prefill | &lt;img src=x onerror=alert(1)&gt; (ssd) |" in text
    assert "write demand on '&lt;img src=x onerror=alert(1)&gt;' mean" in text


def test_unknown_review_format(tiny_trace: Path, tmp_path: Path) -> None:
    """An output name whose format cannot be told is a user error before any work."""
    result = runner.invoke(
        app,
        ["review", str(tiny_trace), "--plan", _plan(tmp_path, GOOD), "-o", str(tmp_path / "r.pdf")],
    )
    assert result.exit_code == EXIT_USER_ERROR and "cannot tell the review format" in result.output


needs_cache = pytest.mark.skipif(
    importlib.util.find_spec("kvadvisor.cache") is None,
    reason="the prefix-cache engine is not on this branch yet",
)


@needs_cache
def test_examples_end_to_end(tmp_path: Path) -> None:
    """The shipped example plans on the sample trace: one passes, one fails with its findings."""
    md, xml = tmp_path / "review.md", tmp_path / "results.xml"
    result = runner.invoke(
        app,
        [
            "review",
            str(SAMPLE),
            "--plan",
            str(GOOD_EXAMPLE),
            "--plan",
            str(BAD_EXAMPLE),
            "--junit",
            str(xml),
            "-o",
            str(md),
        ],
    )
    assert result.exit_code == EXIT_FINDINGS, result.output
    suites = {s.get("name").split(": ")[1]: s for s in ET.parse(xml).getroot()}
    good_failed = {
        c.get("name").split()[0]
        for c in suites["p5e-prefill-p5-decode"]
        if c.find("failure") is not None
    }
    # Its NVMe is the p5e's own instance store, whose bandwidth AWS does not publish: the
    # bandwidth checks skip (they cannot fail on a figure nobody published) and RV09 passes.
    assert good_failed == set()
    good_checks = {
        c.get("name").split()[0]: c for c in suites["p5e-prefill-p5-decode"].iter("testcase")
    }
    assert good_checks["RV09.prefill.local-nvme"].find("skipped") is None
    assert good_checks["RV02.prefill.local-nvme"].find("skipped") is not None
    bad_failed = {
        c.get("name").split()[0].split(".")[0]
        for c in suites["h20-cloud-disk"]
        if c.find("failure") is not None
    }
    assert bad_failed == {
        "RV01",
        "RV02",
        "RV03",
        "RV06",
        "RV07",
        "RV10",
        "EL04",
        "EL05",
        "EL06",
        "EL07",
        "EL08",
        "EL09",
    }
    result = runner.invoke(app, ["review", str(SAMPLE), "--plan", str(GOOD_EXAMPLE)])
    assert result.exit_code == EXIT_OK, result.output


def test_analyze_with_plan_adds_the_plan_section(tiny_trace: Path, tmp_path: Path) -> None:
    """With --plan, the analyze JSON carries plan_reviews and the HTML a plan section."""
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    result = runner.invoke(
        app,
        [
            "analyze",
            str(tiny_trace),
            "--plan",
            _plan(tmp_path, GOOD),
            "-o",
            str(out_json),
            "-o",
            str(out_html),
            "--quiet",
        ],
    )
    assert result.exit_code == EXIT_OK, result.output
    doc = json.loads(out_json.read_text())
    (review,) = doc["plan_reviews"]
    assert review["name"] == "roomy"
    assert {c["code"] for c in review["checks"]} >= {"RV02", "RV04", "EL05", "EL08"}
    assert doc["options"]["plans"] == [str(tmp_path / "plan.yaml")]
    html = out_html.read_text()
    assert "Plan against the workload" in html and "roomy: tiers replayed" in html
    result = runner.invoke(app, ["analyze", str(tiny_trace), "-o", str(out_json), "--quiet"])
    assert "plan_reviews" not in json.loads(out_json.read_text())  # unchanged without --plan


def test_extra_catalog_names_a_storage_option(tiny_trace: Path, tmp_path: Path) -> None:
    """--catalog adds a storage option that plans may name; its figures reach the review."""
    extra = tmp_path / "lab.yaml"
    extra.write_text(
        "kind: storage\n"
        'sources:\n  L1: "our lab\'s fio runs"\n'
        "entries:\n"
        "  lab-nvme:\n    category: local_nvme\n    provider: generic\n"
        "    read_mbps: 2000\n    write_mbps: 1000\n    source: [L1]\n    as_of: 2026-11-30\n"
    )
    plan = _plan(
        tmp_path,
        GOOD.replace(
            "storage: {kind: ssd, read_bandwidth: 100 MB/s, write_bandwidth: 100 MB/s}",
            "storage: lab-nvme",
        ),
    )
    out = tmp_path / "r.xml"
    result = runner.invoke(
        app, ["review", str(tiny_trace), "--plan", str(plan), "--junit", str(out)]
    )
    assert result.exit_code == EXIT_USER_ERROR
    assert "unknown storage option 'lab-nvme'" in result.output
    result = runner.invoke(
        app,
        [
            "review",
            str(tiny_trace),
            "--plan",
            str(plan),
            "--catalog",
            str(extra),
            "--junit",
            str(out),
        ],
    )
    assert result.exit_code == EXIT_OK, result.output
    rv02 = next(
        c for c in ET.parse(out).getroot().iter("testcase") if c.get("name").startswith("RV02")
    )
    assert "against 1 GB/s" in rv02.find("system-out").text


def test_catalog_of_unknown_kind_is_refused(tiny_trace: Path, tmp_path: Path) -> None:
    """A --catalog file whose kind is misspelled is an error, as analyze says, not ignored."""
    catalog = tmp_path / "typo.yaml"
    catalog.write_text("kind: storge\nentries: {}\n")
    result = runner.invoke(
        app, ["review", str(tiny_trace), "--plan", _plan(tmp_path, GOOD), "--catalog", str(catalog)]
    )
    one_error_line(
        result, "typo.yaml", "unknown catalog kind 'storge'", "storage, instances, gpus, models"
    )


def test_a_drive_the_instance_cannot_have_fails_rv09(tiny_trace: Path, tmp_path: Path) -> None:
    """A bought drive model inside a cloud VM is an error (RV09), with the VM's own drives named.

    Too many of its own drives is an error too; its own drives pass and name the unconfirmed
    figures the tier's checks rest on.
    """
    tier = (
        "    instance: {instance}\n    tiers:\n      - name: nvme\n        storage: {storage}\n"
        "        devices: {devices}\n        capacity: 1 TB\n"
    )

    def run(instance: str, storage: str, devices: int) -> ET.Element:
        plan = _plan(
            tmp_path,
            "name: pair\nmodel: {kv_bytes_per_token: 1000}\nstages:\n  prefill:\n"
            + tier.format(instance=instance, storage=storage, devices=devices),
        )
        out = tmp_path / "r.xml"
        runner.invoke(app, ["review", str(tiny_trace), "--plan", str(plan), "--junit", str(out)])
        return next(
            c for c in ET.parse(out).getroot().iter("testcase") if c.get("name").startswith("RV09")
        )

    bad = run("p5e.48xlarge", "kioxia-cm6", 8)
    failure = bad.find("failure")
    assert failure is not None
    assert "local NVMe is fixed (8 x aws-instance-store-nvme)" in failure.get("message", "")
    too_many = run("p5e.48xlarge", "aws-instance-store-nvme", 9)
    assert "takes 8" in too_many.find("failure").get("message", "")
    own = run("p5e.48xlarge", "aws-instance-store-nvme", 8)
    assert own.find("failure") is None
    onprem = run("dgx-h200", "kioxia-cm6", 8)
    assert onprem.find("failure") is None


def test_select_and_ignore_choose_the_checks(tiny_trace: Path, tmp_path: Path) -> None:
    """--select/--ignore by code, name or group run only the chosen rules; typos are exit 2."""
    bad = _plan(tmp_path, GOOD.replace("chunk_size: 256", "chunk_size: 100"), "bad.yaml")
    out = tmp_path / "r.xml"

    def codes(*options: str) -> set[str]:
        result = runner.invoke(
            app, ["review", str(tiny_trace), "--plan", str(bad), "--junit", str(out), *options]
        )
        assert result.exit_code in (EXIT_OK, EXIT_FINDINGS), result.output
        return {c.get("name").split(".")[0] for c in ET.parse(out).getroot().iter("testcase")}

    assert codes("--select", "lint") == {"EL05", "EL08", "EL11"}
    assert codes("--select", "lmcache.chunk_not_multiple,RV02") == {"EL05", "RV02"}
    assert "EL05" not in codes("--ignore", "lmcache")
    result = runner.invoke(app, ["review", str(tiny_trace), "--plan", str(bad), "--ignore", "EL05"])
    assert result.exit_code == EXIT_OK, result.output  # the only error is ignored
    result = runner.invoke(app, ["review", str(tiny_trace), "--plan", str(bad), "--select", "RV99"])
    assert result.exit_code == EXIT_USER_ERROR and "matches no rule" in result.output
