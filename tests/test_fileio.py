"""Atomic output files: the target appears whole or not at all, with umask permissions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvadvisor.io.fileio import atomic_target


def test_success_replaces_target_with_umask_mode(tmp_path: Path) -> None:
    """A finished write renames into place, creates the parent, and leaves no temp file."""
    target = tmp_path / "sub" / "out.txt"
    old = os.umask(0o022)
    try:
        with atomic_target(target) as tmp:
            tmp.write_text("hello", encoding="utf-8")
            assert not target.exists()
    finally:
        os.umask(old)
    assert target.read_text(encoding="utf-8") == "hello"
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["out.txt"]


def test_failure_keeps_the_old_file_and_cleans_up(tmp_path: Path) -> None:
    """An exception mid-write leaves the previous file untouched and no temp file behind."""
    target = tmp_path / "out.txt"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(RuntimeError), atomic_target(target) as tmp:
        tmp.write_text("half", encoding="utf-8")
        raise RuntimeError("disk full")
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]
