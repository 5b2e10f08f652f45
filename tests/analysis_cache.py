"""One analysis per distinct trace and options in a test run, shared by the files that repeat it.

The round trips (tests/test_advice_roundtrip.py, tests/test_emit_roundtrip.py) analyse every
sample trace with the same options, the whole 12,031-request Mooncake trace and the whole
8,819-request Azure trace among them. The first file to ask computes the report; the others
read it back (pickled, so each gets its own copy). Under pytest-xdist the workers share the
run's base temporary directory, and a file lock per key makes a second worker wait for the
first's result instead of computing it again. The key holds the trace file's path, size and
modification time and the options' repr, so a different input is a different analysis; the
directory belongs to one run, so a changed kvadvisor is never read from an older one.

``analyze_run`` does the same for a user's command: ``kvadvisor analyze TRACE`` in a
subprocess, piped, at a given width, once per run (the README's command is also the Mooncake
case of tests/test_verdict_block.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import fio_prerun
import pytest

from kvadvisor.pipeline import AnalyzeOptions
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.results.report import AdviceReport
from kvadvisor.trace.model import Trace

T = TypeVar("T")


def _run_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This run's directory for shared results: the workers' common base under xdist."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / "analyses"
    folder.mkdir(exist_ok=True)
    return folder


def _once(folder: Path, key: str, compute: Callable[[], T]) -> T:
    """``compute()`` once per key in this run: the first caller computes, the others read it."""
    done = folder / f"{key}.pickle"
    with open(folder / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if done.exists():
            return pickle.loads(done.read_bytes())
        result = compute()
        part = folder / f"{key}.part"
        part.write_bytes(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(part, done)
        return result


@contextlib.contextmanager
def device_to_itself(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hold the run's one fio lock: a timed fio run has the disk alone among the workers.

    fio's rate-limited phases check that the device moved the rate asked for; a second fio run
    on the same disk at the same moment (the striped test's loop devices, the gate's candidate
    run, on the other xdist worker) takes part of the bandwidth it measures. The background
    fio runs (tests/fio_prerun.py) hold the same lock.
    """
    with open(fio_prerun.lock_path(_run_directory(tmp_path_factory)), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


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
    return _once(_run_directory(tmp_path_factory), key, lambda: analyze(trace, options, **kwargs))


@dataclass(frozen=True)
class Run:
    """One finished ``kvadvisor analyze`` command: its exit status, its output, its report."""

    returncode: int
    stdout: str
    stderr: str
    report: Path  # the JSON it wrote (-o), shared by every test that asks: read, never write


def analyze_run(tmp_path_factory: pytest.TempPathFactory, trace: str, columns: int) -> Run:
    """``python -m kvadvisor analyze TRACE -o report.json`` as a user runs it, once per run.

    Piped, in the repository root, with only COLUMNS, PATH and a HOME of its own; the worker's
    kernel cache (tests/conftest.py), already compiled, rather than the in-tree one, which two
    workers would write at once, or a cold one in the new HOME.
    """
    root = Path(__file__).resolve().parents[1]
    key = hashlib.sha256(repr(("analyze", trace, columns)).encode()).hexdigest()[:32]
    folder = _run_directory(tmp_path_factory)
    home = folder / key
    report = home / "report.json"

    def run() -> Run:
        home.mkdir(exist_ok=True)
        env = {"COLUMNS": str(columns), "PATH": "/usr/bin:/bin", "HOME": str(home)}
        if os.environ.get("NUMBA_CACHE_DIR"):
            env["NUMBA_CACHE_DIR"] = os.environ["NUMBA_CACHE_DIR"]
        done = subprocess.run(
            [sys.executable, "-m", "kvadvisor", "analyze", trace, "-o", str(report)],
            cwd=root,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        return Run(done.returncode, done.stdout, done.stderr, report)

    return _once(folder, key, run)
