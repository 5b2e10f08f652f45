"""A run's long phases announce themselves here; the CLI's progress display listens.

`analyze` spends seconds to minutes in a few phases (reading the trace, the cache curves, the
stage profile, the deployment search provider by provider, the replay, the report). Library
code only calls :func:`enter`; without a listener nothing happens, so library use stays
silent and pays nothing. A leaf: every layer may announce, none depends on who listens.
"""

from __future__ import annotations

from collections.abc import Callable

READING = "reading"
CACHE = "cache curves"
PROFILE = "stage profile"
SEARCH = "search"
CHECK = "checking the picks"
REPLAY = "replay"
REVIEW = "plan review"
REPORT = "report"

_listener: Callable[[str, str], None] | None = None


def listen(callback: Callable[[str, str], None] | None) -> None:
    """Send each phase entered, as (name, detail), to ``callback`` (None: stop listening)."""
    global _listener
    _listener = callback


def enter(name: str, detail: str = "") -> None:
    """A phase begins (or, with the same ``name``, moves on: "search", "aws, 2 of 5")."""
    if _listener is not None:
        _listener(name, detail)


def of(i: int, n: int, what: str = "") -> str:
    """A position in a counted phase: "2 of 5" or "aws, 2 of 5"."""
    return f"{what}, {i} of {n}" if what else f"{i} of {n}"
