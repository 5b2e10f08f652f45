"""Shared test fixtures: the real public traces, as the repository carries them in sample_traces/.

Every test runs from a plain clone: the traces come from ``sample_traces/`` (the Mooncake
conversation trace whole as canonical parquet, its first 400 lines as published JSONL, and the
Azure 2023 code trace whole as published CSV, zstd-compressed); nothing here needs a folder
beside the repository.
"""

from __future__ import annotations

import fcntl
import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
# The whole Mooncake conversation trace (12,031 requests) in the canonical schema.
MOONCAKE_TRACE = SAMPLES / "mooncake_conversation.parquet"
# Its first 400 lines, byte for byte as published (gzip).
MOONCAKE_HEAD_JSONL_GZ = SAMPLES / "mooncake_conversation_head.jsonl.gz"
# The whole Azure LLM inference 2023 code trace (8,819 requests), byte for byte (zstd).
AZURE_CODE_TRACE = SAMPLES / "azure_code.csv.zst"
# The numba cache directories (ignored by git): one per worker, and the one compiled for all.
CACHES = REPO / "tests" / "__pycache__"


def pytest_configure(config: pytest.Config) -> None:
    """Give this process its own numba cache directory, before any test module imports numba.

    Under pytest-xdist (`-n auto`) each worker keeps its own cache. numba writes each cache file
    atomically, but two processes saving different signatures of one kernel at once can both
    read the index without the other's entry, take the same data-file number, and leave an
    index that points one signature at the other's machine code. One directory per worker has
    one writer at a time (a worker runs its tests, and the commands they start, one after
    another); the commands the tests start inherit it. numba reads NUMBA_CACHE_DIR at import,
    and this hook runs before collection imports the test modules; the xdist controller sets
    none (its workers inherit its environment). The directories sit in this checkout's
    tests/__pycache__ (ignored by git, not a shared /tmp name), so a second run loads what the
    first compiled. A serial run has one too (``numba-main``): numba lays a NUMBA_CACHE_DIR out
    by the kernels' source paths, so tests/test_reliability_memory.py can copy it whole for its
    runs as nobody.

    Under xdist each worker's directory starts as a copy of the kernels compiled once for the
    run (:func:`_seed_from_one_compile`), so the suite compiles them once, not once per worker.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if os.environ.get("NUMBA_CACHE_DIR") or (
        worker is None and config.getoption("numprocesses", None)
    ):
        return
    own = CACHES / f"numba-{worker or 'main'}"
    if worker is not None:
        _seed_from_one_compile(own)
    os.environ["NUMBA_CACHE_DIR"] = str(own)


def _seed_from_one_compile(own: Path) -> None:
    """Copy into ``own`` the kernels that the first worker of this run compiled for all.

    A cold compile of the kernels costs about 40 CPU-seconds (two thirds of it the fleet
    replay's ``simulate_group``), and each worker paid it. Now the first worker to take the lock
    runs the warm-up below in a subprocess with ``numba-shared`` as its cache, and every worker,
    that one included, copies the result into its own directory before numba is imported. A
    kernel signature beyond those is compiled by the worker that needs it, in its own copy, as
    before. ``numba-shared`` stays between runs (a later run's warm-up loads, not compiles); the
    marker names this run (xdist's run id), so one worker runs the warm-up per run. Should the
    warm-up fail, the workers compile what is missing themselves and the tests say what broke.
    """
    shared = CACHES / "numba-shared"
    shared.mkdir(parents=True, exist_ok=True)
    marker = shared / f"run-{os.environ.get('PYTEST_XDIST_TESTRUNUID', 'none')}"
    with open(CACHES / "numba-shared.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not marker.exists():
            for old in shared.glob("run-*"):
                old.unlink()
            # The checkout's kvadvisor, as the workers import it: numba keys its cache on the
            # kernels' source paths.
            env = {**os.environ, "NUMBA_CACHE_DIR": str(shared), "PYTHONPATH": str(REPO)}
            subprocess.run(
                [sys.executable, "-c", _WARM_UP, str(MOONCAKE_HEAD_JSONL_GZ)],
                cwd=REPO,
                env=env,
                capture_output=True,
                check=False,
            )
            marker.touch()
        own.mkdir(parents=True, exist_ok=True)
        for pattern in ("**/*.nbc", "**/*.nbi"):  # an index never names data not copied yet
            for f in shared.glob(pattern):
                target = own / f.relative_to(shared)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, target)


# The warm-up (argv[1]: the Mooncake head): its analysis with every default compiles the
# kernels that the analysis and its replay run, the fleet's simulate_group (about two thirds of
# the compile) among them. Decompressed, as parquet or with a sampled curve it compiled no more.
_WARM_UP = """
import sys
import kvadvisor
kvadvisor.analyze(sys.argv[1], generated_at="2026-01-01T00:00:00+00:00")
"""


# The test files that ran longest in the whole-suite profile (docs/benchmarks.md, "The test
# suite's wall time", fifth round), longest first. Under xdist they start first, so that no long
# file is drawn last and runs alone on one core while the other idles; the rest follow in
# collection order. Stale ranks only cost wall time, never a result.
SLOWEST_FIRST = (
    "test_pipeline_windows.py",
    "test_verdict_block.py",
    "test_pipeline_streaming.py",
    "test_cache_report.py",
    "test_report_json.py",
    "test_notebook.py",
    "test_reliability_memory.py",
    "test_advice_own_findings.py",
    "test_advice_cost_order.py",
    "test_api_doc.py",
    "test_fuzz.py",
    "test_reliability_cli.py",
    "test_trace_objectstore.py",
    "test_distributed.py",
    # not in that profile: about 34 s of CPU each when added (issue 27's replay on Dask)
    "test_distributed_replay.py",
    "test_fleet_slices.py",
    "test_report_html_answer.py",
    "test_report_cli.py",
    "test_advice_roundtrip.py",
    "test_rules_cli.py",
    "test_perfmodel_bounds.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, the slowest files first; each file's tests keep their order.

    ``--dist loadfile`` hands the files out in collection order (pyproject's
    ``--no-loadscope-reorder``: xdist would otherwise order them by their number of tests), each
    worker taking the next file as it runs dry: longest first is the schedule that leaves the
    shortest tail. Both workers collect the same order, as xdist requires. Serial runs keep the
    collection order.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable


def _sample(path: Path) -> Path:
    if not path.is_file():
        pytest.fail(
            f"{path.relative_to(REPO)} is missing: sample_traces/ ships with the repository"
        )
    return path


@pytest.fixture(scope="session")
def mooncake_path() -> Path:
    """The whole Mooncake FAST'25 conversation trace, as canonical parquet."""
    return _sample(MOONCAKE_TRACE)


@pytest.fixture(scope="session")
def mooncake_rows(mooncake_path: Path) -> list[dict]:
    """The Mooncake trace as its published JSONL rows, read with pyarrow alone (not kvadvisor).

    Keys as published: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``.
    ``tests/test_sample_traces.py`` checks these rows against the published figures.
    """
    table = pq.read_table(mooncake_path)
    return [
        {
            "timestamp": round(r["arrival_s"] * 1000),
            "input_length": r["input_tokens"],
            "output_length": r["output_tokens"],
            "hash_ids": r["block_hashes"],
        }
        for r in table.to_pylist()
    ]


@pytest.fixture(scope="session")
def mooncake_jsonl_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 400 lines of the published Mooncake JSONL, decompressed to a plain file."""
    out = tmp_path_factory.mktemp("mooncake") / "conversation_head.jsonl"
    out.write_bytes(gzip.decompress(_sample(MOONCAKE_HEAD_JSONL_GZ).read_bytes()))
    return out


@pytest.fixture(scope="session")
def azure_code_path() -> Path:
    """The whole Azure LLM inference 2023 code trace (zstd-compressed CSV, read as it is)."""
    return _sample(AZURE_CODE_TRACE)


@pytest.fixture(scope="session")
def azure_code_csv_path(azure_code_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same trace decompressed (by pyarrow, not kvadvisor) for the csv-module references."""
    out = tmp_path_factory.mktemp("azure") / "AzureLLMInferenceTrace_code.csv"
    with pa.input_stream(str(azure_code_path), compression="zstd") as stream:
        out.write_bytes(stream.read())
    return out


def pytest_addoption(parser: pytest.Parser) -> None:
    """--update-golden rewrites tests/golden/ from the current output (see tests/goldtest.py)."""
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden files under tests/golden/ instead of comparing with them",
    )
