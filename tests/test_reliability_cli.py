"""Options, terminals and compiled kernels as a hostile user or a locked-down container meets them.

Regression cases of issue 18: option values that hung or crashed a run (a billion cache
instances, --tp 2^70, --window inf, an empty --model), escape sequences from names reaching
the terminal, Markdown and JUnit broken by names, and the compiled kernels failing where no
cache directory is writable (a container's `USER nobody`).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner

from kvadvisor.cli import app
from kvadvisor.report.markdown import code_span
from kvadvisor.termtext import printable

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "mooncake_conversation.parquet"
SMALL = REPO / "sample_traces" / "vllm_bench_old.json"
# The Mooncake head: 400 requests with block hashes, so the cache and replay kernels run, for a
# fraction of the whole trace's analysis time.
HEAD = REPO / "sample_traces" / "mooncake_conversation_head.jsonl.gz"
PLAN = REPO / "examples" / "plans" / "good-p5e-prefill-p5-decode.yaml"
runner = CliRunner()
ESC = "\x1b"


# --- option bounds ----------------------------------------------------------------------------


def _main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """The console entry point in-process: (exit code, stderr); the parser's errors included."""
    from kvadvisor.cli import main

    monkeypatch.setattr("sys.argv", ["kvadvisor", *args])
    with pytest.raises(SystemExit) as stop:
        main()
    return stop.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--cache-instances", "1000000000"], "'--cache-instances'"),
        (["--tp", str(2**70)], "'--tp'"),
        (["--instances", str(2**64)], "'--instances'"),
        (["--window", "inf"], "'--window'"),
        (["--window", "nan"], "'--window'"),
        (["--window", "0"], "'--window': 0 is not in 0.001 to 10,000,000 seconds"),
        (["--window", "1e8"], "'--window': 100,000,000 is not in 0.001 to 10,000,000 seconds"),
        (["--warmup-fraction", "nan"], "'--warmup-fraction'"),
        (["--cache-sample-rate", "inf"], "'--cache-sample-rate'"),
        (["--block-tokens", str(2**40)], "'--block-tokens'"),
        (["--model", ""], "'--model': is empty; give a name (`kvadvisor catalog list models`"),
        (["--gpu", " "], "'--gpu': is empty; give a name (`kvadvisor catalog list gpus`"),
        (["--storage", ""], "'--storage': is empty; give a name (`kvadvisor catalog list storage`"),
        (["--io-unit", "1e30 TB"], "more than 1 EB"),
        (["--io-unit", "2 GiB"], "at most 1 GiB"),
        (["--drive-capacity", "inf TB"], "--drive-capacity"),
    ],
)
def test_analyze_option_bounds(monkeypatch, capsys, args: list[str], needle: str) -> None:
    """Each was a hang, a traceback or a silent acceptance; now one line, exit 2, at once."""
    start = time.monotonic()
    code, err = _main(monkeypatch, capsys, "analyze", str(SMALL), "-q", *args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert time.monotonic() - start < 30


def test_many_cache_instances_do_not_hang() -> None:
    """The largest allowed routing comparison runs: instances grouped by one sort, not a scan.

    On the whole trace, so a scan per instance would show. --no-replay and one provider's
    search: the deployment search and its replay do not read --cache-instances (only the cache
    section does); they were four fifths of this test's CPU time, then the five providers'
    search most of the rest.
    """
    args = ["-q", "--cache-instances", "1024", "--no-replay", "--provider", "aws"]
    args += ["--format", "json"]
    result = runner.invoke(app, ["analyze", str(SAMPLE), *args])
    assert result.exit_code == 0, result.output
    routing = json.loads(result.stdout)["prefix_cache"]["routing"]
    assert routing["instances"] == 1024
    points = {p["policy"]: p["points"] for p in routing["policies"] if p["unavailable"] is None}
    assert points.keys() >= {"random", "prefix_aware"} and all(points.values()), routing


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--block-tokens", "0"], "--block-tokens must be in [1,"),
        (["--seed", "-1"], "--seed must be in [0, 2^64)"),
        (["--rate", "inf"], "--rate must be a finite number"),
        (["--input-sigma", "1e6"], "--input-sigma must be in [0, 10]"),
        (["--requests", str(2**41)], "--requests must be in [1,"),
        (["--requests", "0"], "--requests must be in [1,"),
    ],
)
def test_synth_option_bounds(tmp_path: Path, args: list[str], needle: str) -> None:
    """Synth --block-tokens 0 divided by zero; --seed -1 was numpy's traceback."""
    out = tmp_path / "s.parquet"
    one_error_line(runner.invoke(app, ["synth", "-o", str(out), "--requests", "10", *args]), needle)
    assert not out.exists() and list(tmp_path.iterdir()) == []


