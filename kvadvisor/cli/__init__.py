"""Command line: each command turns options into one library call and maps errors to exit codes.

One module per command group; ``commands`` imports them all, which registers their commands on
``app``. This package itself loads none of them until ``app`` is used, so ``kvadvisor
--version`` answers without importing the command-line library.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from kvadvisor import __version__
from kvadvisor.lazy import lazy_exports

if TYPE_CHECKING:
    from kvadvisor.cli.commands import app
    from kvadvisor.cli.common import EXIT_FINDINGS, EXIT_OK, EXIT_USER_ERROR

_EXPORTS = {
    "app": "kvadvisor.cli.commands",
    "EXIT_FINDINGS": "kvadvisor.cli.common",
    "EXIT_OK": "kvadvisor.cli.common",
    "EXIT_USER_ERROR": "kvadvisor.cli.common",
}

__all__ = ["EXIT_FINDINGS", "EXIT_OK", "EXIT_USER_ERROR", "app", "main"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


def main() -> None:
    """Console-script entry point: exits with the command's code.

    The parser's own errors (an option out of range, an unknown option or command, a missing
    argument) would print a usage block and a boxed message; they become one ``error:`` line
    naming the command's --help, exit 2, like every other user error.
    """
    if sys.argv[1:] == ["--version"]:
        # The most common probe of an install: answered before typer and the commands load.
        sys.stdout.write(f"kvadvisor {__version__}\n")
        sys.exit(0)
    import typer

    from kvadvisor import firstuse
    from kvadvisor.cli.commands import app
    from kvadvisor.cli.common import EXIT_OK
    from kvadvisor.progress import Progress

    # A first run's one-time costs (kernel compilation, the font cache) are said, on a terminal.
    notes = Progress()
    firstuse.listen(lambda what: notes.note(f"kvadvisor: first run: {what}"))

    try:
        code = app(standalone_mode=False, prog_name="kvadvisor")
    except Exception as exc:
        # Duck-typed: Click's exceptions live in typer._click or click, by typer version.
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            raise
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "kvadvisor"
        typer.echo(f"error: {exc.format_message()} (see `{where} --help`)", err=True)
        sys.exit(exc.exit_code)
    except BaseException as exc:
        if type(exc).__name__ != "Abort":  # Ctrl-C or end of input at a prompt
            raise
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else EXIT_OK)
