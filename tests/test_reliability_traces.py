"""Hostile and broken traces: each case of issue 18's bad-input matrix is one error line, exit 2.

Before the fixes these crashed (a segmentation fault on deep JSON), hung or allocated without
bound (an outlier arrival), ended in a traceback, were accepted silently, or blamed the wrong
row. Each test reads through the public reader, and the CLI cases through the command.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner

from kvadvisor.cli import app
from kvadvisor.errors import TraceFormatError, TraceSchemaError
from kvadvisor.io.jsonio import MAX_JSON_DEPTH, too_deep
from kvadvisor.metrics.timeline import MAX_WINDOWS, window_count
from kvadvisor.trace import read_trace
from kvadvisor.trace.readers import FAST_JSONL_MIN_BYTES

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()
GOOD = '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}'
HEADER = "arrival_s,input_tokens,output_tokens"


def _raises(error: type[Exception], path: Path, *needles: str, **kw: object) -> str:
    with pytest.raises(error) as info:
        read_trace(path, **kw)
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# --- JSON that would crash the parser ---------------------------------------------------------

DEEP = 50_000


def _deep_line(kind: str) -> str:
    value = "[" * DEEP + "]" * DEEP if kind == "list" else '{"a":' * DEEP + "1" + "}" * DEEP
    return f'{{"timestamp": 1, "input_length": 10, "output_length": 2, "x": {value}}}'


@pytest.mark.parametrize("kind", ["list", "object"])
@pytest.mark.parametrize("line", [1, 2])
def test_deeply_nested_mooncake_line_is_one_error(tmp_path: Path, kind: str, line: int) -> None:
    """50,000 levels killed `info` with SIGSEGV (line 2) or a RecursionError (line 1).

    Both are one line naming the row now. Run in a subprocess: a regression would kill the
    test process itself.
    """
    lines = [GOOD, _deep_line(kind)] if line == 2 else [_deep_line(kind), GOOD]
    path = _write(tmp_path, "t.jsonl", "\n".join(lines) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "kvadvisor", "info", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-500:])
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), proc.stderr[-500:]
    assert f"row {line}" in err[0] and "nested deeper than" in err[0], err[0]


def test_deep_json_in_the_compiled_reader_path(tmp_path: Path) -> None:
    """A deep line in a file big enough for the compiled reader: refused before pyarrow.

    The compiled kernels do not handle nested values and hand the file back; the depth check
    then runs before pyarrow parses it.
    """
    filler = (GOOD + "\n") * (FAST_JSONL_MIN_BYTES // len(GOOD) + 10)
    path = _write(tmp_path, "big.jsonl", GOOD + "\n" + _deep_line("list") + "\n" + filler)
    assert path.stat().st_size >= FAST_JSONL_MIN_BYTES
    _raises(TraceSchemaError, path, "row 2, column '(record)'", "nested deeper than 32 levels")


def test_deep_json_in_benchmark_results(tmp_path: Path) -> None:
    """vLLM/SGLang results are parsed whole by pyarrow: a deep value is refused before."""
    run = {"input_lens": [1], "output_lens": [1], "model_id": "m", "x": 0}
    text = json.dumps(run).replace('"x": 0', '"x": ' + "[" * DEEP + "]" * DEEP)
    path = _write(tmp_path, "v.json", text)
    _raises(TraceSchemaError, path, "row 1", "nested deeper than", trace_format="vllm")


def test_nesting_scan_matches_a_reference() -> None:
    """Both scans agree with a byte-at-a-time parser, across chunk boundaries.

    The numpy scan (small files) and the compiled one (large files) against one reference.
    """
    from kvadvisor.trace.fastjsonl import too_deep as compiled_too_deep

    rng = np.random.default_rng(7)
    alphabet = np.frombuffer(b'[]{}"\\ab,', dtype=np.uint8)

    def reference(data: bytes, limit: int) -> tuple[str, int | None]:
        depth, inside, escaped = 0, False, False
        for i, c in enumerate(data):
            if inside:
                if escaped:
                    escaped = False
                elif c == 92:
                    escaped = True
                elif c == 34:
                    inside = False
            elif c == 92:
                return "invalid", i  # a parser stops at a backslash outside a string
            elif c == 34:
                inside = True
            elif c in (91, 123):
                depth += 1
                if depth > limit:
                    return "deep", i
            elif c in (93, 125):
                depth -= 1
        return "ok", None

    for _ in range(3000):
        data = bytes(rng.choice(alphabet, size=int(rng.integers(0, 50))))
        limit = int(rng.integers(0, 4))
        cuts = sorted(set(rng.integers(0, len(data) + 1, size=int(rng.integers(0, 4))).tolist()))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        kind, at = reference(data, limit)
        got = too_deep(chunks, limit)
        if kind == "deep":
            assert got == at, (data, limit, chunks)
        elif kind == "ok":
            assert got is None, (data, limit, chunks)
        else:  # past an invalid byte the parser never goes: only earlier levels matter
            assert got is None or got > at, (data, limit, chunks)
        compiled = compiled_too_deep(chunks, limit)
        if kind != "invalid":
            assert compiled == at, (data, limit, chunks)
        else:  # outside strings the kernel takes a backslash as a plain byte
            assert compiled is None or compiled > at, (data, limit, chunks)
    assert too_deep([b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}']) is None
    assert too_deep([b"[" * (MAX_JSON_DEPTH + 1)]) == MAX_JSON_DEPTH


# --- numbers outside physical sense -----------------------------------------------------------


def test_int64_max_token_counts_are_out_of_range(tmp_path: Path) -> None:
    """int64-max tokens overflowed in the analysis (OverflowError traceback)."""
    path = _write(
        tmp_path, "t.csv", f"{HEADER}\n0,9223372036854775807,2\n1,10,9223372036854775807\n"
    )
    _raises(TraceSchemaError, path, "row 1, column 'input_tokens': out_of_range", "next at rows 2")
    one_error_line(runner.invoke(app, ["analyze", str(path), "-q"]), "out_of_range")


@pytest.mark.parametrize(
    "value, needle",
    [("inf", "not_finite: inf"), ("-inf", "not_finite: -inf"), ("1e308", "out_of_range")],
)
def test_arrival_inf_and_huge(tmp_path: Path, value: str, needle: str) -> None:
    """Arrivals of inf were accepted with a note, 1e308 crashed the time series: now errors."""
    path = _write(tmp_path, "t.csv", f"{HEADER}\n0,10,2\n{value},10,2\n")
    _raises(TraceSchemaError, path, "column 'arrival_s'", needle)
    one_error_line(runner.invoke(app, ["analyze", str(path), "-q"]), "arrival_s")


def test_one_row_at_zero_among_epoch_arrivals_names_the_row(tmp_path: Path) -> None:
    """A 3-row CSV with one arrival at 0 among epoch seconds allocated 12.7 GiB per array."""
    path = _write(tmp_path, "t.csv", f"{HEADER}\n1700000000,10,2\n0,10,2\n1700000001,10,2\n")
    message = _raises(
        TraceSchemaError, path, "row 2, column 'arrival_s': out_of_range: 0.0", "outlier"
    )
    assert "next at rows" not in message  # only the outlier, not the two good rows
    result = runner.invoke(app, ["analyze", str(path), "-q", "--format", "json"])
    one_error_line(result, "row 2")


def test_huge_span_with_a_tiny_window_is_refused_before_allocating(tmp_path: Path) -> None:
    """1e12 arrivals with --window 0.001 asked for 7 PiB; a long span stays within the cap."""
    path = _write(tmp_path, "t.csv", f"{HEADER}\n0,10,2\n1e12,10,2\n")
    one_error_line(
        runner.invoke(app, ["analyze", str(path), "-q", "--window", "0.001"]), "arrival_s"
    )
    # Under a day (no unit warning), yet 8e7 windows of 1 ms: over the cap, said so.
    near = _write(tmp_path, "near.csv", f"{HEADER}\n0,10,2\n80000,10,2\n")
    one_error_line(
        runner.invoke(app, ["analyze", str(near), "-q", "--window", "0.001"]),
        "windows, more than the 10,000,000",
        "give --window",
    )
    assert window_count(MAX_WINDOWS - 1.0, 1.0) == MAX_WINDOWS


@pytest.mark.parametrize("column", ["ttft_s", "e2e_s"])
def test_infinite_latency_is_refused(tmp_path: Path, column: str) -> None:
    """TTFT of inf was accepted silently and poisoned every measured stage time."""
    path = _write(tmp_path, "t.csv", f"{HEADER},{column}\n0,10,2,0.1\n1,10,2,inf\n")
    _raises(TraceSchemaError, path, f"row 2, column '{column}': not_finite")


def test_nan_ttft_in_vllm_results_is_counted(tmp_path: Path) -> None:
    """NaN (json.dumps writes it) became null without a word: now a note counts it."""
    run = {
        "input_lens": [10, 10, 10],
        "output_lens": [2, 3, 4],
        "ttfts": [float("nan"), 0.1, float("nan")],
        "start_times": [0, 1, 2],
        "model_id": "m",
    }
    path = _write(tmp_path, "v.json", json.dumps(run))
    trace = read_trace(path)
    assert trace.table["ttft_s"].null_count == 2
    assert any(
        "ttft_s: 2 NaN value(s) for successful requests (first: request 1)" in n
        for n in trace.notes
    ), trace.notes


def test_negative_value_message_has_no_numpy_repr(tmp_path: Path) -> None:
    """`negative_value: np.float64(-5.0)` leaked numpy's repr."""
    path = _write(tmp_path, "t.csv", f"{HEADER},ttft_s\n0,10,2,-5.0\n")
    message = _raises(TraceSchemaError, path, "negative_value: -5.0")
    assert "np." not in message


