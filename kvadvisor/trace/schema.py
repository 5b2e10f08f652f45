"""Build a canonical Trace from a raw table: cast, validate lazily, sort, and note every change."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvadvisor.errors import (
    KvAdvisorWarning,
    Problem,
    TraceFormatError,
    TraceProblem,
    TraceSchemaError,
)
from kvadvisor.trace.model import CANONICAL_COLUMNS, REQUIRED_COLUMNS, Trace, has_values
from kvadvisor.units import S_PER_DAY, S_PER_MIN, plural
from kvadvisor.units.format import duration, number

MAX_PROBLEMS_KEPT = 1000
MAX_ROWS_PER_CHECK = 100

# Largest values that make physical sense, checked for every trace (docs/traces.md#validation):
# a request of 2^40 tokens is a million times any context window; a latency of 10^7 s is
# 116 days; arrivals spanning 10^9 s (31.7 years) are an outlier row or a unit mistake, and
# would size every time series by that span.
MAX_TOKENS = 1 << 40
MAX_LATENCY_S = 1e7
MAX_SPAN_S = 1e9
TOKEN_COLUMNS = ("input_tokens", "output_tokens", "cached_tokens")
LATENCY_COLUMNS = ("ttft_s", "e2e_s", "queue_s", "tpot_s")

# Suspicious time unit: a trace longer than a day in which requests arrive less than once a
# minute on average. Milliseconds read as seconds stretch a trace 1000x (the Mooncake
# conversation trace, 12,031 requests in 3,537 s, would span 40.9 days at one request per
# 294 s), while real fleet traces that long carry many requests per minute (BurstGPT: about
# 16/min over two months).
SUSPICIOUS_SPAN_S = S_PER_DAY
SUSPICIOUS_GAP_S = S_PER_MIN


def missing_columns(path: str, absent: Sequence[str], message: str) -> TraceSchemaError:
    """MISSING_COLUMN naming the first of ``absent`` (the total counts them all)."""
    return TraceSchemaError(
        path,
        [Problem(None, absent[0], TraceProblem.MISSING_COLUMN, message)],
        total=len(absent),
    )


def missing_required(path: str, absent: Sequence[str], found: Sequence[str]) -> TraceSchemaError:
    """Required canonical columns ``absent`` from a table holding ``found``: how to map one."""
    return missing_columns(
        path,
        absent,
        f"required column missing (columns found: {', '.join(found) or 'none'}); "
        f"map a source column with --map {absent[0]}=<source column>",
    )


def shifted_note(start_s: float) -> str:
    """The note for arrivals moved back by ``start_s`` so the first one is at 0."""
    shift = f"{start_s:.6f} s"  # exact: added back, it maps arrivals to the source's clock
    return f"arrival_s shifted by {shift} so the first request arrives at 0"


def _row_numbers(mask: np.ndarray) -> np.ndarray:
    """1-based data-row numbers where mask is true."""
    return np.flatnonzero(mask) + 1


def _cast(table: pa.Table, problems: list[Problem]) -> pa.Table:
    """Cast canonical columns to their canonical types, recording cells that do not cast."""
    arrays, names = [], []
    # Canonical order, whatever the source's order: the same trace always has the same schema.
    for name, (target, _) in CANONICAL_COLUMNS.items():
        if name not in table.column_names:
            continue
        col = table[name]
        if pa.types.is_null(col.type):
            col = pa.chunked_array([pa.nulls(len(col), target)])
        if col.type != target:
            if pa.types.is_integer(target) and pa.types.is_floating(col.type):
                bad = _float_to_int_problems(name, col)
                if bad:
                    problems.extend(bad)
                    continue
            try:
                col = pc.cast(col, target, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                problems.append(_uncastable_problem(name, col, target))
                continue
        arrays.append(col)
        names.append(name)
    return pa.table(arrays, names=names) if names else pa.table({})


def _float_to_int_problems(name: str, col: pa.ChunkedArray) -> list[Problem]:
    """NaN and fractional values in a column that must hold whole numbers."""
    values = col.to_numpy(zero_copy_only=False).astype(np.float64)
    nulls = col.is_null().to_numpy(zero_copy_only=False)
    problems = [
        Problem(int(r), name, TraceProblem.NAN_VALUE, "NaN")
        for r in _row_numbers(np.isnan(values) & ~nulls)[:MAX_ROWS_PER_CHECK]
    ]
    with np.errstate(invalid="ignore"):
        frac = np.isfinite(values) & (values != np.round(values))
    problems += [
        Problem(
            int(r), name, TraceProblem.WRONG_TYPE, f"{shown(values[r - 1])} is not a whole number"
        )
        for r in _row_numbers(frac)[:MAX_ROWS_PER_CHECK]
    ]
    with np.errstate(invalid="ignore"):
        outside = np.isinf(values) | (np.abs(values) >= 2.0**63)
    problems += [
        Problem(
            int(r),
            name,
            TraceProblem.OUT_OF_RANGE,
            f"{shown(values[r - 1])} is outside the 64-bit integer range",
        )
        for r in _row_numbers(outside)[:MAX_ROWS_PER_CHECK]
    ]
    return problems


def _uncastable_problem(name: str, col: pa.ChunkedArray, target: pa.DataType) -> Problem:
    """The first cell that does not cast, as a Problem (bytes that are not UTF-8 said so)."""
    row, value = _first_uncastable(col, target)
    if isinstance(value, bytes) and pa.types.is_string(target):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as exc:
            return Problem(
                row,
                name,
                TraceProblem.NOT_UTF8,
                f"{value[:40]!r} is not UTF-8 text (byte 0x{value[exc.start]:02x}); save the "
                "file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
            )
    return Problem(row, name, TraceProblem.WRONG_TYPE, f"{shown(value)} is not {target}")


def _first_uncastable(col: pa.ChunkedArray, target: pa.DataType) -> tuple[int | None, object]:
    """Find the first value that does not cast (only on the error path, so a loop is fine)."""
    for i, value in enumerate(col.to_pylist()):
        if value is None:
            continue
        try:
            pc.cast(pa.array([value], col.type), target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return i + 1, value
    return None, col.type


def build_trace(
    table: pa.Table,
    *,
    path: str,
    source_format: str,
    block_tokens: int | None,
    notes: tuple[str, ...] = (),
    dropped: dict[str, int] | None = None,
    arrivals_measured: bool = True,
) -> Trace:
    """Validate ``table`` (canonical column names already applied) into a Trace.

    Every problem is collected before raising one TraceSchemaError. Arrivals are shifted to
    start at 0 and sorted (stable) when needed; both are noted. Failed requests are counted,
    a hash count that disagrees with the input length is noted, and a suspicious time unit
    raises a KvAdvisorWarning (and a note), never an error.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise missing_required(path, missing, table.column_names)
    if table.num_rows == 0:
        raise TraceFormatError(f"{path}: no requests in the file; give a trace with rows")
    problems: list[Problem] = []
    table = _cast(table, problems)
    if problems:
        raise TraceSchemaError(path, problems[:MAX_PROBLEMS_KEPT], total=len(problems))
    notes_list = list(notes)
    problems.extend(_check_values(table))
    if problems:
        raise TraceSchemaError(path, problems[:MAX_PROBLEMS_KEPT], total=len(problems))

    arrival = table["arrival_s"].to_numpy()
    order = None
    if len(arrival) and np.any(np.diff(arrival) < 0):
        order = np.argsort(arrival, kind="stable")
        table = table.take(pa.array(order))
        notes_list.append("arrivals were not in order: sorted by arrival_s (ties keep file order)")
        arrival = arrival[order]
    problems = span_problems(arrival, order)
    if problems:
        raise TraceSchemaError(path, problems)
    if len(arrival) and arrival[0] != 0.0:
        start = float(arrival[0])
        table = table.set_column(
            table.column_names.index("arrival_s"),
            "arrival_s",
            pa.array(arrival - start, pa.float64()),
        )
        notes_list.append(shifted_note(start))
        arrival = arrival - start
    derived = _derived_notes(table, arrival, block_tokens, path, arrivals_measured)
    notes_list.extend(n for n in derived if n not in notes_list)
    return Trace(
        table=table.combine_chunks(),
        block_tokens=block_tokens,
        source_format=source_format,
        source_path=path,
        dropped=dict(dropped or {}),
        notes=tuple(notes_list),
        arrivals_measured=arrivals_measured,
    )


