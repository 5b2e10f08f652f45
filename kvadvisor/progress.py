"""Progress on long steps, named by phase (reading, cache curves, search N of M, replay, report).

On a terminal one live line, redrawn in place, names the phase running and its elapsed time
("search: aws, 2 of 5  12.3 s"); each long step ends with one line saying how long it took.
When stderr is not a terminal (CI logs, pipes, files) every phase gets one plain line as it
ends, with its duration ("kvadvisor: cache curves (1.20 s)"; the search one per provider), so
a piped run that takes a minute is never long silent; a phase that fails leaves no line (the
error line says what), so bad input still gets one line on stderr. ``quiet`` writes nothing
at all. The library announces its phases through :mod:`kvadvisor.phases`; the CLI passes them
to :meth:`Progress.phase`.
"""

from __future__ import annotations

import itertools
import shutil
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
# The live line's room for the elapsed time and the spinner; the label is cut to the rest,
# since a line that wraps can no longer be redrawn in place.
LIVE_RESERVE = 14


class Progress:
    """Phase-by-phase progress for the CLI: a live line on a terminal, lines when piped."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        quiet: bool = False,
        live: bool | None = None,
    ) -> None:
        """Write to ``stream`` (default stderr); ``live`` None means "if it is a TTY"."""
        self.stream = stream if stream is not None else sys.stderr
        if live is None:
            isatty = getattr(self.stream, "isatty", None)
            live = bool(isatty and isatty())
        self.live = live
        self.enabled = not quiet
        self._label = ""  # what the live line shows
        self._open: str | None = None  # the phase running, piped: its line is due at its end
        self._since = time.monotonic()
        self._lock = threading.Lock()

    def phase(self, name: str, detail: str = "") -> None:
        """A phase begins or moves on ("search", "aws, 2 of 5"); piped, the last one's line."""
        if not self.enabled:
            return
        name = printable(name, one_line=True)  # file names may hold escape sequences
        detail = printable(detail, one_line=True)
        label = f"{name}: {detail}" if detail else name
        now = time.monotonic()
        with self._lock:
            ended, since = self._open, self._since
            self._label = self._open = label
            self._since = now
        if ended is not None and ended != label and not self.live:
            self._write(f"kvadvisor: {ended} ({duration(now - since)})\n")

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        """Run a step named ``what``: its phases on a live line, or piped one line each."""
        if not self.enabled:
            yield
            return
        what = printable(what, one_line=True)
        start = time.monotonic()
        with self._lock:
            self._label, self._open, self._since = what, None, start
        stop = threading.Event()
        room = max(10, shutil.get_terminal_size().columns - LIVE_RESERVE)

        def spin() -> None:
            for ch in itertools.cycle(SPINNER):
                if stop.wait(REDRAW_S):
                    return
                with self._lock:
                    label = self._label
                if len(label) > room:
                    label = label[: room - 1] + "…"
                # \x1b[K clears what a longer label left; the time is padded for the same reason.
                self._write(f"\r{ch} {label} {duration(time.monotonic() - start):<8}\x1b[K")

        thread = None
        if self.live:
            thread = threading.Thread(target=spin, name="kvadvisor-progress", daemon=True)
            thread.start()
        outcome = "failed"
        try:
            yield
            outcome = "done"
        finally:
            stop.set()
            if thread is not None:
                thread.join()
                self._write("\r\x1b[K")
            elapsed = time.monotonic() - start
            with self._lock:
                last, since = self._open, self._since
                self._open = None
            if not self.live:
                # Piped, a failure says nothing more: the error line that follows says what.
                if outcome == "done":
                    done = f"{last} ({duration(time.monotonic() - since)})" if last else None
                    self._write(f"kvadvisor: {done or f'{what} ({duration(elapsed)})'}\n")
            elif elapsed >= QUIET_BELOW_S or outcome == "failed":
                self._write(f"{what}: {outcome} in {duration(elapsed)}\n")

    def note(self, text: str) -> None:
        """One line of its own (over a live line, which redraws below it); none when quiet."""
        if self.enabled:
            self._write(f"\r\x1b[K{text}\n" if self.live else f"{text}\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