def test_out_of_range_mooncake_integer_names_its_row(tmp_path: Path) -> None:
    """A 20-digit integer got pyarrow's words and no row; it names row and column now."""
    path = _write(
        tmp_path,
        "t.jsonl",
        GOOD + "\n" + GOOD.replace('"input_length": 10', '"input_length": 99999999999999999999'),
    )
    _raises(TraceSchemaError, path, "row 2, column 'input_length': out_of_range", "64-bit")


def test_empty_request_ids_are_not_duplicates(tmp_path: Path) -> None:
    """Two requests with an empty request_id were reported as duplicates (a false error)."""
    path = _write(tmp_path, "t.csv", f"request_id,{HEADER}\n,0,10,2\n,1,10,2\nx,2,10,2\n")
    assert read_trace(path).requests == 3
    dup = _write(tmp_path, "d.csv", f"request_id,{HEADER}\nx,0,10,2\n,1,10,2\nx,2,10,2\n")
    _raises(TraceSchemaError, dup, "row 3, column 'request_id': duplicate_id")


# --- CSV shapes -------------------------------------------------------------------------------


def test_duplicate_csv_header(tmp_path: Path) -> None:
    """A column named twice was a KeyError traceback."""
    path = _write(tmp_path, "t.csv", "arrival_s,input_tokens,input_tokens,output_tokens\n0,1,1,2\n")
    _raises(TraceFormatError, path, "column 'input_tokens' appears twice", "columns 2 and 3")