def _derived_notes(
    table: pa.Table,
    arrival: np.ndarray,
    block_tokens: int | None,
    path: str,
    arrivals_measured: bool,
) -> list[str]:
    """Notes computed from the validated table (recomputed identically on every read)."""
    notes: list[str] = []
    n = table.num_rows
    if "ok" in table.column_names:
        failed = int(pc.sum(pc.invert(table["ok"].fill_null(True))).as_py() or 0)
        if failed:
            notes.append(
                f"{plural(failed, 'failed request')} (ok = false) kept; metrics that need a "
                "successful request exclude them"
            )
    if "block_hashes" in table.column_names and block_tokens:
        lengths = pc.list_value_length(table["block_hashes"]).fill_null(-1)
        counts = lengths.to_numpy(zero_copy_only=False)
        tokens = table["input_tokens"].to_numpy(zero_copy_only=False)
        expected = -(-tokens // block_tokens)  # ceil(input_tokens / block_tokens)
        off = int(np.sum((counts != expected) & (counts >= 0)))
        if off:
            notes.append(
                f"{off} requests have a block hash count other than "
                f"ceil(input_tokens / {block_tokens}); hit tokens are capped at input_tokens"
            )
    elif "block_hashes" in table.column_names:
        notes.append("block_hashes present but block_tokens unknown: give --block-tokens")
    span = float(arrival[-1]) if n else 0.0
    if arrivals_measured and n > 1 and span > SUSPICIOUS_SPAN_S and span / n > SUSPICIOUS_GAP_S:
        message = (
            f"{plural(n, 'request')} over {duration(span)} (one every {duration(span / n)} on "
            "average): are the arrival times milliseconds read as seconds? If so, map them "
            "with --map arrival_s=<column>:ms"
        )
        warnings.warn(f"{path}: column 'arrival_s': {message}", KvAdvisorWarning, stacklevel=3)
        notes.append(f"suspicious time unit: {message}")
    return notes


def shown(value: object) -> str:
    """A cell value for a message: the plain number ("-5.0"), never numpy's repr."""
    if isinstance(value, np.generic):
        value = value.item()
    return repr(value)


def _rows(mask: np.ndarray, first_row: int) -> np.ndarray:
    """1-based row numbers (offset by ``first_row`` rows before this part) where mask is true."""
    return _row_numbers(mask)[:MAX_ROWS_PER_CHECK] + first_row


def column_problems(
    name: str, col: pa.ChunkedArray | pa.Array, first_row: int = 0
) -> list[Problem]:
    """Every value problem of one canonical column (cast already): the per-cell boundary.

    Required cells must be present; numbers must be finite, not negative, and within
    physical sense (token counts below MAX_TOKENS, latencies below MAX_LATENCY_S). Used for
    a whole table and for each streamed batch (``first_row`` rows came before it).
    """
    problems: list[Problem] = []
    _, required = CANONICAL_COLUMNS[name]
    nulls = col.is_null().to_numpy(zero_copy_only=False) if col.null_count else None
    if required and nulls is not None:
        problems += [
            Problem(int(r), name, TraceProblem.NULL_VALUE, "empty") for r in _rows(nulls, first_row)
        ]
    if pa.types.is_floating(col.type):
        values = col.to_numpy(zero_copy_only=False)
        present = ~nulls if nulls is not None else True
        nan = np.isnan(values) & present
        problems += [
            Problem(int(r), name, TraceProblem.NAN_VALUE, "NaN") for r in _rows(nan, first_row)
        ]
        with np.errstate(invalid="ignore"):
            infinite = np.isinf(values)
            neg = (values < 0) & ~infinite
            large = (values > MAX_LATENCY_S) & ~infinite if name in LATENCY_COLUMNS else None
        problems += [
            Problem(
                int(r),
                name,
                TraceProblem.NOT_FINITE,
                f"{shown(values[r - first_row - 1])}: a number must be finite",
            )
            for r in _rows(infinite, first_row)
        ]
        problems += [
            Problem(int(r), name, TraceProblem.NEGATIVE_VALUE, shown(values[r - first_row - 1]))
            for r in _rows(neg, first_row)
        ]
        if large is not None:
            problems += [
                Problem(
                    int(r),
                    name,
                    TraceProblem.OUT_OF_RANGE,
                    f"{shown(values[r - first_row - 1])} s is more than {number(MAX_LATENCY_S)} s "
                    "(116 days); is the unit wrong?",
                )
                for r in _rows(large, first_row)
            ]
    elif pa.types.is_integer(col.type):
        values = col.fill_null(0).to_numpy(zero_copy_only=False)
        problems += [
            Problem(int(r), name, TraceProblem.NEGATIVE_VALUE, shown(values[r - first_row - 1]))
            for r in _rows(values < 0, first_row)
        ]
        if name in TOKEN_COLUMNS:
            problems += [
                Problem(
                    int(r),
                    name,
                    TraceProblem.OUT_OF_RANGE,
                    f"{shown(values[r - first_row - 1])} tokens is not below 2^40; no request "
                    "is that long",
                )
                for r in _rows(values >= MAX_TOKENS, first_row)
            ]
    return problems


def span_problems(arrival: np.ndarray, order: np.ndarray | None = None) -> list[Problem]:
    """The rows that stretch the arrivals over more than MAX_SPAN_S, or nothing.

    ``arrival`` is sorted (``order`` maps its positions back to file rows). The widest gap
    between consecutive arrivals splits the trace; the smaller side is reported as outliers
    (one row at 0 among epoch timestamps), so the message names the row to fix, and no time
    series is ever sized by the span.
    """
    if len(arrival) < 2 or not arrival[-1] - arrival[0] > MAX_SPAN_S:
        return []
    gaps = np.diff(arrival)
    cut = int(np.argmax(gaps)) + 1
    side = np.arange(cut) if cut <= len(arrival) - cut else np.arange(cut, len(arrival))
    rows = (order[side] if order is not None else side) + 1
    span = float(arrival[-1] - arrival[0])
    gap = float(gaps[cut - 1])
    return [
        Problem(
            int(r),
            "arrival_s",
            TraceProblem.OUT_OF_RANGE,
            f"{shown(arrival[i])}: {number(gap)} s away from the other requests; arrivals may "
            f"span at most {number(MAX_SPAN_S)} s (31.7 years), these span {number(span)} s: "
            "fix or delete the outlier row(s)",
        )
        for i, r in sorted(zip(side, rows, strict=True), key=lambda x: x[1])[:MAX_ROWS_PER_CHECK]
    ]


def _check_values(table: pa.Table) -> list[Problem]:
    """Vectorised value checks; returns every problem found."""
    problems: list[Problem] = []
    for name in table.column_names:
        problems += column_problems(name, table[name])
    if has_values(table, "request_id"):
        # An empty id is no id: two requests without one are not duplicates.
        ids = pc.if_else(
            pc.equal(table["request_id"], ""), pa.scalar(None, pa.string()), table["request_id"]
        )
        counts = pc.value_counts(ids.combine_chunks())
        dup_values = counts.field("values").filter(
            pc.and_(pc.greater(counts.field("counts"), 1), pc.is_valid(counts.field("values")))
        )
        if len(dup_values):
            mask = pc.fill_null(pc.is_in(ids, value_set=dup_values), False).to_numpy(
                zero_copy_only=False
            )
            rows = _row_numbers(mask)
            # The first occurrence is fine; report the later ones (error path: a loop is fine).
            seen: set[str] = set()
            for row in rows:
                value = ids[int(row) - 1].as_py()
                if value in seen:
                    problems.append(
                        Problem(int(row), "request_id", TraceProblem.DUPLICATE_ID, repr(value))
                    )
                seen.add(value)
    return problems
