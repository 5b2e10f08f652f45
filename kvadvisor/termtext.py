r"""Text safe for a terminal: control characters from files and names shown as visible escapes.

File names, trace cells, cache tier names, rule, catalog and plan strings all reach the
terminal in messages and summaries. A raw ESC (or a C1 control such as U+009B, which some
terminals take as the start of a sequence) would let such a string clear the screen, move the
cursor or retitle the window; a raw CR would hide what came before it on the line. Each such
character is shown as a visible escape (``\x1b``), so the name stays recognisable.
"""

from __future__ import annotations

import re

# C0 controls except tab and newline, DEL, and the C1 controls (U+0080..U+009F).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f]")
# Unicode line and paragraph separators end a line in some terminals and editors; lone
# surrogates (a file name that is not UTF-8, decoded with surrogateescape) cannot be encoded.
_SEPARATORS = re.compile("[\u2028\u2029\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def printable(text: str, *, one_line: bool = False) -> str:
    r"""``text`` with every control character shown as ``\xNN``.

    Tabs and newlines are kept, unless ``one_line``: then they are escaped too, so the text
    stays on one line (an error message).
    """
    pattern = _CONTROL_ONE_LINE if one_line else _CONTROL
    text = pattern.sub(_escape, text)
    return _SEPARATORS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def has_control(text: str) -> str | None:
    """The first control character of ``text`` other than tab and newline, or None."""
    match = _CONTROL.search(text)
    return None if match is None else match.group()
