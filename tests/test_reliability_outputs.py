"""Outputs: a device is written in place and never removed; a bad -o is an error before the work.

Issue 31 B and its low items: pyarrow deleted the path it was given when a write failed, so a
failed write to a device named as the output (``mknod x.parquet c 1 7``, ``-o /dev/full`` as
root) deleted the device node; a 300-character -o name was a traceback; an unwritable -o was
found only after the whole analysis; `verify -o` on a full disk left half a folder.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner
from verify_fixtures import DISK_PLAN, SERVING_PLAN, write_bursty_trace

import kvadvisor
from kvadvisor.cli import EXIT_OK, app

REPO = Path(__file__).resolve().parents[1]

runner = CliRunner()
FULL = "/dev/full"
needs_full = pytest.mark.skipif(not os.path.exists(FULL), reason="needs /dev/full (Linux)")
LONG = "a" * 300


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    """A small Mooncake trace."""
    return write_bursty_trace(tmp_path / "t.jsonl", 60)


@pytest.fixture()
def plan(tmp_path: Path) -> Path:
    """A serving plan the replay runs."""
    path = tmp_path / "plan.yaml"
    path.write_text(SERVING_PLAN)
    return path


def _full_device_outputs(tmp_path: Path) -> list[Path]:
    """A symlink to /dev/full, and (as root) a character device node like it."""
    link = tmp_path / "link.parquet"
    link.symlink_to(FULL)
    out = [link]
    if os.geteuid() == 0:
        node = tmp_path / "node.parquet"
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 7))
        out.append(node)
    return out


# --- B: a failed write never deletes what it was given -------------------------------------


@needs_full
def test_convert_to_a_full_device_keeps_the_device(trace: Path, tmp_path: Path) -> None:
    """`convert -o` a /dev/full node or link: exit 2, one line, and the node or link remains."""
    for target in _full_device_outputs(tmp_path):
        result = runner.invoke(app, ["convert", str(trace), "-o", str(target)])
        one_error_line(result, "No space left on device")
        assert os.path.lexists(target), f"{target.name} was deleted"
        assert stat.S_ISCHR(os.stat(target).st_mode)
    assert stat.S_ISCHR(os.stat(FULL).st_mode)


@needs_full
def test_replay_requests_out_to_a_full_device_keeps_the_device(
    trace: Path, plan: Path, tmp_path: Path
) -> None:
    """`replay --requests-out` a /dev/full node or link: exit 2 and the node or link remains."""
    for target in _full_device_outputs(tmp_path):
        result = runner.invoke(
            app, ["replay", str(trace), "--plan", str(plan), "--requests-out", str(target)]
        )
        one_error_line(result, "No space left on device")
        assert os.path.lexists(target), f"{target.name} was deleted"
        assert stat.S_ISCHR(os.stat(target).st_mode)


@needs_full
def test_replay_steps_out_to_a_full_device_keeps_the_device(
    trace: Path, plan: Path, tmp_path: Path
) -> None:
    """`replay --steps-out` (written a batch at a time) a /dev/full node or link: the same."""
    for target in _full_device_outputs(tmp_path):
        result = runner.invoke(
            app, ["replay", str(trace), "--plan", str(plan), "--steps-out", str(target)]
        )
        one_error_line(result, "No space left on device")
        assert os.path.lexists(target), f"{target.name} was deleted"
        assert stat.S_ISCHR(os.stat(target).st_mode)


def test_synth_and_convert_still_write_regular_files(trace: Path, tmp_path: Path) -> None:
    """The file-object writers produce the same readable parquet as before."""
    out = tmp_path / "out.parquet"
    result = runner.invoke(app, ["convert", str(trace), "-o", str(out)])
    assert result.exit_code == EXIT_OK, result.output
    assert kvadvisor.read_trace(out).requests == 60
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# --- an unwritable or too-long -o is found before the work ---------------------------------


def _no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every command's library call fail loudly: the CLI must stop before it."""

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the work ran before the output was checked")

    for name in ("analyze", "review", "verify", "replay", "convert"):
        monkeypatch.setattr(kvadvisor, name, boom)


def _commands(trace: Path, plan: Path, target: str) -> dict[str, list[str]]:
    tp = [str(trace), "--plan", str(plan)]
    return {
        "analyze": ["analyze", str(trace), "-q", "-o", f"{target}.json"],
        "review": ["review", *tp, "-o", f"{target}.md"],
        "replay": ["replay", *tp, "--requests-out", f"{target}.parquet"],
        "verify": ["verify", *tp, "-o", target],
        "convert": ["convert", str(trace), "-o", f"{target}.parquet"],
        "emit": ["analyze", str(trace), "-q", "--emit", "vllm", "-o", target],
    }


