"""benchmarks/bench_suite.py reads the suite's figures from .ci/run's output, not the extra's."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_suite import read_log

# The tail of a passing .ci/run (this stop's, 1fa21d8 with ../shared): the suite's summary,
# then the [silicon] step's.
PASSED = """\
........................................................................ [ 99%]
..                                                                       [100%]
=============================== warnings summary ===============================
  Hosting the HTTP server on port 46039 instead
-- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html
2867 passed, 4 warnings in 797.85s (0:13:17)
..                                                                       [100%]
2 passed, 2867 deselected in 35.07s
"""


def test_the_suites_summary_not_the_extras() -> None:
    """2,867 tests in 797.85 s: the first summary line, not the [silicon] step's 2 in 35.07 s."""
    assert read_log(PASSED) == (2867, 797.85, None)


def test_a_failed_suite_has_no_seconds_and_says_how_many_failed() -> None:
    """Failures come first in a -q summary ("1 failed, 2866 passed"): no passing suite to time."""
    text = "FAILED tests/test_x.py::test_y - assert 1 == 2\n"
    text += "1 failed, 2866 passed, 3 warnings in 700.12s (0:11:40)\n"
    assert read_log(text) == (None, None, 1)
    assert read_log("3 errors in 12.50s\n") == (None, None, 3)


def test_no_summary_at_all() -> None:
    """An install that failed before pytest ran: nothing to read."""
    assert read_log("ERROR: Could not find a version that satisfies the requirement\n") == (
        None,
        None,
        None,
    )
