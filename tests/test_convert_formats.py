"""`convert --to parquet|csv|mooncake`: each real sample written and read back into the same rows.

Parquet is lossless (every column and the metadata). CSV keeps every column and value; its
block size is given back with ``--block-tokens``. Mooncake JSONL keeps what the format has:
arrival (ms timestamps, so within a nanosecond), the token counts and the hash ids; what it
cannot hold is said in a warning. The expected values come from reading the sample itself.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import kvadvisor
from kvadvisor.cli import EXIT_OK, EXIT_USER_ERROR, app
from kvadvisor.cli.traces import EXTENSIONS, OutFormat
from kvadvisor.errors import KvAdvisorWarning
from kvadvisor.trace import read_trace
from kvadvisor.trace.writers import FORMATS, MOONCAKE_COLUMNS

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
TRACE_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".gz", ".zst")
SAMPLE_FILES = sorted(p for p in SAMPLES.iterdir() if p.name.endswith(TRACE_SUFFIXES))
runner = CliRunner()


def test_the_cli_and_the_writers_agree() -> None:
    """--to's choices and the extensions are the writers' own."""
    assert {f.value for f in OutFormat} == set(FORMATS) and EXTENSIONS == FORMATS


def _convert(path: Path, out: Path, to: str) -> list[str]:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", KvAdvisorWarning)
        kvadvisor.convert(path, out, to=to)
    return [str(w.message) for w in said if issubclass(w.category, KvAdvisorWarning)]


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_csv_round_trip(path: Path, tmp_path: Path) -> None:
    """Every column and value comes back from the CSV (the block size given back)."""
    original = read_trace(path)
    out = tmp_path / "t.csv"
    said = _convert(path, out, "csv")
    hashed = "block_hashes" in original.table.column_names
    assert any("--block-tokens" in s for s in said) == hashed
    back = read_trace(out, "csv", block_tokens=original.block_tokens if hashed else None)
    assert back.table.equals(original.table), path.name
    assert back.block_tokens == (original.block_tokens if hashed else None)


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_mooncake_round_trip(path: Path, tmp_path: Path) -> None:
    """Arrival, token counts and hash ids come back; the columns left out are named."""
    original = read_trace(path)
    out = tmp_path / "t.jsonl"
    said = _convert(path, out, "mooncake")
    table = original.table
    lost = [
        c
        for c in table.column_names
        if c not in MOONCAKE_COLUMNS and table.column(c).null_count < table.num_rows
    ]
    assert any("no place for " + ", ".join(lost) in s for s in said) == bool(lost), said
    first = json.loads(out.read_text().splitlines()[0])
    assert set(first) <= {"timestamp", "input_length", "output_length", "hash_ids"}
    hashed = "block_hashes" in table.column_names
    other_blocks = hashed and original.block_tokens != 512
    back = read_trace(out, "mooncake", block_tokens=original.block_tokens if other_blocks else None)
    assert back.requests == original.requests
    np.testing.assert_allclose(
        back.table.column("arrival_s").to_numpy(),
        table.column("arrival_s").to_numpy(),
        rtol=0,
        atol=1e-9,
    )
    for column in ("input_tokens", "output_tokens", "block_hashes"):
        if column in table.column_names:
            assert back.table.column(column).equals(table.column(column)), column
        else:
            assert column not in back.table.column_names
    if hashed:
        assert back.block_tokens == original.block_tokens


@pytest.mark.parametrize("path", SAMPLE_FILES[:3], ids=lambda p: p.name)
def test_parquet_is_still_lossless(path: Path, tmp_path: Path) -> None:
    """--to parquet (and a .parquet name) keeps the whole Trace, metadata included."""
    original = read_trace(path)
    out = tmp_path / "t.parquet"
    assert _convert(path, out, "parquet") == []
    back = read_trace(out)
    assert back.table.equals(original.table)
    assert (back.block_tokens, back.notes, back.arrivals_measured) == (
        original.block_tokens,
        original.notes,
        original.arrivals_measured,
    )


def test_the_extension_names_the_format(tmp_path: Path) -> None:
    """-o x.jsonl writes Mooncake, x.csv CSV; --to wins over the name; else one error line."""
    trace = SAMPLES / "mooncake_conversation_head.jsonl.gz"
    jsonl = tmp_path / "x.jsonl"
    res = runner.invoke(app, ["convert", str(trace), "-o", str(jsonl)])
    assert res.exit_code == EXIT_OK, res.output
    assert res.stderr == f"wrote {jsonl}: Mooncake JSONL\n"  # nothing lost: no warning
    assert json.loads(jsonl.read_text().splitlines()[0])["timestamp"] == 0
    forced = tmp_path / "x.data"
    res = runner.invoke(app, ["convert", str(trace), "-o", str(forced), "--to", "csv"])
    assert res.exit_code == EXIT_OK and "canonical CSV" in res.stderr
    assert forced.read_text().startswith('"arrival_s",')
    res = runner.invoke(app, ["convert", str(trace), "-o", str(tmp_path / "x.txt")])
    assert res.exit_code == EXIT_USER_ERROR
    assert res.stderr.startswith("error: ") and "--to parquet|csv|mooncake" in res.stderr
    assert not (tmp_path / "x.txt").exists()
