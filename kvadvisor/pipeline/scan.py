"""The streamed pass: the trace's totals and its cache curve, here or fanned out over a cluster.

One pass over the record batches sums what the summary needs (:class:`Totals`) and feeds the
curve: the exact LRU pass over the flattened block stream, or the SHARDS spatial sample. With a
parallel executor (``--workers``, ``--scheduler``) and a trace of several files, each part of
the stream (a group of files whose time ranges overlap, merged by arrival as the stream merges
them: with partitions by time, one partition) is read on a worker, summed, and prepared there:
its hashes made dense in order of first use (exact), or put through the spatial filter from
its first request's index in the trace (sampled: the filter is a pure function of the hash).
The parts follow each other in time, so this process joins them in order and runs only the
one ordered pass the LRU needs; the curve, the sample and the totals are the serial ones
(docs/scale.md, "What runs where").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvadvisor.cache.model import PrefixCacheResult
from kvadvisor.cache.prefix import (
    first_use_ids,
    id_bound_of,
    join_first_use,
    simulate_arrays,
    warmup_requests_for,
)
from kvadvisor.cache.shards import (
    Sample,
    collect_sample,
    join_samples,
    record_parts,
    sampled_curve,
)
from kvadvisor.errors import TraceFormatError
from kvadvisor.execute import Executor
from kvadvisor.metrics.lengths import LengthCounts
from kvadvisor.results.series import Series
from kvadvisor.sections.workload import (
    arrival_chart,
    arrival_counts,
    arrival_window_s,
    length_chart,
    log2_bin,
)
from kvadvisor.trace.stream import TraceStream


@dataclass
class Totals:
    """Everything one streaming pass sums: counts, span, chart bins, model names.

    The arrival window is chosen from the span in the footers exactly as
    :func:`kvadvisor.sections.workload.arrival_series` chooses it, so the charts are the same.
    """

    duration_s: float = 0.0
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    block_accesses: int = 0
    first_arrival_s: float | None = None
    last_arrival_s: float = 0.0
    batches: int = 0
    arrival_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    input_bins: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    output_bins: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    models: set[str] = field(default_factory=set)
    failed_requests: int = 0
    input_lengths: LengthCounts = field(default_factory=LengthCounts)
    output_lengths: LengthCounts = field(default_factory=LengthCounts)
    # Prompt + output per request: the context check's distribution (sections/context.py).
    request_lengths: LengthCounts = field(default_factory=LengthCounts)

    @property
    def window_s(self) -> int:
        """The arrival chart's window (seconds), from the footers' span."""
        return arrival_window_s(self.duration_s)

    def add(self, batch: pa.RecordBatch) -> None:
        """Sum one record batch in."""
        self.requests += batch.num_rows
        self.batches += 1
        if batch.num_rows == 0:
            return
        inp = batch.column("input_tokens").to_numpy(zero_copy_only=False)
        out = batch.column("output_tokens").to_numpy(zero_copy_only=False)
        arrival = batch.column("arrival_s").to_numpy(zero_copy_only=False)
        self.input_tokens += int(inp.sum())
        self.output_tokens += int(out.sum())
        if self.first_arrival_s is None:
            self.first_arrival_s = float(arrival[0])
        self.last_arrival_s = float(arrival[-1])
        self.arrival_counts = _add_counts(
            self.arrival_counts, arrival_counts(arrival, self.duration_s, self.window_s)
        )
        self.input_bins = _add_counts(self.input_bins, np.bincount(log2_bin(inp)))
        self.output_bins = _add_counts(self.output_bins, np.bincount(log2_bin(out)))
        self.input_lengths.add(inp)
        self.output_lengths.add(out)
        self.request_lengths.add(inp.astype(np.int64) + out.astype(np.int64))
        if "block_hashes" in batch.schema.names:
            self.block_accesses += int(
                pc.sum(pc.list_value_length(batch.column("block_hashes"))).as_py() or 0
            )
        if "ok" in batch.schema.names:
            # as Trace.failed_requests: rows whose ok is false (nulls are not failures)
            self.failed_requests += int(pc.sum(pc.invert(batch.column("ok"))).as_py() or 0)
        if "model" in batch.schema.names:
            self.models.update(
                str(m) for m in pc.unique(batch.column("model").drop_null()).to_pylist()
            )

    def merge(self, later: Totals) -> None:
        """Add what a later run of the stream summed (a part read elsewhere), as if tapped here."""
        self.requests += later.requests
        self.input_tokens += later.input_tokens
        self.output_tokens += later.output_tokens
        self.block_accesses += later.block_accesses
        self.batches += later.batches
        if self.first_arrival_s is None:
            self.first_arrival_s = later.first_arrival_s
        if later.first_arrival_s is not None:  # it held a request
            self.last_arrival_s = later.last_arrival_s
        self.arrival_counts = _add_counts(self.arrival_counts, later.arrival_counts)
        self.input_bins = _add_counts(self.input_bins, later.input_bins)
        self.output_bins = _add_counts(self.output_bins, later.output_bins)
        self.models |= later.models
        self.failed_requests += later.failed_requests
        self.input_lengths.merge(later.input_lengths)
        self.output_lengths.merge(later.output_lengths)
        self.request_lengths.merge(later.request_lengths)

    def arrivals(self) -> Series | None:
        """The arrivals chart, as :func:`kvadvisor.sections.workload.arrival_series` draws it."""
        return None if self.requests == 0 else arrival_chart(self.arrival_counts, self.window_s)

    def histogram(self, what: str) -> Series | None:
        """A length chart, as :func:`kvadvisor.sections.workload.length_histogram` draws it."""
        counts = self.input_bins if what == "input" else self.output_bins
        return None if self.requests == 0 else length_chart(counts, what)


def _add_counts(total: np.ndarray, more: np.ndarray) -> np.ndarray:
    if more.size > total.size:
        total = np.concatenate([total, np.zeros(more.size - total.size, np.int64)])
    total[: more.size] += more
    return total


def _tap(batches: Iterable[pa.RecordBatch], totals: Totals) -> Iterator[pa.RecordBatch]:
    """Pass batches through, summing them on the way (so the cache pass is the only pass)."""
    for batch in batches:
        totals.add(batch)
        yield batch


@dataclass
class _FlatBlocks:
    """The exact pass's input, filled batch by batch into arrays sized from the footers."""

    offsets: np.ndarray
    values: np.ndarray
    input_tokens: np.ndarray
    rows: int = 0
    used: int = 0
    grown: list[int] = field(default_factory=list)

    @classmethod
    def sized(cls, requests: int, accesses: int) -> _FlatBlocks:
        return cls(
            np.zeros(requests + 1, np.int64),
            np.empty(accesses, np.int64),
            np.empty(requests, np.int64),
        )

    def add(self, batch: pa.RecordBatch) -> None:
        col = batch.column("block_hashes")
        if col.null_count:
            col = pc.fill_null(col, pa.scalar([], col.type))
        off = col.offsets.to_numpy().astype(np.int64)
        vals = col.values.to_numpy(zero_copy_only=False)[off[0] : off[-1]]
        n, k = batch.num_rows, len(vals)
        if self.rows + n > len(self.input_tokens) or self.used + k > len(self.values):
            # Footers undercounted (they should not): grow rather than fail, and remember it.
            self.grown.append(self.rows)
            self.offsets = np.resize(self.offsets, max(2 * len(self.offsets), self.rows + n + 1))
            self.input_tokens = np.resize(
                self.input_tokens, max(2 * len(self.input_tokens), self.rows + n)
            )
            self.values = np.resize(self.values, max(2 * len(self.values), self.used + k))
        self.values[self.used : self.used + k] = vals
        self.offsets[self.rows + 1 : self.rows + n + 1] = self.used + off[1:] - off[0]
        self.input_tokens[self.rows : self.rows + n] = batch.column("input_tokens").to_numpy()
        self.rows += n
        self.used += k


