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
from kvadvisor.units import S_PER_DAY, S_PER_MIN

MAX_PROBLEMS_KEPT = 1000
MAX_ROWS_PER_CHECK = 100

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
    return f"arrival_s shifted by {start_s:.6f} s so the first request arrives at 0"


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
                row, value = _first_uncastable(col, target)
                problems.append(
                    Problem(row, name, TraceProblem.WRONG_TYPE, f"{value!r} is not {target}")
                )
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
        Problem(int(r), name, TraceProblem.WRONG_TYPE, f"{values[r - 1]!r} is not a whole number")
        for r in _row_numbers(frac)[:MAX_ROWS_PER_CHECK]
    ]
    return problems


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
    if len(arrival) and np.any(np.diff(arrival) < 0):
        order = np.argsort(arrival, kind="stable")
        table = table.take(pa.array(order))
        notes_list.append("arrivals were not in order: sorted by arrival_s (ties keep file order)")
        arrival = arrival[order]
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
                f"{failed} failed requests (ok = false) kept; metrics that need a successful "
                "request exclude them"
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
            f"{n} requests over {span / S_PER_DAY:.1f} days (one every {span / n:.0f} s on "
            "average): are the arrival times milliseconds read as seconds? If so, map them "
            "with --map arrival_s=<column>:ms"
        )
        warnings.warn(f"{path}: column 'arrival_s': {message}", KvAdvisorWarning, stacklevel=3)
        notes.append(f"suspicious time unit: {message}")
    return notes


def _check_values(table: pa.Table) -> list[Problem]:
    """Vectorised value checks; returns every problem found."""
    problems: list[Problem] = []
    for name in table.column_names:
        col = table[name]
        _, required = CANONICAL_COLUMNS[name]
        if required and col.null_count:
            for row in _row_numbers(col.is_null().to_numpy(zero_copy_only=False))[
                :MAX_ROWS_PER_CHECK
            ]:
                problems.append(Problem(int(row), name, TraceProblem.NULL_VALUE, "empty"))
        if pa.types.is_floating(col.type):
            values = col.to_numpy(zero_copy_only=False)
            nan = np.isnan(values) & ~col.is_null().to_numpy(zero_copy_only=False)
            for row in _row_numbers(nan)[:MAX_ROWS_PER_CHECK]:
                problems.append(Problem(int(row), name, TraceProblem.NAN_VALUE, "NaN"))
            with np.errstate(invalid="ignore"):
                neg = values < 0
            for row in _row_numbers(neg)[:MAX_ROWS_PER_CHECK]:
                problems.append(
                    Problem(int(row), name, TraceProblem.NEGATIVE_VALUE, repr(values[row - 1]))
                )
        elif pa.types.is_integer(col.type):
            values = col.fill_null(0).to_numpy(zero_copy_only=False)
            for row in _row_numbers(values < 0)[:MAX_ROWS_PER_CHECK]:
                problems.append(
                    Problem(int(row), name, TraceProblem.NEGATIVE_VALUE, repr(int(values[row - 1])))
                )
    if has_values(table, "request_id"):
        ids = table["request_id"]
        counts = pc.value_counts(ids.combine_chunks())
        dup_values = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
        if len(dup_values):
            mask = pc.is_in(ids, value_set=dup_values).to_numpy(zero_copy_only=False)
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
