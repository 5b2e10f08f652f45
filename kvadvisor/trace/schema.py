"""Build a canonical Trace from a raw table: cast, validate lazily, sort, and note every change."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvadvisor.errors import Problem, TraceProblem, TraceSchemaError
from kvadvisor.trace.model import CANONICAL_COLUMNS, REQUIRED_COLUMNS, Trace

MAX_PROBLEMS_KEPT = 1000


def _row_numbers(mask: np.ndarray) -> np.ndarray:
    """1-based data-row numbers where mask is true."""
    return np.flatnonzero(mask) + 1


def _cast(table: pa.Table, path: str, problems: list[Problem]) -> pa.Table:
    """Cast canonical columns to their canonical types, recording cells that do not cast."""
    arrays, names = [], []
    for name in table.column_names:
        if name not in CANONICAL_COLUMNS:
            continue
        target, _ = CANONICAL_COLUMNS[name]
        col = table[name]
        if col.type != target:
            try:
                col = pc.cast(col, target, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                bad = _first_uncastable(col, target)
                problems.append(
                    Problem(bad[0], name, TraceProblem.WRONG_TYPE, f"{bad[1]!r} is not {target}")
                )
                continue
        arrays.append(col)
        names.append(name)
    return pa.table(arrays, names=names) if names else pa.table({})


def _first_uncastable(col: pa.ChunkedArray, target: pa.DataType) -> tuple[int | None, object]:
    """Find the first value that does not cast (only on the error path, so a loop is fine)."""
    for i, value in enumerate(col.to_pylist()):
        if value is None:
            continue
        try:
            pc.cast(pa.array([value]), target, safe=True)
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
) -> Trace:
    """Validate ``table`` (canonical column names already applied) into a Trace.

    Every problem is collected before raising one TraceSchemaError. Arrivals are shifted to
    start at 0 and sorted (stable) when needed; both are noted.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        found = ", ".join(table.column_names) or "none"
        raise TraceSchemaError(
            path,
            [
                Problem(
                    None,
                    missing[0],
                    TraceProblem.MISSING_COLUMN,
                    f"required column missing (columns found: {found}); "
                    "map a source column with --map "
                    f"{missing[0]}=<source column>",
                )
            ],
            total=len(missing),
        )
    problems: list[Problem] = []
    table = _cast(table, path, problems)
    if problems:
        raise TraceSchemaError(path, problems)
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
        notes_list.append(f"arrival_s shifted by {start:.6f} s so the first request arrives at 0")
    return Trace(
        table=table.combine_chunks(),
        block_tokens=block_tokens,
        source_format=source_format,
        source_path=path,
        dropped=dict(dropped or {}),
        notes=tuple(notes_list),
    )


def _check_values(table: pa.Table) -> list[Problem]:
    """Vectorised value checks; returns every problem found."""
    problems: list[Problem] = []
    for name in table.column_names:
        col = table[name]
        _, required = CANONICAL_COLUMNS[name]
        if required and col.null_count:
            for row in _row_numbers(col.is_null().to_numpy(zero_copy_only=False))[:100]:
                problems.append(Problem(int(row), name, TraceProblem.NULL_VALUE, "empty"))
        if pa.types.is_floating(col.type):
            values = col.to_numpy(zero_copy_only=False)
            nan = np.isnan(values) & ~col.is_null().to_numpy(zero_copy_only=False)
            for row in _row_numbers(nan)[:100]:
                problems.append(Problem(int(row), name, TraceProblem.NAN_VALUE, "NaN"))
            neg = values < 0
            for row in _row_numbers(neg)[:100]:
                problems.append(
                    Problem(int(row), name, TraceProblem.NEGATIVE_VALUE, repr(values[row - 1]))
                )
        elif pa.types.is_integer(col.type):
            values = col.fill_null(0).to_numpy(zero_copy_only=False)
            for row in _row_numbers(values < 0)[:100]:
                problems.append(
                    Problem(int(row), name, TraceProblem.NEGATIVE_VALUE, repr(int(values[row - 1])))
                )
    if "request_id" in table.column_names and table["request_id"].null_count < table.num_rows:
        ids = table["request_id"]
        counts = pc.value_counts(ids.combine_chunks())
        dup_values = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
        if len(dup_values):
            mask = pc.is_in(ids, value_set=dup_values).to_numpy(zero_copy_only=False)
            rows = _row_numbers(mask)
            # The first occurrence is fine; report the later ones.
            seen: set[str] = set()
            for row in rows:
                value = ids[int(row) - 1].as_py()
                if value in seen:
                    problems.append(
                        Problem(int(row), "request_id", TraceProblem.DUPLICATE_ID, repr(value))
                    )
                seen.add(value)
    return problems
