"""CLI: exit codes, one-line user errors, end-to-end runs on the real traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from analysis_cache import analyze_run
from typer.testing import CliRunner

from kvadvisor import __version__
from kvadvisor.cli import EXIT_USER_ERROR, app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]


def test_version() -> None:
    """--version prints the package version."""
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_missing_file_is_user_error(tmp_path) -> None:
    """A missing trace is one line, exit 2, no traceback."""
    result = runner.invoke(app, ["analyze", str(tmp_path / "nope.jsonl")])
    assert result.exit_code == EXIT_USER_ERROR
    assert "Traceback" not in result.output
    assert "no such file" in result.output


def test_analyze_json_on_mooncake(mooncake_path, tmp_path_factory) -> None:
    """Analyze writes the JSON contract's trace block with the trace's true size.

    The README's command (every default), run once per test run and shared with
    tests/test_readme_answer.py and tests/test_verdict_block.py.
    """
    trace = str(mooncake_path.relative_to(REPO))
    result = analyze_run(tmp_path_factory, trace, 80)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.report.read_text())
    assert doc["format_version"] == 2
    assert doc["trace"]["requests"] == 12031
    assert doc["trace"]["block_tokens"] == 512
    assert abs(doc["trace"]["duration_s"] - 3536.999) < 1e-6


def _analyze_json(path, out, *extra):
    result = runner.invoke(app, ["analyze", str(path), "-q", "-o", str(out), *extra])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def test_profile_deployment_options_reach_the_report(mooncake_jsonl_path, tmp_path) -> None:
    """--instances, --io-unit and --drive-capacity set the profile's knobs, with units.

    On the Mooncake head (400 requests, with hashes and arrival times): the knobs, not the
    trace's size, are under test, and two whole-trace analyses took a minute. One provider's
    search and no closed-loop replay: the knobs are the profile's, which both only read.
    """
    quick = ("--provider", "aws", "--no-replay")
    base = _analyze_json(mooncake_jsonl_path, tmp_path / "a.json", *quick)
    assert base["io"]["io_unit_bytes"] == 4096 and base["io"]["drive_writes_per_day"] is None
    got = _analyze_json(
        mooncake_jsonl_path,
        tmp_path / "b.json",
        *quick,
        "--instances",
        "4",
        "--io-unit",
        "16 KiB",
        "--drive-capacity",
        "7.68 TB",
    )
    assert got["options"]["instances"] == 4
    assert got["io"]["io_unit_bytes"] == 16 * 1024
    assert got["io"]["drive_capacity_bytes"] == 7.68e12
    # DWPD = bytes written per day / drive capacity (decimal TB: 10^12 bytes)
    assert got["io"]["drive_writes_per_day"] == pytest.approx(
        got["io"]["write_bytes_per_day"] / 7.68e12, rel=1e-6
    )
    # a larger device I/O unit rounds each chunk write up further: never fewer bytes on device
    assert got["io"]["write_io"]["mean_io_bytes"] >= base["io"]["write_io"]["mean_io_bytes"]


def test_profile_deployment_option_errors_are_one_line(mooncake_path) -> None:
    """A size without a unit, of the wrong kind, zero, or a fraction of a byte: exit 2, one line."""
    cases = {
        ("--io-unit", "4"): "--io-unit '4': expected a size such as",
        ("--io-unit", "1.5 B"): "--io-unit '1.5 B': must be a whole number of bytes",
        ("--drive-capacity", "7 TB/s"): "'TB/s' is a rate unit",
        ("--drive-capacity", "0 TB"): "--drive-capacity '0 TB': must be more than 0 bytes",
    }
    for (option, value), message in cases.items():
        result = runner.invoke(app, ["analyze", str(mooncake_path), "-q", option, value])
        assert result.exit_code == EXIT_USER_ERROR, (option, value)
        assert message in result.output
        assert "Traceback" not in result.output


def test_analyze_parquet_with_wall_clock_arrivals(tmp_path) -> None:
    """A parquet file whose arrival_s is a timestamp is read whole and converted, not refused."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    start = dt.datetime(2025, 3, 1, 12, 0, 0)
    offsets_s = [0.0, 0.5, 2.25, 4.0]
    common = {"input_tokens": [100, 200, 300, 50], "output_tokens": [10, 20, 5, 1]}
    wall = tmp_path / "wall.parquet"
    pq.write_table(
        pa.table(
            {
                "arrival_s": pa.array(
                    [start + dt.timedelta(seconds=s) for s in offsets_s], pa.timestamp("us")
                ),
                **common,
            }
        ),
        wall,
    )
    secs = tmp_path / "secs.parquet"
    pq.write_table(pa.table({"arrival_s": offsets_s, **common}), secs)
    got = _analyze_json(wall, tmp_path / "w.json")
    want = _analyze_json(secs, tmp_path / "s.json")
    assert got["trace"]["requests"] == 4
    assert got["trace"]["duration_s"] == want["trace"]["duration_s"] == 4.0
    assert got["stage_split"] == want["stage_split"]
    assert any("wall clock" in n for n in got["trace"]["notes"])


