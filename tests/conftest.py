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
import tempfile
import time
from pathlib import Path

import fio_prerun
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
    run (:func:`_start_one_compile`, :func:`pytest_collection_finish`), so the suite compiles
    them once, not once per worker.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None and not config.option.collectonly:
        _FIO["folder"] = Path(tempfile.mkdtemp(prefix="kvadvisor-fio-"))
        os.environ[fio_prerun.ENV] = str(_FIO["folder"])  # the workers inherit it
    if os.environ.get("NUMBA_CACHE_DIR") or (
        worker is None and config.getoption("numprocesses", None)
    ):
        return
    if worker is not None:
        _start_one_compile()
    os.environ["NUMBA_CACHE_DIR"] = str(CACHES / f"numba-{worker or 'main'}")


# The verify tests' fio runs in the background (tests/fio_prerun.py), in the process that
# schedules the tests: their folder, and the process once started.
_FIO: dict[str, object] = {}


def _start_fio(nodeids: list[str]) -> None:
    """Start the fio runs the collected tests read, once, as soon as the collection is known.

    Their timed phases take about 38 s of wall and almost no CPU: in the background they run
    while the workers compile, collect and test, instead of idling a worker's core.
    """
    folder = _FIO.get("folder")
    if isinstance(folder, Path) and "process" not in _FIO:
        _FIO["process"] = fio_prerun.start(folder, nodeids)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """The xdist controller: a worker's collection is known before any test is scheduled."""
    _start_fio(ids)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Let the background fio runs end (they detach their loop devices), then remove them."""
    process = _FIO.get("process")
    if isinstance(process, subprocess.Popen):
        try:
            process.wait(timeout=fio_prerun.WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    folder = _FIO.get("folder")
    if isinstance(folder, Path):
        shutil.rmtree(folder, ignore_errors=True)


# This run's warm-up: the process, in the one worker that started it; the marker that says it
# ended, in every worker.
_WARM_UP: dict[str, object] = {}


def _start_one_compile() -> None:
    """Start the run's one compile of the kernels, in the first worker to take the lock.

    A cold compile of the kernels costs about 40 CPU-seconds (two thirds of it the fleet
    replay's ``simulate_group``), and each worker paid it. Now the first worker to take the lock
    starts the warm-up below in a subprocess with ``numba-shared`` as its cache and goes on:
    both workers collect the tests (about 13 CPU-s each) while it compiles, instead of one
    waiting at the lock for the whole compile, its core idle, and both collecting after. Each
    copies the result into its own directory before the first test
    (:func:`pytest_collection_finish`). A kernel signature beyond those is compiled by the
    worker that needs it, in its own copy, as before. ``numba-shared`` stays between runs (a
    later run's warm-up loads, not compiles); the markers name this run (xdist's run id), so one
    worker runs the warm-up per run. Should the warm-up fail, the workers compile what is
    missing themselves and the tests say what broke.
    """
    shared = CACHES / "numba-shared"
    shared.mkdir(parents=True, exist_ok=True)
    run = f"run-{os.environ.get('PYTEST_XDIST_TESTRUNUID', 'none')}"
    _WARM_UP["done"] = shared / f"{run}.done"
    with open(CACHES / "numba-shared.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        started = shared / run
        if started.exists():
            return
        for old in shared.glob("run-*"):
            old.unlink()
        # The checkout's kvadvisor, as the workers import it: numba keys its cache on the
        # kernels' source paths.
        env = {**os.environ, "NUMBA_CACHE_DIR": str(shared), "PYTHONPATH": str(REPO)}
        _WARM_UP["process"] = subprocess.Popen(
            [sys.executable, "-c", _WARM_UP_CODE, str(MOONCAKE_HEAD_JSONL_GZ)],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started.touch()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Under xdist, before the first test: copy in the kernels the run's warm-up compiled.

    numba reads a kernel's cache index when the kernel first runs, not when its module is
    imported, so a copy made after collection is read by every test.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:  # a serial run: it schedules itself
        _start_fio([item.nodeid for item in session.items])
    done = _WARM_UP.get("done")
    if not isinstance(done, Path):
        return
    process = _WARM_UP.get("process")
    if isinstance(process, subprocess.Popen):
        process.wait()
        done.touch()
    deadline = time.monotonic() + 900  # a warm-up that never ends: compile the kernels here
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    shared, own = done.parent, Path(os.environ["NUMBA_CACHE_DIR"])
    own.mkdir(parents=True, exist_ok=True)
    for pattern in ("**/*.nbc", "**/*.nbi"):  # an index never names data not copied yet
        for f in shared.glob(pattern):
            target = own / f.relative_to(shared)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)


# The warm-up (argv[1]: the Mooncake head): its analysis with every default compiles the
# kernels that the analysis and its replay run, the fleet's simulate_group (about two thirds of
# the compile) among them. Decompressed, as parquet or with a sampled curve it compiled no more.
_WARM_UP_CODE = """
import sys
import kvadvisor
kvadvisor.analyze(sys.argv[1], generated_at="2026-01-01T00:00:00+00:00")
"""


# Files that read one shared result (tests/analysis_cache.py's analyses and the README
# command's run, or the run-wide fio lock) go to one xdist worker as one group: on two workers
# at once, the second would wait at the lock, its core idle, while the first computes. In a
# group they run one after another and the later files read the result computed already.
SHARED_GROUPS = {
    # The whole Mooncake and Azure traces with the round trips' options.
    "round-trips": (
        "test_advice_roundtrip.py",
        "test_emit_roundtrip.py",
        "test_advice_search.py",
        "test_report_iodemand.py",
        "test_rules_e2e.py",
    ),
    # `kvadvisor analyze sample_traces/mooncake_conversation.parquet` at 80 columns.
    "readme-command": (
        "test_verdict_block.py",
        "test_readme_answer.py",
        "test_report_json.py",
        "test_cli.py",
    ),
    # fio's timed phases, one run at a time across the workers (device_to_itself).
    "fio": ("test_verify_fio.py", "test_verify_striped.py", "test_verify_gate.py"),
}
GROUP_OF = {name: group for group, names in SHARED_GROUPS.items() for name in names}

# The groups and files that ran longest in the whole-suite profile (docs/benchmarks.md, "The
# test suite's wall time", sixth round), longest first. Under xdist they start first, so that
# no long one is drawn last and runs alone on one core while the other idles; the rest follow
# in collection order. Stale ranks only cost wall time, never a result.
SLOWEST_FIRST = (
    "round-trips",
    "readme-command",
    "test_reliability_cli.py",
    "fio",
    "test_cache_report.py",
    "test_notebook.py",
    "test_pipeline_streaming.py",
    "test_advice_own_findings.py",
    "test_reliability_memory.py",
    "test_trace_objectstore.py",
    "test_advice_cost_order.py",
    "test_api_doc.py",
    "test_distributed.py",
    # not in that profile: about 34 s of CPU each when added (issue 27's replay on Dask)
    "test_distributed_replay.py",
    # about 12 CPU-s since the seventh round (the Mooncake trace's first 4,000 requests)
    "test_pipeline_windows.py",
    "test_fleet_slices.py",
    "test_reliability_files.py",
    "test_perfmodel_bounds.py",
    "test_typing.py",
    "test_progress.py",
    "test_report_html_answer.py",
    "test_report_cli.py",
    "test_emit_router.py",
    "test_review.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, the slowest groups and files first; each keeps its tests' order.

    ``--dist loadfile`` hands out the units of :func:`pytest_xdist_make_scheduler` in
    collection order (pyproject's ``--no-loadscope-reorder``: xdist would otherwise order them
    by their number of tests), each worker taking the next as it runs dry: longest first is the
    schedule that leaves the shortest tail. Both workers collect the same order, as xdist
    requires. Serial runs keep the collection order.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    # Stable: within a group, its files and their tests keep their order.
    items.sort(key=lambda item: rank.get(GROUP_OF.get(item.path.name, item.path.name), len(rank)))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile``, with the files of one ``SHARED_GROUPS`` entry as one unit of work.

    A unit runs whole on one worker, so a module- or session-scoped fixture is built once, as
    xdist's own loadfile does for a file. (xdist's ``loadgroup`` would do this by marks, but it
    renames the tests through an attribute pytest 9 no longer reads, so every test became its
    own unit.) Any other ``--dist`` is xdist's own.
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedResultScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """Scope: the test's group if its file shares a result, else its file."""

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return GROUP_OF.get(path.rsplit("/", 1)[-1], path)

    return SharedResultScheduling(config, log)


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
