"""The streamed scan on Dask (issue 27): partitions read and prepared on workers, one pass here.

A hive-partitioned copy of the Mooncake head (400 real requests, their block hashes) in four
time partitions of two shards each, whose time ranges overlap (merged by arrival, as the stream
merges them). On a local cluster of 2 processes the curve, its hit ratios and the pass's totals
must equal the serial pass's, exactly and at a SHARDS rate; the hashes are checked as Mooncake
stores them (small ids, used as they are) and scrambled into 64-bit values (made dense per
partition on the workers, joined here). Only the scan runs: no search, no replay.

Like tests/test_distributed.py these need the [distributed] extra (the test extra installs it,
so CI runs them); without it they say they skipped, and why.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import MOONCAKE_HEAD_JSONL_GZ

from kvadvisor.cache.prefix import simulate_arrays
from kvadvisor.cache.shards import estimate_prefix_curve, record_parts
from kvadvisor.execute import EXTRA, SERIAL, Executor, open_executor
from kvadvisor.pipeline.scan import Totals, scan
from kvadvisor.trace.readers import read_trace
from kvadvisor.trace.stream import open_trace_stream
from kvadvisor.trace.writers import write_parquet

PARTITIONS = 4
ROW_GROUP_ROWS = 50
RATE = 0.25  # a quarter of the blocks: a real sample of 400 requests, not all of them
# An odd multiplier: a bijection on [0, 2^63), so distinct ids stay distinct, now 64-bit wide.
SCRAMBLE = 0x9E3779B97F4A7C15


@pytest.fixture(scope="module")
def cluster() -> Iterator[Executor]:
    """A local Dask cluster of 2 worker processes, shared by this module's tests."""
    pytest.importorskip("distributed", reason=f"the [distributed] extra is not installed: {EXTRA}")
    with open_executor(2) as ex:
        yield ex


def _partitioned(table: pa.Table, root: Path) -> Path:
    """window=0..3 by arrival time, two shards each (even and odd seconds), overlapping in time."""
    arrival = table["arrival_s"].to_numpy()
    window = np.minimum((arrival / (arrival[-1] + 1e-9) * PARTITIONS).astype(int), PARTITIONS - 1)
    second = np.floor(arrival).astype(int)
    for w in range(PARTITIONS):
        for shard in (0, 1):
            rows = np.flatnonzero((window == w) & (second % 2 == shard))
            folder = root / f"window={w}"
            folder.mkdir(parents=True, exist_ok=True)
            part = table.take(pa.array(rows))
            pq.write_table(part, folder / f"part-{shard}.parquet", row_group_size=ROW_GROUP_ROWS)
    return root


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    """The Mooncake head as canonical parquet (schema metadata with block_tokens), read back."""
    path = tmp_path_factory.mktemp("head") / "head.parquet"
    write_parquet(read_trace(MOONCAKE_HEAD_JSONL_GZ), path)
    return pq.read_table(path)


@pytest.fixture(scope="module", params=["mooncake ids", "64-bit hashes"])
def hive(request: pytest.FixtureRequest, head: pa.Table, tmp_path_factory) -> Path:
    """The head in hive partitions, its hashes as stored or scrambled into 64-bit values."""
    table = head
    if request.param == "64-bit hashes":
        hashes = table["block_hashes"].combine_chunks()
        values = hashes.values.to_numpy().astype(np.uint64)
        wide = ((values * np.uint64(SCRAMBLE)) & np.uint64((1 << 63) - 1)).astype(np.int64)
        scrambled = pa.ListArray.from_arrays(hashes.offsets, pa.array(wide), mask=hashes.is_null())
        table = table.set_column(table.schema.get_field_index("block_hashes"), "block_hashes",
                                 scrambled)  # fmt: skip
    return _partitioned(table, tmp_path_factory.mktemp("hive") / "traces")


def _totals(t: Totals) -> dict:
    """Every figure the summary reads of the pass, as plain values."""
    return {
        "scalars": (t.requests, t.input_tokens, t.output_tokens, t.block_accesses, t.batches,
                    t.first_arrival_s, t.last_arrival_s, t.failed_requests, sorted(t.models)),
        "bins": [a.tolist() for a in (t.arrival_counts, t.input_bins, t.output_bins)],
        "lengths": [(c.values.tolist(), c.counts.tolist())
                    for c in (t.input_lengths, t.output_lengths, t.request_lengths)],
    }  # fmt: skip


