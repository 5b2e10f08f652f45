"""The compiled Mooncake JSONL reader: same table as pyarrow's, or pyarrow decides."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvadvisor.errors import KvAdvisorError
from kvadvisor.trace import fastjsonl, read_trace, readers
from kvadvisor.trace.detect import TraceFormat

SCHEMA = readers.JSONL_SCHEMAS[TraceFormat.MOONCAKE]
KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
GOOD = b'{"timestamp": 1, "input_length": 20, "output_length": 3, "hash_ids": [1, 2]}\n'
REPO = Path(__file__).resolve().parents[1]


def _pyarrow(data: bytes) -> pa.Table:
    """What _read_jsonl returned before the compiled reader: the reference."""
    return pajson.read_json(
        pa.BufferReader(data),
        read_options=pajson.ReadOptions(block_size=readers.JSONL_BLOCK_BYTES),
        parse_options=pajson.ParseOptions(
            explicit_schema=SCHEMA, unexpected_field_behavior="infer"
        ),
    )


def _compiled(data: bytes) -> pa.Table | None:
    # A writable copy: the same array type as np.fromfile, so the cached kernel is reused.
    return fastjsonl.parse_mooncake(np.frombuffer(data, dtype=np.uint8).copy(), SCHEMA)


def _refuse(*args: object, **kwargs: object) -> None:
    raise AssertionError("this reader must not be called here")


def _read(path: Path, monkeypatch: pytest.MonkeyPatch, *, compiled: bool):
    """read_trace's result, or its error as (type, message), with or without the fast path."""
    monkeypatch.setattr(readers, "FAST_JSONL_MIN_BYTES", 0 if compiled else 1 << 62)
    try:
        return read_trace(path, "mooncake")
    except KvAdvisorError as exc:
        return type(exc), str(exc)


def test_real_trace_same_table_as_pyarrow(mooncake_jsonl_path: Path, monkeypatch) -> None:
    """The published Mooncake JSONL: equal table, same schema, read without pyarrow.json."""
    expected = _pyarrow(mooncake_jsonl_path.read_bytes())
    monkeypatch.setattr(readers, "FAST_JSONL_MIN_BYTES", 0)
    monkeypatch.setattr(readers.pajson, "read_json", _refuse)
    got = readers._read_jsonl(mooncake_jsonl_path, None, TraceFormat.MOONCAKE)
    assert got.schema.equals(SCHEMA)
    assert got.equals(expected)
    # The first 400 lines of the published trace hold 11,349 block hashes (counted with
    # jq: ``[.hash_ids | length] | add`` over the lines).
    assert got.num_rows == 400
    assert len(got["hash_ids"].combine_chunks().values) == 11_349
    assert got["hash_ids"].type.equals(pa.list_(pa.int64()))


def test_real_trace_same_trace_end_to_end(mooncake_jsonl_path: Path, monkeypatch) -> None:
    """read_trace gives the same canonical trace (columns, notes, drops) either way."""
    slow = _read(mooncake_jsonl_path, monkeypatch, compiled=False)
    monkeypatch.setattr(readers.pajson, "read_json", _refuse)
    fast = _read(mooncake_jsonl_path, monkeypatch, compiled=True)
    assert fast.table.equals(slow.table)
    assert fast.table.schema.metadata == slow.table.schema.metadata


def test_columns_are_built_without_copies(mooncake_jsonl_path: Path) -> None:
    """The table wraps the parsed numpy arrays: arrow's pool allocates nothing for it."""
    data = np.fromfile(mooncake_jsonl_path, dtype=np.uint8)
    before = pa.total_allocated_bytes()
    table = fastjsonl.parse_mooncake(data, SCHEMA)
    assert table is not None and table.num_rows == 400
    assert pa.total_allocated_bytes() == before


def test_small_files_stay_with_pyarrow(tmp_path: Path, monkeypatch) -> None:
    """Below the threshold the compiled reader is not called (numba would cost more)."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD * 3)

    def fail(*args: object) -> None:
        raise AssertionError("compiled reader called below the threshold")

    monkeypatch.setattr(fastjsonl, "parse_mooncake", fail)
    assert readers._read_jsonl(path, None, TraceFormat.MOONCAKE).num_rows == 3


def test_reading_a_small_mooncake_file_does_not_import_numba(tmp_path: Path) -> None:
    """Numba stays out of a process that reads a small trace (import-time budget)."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD * 3)
    code = (
        "import sys; from kvadvisor.trace import read_trace; "
        f"read_trace({str(path)!r}, 'mooncake'); print('numba' in sys.modules)"
    )
    # This checkout first, whatever kvadvisor the interpreter has installed.
    path_entries = [str(REPO), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path_entries)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "False"