@pytest.mark.parametrize("command", ["analyze", "review", "replay", "verify", "convert", "emit"])
def test_a_too_long_output_name_is_one_error_before_the_work(
    command: str, trace: Path, plan: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 300-character -o name was an ENAMETOOLONG traceback after the work."""
    _no_work(monkeypatch)
    args = _commands(trace, plan, str(tmp_path / LONG))[command]
    one_error_line(runner.invoke(app, args), "name is too long")


@pytest.mark.parametrize("command", ["analyze", "review", "replay", "verify", "convert", "emit"])
def test_an_unwritable_output_is_one_error_before_the_work(
    command: str, trace: Path, plan: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An -o below a regular file (not a folder: nothing can be created there)."""
    _no_work(monkeypatch)
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    args = _commands(trace, plan, str(blocker / "out"))[command]
    one_error_line(runner.invoke(app, args), "is not a directory")
    assert blocker.read_text() == "x"


NOBODY = 65534


def test_an_output_in_a_read_only_folder_is_one_error_before_the_work(tmp_path: Path) -> None:
    """A folder the user may not write to: refused before the trace is even read.

    Root writes anywhere, so under root (CI) the command runs as the unprivileged user nobody
    (.ci/run lets nobody reach the interpreter). The trace is not a trace at all: had the
    command read it before checking -o, the error would name the trace, not the folder.
    """
    work = Path(tempfile.mkdtemp(prefix="kvadvisor-ro-"))
    try:
        work.chmod(0o777)  # HOME for nobody: its compiled-kernel cache
        folder = work / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        (work / "t.jsonl").write_text("not a trace\n")
        (work / "t.jsonl").chmod(0o644)
        as_nobody = os.geteuid() == 0
        done = subprocess.run(
            [sys.executable, "-m", "kvadvisor", "analyze", "t.jsonl", "-o", "ro/r.json"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=work,
            env={**os.environ, "HOME": str(work), "PYTHONPATH": str(REPO)},
            preexec_fn=(lambda: (os.setgid(NOBODY), os.setuid(NOBODY))) if as_nobody else None,
        )
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "permission denied" in lines[0].lower(), done.stderr
        assert "ro/r.json" in lines[0] and "Traceback" not in done.stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- verify -o is written whole or not at all -----------------------------------------------


def _disk_full_after(monkeypatch: pytest.MonkeyPatch, files: int) -> None:
    """Path.write_text fails with ENOSPC once ``files`` files were written (a disk filling)."""
    real = Path.write_text
    written = []

    def write_text(self: Path, *args: object, **kwargs: object) -> int:
        if len(written) >= files:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        written.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)


def test_verify_on_a_full_disk_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills on the third file: exit 2, one line, no folder and no staging left."""
    trace = write_bursty_trace(tmp_path / "t.jsonl", 60)
    plan = tmp_path / "plan.yaml"
    plan.write_text(DISK_PLAN)
    out = tmp_path / "out" / "jobs"
    _disk_full_after(monkeypatch, 2)
    result = runner.invoke(app, ["verify", str(trace), "--plan", str(plan), "-o", str(out)])
    one_error_line(result, "No space left on device")
    assert not out.exists()
    assert not any(p.name.endswith(".tmp") for p in out.parent.iterdir())


def test_verify_on_a_full_disk_keeps_the_earlier_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rewriting an earlier verify folder that then fails leaves the earlier set intact."""
    trace = write_bursty_trace(tmp_path / "t.jsonl", 60)
    plan = tmp_path / "plan.yaml"
    plan.write_text(DISK_PLAN)
    out = tmp_path / "jobs"
    result = runner.invoke(app, ["verify", str(trace), "--plan", str(plan), "-o", str(out)])
    assert result.exit_code == EXIT_OK, result.output
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert os.access(out / "run-fio.sh", os.X_OK)
    write_bursty_trace(trace, 80, seed=3)  # another trace: every file would change
    _disk_full_after(monkeypatch, 2)
    result = runner.invoke(app, ["verify", str(trace), "--plan", str(plan), "-o", str(out)])
    one_error_line(result, "No space left on device")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
