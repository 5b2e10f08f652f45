"""Command line: each command turns options into one library call and maps errors to exit codes.

One module per command group; importing them registers their commands on ``app``.
"""

import os
import signal
import sys
import threading

from kvadvisor import jitcache
from kvadvisor.cli import analyze, replay, review, rulescmd, traces, verify  # noqa: F401
from kvadvisor.cli.common import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USER_ERROR,
    app,
    error_line,
    silence_stdout,
)
from kvadvisor.fileio import remove_temporary_files

__all__ = ["EXIT_FINDINGS", "EXIT_OK", "EXIT_USER_ERROR", "app", "main"]

# Exit codes for a run stopped by a signal: 128 + the signal number, as a shell reports it.
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM


class Interrupted(BaseException):
    """Raised in the main thread by SIGINT or SIGTERM, to unwind the run.

    It goes through every ``finally`` and ``with`` (so temporary output files are removed)
    like Ctrl-C does, but is not a KeyboardInterrupt, which the parser would turn into its
    own "Aborted!".
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# Seconds a run has, after SIGINT or SIGTERM, to unwind through its clean-ups before it is
# stopped outright: the exception a signal raises can be swallowed by library code it lands
# in (an import inside numpy, a C extension's callback), or wait behind a long native call.
GRACE_S = 5.0
_stopping: list[int] = []


def _stop_message(signum: int) -> str:
    name = signal.Signals(signum).name
    return f"error: interrupted by {name}; no output was left half-written"


def _stop_now(signum: int) -> None:
    """Remove the temporary files and exit at once (from any thread)."""
    remove_temporary_files()
    jitcache.remove_directory()
    error_line(_stop_message(signum))
    os._exit(EXIT_SIGINT if signum == signal.SIGINT else EXIT_SIGTERM)


def _on_signal(signum: int, frame: object) -> None:
    if _stopping:  # a second signal: the user wants out now
        _stop_now(_stopping[0])
    _stopping.append(signum)
    watchdog = threading.Timer(GRACE_S, _stop_now, args=(signum,))
    watchdog.daemon = True
    watchdog.start()
    raise Interrupted(signum)


def main() -> None:
    """Console-script entry point: exits with the command's code.

    The parser's own errors (an option out of range, an unknown option or command, a missing
    argument) would print a usage block and a boxed message; they become one ``error:`` line
    naming the command's --help, exit 2, like every other user error. SIGINT and SIGTERM stop
    the run with one line and exit 130 or 143, temporary files removed.
    """
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    if jitcache.NOTE:
        error_line(jitcache.NOTE)
    try:
        code = app(standalone_mode=False, prog_name="kvadvisor")
    except Interrupted as stop:
        error_line(_stop_message(stop.signum))
        sys.exit(EXIT_SIGINT if stop.signum == signal.SIGINT else EXIT_SIGTERM)
    except Exception as exc:
        # Duck-typed: Click's exceptions live in typer._click or click, by typer version.
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            raise
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "kvadvisor"
        error_line(f"error: {exc.format_message()} (see `{where} --help`)")
        sys.exit(exc.exit_code)
    except BaseException as exc:
        if type(exc).__name__ != "Abort":  # end of input at a prompt
            raise
        error_line("Aborted!")
        sys.exit(1)
    finally:
        # A caller in the same process (a test, an embedding tool) gets its handlers back.
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    try:
        sys.stdout.flush()  # what the commands wrote is flushed as they write; this is the rest
    except OSError as exc:
        silence_stdout()
        error_line(f"error: stdout: cannot be written ({exc.strerror or exc})")
        sys.exit(EXIT_USER_ERROR)
    sys.exit(code if isinstance(code, int) else EXIT_OK)