def test_compressed_and_other_formats_stay_with_pyarrow(tmp_path: Path, monkeypatch) -> None:
    """Only uncompressed Mooncake goes to the compiled reader."""
    import gzip

    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(GOOD * 2))
    monkeypatch.setattr(readers, "FAST_JSONL_MIN_BYTES", 0)
    monkeypatch.setattr(fastjsonl, "parse_mooncake", _refuse)
    assert read_trace(path, "mooncake").requests == 2
    bailian = tmp_path / "b.jsonl"
    bailian.write_bytes(
        b'{"chat_id": 1, "parent_chat_id": -1, "timestamp": 1.5, "input_length": 20, '
        b'"output_length": 3, "hash_ids": [1, 2]}\n'
    )
    assert read_trace(bailian, "bailian").requests == 1


# --- generated files: every variation the subset allows ------------------------------------

BIG = 10**18 - 1  # the largest 18-digit integer
ints = st.one_of(st.integers(0, 1000), st.integers(0, BIG))
blank = st.sampled_from(["", " ", "\t", "  \t"])
records = st.tuples(ints, ints, ints, st.lists(ints, max_size=6), st.permutations(KEYS))


@st.composite
def jsonl_files(draw) -> bytes:
    """Mooncake lines in the handled subset, with the whitespace, order and ends it allows."""
    lines = []
    for ts, inp, out, hashes, order in draw(st.lists(records, min_size=1, max_size=8)):
        values = {
            "timestamp": str(ts),
            "input_length": str(inp),
            "output_length": str(out),
            "hash_ids": "[" + draw(blank) + ("," + draw(blank)).join(map(str, hashes)) + "]",
        }
        members = [
            f'{draw(blank)}"{k}"{draw(blank)}:{draw(blank)}{values[k]}{draw(blank)}' for k in order
        ]
        line = draw(blank) + "{" + ",".join(members) + "}" + draw(blank)
        lines.append(line)
        lines.extend(draw(st.lists(blank, max_size=1)))  # a blank line now and then
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    text = ending.join(lines) + draw(st.sampled_from(["", ending, ending * 2]))
    return draw(st.sampled_from(["", "\n", "\r\n \n"])) + text


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jsonl_files())
def test_generated_files_same_table_as_pyarrow(data: str) -> None:
    """Key order, spaces and tabs, empty lists, 18-digit ints, blank lines, CRLF, no final LF."""
    raw = data.encode()
    got = _compiled(raw)
    assert got is not None, data
    assert got.schema.equals(SCHEMA)
    assert got.equals(_pyarrow(raw)), data


def test_big_integers_round_like_pyarrow() -> None:
    """An 18-digit timestamp becomes the same (nearest) float64 pyarrow gives."""
    raw = (
        b'{"timestamp": 999999999999999999, "input_length": 123456789012345678, '
        b'"output_length": 0, "hash_ids": [999999999999999999, 0]}\n'
    )
    got = _compiled(raw)
    assert got["timestamp"][0].as_py() == 1e18  # 10**18 - 1 rounds up to 10**18
    assert got["input_length"][0].as_py() == 123456789012345678
    assert got.equals(_pyarrow(raw))


def test_positions_and_counts() -> None:
    """The kernel returns (records, ids); -1 - position where the subset was left."""
    data = np.frombuffer(GOOD * 2 + b"\n", dtype=np.uint8).copy()
    lines, commas = fastjsonl.count_lines_and_commas(data)
    assert (lines, commas) == (3, 8)
    rows = np.empty(4)
    ints_ = [np.empty(4, np.int64) for _ in range(2)]
    offsets = np.empty(5, np.int32)
    hashes = np.empty(8, np.int64)
    assert fastjsonl.parse_records(data, rows, *ints_, offsets, hashes) == (2, 4)
    assert list(offsets[:3]) == [0, 2, 4]
    assert list(hashes[:4]) == [1, 2, 1, 2]
    bad = np.frombuffer(GOOD + b'{"timestamp": -1', dtype=np.uint8).copy()
    status, _ = fastjsonl.parse_records(bad, rows, *ints_, offsets, hashes)
    assert -1 - status == len(GOOD) + len(b'{"timestamp": ')


# --- anything else: not handled, and pyarrow gives today's result or message ----------------

_HEAD = b'{"timestamp": 1, "input_length": 20, "output_length": 3, "hash_ids": [1]}\n'


def _rec(ts: str = "2", inp: str = "5", out: str = "3", ids: str = "[1]") -> bytes:
    """A record with these raw value texts, keys in the trace's order."""
    return (
        f'{{"timestamp": {ts}, "input_length": {inp}, "output_length": {out}, "hash_ids": {ids}}}'
    ).encode()


