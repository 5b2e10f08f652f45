r"""Names made safe for every file kvadvisor generates: one checker, one quoter per format.

Names come from files other people write (a trace's file name, a plan's name, its tier names,
catalog names) and land in scripts, fio job files, engine configurations and READMEs. A raw
newline in one ends the comment line it is written into, and the next line is then code: a
shell command, a fio ``[global]`` section with ``exec_prerun=``. So names are checked where
they enter (:func:`name_problem`: printable, one line), and every writer still passes text
through the quoter of its format, so a name that was never checked cannot start a line either:

* comments (shell ``#``, fio ``;``, YAML ``#``) and Markdown: :func:`one_line` shows every
  control character, newlines included, as a visible escape (``\x0a``);
* shell words: :func:`shell_word` (POSIX single quotes; bash's ``$'...'`` escapes for a
  word with control characters, so it stays on one line);
* YAML and JSON scalars are written by their dumpers (``yaml.safe_dump``, ``json.dumps``),
  which quote on their own; nothing here replaces them.
"""

from __future__ import annotations

import shlex

from kvadvisor.termtext import printable


def name_problem(text: str) -> str | None:
    """Why ``text`` cannot be a name (None when it can): it must be printable and one line."""
    if not text.strip():
        return "is empty"
    shown = printable(text, one_line=True)
    if shown == text:
        return None
    bad = next(c for c in text if printable(c, one_line=True) != c)
    return (
        f"holds the control character U+{ord(bad):04X} ('{shown}'); a name must be printable "
        "text on one line (it is written into scripts, job files and reports)"
    )


def one_line(text: str) -> str:
    r"""``text`` on one line with every control character shown as ``\xNN`` (for comments)."""
    return printable(text, one_line=True)


def comment(text: str, prefix: str = "#") -> str:
    """A comment line ``<prefix> text`` that no character of ``text`` can end early."""
    return f"{prefix} {one_line(text)}" if text else prefix


def shell_word(text: str) -> str:
    """``text`` as one bash word on one line, safe to paste and to run.

    POSIX single quotes when ``text`` is printable; else bash's ``$'...'`` with each control
    character as an escape, so the word stays on its line and means exactly ``text`` (a lone
    surrogate, a file name byte that is not UTF-8, is written as that byte).
    """
    if one_line(text) == text:
        return shlex.quote(text)
    return "$'" + "".join(_ansi_c(ch) for ch in text) + "'"


def _ansi_c(ch: str) -> str:
    """One character inside bash's ``$'...'``: a control character as its UTF-8 bytes."""
    if ch in "\\'":
        return "\\" + ch
    if one_line(ch) == ch:
        return ch
    # Bytes, not \u: bash writes \u in the locale's charset; \xNN is the same byte anywhere.
    return "".join(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogateescape"))
