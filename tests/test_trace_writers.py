"""Canonical parquet: exact round trips, metadata, row groups, permissions, no clobbering."""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvadvisor.errors import ConfigError, KvAdvisorWarning
from kvadvisor.trace import read_trace, write_parquet
from kvadvisor.trace.model import META_BLOCK_TOKENS
from kvadvisor.trace.schema import build_trace

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
FIX = REPO / "tests" / "fixtures" / "traces"
TRACE_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".gz", ".zst")
SAMPLE_FILES = sorted(p for p in SAMPLES.iterdir() if p.name.endswith(TRACE_SUFFIXES))
OPTIONS = {
    "tiny_canonical.csv": {"block_tokens": 16},
    "tiny_mapped.csv": {
        "column_map": ["arrival_s=ts_ms:ms", "input_tokens=prompt_len", "output_tokens=gen_len"]
    },
}
FIXTURES = sorted(p for p in FIX.glob("tiny_*"))


def _same(a, b) -> None:
    assert a.table.equals(b.table)
    assert a.table.schema == b.table.schema
    assert (a.block_tokens, a.source_format, a.notes, dict(a.dropped), a.arrivals_measured) == (
        b.block_tokens,
        b.source_format,
        b.notes,
        dict(b.dropped),
        b.arrivals_measured,
    )


def test_every_sample_is_present_and_small() -> None:
    """One sample per source format, under 10 MB in all."""
    assert len(SAMPLE_FILES) >= 9
    assert sum(p.stat().st_size for p in SAMPLES.iterdir()) < 10_000_000


@pytest.mark.parametrize("path", SAMPLE_FILES + FIXTURES, ids=lambda p: p.name)
def test_round_trip_is_exact(path, tmp_path) -> None:
    """The written parquet reads back to the same Trace (table, types, metadata, notes)."""
    options = OPTIONS.get(path.name, {})
    original = read_trace(path, **options)
    out = tmp_path / "out.parquet"
    write_parquet(original, out)
    again = read_trace(out)
    _same(original, again)
    # And a second generation is byte-for-byte the same data.
    out2 = tmp_path / "out2.parquet"
    write_parquet(again, out2)
    _same(again, read_trace(out2))


def test_metadata_and_row_groups(tmp_path) -> None:
    """block_tokens sits in the schema metadata; row groups hold 128k rows."""
    n = 300_000
    trace = build_trace(
        pa.table(
            {
                "arrival_s": np.arange(n, dtype=np.float64),
                "input_tokens": np.ones(n, np.int64),
                "output_tokens": np.ones(n, np.int64),
            }
        ),
        path="mem",
        source_format="csv",
        block_tokens=64,
    )
    out = tmp_path / "big.parquet"
    write_parquet(trace, out)
    meta = pq.ParquetFile(out).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [
        131_072,
        131_072,
        300_000 - 262_144,
    ]
    assert pq.read_schema(out).metadata[META_BLOCK_TOKENS] == b"64"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_output_respects_umask(umask, mode, tmp_path) -> None:
    """The written file gets the usual mode for the umask, not mkstemp's 0600."""
    trace = read_trace(FIX / "tiny_mooncake.jsonl")
    old = os.umask(umask)
    try:
        write_parquet(trace, tmp_path / "o.parquet")
    finally:
        os.umask(old)
    assert (tmp_path / "o.parquet").stat().st_mode & 0o777 == mode


def test_refuses_to_overwrite_its_input(tmp_path) -> None:
    """Writing over the source trace is refused, and the source is untouched."""
    src = tmp_path / "t.parquet"
    write_parquet(read_trace(FIX / "tiny_mooncake.jsonl"), src)
    before = src.read_bytes()
    with pytest.raises(ConfigError, match="refusing to overwrite the input"):
        write_parquet(read_trace(src), src)
    assert src.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]  # no temp file left


@st.composite
def _canonical_tables(draw):
    n = draw(st.integers(1, 30))
    arrivals = draw(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=n, max_size=n))
    tokens = st.lists(st.integers(0, 200_000), min_size=n, max_size=n)
    cols = {"arrival_s": arrivals, "input_tokens": draw(tokens), "output_tokens": draw(tokens)}
    if draw(st.booleans()):
        cols["block_hashes"] = draw(
            st.lists(
                st.one_of(st.none(), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5)),
                min_size=n,
                max_size=n,
            )
        )
    if draw(st.booleans()):
        cols["ok"] = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if draw(st.booleans()):
        cols["ttft_s"] = draw(
            st.lists(st.one_of(st.none(), st.floats(0, 100)), min_size=n, max_size=n)
        )
    if draw(st.booleans()):
        cols["session_id"] = draw(
            st.lists(st.one_of(st.none(), st.text(max_size=4)), min_size=n, max_size=n)
        )
    return pa.table(cols), draw(st.one_of(st.none(), st.integers(1, 1024)))


@settings(max_examples=25, deadline=None)
@given(_canonical_tables())
def test_round_trip_property(case) -> None:
    """Any valid canonical table survives write + read unchanged (metadata included)."""
    table, block_tokens = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KvAdvisorWarning)  # random spans may look like ms
        trace = build_trace(table, path="mem", source_format="csv", block_tokens=block_tokens)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "t.parquet"
            write_parquet(trace, out)
            _same(trace, read_trace(out))