# --- the terminal -----------------------------------------------------------------------------


def test_printable_escapes_every_control_character() -> None:
    """C0 (but tab and newline), DEL, C1, line separators and lone surrogates become visible."""
    text = "a\x1b[2Jb\rc\x07d\x7fe\x9bf\u2028g\udcffh\ti\nj"
    assert printable(text) == "a\\x1b[2Jb\\x0dc\\x07d\\x7fe\\x9bf\\u2028g\\udcffh\ti\nj"
    assert printable("x\ty\nz", one_line=True) == "x\\x09y\\x0az"


def _trace_named(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    shutil.copy(SMALL, path)
    return path


def test_file_name_escapes_never_reach_the_terminal(tmp_path: Path) -> None:
    """A trace named with ESC [2J (clear screen) or OSC 0 (retitle): shown escaped everywhere."""
    path = _trace_named(tmp_path, f"t{ESC}[2J{ESC}]0;pwned\x07.json")
    info = runner.invoke(app, ["info", str(path)])
    assert info.exit_code == 0, info.output
    assert ESC not in info.stdout and "\x07" not in info.stdout
    assert "t\\x1b[2J\\x1b]0;pwned\\x07.json" in info.stdout
    summary = runner.invoke(app, ["analyze", str(path)])
    assert summary.exit_code == 0 and ESC not in summary.stdout
    report = runner.invoke(app, ["analyze", str(path), "-q", "--format", "markdown"])
    assert report.exit_code == 0 and ESC not in report.stdout
    # And in the one error line (here: --map on a format that takes none).
    bad = runner.invoke(app, ["info", str(path), "--map", "input_tokens=x"])
    line = one_error_line(bad, "\\x1b[2J")
    assert ESC not in line


def test_cache_tier_name_escapes() -> None:
    """A --cache-tier name is the user's own text: escaped in a message, never raw in a report.

    One provider's search: each provider's verdict is written by the same code, and the name
    reaches the report all the same (checked below).
    """
    bad = runner.invoke(app, ["analyze", str(HEAD), "-q", "--cache-tier", f"h{ESC}[31m=x"])
    assert ESC not in one_error_line(bad, "h\\x1b[31m")
    tier = ["--cache-tier", f"h{ESC}[31mbm=1M", "--provider", "aws"]
    for fmt in ("text", "markdown", "json"):
        result = runner.invoke(app, ["analyze", str(HEAD), "-q", *tier, "--format", fmt])
        assert result.exit_code == 0, result.output
        assert ESC not in result.stdout, fmt
    # The name reached the report: the JSON carries it, escaped as \u001b.
    assert "h\\u001b[31mbm" in result.stdout


def test_warning_lines_are_escaped(tmp_path: Path) -> None:
    """A warning names the file too: one line, escaped."""
    path = tmp_path / f"w{ESC}[2J.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n0,10,2\n100000,10,2\n")
    result = runner.invoke(app, ["info", str(path)])
    assert result.exit_code == 0
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings and all(ESC not in w and "w\\x1b[2J.csv" in w for w in warnings)