def scan(
    stream: TraceStream,
    *,
    sample_rate: float | None,
    warmup_fraction: float,
    executor: Executor,
) -> tuple[PrefixCacheResult | None, Totals]:
    """The totals and the curve (None without hashes; SHARDS at ``sample_rate`` when given).

    Fanned out over ``executor``'s workers when it runs tasks elsewhere and the stream has more
    than one part; in this process otherwise. Either way the same figures.
    """
    parts = stream.parts()
    if executor.parallel and len(parts) > 1:
        return _fanned(stream, parts, sample_rate, warmup_fraction, executor)
    totals = Totals(duration_s=stream.duration_s)
    if not stream.has_hashes:
        for _ in _tap(stream, totals):
            pass
        return None, totals
    if sample_rate is None:
        flat = _FlatBlocks.sized(stream.requests, stream.block_accesses)
        for batch in _tap(stream, totals):
            flat.add(batch)
        return _exact(flat.offsets[: flat.rows + 1], flat.values[: flat.used],
                      flat.input_tokens[: flat.rows], stream, warmup_fraction), totals  # fmt: skip
    warmup = warmup_requests_for(stream.requests, warmup_fraction)
    sample = collect_sample(
        record_parts(_tap(iter(stream), totals)),
        block_tokens=int(stream.block_tokens or 0),
        rate=sample_rate,
        warmup=warmup,
    )
    return _sampled(sample, stream, sample_rate, warmup_fraction, warmup), totals


def _exact(
    offsets: np.ndarray,
    values: np.ndarray,
    input_tokens: np.ndarray,
    stream: TraceStream,
    warmup_fraction: float,
    id_bound: int | None = None,
) -> PrefixCacheResult:
    return simulate_arrays(
        offsets,
        values,
        input_tokens,
        int(stream.block_tokens or 0),
        warmup_requests=warmup_requests_for(input_tokens.shape[0], warmup_fraction),
        warmup_fraction=warmup_fraction,
        id_bound=id_bound,
    )


def _sampled(
    sample: Sample, stream: TraceStream, rate: float, warmup_fraction: float, warmup: int
) -> PrefixCacheResult:
    return sampled_curve(
        sample,
        block_tokens=int(stream.block_tokens or 0),
        warmup_fraction=warmup_fraction,
        warmup=warmup,
        rate=rate,
    )


