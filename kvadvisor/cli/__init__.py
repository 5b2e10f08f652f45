"""Command line: each command turns options into one library call and maps errors to exit codes.

One module per command group; importing them registers their commands on ``app``.
"""

from kvadvisor.cli import analyze, review, rulescmd, traces  # noqa: F401 (registers commands)
from kvadvisor.cli.common import EXIT_FINDINGS, EXIT_OK, EXIT_USER_ERROR, app

__all__ = ["EXIT_FINDINGS", "EXIT_OK", "EXIT_USER_ERROR", "app", "main"]


def main() -> None:
    """Console-script entry point."""
    app()
