"""Command line: each command turns options into one library call and maps errors to exit codes.

One module per command group; importing them registers their commands on ``app``.
"""

import sys

import typer

from kvadvisor.cli import analyze, replay, review, rulescmd, traces, verify  # noqa: F401
from kvadvisor.cli.common import EXIT_FINDINGS, EXIT_OK, EXIT_USER_ERROR, app

__all__ = ["EXIT_FINDINGS", "EXIT_OK", "EXIT_USER_ERROR", "app", "main"]


def main() -> None:
    """Console-script entry point: exits with the command's code.

    The parser's own errors (an option out of range, an unknown option or command, a missing
    argument) would print a usage block and a boxed message; they become one ``error:`` line
    naming the command's --help, exit 2, like every other user error.
    """
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
