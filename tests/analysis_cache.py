"""One analysis per distinct trace and options in a test run, shared by the files that repeat it.

The round trips (tests/test_advice_roundtrip.py, tests/test_emit_roundtrip.py) analyse every
sample trace with the same options, the whole 12,031-request Mooncake trace and the whole
8,819-request Azure trace among them. The first file to ask computes the report; the others
read it back (pickled, so each gets its own copy). Under pytest-xdist the workers share the
run's base temporary directory, and a file lock per key makes a second worker wait for the
first's result instead of computing it again. The key holds the trace file's path, size and
modification time and the options' repr, so a different input is a different analysis; the
directory belongs to one run, so a changed kvadvisor is never read from an older one.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pickle
from pathlib import Path

import pytest

from kvadvisor.pipeline import AnalyzeOptions
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.results.report import AdviceReport
from kvadvisor.trace.model import Trace


def _run_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This run's directory for shared results: the workers' common base under xdist."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / "analyses"
    folder.mkdir(exist_ok=True)
    return folder


def analysed(
    tmp_path_factory: pytest.TempPathFactory,
    path: Path,
    trace: Trace,
    options: AnalyzeOptions,
    **kwargs: str,
) -> AdviceReport:
    """``analyze(trace, options, **kwargs)`` on ``trace`` (read from ``path``), once per run."""
    stat = path.stat()
    key = hashlib.sha256(
        repr(
            (str(path.resolve()), stat.st_size, stat.st_mtime_ns, options, sorted(kwargs.items()))
        ).encode()
    ).hexdigest()[:32]
    folder = _run_directory(tmp_path_factory)
    done = folder / f"{key}.pickle"
    with open(folder / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if done.exists():
            return pickle.loads(done.read_bytes())
        report = analyze(trace, options, **kwargs)
        part = folder / f"{key}.part"
        part.write_bytes(pickle.dumps(report, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(part, done)
        return report
