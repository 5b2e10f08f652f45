"""The low-severity cases of issue 31 this branch covers, each one error line or a clean run.

Before the fixes: `rules check` on a directory whose entries vanish while it is walked
(/proc) was a FileNotFoundError traceback; a hand-edited `verify.json` of the wrong types
reached the judging and failed there with a TypeError; `--slo ttft_p99=0s` (and `0 s` in a
plan) was accepted, a target no run can meet; `synth --requests 0` wrote a trace every other
command refuses (its case is in test_reliability_cli's synth bounds).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner

from kvadvisor.cli import app
from kvadvisor.errors import ConfigError, PlanError
from kvadvisor.fleet.summary import parse_slo
from kvadvisor.plan.loader import load_plan
from kvadvisor.rules.loader import rule_files
from kvadvisor.verifyjobs.model import VerifyError
from kvadvisor.verifyjobs.results import check_manifest

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "sample_traces" / "mooncake_conversation_head.jsonl.gz"
PLAN = REPO / "examples" / "plans" / "cause3-paged-io.yaml"
GOOD_PLAN = REPO / "examples" / "plans" / "good-p5e-prefill-p5-decode.yaml"
runner = CliRunner()


def test_rule_files_skip_entries_that_vanish_mid_walk(tmp_path: Path, monkeypatch) -> None:
    """A folder that disappears between its listing and its scan (/proc's processes)."""
    rule = next((REPO / "rules" / "workload").glob("*.yaml"))
    shutil.copy(rule, tmp_path / rule.name)
    gone = tmp_path / "1234"
    gone.mkdir()
    real = os.scandir

    def scandir(path=".", *args, **kwargs):
        if Path(path) == gone:
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    assert rule_files(tmp_path) == [tmp_path / rule.name]


@pytest.mark.parametrize("text", ["ttft_p99=0s", "tpot_p99=0 ms", "ttft_p90=0us"])
def test_a_zero_slo_target_is_refused(text: str) -> None:
    """Negative targets were refused already; zero, which no run meets, was not."""
    with pytest.raises(ConfigError, match=r"a latency target must be above 0 s"):
        parse_slo(text)


def test_a_zero_slo_target_is_refused_by_the_commands(tmp_path: Path) -> None:
    """--slo ttft_p99=0s: every run fails it by definition; it was accepted."""
    args = ["analyze", str(TRACE), "-o", str(tmp_path / "a.json"), "--slo", "ttft_p99=0s"]
    one_error_line(runner.invoke(app, args), "--slo 'ttft_p99=0s'", "above 0 s")
    plan = tmp_path / "p.yaml"
    plan.write_text(GOOD_PLAN.read_text().replace("ttft_p99: 2 s", "ttft_p99: 0 s"))
    assert "ttft_p99: 0 s" in plan.read_text()
    with pytest.raises(PlanError, match=r"slo.ttft_p99: must be above zero"):
        load_plan(plan)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> dict:
    """A verify folder's manifest, as `kvadvisor verify` writes it."""
    out = tmp_path_factory.mktemp("v") / "jobs"
    result = runner.invoke(app, ["verify", str(TRACE), "--plan", str(PLAN), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads((out / "verify.json").read_text())


def test_the_written_manifest_passes_its_own_check(manifest: dict) -> None:
    """The shape check follows what `kvadvisor verify` writes: its own output passes."""
    assert check_manifest(manifest, "verify.json") is manifest


@pytest.mark.parametrize(
    "edit, where",
    [
        (lambda m: m["fio"][0]["phases"][0].update(rates_bytes_per_s="fast"), "fio[0].phases[0]"),
        (lambda m: m["fio"][0].update(io_bytes="4k"), "fio[0].io_bytes: expected int"),
        (lambda m: m["benchmarks"][0].update(input_tokens_total=None), "benchmarks[0]"),
        (lambda m: m.update(fio={"a": 1}), "fio: expected a list"),
        (lambda m: m["plan"].update(slo={"ttft_p99_s": "2 s"}), "plan.slo.ttft_p99_s"),
    ],
)
def test_a_hand_edited_manifest_of_wrong_types_is_one_error(manifest: dict, edit, where) -> None:
    """Each reached the judging and failed there (a TypeError) once results were present."""
    edited = json.loads(json.dumps(manifest))
    edit(edited)
    with pytest.raises(VerifyError, match=r"regenerate the folder") as info:
        check_manifest(edited, "verify.json")
    assert where in str(info.value)
