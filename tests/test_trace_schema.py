"""build_trace: lazy validation with row/column/reason, sorting, shifting and derived notes."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvadvisor.errors import KvAdvisorWarning, TraceFormatError, TraceProblem, TraceSchemaError
from kvadvisor.trace.formats import session_roots
from kvadvisor.trace.schema import build_trace


def _build(cols: dict, **kw):
    kw.setdefault("block_tokens", None)
    return build_trace(pa.table(cols), path="t.csv", source_format="csv", **kw)


def test_collects_every_problem_before_raising() -> None:
    """Negative, NaN and null cells in several columns are all reported, in one error."""
    with pytest.raises(TraceSchemaError) as info:
        _build(
            {
                "arrival_s": [0.0, float("nan"), 2.0, 3.0],
                "input_tokens": [10, -1, 5, -7],
                "output_tokens": pa.array([1, None, 1, 1], pa.int64()),
            }
        )
    err = info.value
    got = {(p.row, p.column, p.reason) for p in err.problems}
    assert got == {
        (2, "arrival_s", TraceProblem.NAN_VALUE),
        (2, "input_tokens", TraceProblem.NEGATIVE_VALUE),
        (4, "input_tokens", TraceProblem.NEGATIVE_VALUE),
        (2, "output_tokens", TraceProblem.NULL_VALUE),
    }
    assert err.total == 4
    assert "t.csv: row 2, column 'arrival_s': nan_value" in str(err)
    assert "and 3 more problems, next at rows" in str(err)


def test_float_token_counts_name_nan_and_fractions() -> None:
    """A float token column: NaN and 2.5 are named; whole floats cast silently."""
    with pytest.raises(TraceSchemaError) as info:
        _build(
            {
                "arrival_s": [0.0, 1.0, 2.0],
                "input_tokens": [1.0, float("nan"), 2.5],
                "output_tokens": [1, 1, 1],
            }
        )
    reasons = [(p.row, p.reason) for p in info.value.problems]
    assert reasons == [(2, TraceProblem.NAN_VALUE), (3, TraceProblem.WRONG_TYPE)]
    ok = _build({"arrival_s": [0.0], "input_tokens": [3.0], "output_tokens": [1]})
    assert ok.table["input_tokens"].type == pa.int64()


def test_wrong_type_names_first_bad_cell() -> None:
    """A text column that should be integers: the first bad row is named."""
    with pytest.raises(TraceSchemaError) as info:
        _build(
            {
                "arrival_s": [0.0, 1.0, 2.0],
                "input_tokens": ["1", "2", "x"],
                "output_tokens": [1, 1, 1],
            }
        )
    p = info.value.problems[0]
    assert (p.row, p.column, p.reason) == (3, "input_tokens", TraceProblem.WRONG_TYPE)


def test_duplicate_ids_report_later_occurrences() -> None:
    """The first occurrence of an id is fine; each repeat is a problem."""
    with pytest.raises(TraceSchemaError) as info:
        _build(
            {
                "arrival_s": [0.0, 1.0, 2.0, 3.0],
                "input_tokens": [1, 1, 1, 1],
                "output_tokens": [1, 1, 1, 1],
                "request_id": ["a", "b", "a", "a"],
            }
        )
    assert [(p.row, p.reason) for p in info.value.problems] == [
        (3, TraceProblem.DUPLICATE_ID),
        (4, TraceProblem.DUPLICATE_ID),
    ]


def test_missing_required_column_lists_found_and_suggests_map() -> None:
    """The message lists the columns found and the --map to fix it."""
    with pytest.raises(
        TraceSchemaError,
        match=r"columns found: arrival_s, prompt.*--map "
        r"input_tokens=<source column>",
    ):
        build_trace(
            pa.table({"arrival_s": [0.0], "prompt": [1], "output_tokens": [1]}),
            path="t.csv",
            source_format="csv",
            block_tokens=None,
        )


def test_no_rows_is_an_error() -> None:
    """A header without rows is a user error, not an empty analysis."""
    with pytest.raises(TraceFormatError, match="no requests"):
        _build(
            {
                "arrival_s": pa.array([], pa.float64()),
                "input_tokens": pa.array([], pa.int64()),
                "output_tokens": pa.array([], pa.int64()),
            }
        )


def test_sorts_stably_and_shifts_with_notes() -> None:
    """Out-of-order arrivals are sorted (ties keep file order) and shifted to start at 0."""
    t = _build(
        {
            "arrival_s": [5.0, 3.0, 5.0, 3.0],
            "input_tokens": [1, 2, 3, 4],
            "output_tokens": [1, 1, 1, 1],
        }
    )
    assert t.table["input_tokens"].to_pylist() == [2, 4, 1, 3]
    assert t.table["arrival_s"].to_pylist() == [0.0, 0.0, 2.0, 2.0]
    assert any("sorted" in n for n in t.notes)
    assert any("shifted by 3.000000 s" in n for n in t.notes)


def test_hash_count_mismatch_is_noted_not_fatal() -> None:
    """ceil(input/block_tokens) hashes expected; others are counted in a note."""
    t = _build(
        {
            "arrival_s": [0.0, 1.0, 2.0],
            "input_tokens": [16, 17, 40],
            "output_tokens": [1, 1, 1],
            "block_hashes": [[1], [1, 2], [1]],
        },
        block_tokens=16,
    )
    assert any(n.startswith("1 requests have a block hash count") for n in t.notes)
    assert t.has_hashes


def test_failed_requests_counted() -> None:
    """Rows with ok = false are kept, counted and noted."""
    t = _build(
        {
            "arrival_s": [0.0, 1.0, 2.0],
            "input_tokens": [1, 1, 1],
            "output_tokens": [1, 0, 0],
            "ok": [True, False, False],
        }
    )
    assert t.requests == 3 and t.failed_requests == 2
    assert any(n.startswith("2 failed requests") for n in t.notes)


def test_milliseconds_as_seconds_warns_and_notes() -> None:
    """12,000 requests over 40 days (ms read as s): a KvAdvisorWarning and a note, no error."""
    arrival = np.linspace(0.0, 3_537_000.0, 12_000)
    cols = {
        "arrival_s": arrival,
        "input_tokens": np.ones(12_000, np.int64),
        "output_tokens": np.ones(12_000, np.int64),
    }
    # 3,537,000 s = 982.5 h (40.9 days), three digits 982 h; one every 294.75 s = 4.91 min.
    said = r"column 'arrival_s': 12,000 requests over 982 h \(one every 4\.91 min on average\)"
    with pytest.warns(KvAdvisorWarning, match=said + ".*:ms"):
        t = _build(cols)
    assert any(n.startswith("suspicious time unit") for n in t.notes)
    # The same trace in seconds (under an hour) is quiet.
    cols["arrival_s"] = arrival / 1000
    with warnings.catch_warnings():
        warnings.simplefilter("error", KvAdvisorWarning)
        quiet = _build(cols)
    assert not any("suspicious" in n for n in quiet.notes)


def test_busy_long_trace_is_not_suspicious() -> None:
    """A long trace with requests every few seconds (like BurstGPT) is not suspicious."""
    n = 20_000
    cols = {
        "arrival_s": np.linspace(0.0, 2 * 86_400.0, n),  # 2 days, one every 8.6 s
        "input_tokens": np.ones(n, np.int64),
        "output_tokens": np.ones(n, np.int64),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error", KvAdvisorWarning)
        _build(cols)


def _slow_roots(ids, parents):
    index = {v: i for i, v in enumerate(ids)}
    out = []
    for i in range(len(ids)):
        j, steps = i, 0
        while parents[j] in index and steps <= len(ids):
            j, steps = index[parents[j]], steps + 1
        out.append(j)
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(st.just(n), st.lists(st.integers(-1, 60), min_size=n, max_size=n))
    )
)
def test_session_roots_matches_slow_walk(case) -> None:
    """Pointer doubling gives the same chain roots as walking parent links one by one."""
    n, raw_parents = case
    ids = (np.arange(n, dtype=np.int64) * 7919) % 10007 * 2  # unique, unsorted, even
    # Point only to earlier rows (or outside) so chains are acyclic, as in a real trace.
    parents = np.array(
        [
            ids[p % i] if 0 <= p <= 50 and i > 0 else (2 * p + 1 if p > 50 else -1)  # odd: absent
            for i, p in enumerate(raw_parents)
        ],
        dtype=np.int64,
    )
    assert session_roots(ids, parents).tolist() == _slow_roots(ids.tolist(), parents.tolist())
