"""The assembled command line: importing the command modules registers their commands on app."""

from kvadvisor.cli import analyze, replay, review, rulescmd, traces, verify  # noqa: F401
from kvadvisor.cli.common import app

__all__ = ["app"]
