"""The assembled command line: importing the command modules registers their commands on app."""

from kvadvisor.cli import (  # noqa: F401 (registers)
    analyze,
    docscmd,
    replay,
    review,
    rulescmd,
    traces,
    verify,
)
from kvadvisor.cli.common import app, readable_help

# Every command, whichever module registered it, shows readable metavars in --help.
readable_help(app)

__all__ = ["app"]
