"""The real traces in sample_traces/ are the published files: the tests on them test real data.

The checksums and sizes are the published files' own (Mooncake ``conversation_trace.jsonl`` at
commit 3cca71d, Azure ``AzureLLMInferenceTrace_code.csv`` at commit 7909210; see
sample_traces/README.md). Everything here reads with pyarrow, gzip and hashlib, not kvadvisor.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa

MOONCAKE_SHA256 = "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df"
MOONCAKE_BYTES = 3_029_533
AZURE_CODE_SHA256 = "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6"
AZURE_CODE_BYTES = 320_117
HEAD_ROWS = 400
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _published_jsonl(rows: list[dict]) -> bytes:
    # The published file is json.dumps of each row with its keys in this order, one per line.
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def test_mooncake_parquet_is_the_published_trace(mooncake_rows: list[dict]) -> None:
    """The parquet's 12,031 rows, written as the published JSONL, give its exact bytes."""
    data = _published_jsonl(mooncake_rows)
    assert len(mooncake_rows) == 12_031
    assert len(data) == MOONCAKE_BYTES
    assert hashlib.sha256(data).hexdigest() == MOONCAKE_SHA256


def test_mooncake_head_is_the_first_lines(mooncake_rows: list[dict], mooncake_jsonl_path) -> None:
    """The gzip excerpt is the published file's first 400 lines, unchanged."""
    head = mooncake_jsonl_path.read_bytes()
    assert head == _published_jsonl(mooncake_rows[:HEAD_ROWS])
    assert head.count(b"\n") == HEAD_ROWS


def _zstd(path: Path) -> bytes:
    with pa.input_stream(str(path), compression="zstd") as stream:
        return bytes(stream.read())


def test_azure_code_is_the_published_trace(azure_code_csv_path: Path) -> None:
    """The zstd file decompresses to the published Azure code trace, byte for byte."""
    data = azure_code_csv_path.read_bytes()
    assert len(data) == AZURE_CODE_BYTES
    assert hashlib.sha256(data).hexdigest() == AZURE_CODE_SHA256


def test_azure_head_is_the_first_lines(azure_code_csv_path: Path) -> None:
    """The short Azure excerpt is the header and the first 400 rows of the whole trace."""
    head = _zstd(SAMPLES / "azure_code_head.csv.zst")
    lines = azure_code_csv_path.read_bytes().splitlines(keepends=True)
    assert head == b"".join(lines[: HEAD_ROWS + 1])


def test_a_shared_copy_of_a_sample_is_left_out_and_another_trace_kept(
    azure_code_csv_path: Path, tmp_path: Path
) -> None:
    """tests/advice_traces.py drops a shared file by its bytes, not its name.

    The decompressed Azure sample (the published file) under another name is dropped; the same
    bytes with one more row are a different trace and stay.
    """
    from advice_traces import new_to_samples  # here: advice_traces imports this module

    copy = tmp_path / "renamed.csv"
    copy.write_bytes(azure_code_csv_path.read_bytes())
    other = tmp_path / "AzureLLMInferenceTrace_code.csv"
    other.write_bytes(azure_code_csv_path.read_bytes() + b"2023-11-16 18:20:00.0000000,10,20\n")
    assert new_to_samples([copy, other]) == [other]
