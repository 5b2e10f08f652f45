"""Progress: phases named on a live line in a terminal, a line each when piped, none when quiet."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvadvisor import phases
from kvadvisor.cli import progress
from kvadvisor.cli.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class FakeTty(io.StringIO):
    """A string buffer that says it is a terminal."""

    def isatty(self) -> bool:
        """Pretend to be a terminal."""
        return True


def test_piped_one_line_per_phase() -> None:
    """Not a terminal: each phase gets one line as it ends, with its duration."""
    stream = io.StringIO()
    p = Progress(stream)
    assert not p.live
    with p.step("reading trace.jsonl"):
        pass
    with p.step("analyzing"):
        p.phase("cache curves")
        for i in range(1, 3):
            p.phase("search", phases.of(i, 2, "aws"))
        p.phase("replay")
    lines = stream.getvalue().splitlines()
    assert [line.rsplit(" (", 1)[0] for line in lines] == [
        "kvadvisor: reading trace.jsonl",
        "kvadvisor: cache curves",
        "kvadvisor: search: aws, 1 of 2",
        "kvadvisor: search: aws, 2 of 2",
        "kvadvisor: replay",
    ]
    # How long each took, with its unit.
    assert all(re.search(r" \([0-9.]+ (ns|µs|ms|s)\)$", line) for line in lines), lines
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_piped_failure_leaves_the_error_alone() -> None:
    """Piped, a failing phase writes nothing: bad input still gets one line on stderr."""
    stream = io.StringIO()
    with pytest.raises(ValueError), Progress(stream).step("reading bad.csv"):
        raise ValueError("boom")
    assert stream.getvalue() == ""


def test_quiet_writes_nothing() -> None:
    """--quiet: not a byte, in a terminal or not, even for a failed step."""
    for stream in (io.StringIO(), FakeTty()):
        p = Progress(stream, quiet=True)
        with pytest.raises(ValueError), p.step("reading"):
            p.phase("search", "1 of 2")
            p.note("first run")
            raise ValueError("boom")
        assert stream.getvalue() == ""


def test_live_line_names_the_phase(monkeypatch) -> None:
    """On a terminal the live line shows the phase and its count, then one line at the end."""
    monkeypatch.setattr(progress, "QUIET_BELOW_S", 0.0)
    stream = FakeTty()
    p = Progress(stream)
    with p.step("analyzing"):
        p.phase("search", phases.of(2, 5, "gcp"))
        time.sleep(0.35)
    out = stream.getvalue()
    frames = [ANSI.sub("", f) for f in re.split(r"\r|\n", out)]
    assert any(re.fullmatch(r"[-\\|/] search: gcp, 2 of 5 [0-9.]+ ms", f) for f in frames), frames
    assert out.endswith("s\n")
    assert "analyzing: done in" in out.splitlines()[-1]


def test_live_line_is_cut_to_the_width_not_wrapped(monkeypatch) -> None:
    """A label longer than the terminal ends in an ellipsis: a wrapped line cannot redraw."""
    monkeypatch.setenv("COLUMNS", "40")
    stream = FakeTty()
    with Progress(stream).step("reading " + "a-very-long-trace-name/" * 5 + "t.jsonl"):
        time.sleep(0.3)
    frames = [ANSI.sub("", f) for f in re.split(r"\r|\n", stream.getvalue())]
    drawn = [f for f in frames if f.startswith(("-", "\\", "|", "/"))]
    assert drawn and all(len(f) <= 40 and f.endswith("…") for f in drawn), drawn


def test_failed_step_says_so() -> None:
    """On a terminal a step that raises is reported as failed; the exception goes through."""
    stream = FakeTty()
    with pytest.raises(ValueError, match="boom"), Progress(stream).step("analyzing"):
        raise ValueError("boom")
    assert "analyzing: failed in" in stream.getvalue()


def test_phase_names_are_made_safe() -> None:
    """A file name with escape sequences cannot drive the terminal through the progress line."""
    stream = io.StringIO()
    with Progress(stream).step("reading evil\x1b[2J.jsonl"):
        pass
    assert "\x1b" not in stream.getvalue()


def test_library_phases_reach_a_listener() -> None:
    """phases.enter goes to the listener while one listens, and nowhere after."""
    got: list[tuple[str, str]] = []
    phases.listen(lambda name, detail: got.append((name, detail)))
    try:
        phases.enter(phases.SEARCH, phases.of(1, 2, "aws"))
    finally:
        phases.listen(None)
    phases.enter(phases.REPLAY)
    assert got == [("search", "aws, 1 of 2")]


def test_piped_analyze_names_every_phase(tmp_path: Path) -> None:
    """A piped `analyze` says each phase on stderr, in order; --quiet says none of them."""
    trace = ROOT / "sample_traces" / "vllm_bench_appended.json"
    out = tmp_path / "r.json"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "80"}
    # The worker's kernel cache (tests/conftest.py), already compiled: not the in-tree one,
    # which this run would otherwise compile cold (and two workers write at once).
    if os.environ.get("NUMBA_CACHE_DIR"):
        env["NUMBA_CACHE_DIR"] = os.environ["NUMBA_CACHE_DIR"]
    cmd = [sys.executable, "-m", "kvadvisor", "analyze", str(trace), "-o", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    said = [
        line.removeprefix("kvadvisor: ").rsplit(" (", 1)[0].split(":")[0]
        for line in done.stderr.splitlines()
        if line.startswith("kvadvisor: ") and not line.startswith("kvadvisor: first run")
    ]
    said = [name for i, name in enumerate(said) if i == 0 or said[i - 1] != name]
    providers = int(done.stderr.split("kvadvisor: search: aws, 1 of ", 1)[1].split(" ")[0])
    assert said == [
        f"reading {trace}",
        phases.CACHE,
        phases.PROFILE,
        phases.SEARCH,
        phases.CHECK,
        phases.REPLAY,
        phases.REPORT,
    ]
    assert done.stderr.splitlines()[-1] == f"wrote {out}"
    # The search has a line per provider, each naming it and how many there are.
    assert done.stderr.count("kvadvisor: search: ") == providers > 1
    quiet = subprocess.run(
        [*cmd, "--quiet"], cwd=ROOT, capture_output=True, text=True, env=env, check=False
    )
    assert quiet.returncode == 0 and quiet.stderr == f"wrote {out}\n"