def _main(monkeypatch, capsys, *args):
    """Run the console-script entry point; (exit code, stderr)."""
    from kvadvisor.cli import main

    monkeypatch.setattr("sys.argv", ["kvadvisor", *args])
    with pytest.raises(SystemExit) as stop:
        main()
    return stop.value.code, capsys.readouterr().err


def test_entry_point_collects_garbage_less_often_and_restores(monkeypatch, capsys) -> None:
    """During a run the collector uses GC_THRESHOLDS; the caller's thresholds come back after."""
    import gc

    import kvadvisor.cli as cli

    seen = []
    monkeypatch.setattr(cli, "_run", lambda: seen.append(gc.get_threshold()) or 0)
    before = gc.get_threshold()
    code, _ = _main(monkeypatch, capsys, "info")
    assert code == 0
    assert seen == [cli.GC_THRESHOLDS] and cli.GC_THRESHOLDS[0] > before[0]
    assert gc.get_threshold() == before


def test_parser_errors_are_one_line(monkeypatch, capsys, tmp_path) -> None:
    """An option out of range, an unknown option or command, a missing argument: one line, 2."""
    cases = {
        (
            "analyze",
            "t.jsonl",
            "--instances",
            "0",
        ): "error: Invalid value for '--instances': Input should be greater than or equal to 1 "
        "(see `kvadvisor analyze --help`)",
        ("analyze", "t.jsonl", "--bogus"): "error: No such option: --bogus",
        ("analyze",): "error: Missing argument 'TRACE'. (see `kvadvisor analyze --help`)",
        ("nosuchcommand",): "error: No such command 'nosuchcommand'. (see `kvadvisor --help`)",
    }
    for args, message in cases.items():
        code, err = _main(monkeypatch, capsys, *args)
        assert code == EXIT_USER_ERROR, args
        assert err.startswith(message) and err.count("\n") == 1, err


def test_entry_point_exit_codes(monkeypatch, capsys, mooncake_path, tmp_path) -> None:
    """The entry point passes on each command's code: 0 done, 2 user error, 1 review findings."""
    assert _main(monkeypatch, capsys, "--version")[0] == 0
    code, err = _main(monkeypatch, capsys, "analyze", str(tmp_path / "missing.jsonl"))
    assert code == EXIT_USER_ERROR and "no such file" in err
    plans = REPO / "examples" / "plans"
    ok = _main(
        monkeypatch,
        capsys,
        "review",
        str(mooncake_path),
        "--plan",
        str(plans / "good-p5e-prefill-p5-decode.yaml"),
    )[0]
    bad = _main(
        monkeypatch,
        capsys,
        "review",
        str(mooncake_path),
        "--plan",
        str(plans / "bad-h20-cloud-disk.yaml"),
    )[0]
    assert (ok, bad) == (0, 1)
