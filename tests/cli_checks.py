"""Shared assertion for the CLI tests: a user error is exit 2 and one ``error:`` line."""

from __future__ import annotations

import re

from kvadvisor.cli import EXIT_USER_ERROR


def one_error_line(result, *needles: str) -> str:
    """Exit 2, exactly one stderr line starting 'error:', no traceback, naming the needles.

    A piped run may first have said which phases finished (docs/errors.md): those progress
    lines are not part of the error.
    """
    assert result.exit_code == EXIT_USER_ERROR, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = without_progress(result.stderr)
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# A piped run's progress: "kvadvisor: PHASE (DURATION)" once each phase ends (docs/reports.md).
PROGRESS_LINE = re.compile(r"^kvadvisor: .+ \([0-9.,]+ (ns|µs|ms|s|min|h)\)$")


def without_progress(stderr: str) -> list[str]:
    """Stderr's lines less the progress lines of the phases that finished before an error."""
    return [line for line in stderr.strip().splitlines() if not PROGRESS_LINE.match(line)]