def _curve(result) -> dict:
    c = result.curve
    return {
        name: np.asarray(getattr(c, name)).tolist()
        for name in (
            "capacity_blocks", "hit_tokens_all", "hit_tokens_steady", "hit_blocks_all",
            "hit_blocks_steady", "total_tokens_all", "total_tokens_steady", "total_blocks_all",
            "total_blocks_steady",
        )
    }  # fmt: skip


def test_the_fixture_is_partitioned_and_its_shards_overlap(hive: Path) -> None:
    """8 files in 4 parts that follow each other in time; each part's 2 shards overlap."""
    stream = open_trace_stream(hive)
    parts = stream.parts()
    assert len(stream.files) == 8 and len(parts) == PARTITIONS
    assert [len(p.files) for p in parts] == [2] * PARTITIONS
    assert sum(p.requests for p in parts) == stream.requests == 400
    # the parts' rows, in order, are the stream's rows
    joined = pa.Table.from_batches([b for p in parts for b in p])
    whole = pa.Table.from_batches(list(stream))
    assert joined.equals(whole)


def test_exact_curve_on_two_workers_equals_the_serial_pass(hive: Path, cluster) -> None:
    """The exact curve, its hit ratios and the totals equal one process's, figure for figure.

    Also checked against the exact pass over the original single trace (computed apart).
    """
    stream = open_trace_stream(hive)
    local, local_totals = scan(stream, sample_rate=None, warmup_fraction=0.5, executor=SERIAL)
    fanned, fanned_totals = scan(stream, sample_rate=None, warmup_fraction=0.5, executor=cluster)
    assert _curve(fanned) == _curve(local)
    assert _totals(fanned_totals) == _totals(local_totals)
    assert np.array_equal(fanned.hit_tokens, local.hit_tokens)
    assert np.array_equal(fanned.leading_distance, local.leading_distance)
    assert fanned.id_bound == local.id_bound and fanned.warmup_requests == 200
    # Mooncake's small ids are used as they are; 64-bit hashes were made dense on the workers
    assert (fanned.id_bound is None) == (int(pc.max(pc.list_flatten(
        pa.Table.from_batches(list(stream))["block_hashes"])).as_py()) > 1 << 40)  # fmt: skip
    grid = np.array([1, 4, 16, 64, 256, 1024]) * stream.block_tokens
    assert np.array_equal(fanned.curve.ratios_on_grid(grid)[0], local.curve.ratios_on_grid(grid)[0])
    # independently: the pass over the merged stream's flattened hashes, in one array
    whole = pa.Table.from_batches(list(stream))
    hashes = whole["block_hashes"].combine_chunks()
    direct = simulate_arrays(
        hashes.offsets.to_numpy().astype(np.int64),
        hashes.values.to_numpy().astype(np.int64),
        whole["input_tokens"].to_numpy().astype(np.int64),
        stream.block_tokens,
        warmup_requests=200,
        warmup_fraction=0.5,
    )
    assert _curve(fanned) == _curve(direct)
    assert fanned.curve.hit_tokens_all[-1] > 0  # the head reuses prefixes: a curve to compare
    assert fanned_totals.requests == 400
    assert fanned_totals.input_tokens == int(pc.sum(whole["input_tokens"]).as_py())


def test_sampled_curve_on_two_workers_equals_the_serial_pass(hive: Path, cluster) -> None:
    """SHARDS at rate 1/4: the sample, the curve, its error estimate equal one process's."""
    stream = open_trace_stream(hive)
    local, local_totals = scan(stream, sample_rate=RATE, warmup_fraction=0.5, executor=SERIAL)
    fanned, fanned_totals = scan(stream, sample_rate=RATE, warmup_fraction=0.5, executor=cluster)
    assert _curve(fanned) == _curve(local)
    assert _totals(fanned_totals) == _totals(local_totals)
    assert fanned.sampling == local.sampling
    assert 0 < fanned.sampling.sampled_accesses < fanned.sampling.total_accesses
    # independently: the estimator over the merged stream's batches in one process
    direct = estimate_prefix_curve(
        record_parts(list(stream)),
        block_tokens=stream.block_tokens,
        total_requests=400,
        warmup_fraction=0.5,
        rate=RATE,
    )
    assert _curve(fanned) == _curve(direct) and fanned.sampling == direct.sampling