def test_cr_only_line_endings(tmp_path: Path) -> None:
    """Old-Mac CR line ends: pyarrow reads them; the error path (a bad cell) crashed in csv."""
    good = _write(tmp_path, "g.csv", f"{HEADER}\r0,10,2\r1,10,2\r".encode())
    assert read_trace(good).requests == 2
    bad = _write(tmp_path, "b.csv", f"{HEADER}\r0,10,2\r1,x,2\r".encode())
    _raises(TraceSchemaError, bad, "row 2, column 'input_tokens': wrong_type")


def test_two_megabyte_field(tmp_path: Path) -> None:
    """A 2 MB cell straddled pyarrow's 1 MiB block, then overflowed csv's field limit."""
    path = _write(tmp_path, "t.csv", f"{HEADER},model\n0,10,2,{'x' * 2_000_000}\n1,10,2,y\n")
    assert read_trace(path).requests == 2
    bad = _write(tmp_path, "b.csv", f"{HEADER},model\n0,10,2,{'x' * 2_000_000}\n1,x,2,y\n")
    _raises(TraceSchemaError, bad, "row 2, column 'input_tokens': wrong_type")


def test_parquet_forced_through_csv(tmp_path: Path) -> None:
    """--trace-format csv on a parquet file was a _csv.Error traceback."""
    path = REPO / "sample_traces" / "mooncake_conversation.parquet"
    _raises(TraceFormatError, path, "a parquet file, not csv", trace_format="csv")


def test_csv_ending_inside_an_open_quote(tmp_path: Path) -> None:
    """The last field's quote never closed: pyarrow took the rest as one value, silently."""
    path = _write(tmp_path, "t.csv", f'{HEADER},model\n0,10,2,a\n1,10,2,"unterminated\n')
    _raises(TraceSchemaError, path, "row 2, column '(record)': unparseable", "never closed")
    ok = _write(tmp_path, "ok.csv", f'{HEADER},model\n0,10,2,"a ""quoted"", b"\n1,10,2,ab"c\n')
    assert read_trace(ok).table["model"].to_pylist() == ['a "quoted", b', 'ab"c']


def test_utf8_bom_row_blame(tmp_path: Path) -> None:
    """A byte order mark was blamed on row 1 when the bad row is row 2."""
    path = _write(tmp_path, "t.jsonl", b"\xef\xbb\xbf" + (GOOD + "\n" + "{broken\n").encode())
    _raises(TraceSchemaError, path, "row 2", "not valid JSON")


@pytest.mark.parametrize(
    "data, needle",
    [
        ("a,b\n1,2\n".encode("utf-16"), "UTF-16 text, not UTF-8"),
        (f"{HEADER},model\n0,10,2,caf\xe9\n".encode("latin-1"), "not UTF-8"),
    ],
)
def test_other_encodings_are_not_called_binary(tmp_path: Path, data: bytes, needle: str) -> None:
    """Latin-1 and UTF-16 files were "binary"; they are text in another encoding."""
    message = _raises((TraceFormatError, TraceSchemaError), _write(tmp_path, "t.csv", data), needle)
    assert "binary" not in message and "iconv" in message


def test_latin1_cell_past_the_head(tmp_path: Path) -> None:
    """A Latin-1 byte after the first 64 KiB: named as the cell that is not UTF-8."""
    rows = "".join(f"{i},10,2,m\n" for i in range(20_000))
    data = f"{HEADER},model\n{rows}".encode() + "20000,10,2,caf\xe9\n".encode("latin-1")
    _raises(
        TraceSchemaError, _write(tmp_path, "t.csv", data), "row 20001, column 'model': not_utf8"
    )