NOT_HANDLED = {
    "minus sign": _rec(inp="-5"),
    "minus zero": _rec(ts="-0"),
    "fraction": _rec(ts="2.5"),
    "exponent": _rec(ts="2e3"),
    "null": _rec(inp="null"),
    "null list": _rec(ids="null"),
    "true": _rec(out="true"),
    "false in list": _rec(ids="[false]"),
    "string value": _rec(inp='"12"'),
    "string in list": _rec(ids='["a"]'),
    "nested list": _rec(ids="[[1]]"),
    "nested object": _rec(ts='{"ms": 2}'),
    "number for list": _rec(ids="1"),
    "trailing comma in list": _rec(ids="[1, ]"),
    "leading comma in list": _rec(ids="[, 1]"),
    "leading zero": _rec(inp="05"),
    "leading zero in list": _rec(ids="[1, 02]"),
    "minus in list": _rec(ids="[1, -2]"),
    "fraction in list": _rec(ids="[1.0]"),
    "19 digits": _rec(ids="[1000000000000000000]"),
    "too big for int64": _rec(inp="99999999999999999999"),
    "truncated line": _rec()[:-2],
    "trailing garbage": _rec() + b" x",
    "two records on a line": _rec() + b" " + _rec(),
    "trailing comma in object": _rec()[:-1] + b",}",
    "unknown key": _rec()[:-1] + b', "model": 7}',
    "missing key": b'{"timestamp": 2, "input_length": 5, "hash_ids": [1]}',
    "duplicate key": b'{"timestamp": 2, ' + _rec()[1:],
    "escaped key": _rec().replace(b"input_length", b"input_lengt\\u0068"),
    "same length and first byte": _rec().replace(b"timestamp", b"timestamq"),
    "key prefix": _rec().replace(b"hash_ids", b"hash_idz"),
    "non-ASCII key": _rec().replace(b"input_length", "input_léngth".encode()),
    "missing colon": _rec().replace(b'"timestamp":', b'"timestamp"'),
    "object over two lines": _rec().replace(b", ", b",\n", 1),
    "CR inside a record": _rec().replace(b", ", b",\r", 1),
    "empty object": b"{}",
    "array record": b"[1, 2, 3]",
    "NUL byte": _rec() + b"\x00",
}


@pytest.mark.parametrize("name", list(NOT_HANDLED))
def test_not_handled_falls_back_to_todays_result(name: str, tmp_path: Path, monkeypatch) -> None:
    """Line 2 leaves the subset: the kernel refuses; read_trace's result or error is unchanged."""
    raw = _HEAD + NOT_HANDLED[name] + b"\n" + _HEAD
    assert _compiled(raw) is None
    path = tmp_path / "t.jsonl"
    path.write_bytes(raw)
    expected = _read(path, monkeypatch, compiled=False)
    got = _read(path, monkeypatch, compiled=True)
    if isinstance(expected, tuple):
        assert got == expected
    else:
        assert got.table.equals(expected.table)
        assert got.table.schema.metadata == expected.table.schema.metadata


def test_byte_order_mark_falls_back(tmp_path: Path, monkeypatch) -> None:
    """A UTF-8 BOM before the first record is left to pyarrow."""
    raw = b"\xef\xbb\xbf" + _HEAD * 2
    assert _compiled(raw) is None
    path = tmp_path / "t.jsonl"
    path.write_bytes(raw)
    assert _read(path, monkeypatch, compiled=True) == _read(path, monkeypatch, compiled=False)


def test_no_records_falls_back() -> None:
    """Blank files are pyarrow's to judge."""
    assert _compiled(b"") is None
    assert _compiled(b"\n \r\n\t\n") is None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("string value", "row 2, column 'input_length': wrong_type: '12' is not an integer"),
        ("minus sign", "row 2, column 'input_tokens': negative_value: -5"),
        ("missing key", "row 2, column 'output_tokens': null_value: empty"),
        (
            "trailing comma in list",
            "row 2, column 'hash_ids': unparseable: not valid JSON at line 2, character 73 "
            "(Expecting value); a truncated line? complete or delete it",
        ),
    ],
)
def test_real_error_messages_end_to_end(
    name: str, message: str, tmp_path: Path, monkeypatch
) -> None:
    """The user still sees the row, column and reason pyarrow's path names."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(_HEAD + NOT_HANDLED[name] + b"\n" + _HEAD)
    monkeypatch.setattr(readers, "FAST_JSONL_MIN_BYTES", 0)
    with pytest.raises(KvAdvisorError) as err:
        read_trace(path, "mooncake")
    assert str(err.value) == f"{path}: {message}"


def test_more_ids_than_int32_offsets_falls_back(tmp_path: Path, monkeypatch) -> None:
    """A file whose ids could overflow list<int64>'s int32 offsets goes to pyarrow."""
    raw = GOOD * 3
    monkeypatch.setattr(fastjsonl, "MAX_HASH_IDS", 5)  # 9 commas: could hold more ids
    assert _compiled(raw) is None
    path = tmp_path / "t.jsonl"
    path.write_bytes(raw)
    monkeypatch.setattr(readers, "FAST_JSONL_MIN_BYTES", 0)
    assert readers._read_jsonl(path, None, TraceFormat.MOONCAKE).equals(_pyarrow(raw))
