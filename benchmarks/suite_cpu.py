r"""Where the test suite's CPU goes: a pytest plugin that logs each test's CPU, and its summary.

Each test's CPU is user + system seconds of its worker and of every process the test waited for
(a ``kvadvisor`` subprocess, a fio run), from setup to teardown, so the fixtures a test builds
are charged to the first test that needs them; each worker's collection is logged too. One
JSON line per test, one file per xdist worker, in the folder named by ``KVADVISOR_SUITE_CPU``:

    KVADVISOR_SUITE_CPU=$HOME/suite-cpu PYTHONPATH=benchmarks \
        python -m pytest -q -n auto -p suite_cpu
    python benchmarks/suite_cpu.py $HOME/suite-cpu

The summary prints the CPU by file and the slowest tests. A process a test starts and does not
wait for (the Dask cluster's workers, the S3 server) is not counted.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ENV = "KVADVISOR_SUITE_CPU"
_OUT: list[Any] = []  # this process's log file, once opened (one process is one worker)


def _cpu() -> tuple[float, float]:
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


def _write(row: dict[str, object]) -> None:
    folder = os.environ.get(ENV)
    if not folder:
        return
    if not _OUT:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(folder).mkdir(parents=True, exist_ok=True)
        _OUT.append(open(Path(folder) / f"cpu-{worker}.jsonl", "a"))
    _OUT[0].write(json.dumps(row) + "\n")
    _OUT[0].flush()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Log the test's CPU (its own and its waited-for children's) and its wall."""
    own0, child0 = _cpu()
    wall0 = time.perf_counter()
    yield
    own1, child1 = _cpu()
    wall = time.perf_counter() - wall0
    _write({"test": item.nodeid, "cpu": own1 - own0, "child": child1 - child0, "wall": wall})


def pytest_collection_finish(session: pytest.Session) -> None:
    """Log what the process spent up to the end of its collection."""
    own, child = _cpu()
    _write({"test": "<collection>", "cpu": own, "child": child, "wall": 0.0})


def summary(folder: Path, top: int = 30) -> str:
    """The CPU by file and the ``top`` costliest tests, from the plugin's files in ``folder``."""
    rows = [
        json.loads(line) | {"worker": f.stem.removeprefix("cpu-")}
        for f in sorted(folder.glob("cpu-*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    tests = [r for r in rows if r["test"] != "<collection>"]
    total = sum(r["cpu"] + r["child"] for r in tests)
    out = [f"{len(tests)} tests, {total:.1f} CPU-s in tests (their subprocesses included)"]
    for r in rows:
        if r["test"] == "<collection>":
            out.append(
                f"collection ({r['worker']}): {r['cpu']:.1f} CPU-s, "
                f"{r['child']:.1f} in processes it waited for"
            )
    by_file: collections.Counter[str] = collections.Counter()
    for r in tests:
        by_file[r["test"].split("::")[0]] += r["cpu"] + r["child"]
    out.append("CPU-s by file:")
    out += [f"{cpu:8.1f}  {name}" for name, cpu in by_file.most_common(top)]
    out.append("CPU-s by test (subprocesses, wall):")
    for r in sorted(tests, key=lambda r: -(r["cpu"] + r["child"]))[:top]:
        out.append(
            f"{r['cpu'] + r['child']:8.1f}  ({r['child']:.1f}, {r['wall']:.1f} s)  {r['test']}"
        )
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit(f"usage: python {sys.argv[0]} FOLDER  (the folder {ENV} named)")
    print(summary(Path(sys.argv[1])))
