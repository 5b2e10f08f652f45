"""Trace readers on input that ended in Arrow tracebacks or ran away (issue 31, parts I to M).

Before the fixes: an Azure timestamp at 1970 beside 2023 was an ArrowInvalid traceback; a
20,000-column CSV took over a minute (a scan of every column name per column); empty vLLM
bench lists, nested SGLang ``itls`` and a mixed-type LLMPerf ``error_code`` were Arrow
tracebacks; a small ``.csv.gz`` expanding a thousandfold was read whole until memory ran
out; a parquet ``kvadvisor.block_tokens`` of 20 digits overflowed; "0x10" in a CSV was read
as 16 where JSONL refuses it; plain JSONL named ``.jsonl.gz`` was refused.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner

from kvadvisor.cli import app
from kvadvisor.errors import TraceFormatError, TraceSchemaError
from kvadvisor.trace import read_trace

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
runner = CliRunner()
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def _raises(error: type[Exception], path: Path, *needles: str, **kw: object) -> str:
    with pytest.raises(error) as info:
        read_trace(path, **kw)
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def test_azure_timestamps_decades_apart_are_one_schema_error(tmp_path: Path) -> None:
    """1970 beside 2023: the float cast of 1.7e18 ns was refused by pyarrow's checked cast."""
    path = tmp_path / "azure.csv"
    path.write_text(
        f"{AZURE_HEADER}\n2023-11-16 18:17:03.9799600,4808,10\n1970-01-01 00:00:00.0000000,31,8\n"
    )
    _raises(TraceSchemaError, path, "row 2", "arrivals may span at most")


@pytest.mark.parametrize("source", ["azure", "burstgpt"])
def test_wide_csv_reads_in_linear_time(tmp_path: Path, source: str) -> None:
    """20,000 unused columns: over 60 s before (a list of every name built per column)."""
    extra = [f"x{i}" for i in range(20_000)]
    if source == "azure":
        header = [*AZURE_HEADER.split(","), *extra]
        rows = [["2023-11-16 18:17:03.97", "10", "2"], ["2023-11-16 18:17:04.97", "20", "3"]]
    else:
        header = ["Timestamp", "Model", "Request tokens", "Response tokens", *extra]
        rows = [["0", "GPT-4", "10", "2"], ["1", "GPT-4", "20", "3"]]
    lines = [",".join(header)] + [",".join(r + ["1"] * len(extra)) for r in rows]
    path = tmp_path / f"{source}.csv"
    path.write_text("\n".join(lines) + "\n")
    start = time.monotonic()
    assert read_trace(path).requests == 2
    assert time.monotonic() - start < 20  # about 1 s; 60 s and more before


def _bench(tmp_path: Path, name: str, change) -> Path:
    sample = SAMPLES / name
    if name.endswith(".jsonl"):
        run = json.loads(sample.read_text().splitlines()[0])
    else:
        run = json.loads(sample.read_text())
    change(run)
    path = tmp_path / name
    path.write_text(json.dumps(run) + "\n")
    return path


def test_vllm_bench_with_empty_lists_is_a_user_error(tmp_path: Path) -> None:
    """Empty per-request lists have pyarrow's null type, which list_flatten refused."""

    def empty(run: dict) -> None:
        for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
            run[key] = []

    path = _bench(tmp_path, "vllm_bench_old.json", empty)
    _raises(TraceFormatError, path, "no requests in the file", "input_lens is empty")


def test_sglang_nested_itls_name_the_cell(tmp_path: Path) -> None:
    """A list per inter-token latency (one level too deep) failed in a float cast."""

    def nest(run: dict) -> None:
        run["details"]["itls"] = [[[0.1, 0.2]] for _ in run["details"]["input_lens"]]

    path = _bench(tmp_path, "sglang_bench_details.jsonl", nest)
    _raises(TraceSchemaError, path, "row 1", "'itls[0]'", "is not a list of numbers")


