"""CLI for rules and catalogs: list, show, check, generated docs, analyze options."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import MOONCAKE_HEAD_JSONL_GZ
from typer.testing import CliRunner

from kvadvisor.advice.inputs import load_rule_set
from kvadvisor.cli import EXIT_USER_ERROR, app
from kvadvisor.rules import workload_rules
from kvadvisor.rules.docs import condition_text, render_rules_doc
from kvadvisor.rules.model import Compare, Op

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]


def test_rules_list_select_ignore() -> None:
    """List honours --select and --ignore by group, code and name."""
    result = runner.invoke(app, ["rules", "list", "--select", "tiers", "--ignore", "TI02"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("code") and len(lines) == 2 and lines[1].startswith("TI01")


def test_rules_show() -> None:
    """Show prints the condition, docs headings and references of one rule."""
    result = runner.invoke(app, ["rules", "show", "storage.prefill_write_bandwidth"])
    assert result.exit_code == 0
    for text in (
        "ST03",
        "prefill_storage_write_utilization_p99 > 1",
        "What it does:",
        "Why it matters:",
        "Example:",
        "References:",
    ):
        assert text in result.output
    bad = runner.invoke(app, ["rules", "show", "ST3"])
    assert bad.exit_code == EXIT_USER_ERROR and "did you mean 'ST03'" in bad.output


def test_rules_check_user_dir(tmp_path: Path) -> None:
    """Check accepts a valid user rule and rejects an unknown fact with a suggestion."""
    text = (REPO / "rules" / "cache" / "CA03-reuse-unknown.yaml").read_text(encoding="utf-8")
    good = text.replace("code: CA03", "code: XX01").replace("cache.reuse_unknown", "team.no_hashes")
    (tmp_path / "XX01.yaml").write_text(good, encoding="utf-8")
    ok = runner.invoke(app, ["rules", "check", str(tmp_path)])
    assert ok.exit_code == 0 and "1 rule(s) OK" in ok.output
    (tmp_path / "XX01.yaml").write_text(
        good.replace("prefix_reuse_measurable, op", "prefix_reuse_measureable, op")
    )
    bad = runner.invoke(app, ["rules", "check", str(tmp_path)])
    assert bad.exit_code == EXIT_USER_ERROR
    assert "did you mean 'prefix_reuse_measurable'" in bad.output
    clash = runner.invoke(app, ["rules", "check", str(REPO / "rules" / "cache")])
    assert clash.exit_code == 0  # the built-in folder itself is fine


def test_rules_doc_is_up_to_date() -> None:
    """docs/rules.md is generated from the rule files (`kvadvisor rules docs -o docs/rules.md`)."""
    committed = (REPO / "docs" / "rules.md").read_text(encoding="utf-8")
    assert committed == render_rules_doc(load_rule_set())
    out = runner.invoke(app, ["rules", "docs"])
    assert out.exit_code == 0 and out.output == committed


def test_catalog_list_and_show(tmp_path: Path) -> None:
    """Catalog list/show, with an extra catalog file adding an entry."""
    extra = tmp_path / "mine.yaml"
    extra.write_text(
        "kind: storage\nsources: {V: 'vendor sheet'}\nentries:\n"
        "  team-array: {category: local_nvme, provider: generic, write_mbps: 50000,"
        " source: [V], as_of: 2026-11-30}\n",
        encoding="utf-8",
    )
    listed = runner.invoke(app, ["catalog", "list", "storage", "--catalog", str(extra)])
    assert listed.exit_code == 0 and "team-array" in listed.output
    inst = runner.invoke(app, ["catalog", "list", "instances"])
    assert "p5e.48xlarge" in inst.output and "8 x h200" in inst.output
    shown = runner.invoke(app, ["catalog", "show", "alibaba-essd-pl1"])
    assert "per_gib.mbps: 120 + 0.5 x C, at most 350" in shown.output and "[A2]" in shown.output
    typo = runner.invoke(app, ["catalog", "show", "alibaba-essd-p1"])
    assert typo.exit_code == EXIT_USER_ERROR and "did you mean" in typo.output


def test_catalog_show_finds_instances_as_lookup_does() -> None:
    """Instance names match in any case, as storage names do; a typo is suggested from both."""
    for name in ("p5e.48xlarge", "P5E.48XLARGE"):
        shown = runner.invoke(app, ["catalog", "show", name])
        assert shown.exit_code == 0, shown.output
        assert shown.output.startswith("p5e.48xlarge\n  provider: aws\n")
    typo = runner.invoke(app, ["catalog", "show", "p5e.48xlarg"])
    assert typo.exit_code == EXIT_USER_ERROR
    assert "unknown catalog entry 'p5e.48xlarg'" in typo.output
    assert "did you mean 'p5e.48xlarge'" in typo.output


def test_bad_catalog_file_is_one_line(tmp_path: Path) -> None:
    """A value with a unit in --catalog ends with exit 2 and one line naming file and field."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "kind: storage\nsources: {V: x}\nentries:\n  d: {category: local_nvme, "
        "provider: generic, read_mbps: '4.8 TB/s', source: [V], as_of: 2026-11-30}\n",
        encoding="utf-8",
    )
    result = runner.invoke(app, ["catalog", "list", "--catalog", str(bad)])
    assert result.exit_code == EXIT_USER_ERROR
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "entries.d.read_mbps" in lines[0] and "MB/s" in lines[0]


