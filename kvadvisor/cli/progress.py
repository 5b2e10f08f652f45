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

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TextIO

from kvadvisor.termtext import printable
from kvadvisor.units.format import duration

REDRAW_S = 0.1
# Steps faster than this leave no "done" line: only long steps are worth a line in the scroll.
QUIET_BELOW_S = 0.5


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
        live = self._live_line(start) if self.live else nullcontext()
        outcome = "failed"
        try:
            with live:
                yield
            outcome = "done"
        finally:
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

    def _live_line(self, start: float) -> AbstractContextManager[object]:
        """Rich's Live display of one line: a spinner, the phase running, its elapsed time.

        Transient (it leaves nothing when the step ends) and cut to the width with an
        ellipsis, never wrapped, so it redraws in place. rich is imported here: a run that
        is piped or quiet does not load it for this.
        """
        from rich.console import Console
        from rich.live import Live
        from rich.spinner import Spinner
        from rich.text import Text

        spinner = Spinner("line")
        progress = self

        class StatusLine:
            def __rich__(self) -> Text:
                with progress._lock:
                    label = progress._label
                now = time.monotonic()
                frame = spinner.render(now)  # the spinner's frame for this moment
                # One Text, not the spinner's grid: a grid cell wraps, a Text can be cut.
                return Text.assemble(
                    frame,  # type: ignore[arg-type]
                    f" {label} {duration(now - start)}",
                    no_wrap=True,
                    overflow="ellipsis",
                )

        console = Console(
            file=self.stream, force_terminal=True, highlight=False, markup=False, emoji=False
        )
        return Live(
            StatusLine(),
            console=console,
            transient=True,
            refresh_per_second=1 / REDRAW_S,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    def note(self, text: str) -> None:
        """One line of its own (over a live line, which redraws below it); none when quiet."""
        if not self.enabled:
            return
        # Over another live line (the first-run notes have a Progress of their own): clear it
        # first; it redraws below on its next refresh.
        self._write(f"\r\x1b[K{text}\n" if self.live else f"{text}\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
