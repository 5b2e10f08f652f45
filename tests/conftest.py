"""Shared test fixtures: the real public traces, as the repository carries them in sample_traces/.

Every test runs from a plain clone: the traces come from ``sample_traces/`` (the Mooncake
conversation trace whole as canonical parquet, its first 400 lines as published JSONL, and the
Azure 2023 code trace whole as published CSV, zstd-compressed); nothing here needs a folder
beside the repository.
"""

from __future__ import annotations

import gzip
import os
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
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if os.environ.get("NUMBA_CACHE_DIR") or (
        worker is None and config.getoption("numprocesses", None)
    ):
        return
    os.environ["NUMBA_CACHE_DIR"] = str(
        REPO / "tests" / "__pycache__" / f"numba-{worker or 'main'}"
    )


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