@dataclass
class Prepared:
    """One part read and prepared on a worker: its totals and what the curve needs of it.

    Exact: per-request offsets (from 0) and input tokens, each access's dense id within the
    part and each id's hash. Sampled: the part's spatial sample. Neither without hashes.
    """

    totals: Totals
    offsets: np.ndarray | None = None
    input_tokens: np.ndarray | None = None
    ids: np.ndarray | None = None
    keys: np.ndarray | None = None
    sample: Sample | None = None


def prepare_part(
    part: TraceStream,
    duration_s: float,
    sample_rate: float | None,
    warmup: int,
    first_request: int,
) -> Prepared:
    """Read one part of the stream and prepare it for the curve (run on a worker).

    ``duration_s``: the whole trace's span (the arrival chart's windows); ``warmup`` and
    ``first_request``: the trace's warm-up requests and this part's first request's index.
    """
    totals = Totals(duration_s=duration_s)
    if not part.has_hashes:
        for _ in _tap(part, totals):
            pass
        return Prepared(totals)
    if sample_rate is not None:
        sample = collect_sample(
            record_parts(_tap(iter(part), totals)),
            block_tokens=int(part.block_tokens or 0),
            rate=sample_rate,
            warmup=warmup,
            first_request=first_request,
        )
        return Prepared(totals, sample=sample)
    flat = _FlatBlocks.sized(part.requests, part.block_accesses)
    for batch in _tap(part, totals):
        flat.add(batch)
    ids, keys = first_use_ids(flat.values[: flat.used])
    return Prepared(
        totals,
        offsets=flat.offsets[: flat.rows + 1],
        input_tokens=flat.input_tokens[: flat.rows],
        ids=ids,
        keys=keys,
    )


def _fanned(
    stream: TraceStream,
    parts: tuple[TraceStream, ...],
    sample_rate: float | None,
    warmup_fraction: float,
    executor: Executor,
) -> tuple[PrefixCacheResult | None, Totals]:
    """Each part read and prepared on a worker; joined here in time order for the one pass."""
    warmup = warmup_requests_for(stream.requests, warmup_fraction)
    starts = np.concatenate(([0], np.cumsum([p.requests for p in parts])))
    futures = [
        executor.submit(prepare_part, part, stream.duration_s, sample_rate, warmup, int(start))
        for part, start in zip(parts, starts[:-1], strict=True)
    ]
    totals = Totals(duration_s=stream.duration_s)
    # The exact pass's per-request arrays are filled part by part as they arrive (16 B per
    # request, as the serial pass holds them); each part keeps only its ids and their hashes.
    exact = stream.has_hashes and sample_rate is None
    offsets = np.zeros(stream.requests + 1 if exact else 1, np.int64)
    input_tokens = np.empty(stream.requests if exact else 0, np.int64)
    runs: list[tuple[np.ndarray, np.ndarray]] = []
    samples: list[Sample] = []
    for part, start, future in zip(parts, starts[:-1], futures, strict=True):
        done = future.result()
        if done.totals.requests != part.requests:
            # Each part's requests are numbered from the footers' counts: they must agree.
            raise TraceFormatError(
                f"{', '.join(part.files)}: the footers count {part.requests} rows, "
                f"{done.totals.requests} were read; write the files again with `kvadvisor convert`"
            )
        totals.merge(done.totals)
        if done.sample is not None:
            samples.append(done.sample)
        if exact and done.offsets is not None and done.input_tokens is not None:
            r0, r1 = int(start), int(start) + part.requests
            offsets[r0 + 1 : r1 + 1] = done.offsets[1:] + offsets[r0]
            input_tokens[r0:r1] = done.input_tokens
            assert done.ids is not None and done.keys is not None
            runs.append((done.ids, done.keys))
    if not stream.has_hashes:
        return None, totals
    if sample_rate is not None:
        sample = join_samples(samples)
        return _sampled(sample, stream, sample_rate, warmup_fraction, warmup), totals
    return _joined_exact(offsets, input_tokens, runs, stream, warmup_fraction), totals


def _joined_exact(
    offsets: np.ndarray,
    input_tokens: np.ndarray,
    runs: list[tuple[np.ndarray, np.ndarray]],
    stream: TraceStream,
    warmup_fraction: float,
) -> PrefixCacheResult:
    """The exact pass over the parts' dense ids joined in order (as the serial pass's ids)."""
    present = [keys for _, keys in runs if keys.shape[0]]
    lo = min((int(k.min()) for k in present), default=0)
    hi = max((int(k.max()) for k in present), default=0)
    if id_bound_of(lo, hi, int(offsets[-1])) is not None:
        # Small ids already (Mooncake's): the serial pass uses the hashes as they are.
        values = np.concatenate([keys[ids] for ids, keys in runs])
        return _exact(offsets, values, input_tokens, stream, warmup_fraction)
    ids, bound = join_first_use(runs)
    return _exact(offsets, ids, input_tokens, stream, warmup_fraction, id_bound=bound)