def test_catalog_file_without_a_known_kind_is_one_line(tmp_path: Path) -> None:
    """--catalog routes files by kind: a missing or unknown kind is exit 2, one line."""
    for text, expected in (
        ("sources: {V: x}\nentries: {}\n", "a catalog file starts with 'kind: storage'"),
        ("kind: gadgets\nentries: {}\n", "unknown catalog kind 'gadgets'; expected one of"),
    ):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text, encoding="utf-8")
        result = runner.invoke(app, ["catalog", "list", "--catalog", str(bad)])
        assert result.exit_code == EXIT_USER_ERROR, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.output, result.output
        assert str(bad) in lines[0] and expected in lines[0], lines[0]


def test_analyze_with_advisor_options(tmp_path: Path) -> None:
    """Analyze --instance/--provider/--slo/--select fill the recommendation and rule outcomes.

    --instance pins the search to that instance; decode buys no storage whatever the stage.
    On the Mooncake head (400 real requests with block hashes): what is checked is where each
    option lands, not a figure of the whole trace.
    """
    out = tmp_path / "r.json"
    result = runner.invoke(
        app,
        [
            "analyze",
            str(MOONCAKE_HEAD_JSONL_GZ),
            "-o",
            str(out),
            "--instance",
            "p5en.48xlarge",
            "--provider",
            "aws",
            "--slo",
            "ttft_p99=10s,tpot_p99=100ms",
            "--select",
            "cache,utilization",
            "--ignore",
            "CA05",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    rec = doc["recommendation"]
    for stage in ("prefill", "decode"):
        assert rec[stage]["instance"] == "p5en.48xlarge"
    assert rec["decode"]["storage"] is None
    (verdict,) = rec["verdict"]["verdicts"]
    assert verdict["provider"] == "aws" and verdict["status"] == "chosen"
    assert rec["verdict"]["slo"]["targets"] == {"ttft_p99_s": 10.0, "tpot_p99_s": 0.1}
    codes = {o["code"] for o in rec["rules"]}
    # analyze runs the workload rules; the review rules the selection also takes (RV04, ...)
    # run on plans.
    selected = load_rule_set((), ["cache,utilization"], ["CA05"])
    expected = {r.code for r in workload_rules(selected)}
    assert {r.code for r in selected} > expected
    assert codes == expected and "CA05" not in codes and "UT01" in codes and "ST03" not in codes
    for finding in doc["findings"]:
        assert set(finding) >= {"code", "severity", "stage", "message", "evidence"}
    bad = runner.invoke(app, ["analyze", str(MOONCAKE_HEAD_JSONL_GZ), "--instance", "p5e.48xlarg"])
    assert bad.exit_code == EXIT_USER_ERROR and "did you mean 'p5e.48xlarge'" in bad.output


def test_a_condition_quotes_its_threshold_as_the_rule_file_writes_it() -> None:
    """ST07's 1048576-byte I/O size reads 1048576, not the rounded 1.04858e+06 of ``:g``."""
    shown = runner.invoke(app, ["rules", "show", "ST07"])
    assert shown.exit_code == 0, shown.output
    assert "io_size_bytes >= 1048576" in shown.output
    assert "read_bytes_per_s_p99 >= 2000000000" in shown.output
    assert condition_text(Compare("x", Op.GE, value=0.3)) == ["x >= 0.3"]
    assert condition_text(Compare("x", Op.LT, ref="y", factor=2.0)) == ["x < 2 x y"]
