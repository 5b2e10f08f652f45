"""Streaming reader: one file, a directory, hive partitions, overlapping files, in order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from kvadvisor.errors import TraceFormatError, TraceSchemaError
from kvadvisor.synth import SynthShape, write_synth_parquet
from kvadvisor.trace import read_trace
from kvadvisor.trace.model import META_BLOCK_TOKENS
from kvadvisor.trace.stream import open_trace_stream, stream_trace

FIX = Path(__file__).resolve().parent / "fixtures" / "traces"
SHAPE = SynthShape(
    requests=3000,
    block_tokens=64,
    input_tokens_median=500.0,
    rate_per_s=20.0,
    sessions=200,
    seed=21,
)


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> tuple[str, pa.Table]:
    """A synthetic trace in one file (several row groups) and its table as read_trace gives."""
    path = tmp_path_factory.mktemp("whole") / "trace.parquet"
    write_synth_parquet(SHAPE, path, chunk_rows=700)
    return str(path), read_trace(path).table


def _collect(stream) -> pa.Table:
    return pa.Table.from_batches(list(stream)).combine_chunks()


def test_one_file_streams_to_the_same_table(whole) -> None:
    """One file streams in bounded batches to exactly the table read_trace gives."""
    path, table = whole
    stream = open_trace_stream(path, batch_rows=256)
    assert stream.requests == 3000 and stream.block_tokens == 64 and stream.has_hashes
    batches = list(stream)
    assert max(b.num_rows for b in batches) <= 256
    assert _collect(batches).equals(table.select(list(stream.columns)))


def test_hive_partitions_read_as_the_whole(whole, tmp_path) -> None:
    """Two-level hive partitions (path order is not time order) read as the whole file."""
    path, table = whole
    src = pq.read_table(path)

    def bucket(width: float) -> pa.Array:
        return pc.cast(pc.floor(pc.divide(src["arrival_s"], width)), pa.int64())

    # Two levels; "hour=10" sorts before "hour=2", so path order is not time order.
    ds.write_dataset(
        src.append_column("day", bucket(50.0)).append_column("hour", bucket(10.0)),
        tmp_path / "hive",
        format="parquet",
        partitioning=["day", "hour"],
        partitioning_flavor="hive",
        max_rows_per_group=200,
        preserve_order=True,
    )
    assert len(list((tmp_path / "hive").glob("day=*/hour=*/*.parquet"))) > 10
    stream = open_trace_stream(tmp_path / "hive", batch_rows=128)
    assert "hour" not in stream.columns and "day" not in stream.columns
    assert stream.block_tokens == 64
    assert len(stream._clusters) == len(stream.files)  # time-disjoint: no merge needed
    assert _collect(stream).equals(table.select(list(stream.columns)))


def test_overlapping_files_are_merged_in_arrival_order(whole, tmp_path) -> None:
    """Files spanning the same time are merged back into arrival order."""
    path, table = whole
    src = pq.read_table(path)
    for k in range(3):  # every third row: three files spanning the same time
        pq.write_table(
            src.take(pa.array(np.arange(k, src.num_rows, 3))),
            tmp_path / f"part-{k}.parquet",
            row_group_size=100,
        )
    stream = open_trace_stream(tmp_path, batch_rows=64)
    assert len(stream._clusters) == 1
    assert _collect(stream).equals(table.select(list(stream.columns)))


def test_a_time_range_reads_only_its_rows(whole, tmp_path) -> None:
    """since/until keep [since, until) of overlapping files; row groups outside are skipped."""
    path, table = whole
    src = pq.read_table(path)
    for k in range(3):
        pq.write_table(
            src.take(pa.array(np.arange(k, src.num_rows, 3))),
            tmp_path / f"part-{k}.parquet",
            row_group_size=100,
        )
    arrival = src["arrival_s"].to_numpy()
    since, until = float(arrival[1000]), float(arrival[2000])
    keep = (arrival >= since) & (arrival < until)
    stream = open_trace_stream(tmp_path, batch_rows=64, since_s=since, until_s=until)
    assert stream.requests == int(keep.sum())
    files = [f for cluster in stream._clusters for f in cluster]
    assert sum(len(f.row_groups) for f in files) < 30  # 3 files of 10 row groups
    want = src.filter(pa.array(keep)).select(list(stream.columns))
    got = _collect(stream)
    np.testing.assert_array_equal(
        got["arrival_s"].to_numpy(), want["arrival_s"].to_numpy() - arrival[keep][0]
    )
    assert got.drop_columns(["arrival_s"]).equals(want.drop_columns(["arrival_s"]))
    assert stream.notes[-1].startswith(f"--since {since:.15g} --until {until:.15g}: ")
    # The same range of the one file: the same rows, read through the same stream.
    one = open_trace_stream(path, since_s=since, until_s=until).read_all()
    assert one.table.equals(got)
    with pytest.raises(TraceFormatError, match="no request arrives in --since"):
        open_trace_stream(path, since_s=float(arrival[-1]) + 1)


def test_ties_across_files_keep_file_order(tmp_path) -> None:
    """Equal arrivals in different files come out in file order."""
    meta = {META_BLOCK_TOKENS: b"16"}
    for name, ids in (("a", [1, 2, 3]), ("b", [10, 20, 30])):
        t = pa.table(
            {"arrival_s": [5.0, 5.0, 6.0], "input_tokens": ids, "output_tokens": [1, 1, 1]}
        ).replace_schema_metadata(meta)
        pq.write_table(t, tmp_path / f"{name}.parquet")
    got = _collect(open_trace_stream(tmp_path, batch_rows=1))
    assert got["input_tokens"].to_pylist() == [1, 2, 10, 20, 3, 30]
    assert got["arrival_s"].to_pylist() == [0.0, 0.0, 0.0, 0.0, 1.0, 1.0]


def test_unsorted_file_is_one_clear_error(tmp_path) -> None:
    """A file going back in time is one error naming the row."""
    pq.write_table(
        pa.table(
            {"arrival_s": [0.0, 2.0, 1.0], "input_tokens": [1, 2, 3], "output_tokens": [1, 1, 1]}
        ),
        tmp_path / "x.parquet",
    )
    with pytest.raises(TraceFormatError, match="row 3: arrival_s goes back in time"):
        list(open_trace_stream(tmp_path / "x.parquet"))


def test_missing_column_and_mixed_block_sizes_are_errors(tmp_path) -> None:
    """A missing required column or mixed block sizes are clear errors."""
    pq.write_table(pa.table({"arrival_s": [0.0]}), tmp_path / "m.parquet")
    with pytest.raises(TraceSchemaError, match="input_tokens"):
        open_trace_stream(tmp_path / "m.parquet")
    d = tmp_path / "mixed"
    d.mkdir()
    for bt in (16, 512):
        t = pa.table({"arrival_s": [float(bt)], "input_tokens": [1], "output_tokens": [1]})
        pq.write_table(
            t.replace_schema_metadata({META_BLOCK_TOKENS: str(bt).encode()}), d / f"{bt}.parquet"
        )
    with pytest.raises(TraceFormatError, match="disagree on block_tokens"):
        open_trace_stream(d)


def test_in_memory_trace_streams_the_same(mooncake_path) -> None:
    """An in-memory Trace seen as a stream gives back its own table."""
    trace = read_trace(mooncake_path)
    stream = stream_trace(trace, batch_rows=1000)
    assert stream.requests == 12_031 and stream.block_tokens == 512
    assert _collect(stream).equals(trace.table)


def test_in_memory_stream_reads_back_the_same_trace() -> None:
    """read_all of an in-memory Trace's stream is that Trace: notes and dropped counts too.

    The BurstGPT fixture's first request arrives at 5 s and one request failed: read_trace
    notes both; a dropped count is given by hand.
    """
    from kvadvisor.trace.schema import build_trace

    read = read_trace(FIX / "tiny_burstgpt.csv")
    trace = build_trace(
        read.table,
        path=read.source_path,
        source_format="burstgpt",
        block_tokens=None,
        notes=read.notes,
        dropped={"unparseable": 2},
    )
    assert any(n.startswith("arrival_s shifted by 5.000000 s") for n in trace.notes)
    again = stream_trace(trace).read_all()
    assert again.notes == trace.notes and dict(again.dropped) == {"unparseable": 2}
    assert again.table.equals(trace.table)
    assert (again.source_format, again.block_tokens, again.arrivals_measured) == (
        "burstgpt",
        None,
        True,
    )


def test_unmeasured_arrivals_survive_a_directory(tmp_path) -> None:
    """Unmeasured arrivals stay unmeasured when the files are read as a directory.

    Files that say their arrivals were not measured (benchmark results without start
    times) keep saying so, as read_trace says for one file.
    """
    from kvadvisor.trace.schema import build_trace
    from kvadvisor.trace.writers import write_parquet

    table = pa.table(
        {"arrival_s": [0.0, 0.0, 0.0], "input_tokens": [10, 20, 30], "output_tokens": [1, 2, 3]}
    )
    for i, rows in enumerate(((0, 1), (2,))):
        part = build_trace(
            table.take(list(rows)),
            path=f"part{i}",
            source_format="llmperf",
            block_tokens=None,
            arrivals_measured=False,
        )
        write_parquet(part, tmp_path / f"part{i}.parquet")
    assert read_trace(tmp_path / "part0.parquet").arrivals_measured is False
    stream = open_trace_stream(tmp_path)
    assert stream.arrivals_measured is False
    whole = stream.read_all()
    assert whole.requests == 3 and whole.arrivals_measured is False
