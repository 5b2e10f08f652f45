"""Progress: nothing at all when stderr is not a terminal; a step line when it is."""

from __future__ import annotations

import io
import time

import pytest

from kvadvisor import progress
from kvadvisor.progress import Progress


class FakeTty(io.StringIO):
    """A string buffer that says it is a terminal."""

    def isatty(self) -> bool:
        """Pretend to be a terminal."""
        return True


def test_silent_when_not_a_tty() -> None:
    """CI logs stay clean: a pipe or file gets no output, not even for a long step."""
    stream = io.StringIO()
    p = Progress(stream)
    assert not p.enabled
    with p.step("reading"):
        time.sleep(0.25)
    assert stream.getvalue() == ""


def test_long_step_on_a_tty(monkeypatch) -> None:
    """On a terminal a long step spins, then leaves one line with its duration."""
    monkeypatch.setattr(progress, "QUIET_BELOW_S", 0.0)
    stream = FakeTty()
    with Progress(stream).step("reading trace.jsonl"):
        time.sleep(0.25)
    out = stream.getvalue()
    assert "\r" in out and out.endswith("s\n")
    assert "reading trace.jsonl: done in" in out.splitlines()[-1]


def test_failed_step_says_so() -> None:
    """A step that raises is reported as failed, and the exception goes through."""
    stream = FakeTty()
    with pytest.raises(ValueError, match="boom"), Progress(stream).step("analyzing"):
        raise ValueError("boom")
    assert "analyzing: failed in" in stream.getvalue()
