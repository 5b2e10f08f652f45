"""Progress on long steps (reading, analysing, rendering), shown only when stderr is a terminal.

When the stream is not a TTY (CI logs, pipes, files) nothing at all is written, so logs stay
clean. On a terminal each step shows a spinner with the elapsed time, redrawn in place, and
ends with one line saying how long it took.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from kvadvisor.termtext import printable
from kvadvisor.units.format import duration

SPINNER = "|/-\\"
REDRAW_S = 0.1
# Steps faster than this leave no "done" line: only long steps are worth a line in the scroll.
QUIET_BELOW_S = 0.5


class Progress:
    """Step-by-step progress for the CLI; a no-op unless ``stream`` is a terminal."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        """Write to ``stream`` (default stderr); ``enabled`` None means "if it is a TTY"."""
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        """Show ``what`` with a spinner while the block runs (nothing when disabled)."""
        if not self.enabled:
            yield
            return
        what = printable(what, one_line=True)  # file names may hold escape sequences
        start = time.monotonic()
        stop = threading.Event()

        def spin() -> None:
            for ch in itertools.cycle(SPINNER):
                if stop.wait(REDRAW_S):
                    return
                # Padded: a shorter reading ("900 ms" after "1.23 s") must cover the last one.
                self._write(f"\r{ch} {what} {duration(time.monotonic() - start):<8}")

        thread = threading.Thread(target=spin, name="kvadvisor-progress", daemon=True)
        thread.start()
        outcome = "failed"
        try:
            yield
            outcome = "done"
        finally:
            stop.set()
            thread.join()
            elapsed = time.monotonic() - start
            # \x1b[K clears what the spinner left on the line.
            self._write("\r\x1b[K")
            if elapsed >= QUIET_BELOW_S or outcome == "failed":
                self._write(f"{what}: {outcome} in {duration(elapsed)}\n")

    def note(self, text: str) -> None:
        """One line of its own (over a spinner's line, which redraws below it); none when off."""
        if self.enabled:
            self._write(f"\r\x1b[K{text}\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
