"""One-time slow steps announce themselves here; the CLI decides whether to say so, and where.

The first run compiles the numba kernels (cached on disk afterwards) and has matplotlib build
its font cache: a few seconds on a quiet machine, more on a busy one, with nothing to show for
it. Library code only calls :func:`announce` (or :func:`watch_numba_compiles` after importing
numba); without a listener nothing is printed, so library use stays silent.
"""

from __future__ import annotations

from collections.abc import Callable

NUMBA_COMPILING = "compiling the numba kernels (once; later runs load them from the cache)"
FONT_CACHE = "matplotlib is building its font cache (once)"

_listener: Callable[[str], None] | None = None
_said: set[str] = set()
_watching = False


def listen(callback: Callable[[str], None] | None) -> None:
    """Send each announcement, once per process, to ``callback`` (None: stop listening)."""
    global _listener
    _listener = callback


def announce(what: str) -> None:
    """Say ``what`` (a slow step about to run for the first time) to the listener, once."""
    if _listener is None or what in _said:
        return
    _said.add(what)
    _listener(what)


def watch_numba_compiles() -> None:
    """Announce the first numba compilation of this process (a cache miss, not a cache load).

    Kernel modules call this right after importing numba; numba signals "numba:compile" only
    when a kernel is compiled, not when it is loaded from its on-disk cache.
    """
    global _watching
    if _watching:
        return
    from numba.core import event

    class _FirstCompile(event.Listener):  # type: ignore[misc]
        def on_start(self, ev: event.Event) -> None:
            announce(NUMBA_COMPILING)

        def on_end(self, ev: event.Event) -> None:
            pass

    event.register("numba:compile", _FirstCompile())
    _watching = True
