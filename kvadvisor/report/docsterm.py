"""The reference docs (Markdown) drawn for a terminal with rich: headings, tables, lists, wrapped.

The docs' anchors (``<a id="slug"></a>`` lines, the targets of `kvadvisor docs topic#slug`)
are for GitHub and the section lookup; a reader of the terminal has no use for them, so they
are dropped before drawing. The docs ship with the package and are ours, but a file can still
carry a control character: the drawn text is made safe as every terminal line is.
"""

from __future__ import annotations

import io
import re

from rich.console import Console
from rich.markdown import Markdown

from kvadvisor.termtext import printable

ANCHOR_LINE = re.compile(r'^<a id="[^"]*"></a>[ \t]*\n?', re.M)
_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.M)


def render_docs(markdown: str, width: int, *, color: bool = False) -> str:
    """``markdown`` drawn at ``width`` columns; ANSI styles only when ``color``."""
    console = Console(
        file=io.StringIO(),
        width=width,
        force_terminal=color,
        color_system="standard" if color else None,
        no_color=not color,
        highlight=False,
        emoji=False,
        legacy_windows=False,
        _environ={},  # the width and colour are the caller's, not COLUMNS' or NO_COLOR's
    )
    console.print(Markdown(printable(ANCHOR_LINE.sub("", markdown)), hyperlinks=False))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    # rich pads every line to the width; the padding carries nothing.
    return _TRAILING.sub(r"\1", text).rstrip("\n") + "\n"