def test_llmperf_error_code_of_mixed_types_is_read(tmp_path: Path) -> None:
    """An HTTP status in one request and a message in another: both are failures."""
    records = json.loads((SAMPLES / "llmperf_individual_responses.json").read_text())
    before = read_trace(SAMPLES / "llmperf_individual_responses.json")
    failed_before = before.requests - int(before.table["ok"].to_numpy().sum())
    fresh = [i for i, r in enumerate(records) if r["error_code"] is None][:2]
    records[fresh[0]]["error_code"] = 500
    records[fresh[1]]["error_code"] = "timeout"
    path = tmp_path / "llmperf_individual_responses.json"
    path.write_text(json.dumps(records))
    trace = read_trace(path)
    assert trace.requests - int(trace.table["ok"].to_numpy().sum()) == failed_before + 2


def test_a_csv_decompression_bomb_stops_at_the_memory_limit(tmp_path: Path) -> None:
    """175 KB of gzip, 120 MB of text: analyze read it whole; now it stops at --memory-limit."""
    path = tmp_path / "bomb.csv.gz"
    path.write_bytes(
        gzip.compress(b"arrival_s,input_tokens,output_tokens\n" + b"0,1,1\n" * 20_000_000, 1)
    )
    out = tmp_path / "a.json"
    args = ["analyze", str(path), "--memory-limit", "50MB", "-o", str(out)]
    one_error_line(runner.invoke(app, args), "more than 50,000,000 bytes of text", "--memory-limit")
    assert not out.exists()
    _raises(TraceFormatError, path, "more than 1,000 bytes", max_text_bytes=1000)


def test_huge_stored_block_tokens_is_damaged_metadata(tmp_path: Path) -> None:
    """20 digits passed the reader and overflowed int64 further on."""
    table = pa.table({"arrival_s": [0.0, 1.0], "input_tokens": [10, 20], "output_tokens": [1, 2]})
    path = tmp_path / "t.parquet"
    meta = {b"kvadvisor.block_tokens": b"12345678901234567890"}
    pq.write_table(table.replace_schema_metadata(meta), path)
    _raises(TraceFormatError, path, "'kvadvisor.block_tokens' is damaged", "up to 1,048,576")


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_hex_token_counts_are_refused_in_csv_as_in_jsonl(tmp_path: Path, suffix: str) -> None:
    """Pyarrow's CSV reader takes "0x10" for 16; the cell is named as any other bad one."""
    path = tmp_path / f"t{suffix}"
    text = "arrival_s,input_tokens,output_tokens\n0,12,1\n1,0x10,2\n"
    path.write_bytes(gzip.compress(text.encode()) if suffix.endswith(".gz") else text.encode())
    _raises(TraceSchemaError, path, "row 2", "'input_tokens'", "'0x10' is not an integer")


def test_hex_looking_text_elsewhere_is_not_a_problem(tmp_path: Path) -> None:
    """Only the numeric columns are held to it: a model name may hold "0x"."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens,model\n0,12,1,m-0x1\n1,16,2,m-0x1\n")
    assert read_trace(path).requests == 2


@pytest.mark.parametrize("name", ["plain.jsonl.gz", "plain.csv.zst"])
def test_plain_text_named_compressed_is_read(tmp_path: Path, name: str) -> None:
    """Compression is judged by magic bytes; pyarrow, given the path, judged by the name."""
    path = tmp_path / name
    if name.startswith("plain.jsonl"):
        path.write_text(
            '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
        )
    else:
        path.write_text("arrival_s,input_tokens,output_tokens\n0,10,2\n")
    assert read_trace(path).requests == 1


def test_every_command_keeps_the_csv_bound_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --memory-limit (convert and info have none) the bound is half the machine.

    The machine is made to read 20 MB of memory, so the bound is 10 MB; the 120 MB of text the
    bomb expands to stops there in convert and info, as it does in analyze.
    """
    monkeypatch.setattr("kvadvisor.trace.memory.physical_memory_bytes", lambda: 20_000_000)
    path = tmp_path / "bomb.csv.gz"
    path.write_bytes(
        gzip.compress(b"arrival_s,input_tokens,output_tokens\n" + b"0,1,1\n" * 20_000_000, 1)
    )
    out = tmp_path / "t.parquet"
    for args in (["convert", str(path), "-o", str(out)], ["info", str(path)]):
        one_error_line(runner.invoke(app, args), "more than 10,000,000 bytes of text")
    assert not out.exists()
    _raises(TraceFormatError, path, "more than 10,000,000 bytes")
