"""Signals at any moment of a run, the last one included (issue 31, part 8).

Before the fix: SIGINT or SIGTERM arriving after the command had returned (after its "wrote
..." line, while the interpreter shut down) met Python's default handlers again: SIGTERM
killed the process unannounced, SIGINT printed a KeyboardInterrupt from the shutdown and
exited 0; SIGHUP was not handled at all, so it left the temporary output file behind.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The console entry point, with a signal sent to the process from its atexit stage: the
# last moment Python code runs, after main() has returned and the command's output is out.
LATE = """\
import atexit, os, signal, sys, time
from kvadvisor import cli
atexit.register(lambda: (os.kill(os.getpid(), signal.{sig}), time.sleep(5)))
sys.argv = ["kvadvisor", "catalog", "list", "gpus"]
cli.main()
"""


def _message(name: str) -> str:
    return f"error: interrupted by {name}; no output was left half-written"


@pytest.mark.parametrize("sig, code", [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 143)])
def test_a_signal_after_the_command_returned_exits_with_its_code(sig: str, code: int) -> None:
    """The last moment: exit 130/143 with the one line, no shutdown traceback."""
    done = subprocess.run(
        [sys.executable, "-c", LATE.format(sig=sig)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == code, (done.returncode, done.stderr[-2000:])
    assert done.stderr.strip().splitlines() == [_message(sig)], done.stderr
    assert "h100-sxm" in done.stdout  # the command's output came out whole before


def test_sighup_mid_write_is_handled_as_sigterm(tmp_path: Path) -> None:
    """SIGHUP (a closed terminal) while synth writes: 143, one line, no temporary file left."""
    out = tmp_path / "s.parquet"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvadvisor", "synth", "-o", str(out), "--requests", "20000000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    deadline = time.monotonic() + 60
    while not any(p.name.startswith(".s.parquet.") for p in tmp_path.iterdir()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
        time.sleep(0.02)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.strip().splitlines() == [_message("SIGHUP")], err
    assert list(tmp_path.iterdir()) == []