# --- Markdown and JUnit -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["plain", "a`b", "`edge`", "x | y", "<img src=x onerror=alert(1)>", "a``b`", ""]
)
def test_code_span_cannot_be_broken_out_of(text: str) -> None:
    """The fence is longer than any backtick run inside; pipes are escaped for table cells."""
    span = code_span(text)
    fence = re.match(r"`+", span).group()
    inner = span[len(fence) : -len(fence)]
    assert span.endswith(fence)
    assert all(len(run) < len(fence) for run in re.findall(r"`+", inner))
    assert inner.strip() == text.replace("|", "\\|").strip()


def test_review_markdown_keeps_plan_names_in_code(tmp_path: Path) -> None:
    """Raw HTML and a backtick in a plan name stay text in the PR comment."""
    name = "p`><img src=x onerror=alert(1)>"
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        PLAN.read_text().replace("name: p5e-prefill-p5-decode", f"name: '{name}'"),
        encoding="utf-8",
    )
    out = tmp_path / "review.md"
    result = runner.invoke(app, ["review", str(SAMPLE), "--plan", str(plan), "-o", str(out)])
    assert result.exit_code in (0, 1), result.output
    text = out.read_text(encoding="utf-8")
    assert code_span(name) in text
    outside = re.sub(r"(`+).*?\1", "", text)  # every code span removed
    assert "<img" not in outside


def test_junit_is_well_formed_with_control_characters(tmp_path: Path) -> None:
    """A trace name with control characters (plan text refuses them) made the XML ill-formed."""
    trace = tmp_path / f"t{ESC}[1m\x01.parquet"
    shutil.copy(SAMPLE, trace)
    junit = tmp_path / "r.xml"
    result = runner.invoke(
        app, ["review", str(trace), "--plan", str(PLAN), "--junit", str(junit), "-o", "-"]
    )
    assert result.exit_code in (0, 1), result.output
    root = ET.parse(junit).getroot()  # raises on an ill-formed document
    values = [p.get("value") for p in root.iter("property") if p.get("name") == "trace"]
    assert values and "\\x1b[1m\\x01" in values[0]


# --- compiled kernels without a writable cache directory --------------------------------------


def _address_space(limit_bytes: int):
    """``ulimit -v`` for a child process (set between fork and exec)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return limit


def test_kernels_run_without_a_writable_cache_directory(tmp_path: Path) -> None:
    """HOME unwritable, the install read-only, NUMBA_CACHE_DIR unset (a container's `nobody`).

    numba refused to define the kernels ("cannot cache function '_splitmix64': no locator
    available"); now a temporary cache directory is used, said in one note, removed at exit.
    Read-only is made with files where the __pycache__ directories and ~/.cache would go, so
    it holds for root as well. Under ``ulimit -v 2000000``: this is the suite's one cold compile
    of every kernel the analysis runs under the 2 GB limit, where LLVM ran out of memory before
    (tests/test_reliability_memory.py's runs as nobody start from compiled kernels).
    """
    copy = tmp_path / "install"
    shutil.copytree(
        REPO / "kvadvisor", copy / "kvadvisor", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(REPO / "rules", copy / "rules")
    for folder in [copy / "kvadvisor", *(p for p in (copy / "kvadvisor").rglob("*") if p.is_dir())]:
        (folder / "__pycache__").write_text("not a directory")
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "kvadvisor", "analyze", str(HEAD), "-q", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
        preexec_fn=_address_space(2_000_000 * 1024),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    notes = [line for line in lines if line.startswith("note: no writable cache directory")]
    assert len(notes) == 1 and "Traceback" not in proc.stderr, lines
    assert not any(line.startswith(("error", "warning")) for line in lines), lines
    assert json.loads(out.read_text())["trace"]["requests"] > 0
    used = re.search(r"compiling into (\S+),", notes[0]).group(1)
    assert not Path(used).exists()  # removed at exit
