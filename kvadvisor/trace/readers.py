"""Read a trace file in any supported format into a canonical Trace (the only trace file I/O).

Files are parsed with pyarrow's readers (multi-threaded C++, no Python loop per line);
gzip and zstd inputs are decompressed on the fly. Python loops appear only on error paths,
to name the row and column of the first bad cell.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from kvadvisor.errors import (
    ConfigError,
    Problem,
    TraceError,
    TraceFormatError,
    TraceProblem,
    TraceSchemaError,
)
from kvadvisor.io.fileio import check_input
from kvadvisor.io.jsonio import MAX_JSON_DEPTH, SCAN_CHUNK_BYTES, NestingScan
from kvadvisor.trace import formats
from kvadvisor.trace.detect import (
    PARQUET_MAGIC,
    TraceFormat,
    compression_of,
    parse_format,
    sniff_head,
    sniff_keys,
    text_problem,
)
from kvadvisor.trace.formats import ColumnSource, Converted
from kvadvisor.trace.memory import default_memory_limit_bytes
from kvadvisor.trace.model import (
    CANONICAL_COLUMNS,
    META_ARRIVALS_MEASURED,
    META_BLOCK_TOKENS,
    META_DROPPED,
    META_NOTES,
    META_SOURCE_FORMAT,
    Trace,
)
from kvadvisor.trace.schema import build_trace
from kvadvisor.units.format import count

HEAD_BYTES = 64 * 1024
MAX_STORED_BLOCK_TOKENS = 1 << 20  # as --block-tokens allows
JSONL_BLOCK_BYTES = 64 * 1024 * 1024  # pyarrow.json block: large blocks parse faster
# pyarrow.csv block (its default is 1 MiB): a row longer than a block cannot be parsed
# ("straddling object"), so one long text cell (a prompt kept in the trace) needs room.
CSV_BLOCK_BYTES = 16 * 1024 * 1024
# Single-document JSON results (vLLM, SGLang, LLMPerf) are parsed whole in memory.
MAX_DOCUMENT_BYTES = 1024 * 1024 * 1024
MAX_FIRST_RECORD_BYTES = 512 * 1024 * 1024
# Uncompressed Mooncake JSONL from this size up goes to the compiled reader (trace/fastjsonl.py;
# anything outside its subset still goes to pyarrow). Its cost is numba: importing it and
# starting its compiler takes about 0.5 s in a fresh process, after which reading and parsing
# take less than half of pyarrow.json's time (0.53 s against 1.20 s on 169 MiB). Measured with
# benchmarks/bench_ingest.py (figures in docs/traces.md): where nothing else needs numba
# (convert, info) the crossover is about 64 MiB on a quiet machine and below 32 MiB on a busy
# one (32 MiB: 0.62 s against 0.45 s quiet, 0.77 s against 0.88 s busy); analyze and review
# start numba for their cache passes anyway, and there the compiled reader wins at every size
# measured (8 MiB: 0.04 s against 0.09 s).
FAST_JSONL_MIN_BYTES = 32 * 1024 * 1024
# What a compressed JSONL file is taken to expand to, to pick the nesting scan before reading.
COMPRESSION_RATIO = 8

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# What each column must hold, for the error-path scans: "int", "number", "ints" (list of
# int), "timestamp". Used to name the first bad cell when pyarrow refuses a file.
INT, NUMBER, INTS, NUMBERS, TIMESTAMP = "int", "number", "ints", "numbers", "timestamp"
EXPECTED_KINDS: dict[TraceFormat, dict[str, str]] = {
    TraceFormat.MOONCAKE: {
        "timestamp": NUMBER,
        "input_length": INT,
        "output_length": INT,
        "hash_ids": INTS,
    },
    TraceFormat.BAILIAN: {
        "chat_id": INT,
        "parent_chat_id": INT,
        "timestamp": NUMBER,
        "input_length": INT,
        "output_length": INT,
        "hash_ids": INTS,
    },
    TraceFormat.AZURE: {"TIMESTAMP": TIMESTAMP, "ContextTokens": INT, "GeneratedTokens": INT},
    TraceFormat.BURSTGPT: {"Timestamp": NUMBER, "Request tokens": INT, "Response tokens": INT},
    TraceFormat.LLMPERF: {
        "number_input_tokens": INT,
        "number_output_tokens": INT,
        "ttft_s": NUMBER,
        "end_to_end_latency_s": NUMBER,
    },
}
# The per-request arrays of a benchmark run that are checked, and what each entry must be.
BENCH_KINDS = (
    ("input_lens", INT),
    ("output_lens", INT),
    ("ttfts", NUMBER),
    ("start_times", NUMBER),
    ("itls", NUMBERS),  # one list of inter-token seconds per request
)
# pyarrow types for the JSONL sources: an explicit schema skips type inference (faster) and
# makes a wrong type an immediate error.
JSONL_SCHEMAS: dict[TraceFormat, pa.Schema] = {
    TraceFormat.MOONCAKE: pa.schema(
        [
            ("timestamp", pa.float64()),
            ("input_length", pa.int64()),
            ("output_length", pa.int64()),
            ("hash_ids", pa.list_(pa.int64())),
        ]
    ),
    TraceFormat.BAILIAN: pa.schema(
        [
            ("chat_id", pa.int64()),
            ("parent_chat_id", pa.int64()),
            ("timestamp", pa.float64()),
            ("input_length", pa.int64()),
            ("output_length", pa.int64()),
            ("hash_ids", pa.list_(pa.int64())),
        ]
    ),
}


def one_line(exc: BaseException) -> str:
    """An exception's text on one line: pyarrow's messages may span several (page headers)."""
    return " ".join(str(exc).split())


def _loads(text: str | bytes) -> object:
    """``json.loads`` whose every failure is a JSONDecodeError (so one handler names the spot).

    Python's parser raises RecursionError past ~1,000 nesting levels and a plain ValueError
    for an integer of more than 4,300 digits; both become a JSONDecodeError at the place found.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        doc = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
        scan = NestingScan()
        scan.feed(doc.encode("utf-8", "surrogatepass"))
        at = scan.too_deep_at or 0
        pos = len(doc.encode("utf-8", "surrogatepass")[:at].decode("utf-8", errors="replace"))
        raise json.JSONDecodeError(
            f"nested deeper than {MAX_JSON_DEPTH} levels; not a trace record", doc, pos
        ) from None
    except ValueError as exc:
        doc = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
        raise json.JSONDecodeError(one_line(exc), doc, 0) from None


def _check_file(path: Path) -> None:
    check_input(path, TraceFormatError, what="trace file")


def _open(path: Path, compression: str | None) -> pa.NativeFile:
    """A (decompressing) input stream; compression=None reads the bytes as they are."""
    try:
        return pa.input_stream(str(path), compression=compression)
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot be read ({one_line(exc)})") from None


def _plain(path: Path) -> str | pa.NativeFile:
    """An uncompressed file for pyarrow's readers, whatever its name says.

    Given a path, pyarrow decompresses by the name's suffix: plain JSONL named ``.jsonl.gz``
    failed with "incorrect header check", though compression is judged by the magic bytes.
    A plain name keeps the path, which lets pyarrow read ahead in parallel.
    """
    try:
        pa.Codec.detect(str(path))
    except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return str(path)  # no compression suffix
    return pa.memory_map(str(path))


def _corrupt(path: Path, compression: str | None, exc: Exception) -> TraceFormatError:
    """A read that failed inside the file: corrupt or truncated compressed data, or an I/O error.

    The head of a compressed file decompresses before the format is detected, so damage past it
    shows only while the whole file is parsed.
    """
    if compression is None:
        return TraceFormatError(f"{path}: cannot be read ({one_line(exc)})")
    return TraceFormatError(
        f"{path}: corrupt {compression} data ({one_line(exc)}); the file is damaged or incomplete "
        f"(an interrupted download?): fetch or compress it again"
    )


def _read_all(path: Path, compression: str | None) -> bytes:
    try:
        with _open(path, compression) as stream:
            return stream.read()
    except (OSError, pa.ArrowInvalid) as exc:
        raise _corrupt(path, compression, exc) from None


def _read_document(path: Path, compression: str | None) -> bytes:
    """A single-document JSON file, read whole (after a size check: it is parsed in memory)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot be read ({exc.strerror})") from None
    if size > MAX_DOCUMENT_BYTES:
        raise TraceFormatError(
            f"{path}: {count(size)} bytes is over the {count(MAX_DOCUMENT_BYTES)}-byte limit for a "
            "benchmark result read whole; split the runs into several files"
        )
    return _read_all(path, compression)


def _head(path: Path) -> tuple[bytes, str | None]:
    """The first bytes after decompression, and the compression found."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(HEAD_BYTES)
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot be read ({exc.strerror})") from None
    compression = compression_of(raw)
    if compression is None:
        return raw, None
    try:
        with _open(path, compression) as stream:
            return stream.read(HEAD_BYTES), compression
    except (OSError, pa.ArrowInvalid) as exc:
        raise _corrupt(path, compression, exc) from None


def _first_record(path: Path, compression: str | None) -> dict:
    """The first JSON object of the file: its first line, or the whole file if pretty-printed."""
    chunks: list[bytes] = []
    size = 0
    try:
        with _open(path, compression) as stream:
            while size < MAX_FIRST_RECORD_BYTES:
                chunk = stream.read(1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if b"\n" in chunk.lstrip(b"\r\n \t"):
                    break
    except (OSError, pa.ArrowInvalid) as exc:
        raise _corrupt(path, compression, exc) from None
    data = b"".join(chunks).lstrip(b"\xef\xbb\xbf \t\r\n")
    line = data.split(b"\n", 1)[0]
    try:
        record = _loads(line)
    except json.JSONDecodeError as line_exc:
        first = line.decode(errors="replace")
        if line_exc.pos < len(first.rstrip()):
            # Broken inside the first line: the problem is there, whatever follows.
            raise TraceSchemaError(str(path), [_json_problem(1, 1, first, line_exc)]) from None
        # The first line is an unfinished object: a pretty-printed file; parse it whole and
        # point at the line and character where that fails.
        whole = _read_all(path, compression)
        try:
            record = _loads(whole)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _document_problem(path, whole, exc, row=1) from None
    if not isinstance(record, dict):
        raise TraceFormatError(f"{path}: the first JSON value is not an object; not a trace")
    return record


def detect_format(path: str | Path) -> TraceFormat:
    """The format of ``path`` from its name and content (see docs/traces.md, detection rules)."""
    path = Path(path)
    _check_file(path)
    return _detect(path)[0]


def _detect(path: Path) -> tuple[TraceFormat, str | None]:
    """The format of a checked file, and the compression its head showed."""
    head, compression = _head(path)
    found = sniff_head(str(path), head)
    if isinstance(found, TraceFormat):
        return found, compression
    record = _first_record(path, compression)
    details = record.get("details")
    nested = set(details) if isinstance(details, dict) else set()
    return sniff_keys(str(path), set(record), nested), compression


def read_trace(
    path: str | Path,
    trace_format: str | TraceFormat | None = None,
    *,
    column_map: Mapping[str, ColumnSource] | Sequence[str] | None = None,
    block_tokens: int | None = None,
    max_text_bytes: int | None = None,
) -> Trace:
    """Read ``path`` in ``trace_format`` (auto-detected when None) into a canonical Trace.

    ``column_map`` renames columns of a canonical CSV/parquet (``{"input_tokens":
    ColumnSource("prompt_len")}`` or the ``--map`` strings); ``block_tokens`` sets or
    overrides the tokens per hash block. ``max_text_bytes``: the most CSV text (decompressed)
    read before the read stops with a TraceFormatError (None: half the machine's physical
    memory, analyze's default --memory-limit, so every command that reads a trace keeps the
    bound); a CSV is parsed whole, so a small ``.csv.gz`` expanding a thousandfold stops there,
    not at the machine's memory.
    """
    path = Path(path)
    _check_file(path)
    if block_tokens is not None and block_tokens <= 0:
        raise ConfigError(f"--block-tokens {block_tokens}: must be a positive number of tokens")
    mapping = (
        formats.parse_column_map(column_map)
        if isinstance(column_map, (list, tuple))
        else dict(column_map or {})
    )
    given = parse_format(trace_format)
    fmt, compression = _detect(path) if given is None else (given, None)
    if mapping and fmt not in (TraceFormat.CSV, TraceFormat.PARQUET):
        raise ConfigError(
            f"{path}: --map applies to canonical CSV/parquet, not to {fmt.value} traces"
        )
    if given is not None:  # detection, skipped, is what reads the head otherwise
        head, compression = _head(path)
        _check_forced_format(path, head, given)
    if fmt is TraceFormat.PARQUET:
        return _read_parquet(path, mapping, block_tokens)
    if fmt in (TraceFormat.MOONCAKE, TraceFormat.BAILIAN):
        raw = _read_jsonl(path, compression, fmt)
        convert = formats.from_mooncake if fmt is TraceFormat.MOONCAKE else formats.from_bailian
        converted = convert(raw, str(path))
    elif fmt in (TraceFormat.AZURE, TraceFormat.BURSTGPT, TraceFormat.CSV):
        bound = default_memory_limit_bytes() if max_text_bytes is None else max_text_bytes
        raw = _read_csv(path, compression, fmt, mapping, bound)
        converters: dict[TraceFormat, Callable[[pa.Table, str], Converted]] = {
            TraceFormat.AZURE: formats.from_azure,
            TraceFormat.BURSTGPT: formats.from_burstgpt,
            TraceFormat.CSV: lambda t, p: formats.from_canonical(t, p, mapping),
        }
        converted = converters[fmt](raw, str(path))
    elif fmt in (TraceFormat.VLLM, TraceFormat.SGLANG):
        raw = _read_bench(path, compression)
        converted = formats.from_bench(raw, str(path), fmt.value)
    else:  # LLMPerf
        raw = _read_llmperf(path, compression)
        converted = formats.from_llmperf(raw, str(path))
    del raw
    trace = _build(converted, path, fmt.value, block_tokens)
    del converted
    # The text parsers' buffers are free now but stay in arrow's allocator pool (about a third
    # of a JSONL file's parse peak); hand them back before the analysis allocates its arrays.
    pa.default_memory_pool().release_unused()
    return trace


def _check_forced_format(path: Path, head: bytes, fmt: TraceFormat) -> None:
    """A format given with --trace-format must match what the file is, at least text or not."""
    if fmt is TraceFormat.PARQUET:
        return  # pyarrow says what is wrong with a file that is not parquet
    if head.startswith(PARQUET_MAGIC):
        raise TraceFormatError(
            f"{path}: a parquet file, not {fmt.value}; drop --trace-format {fmt.value} (or give "
            "--trace-format parquet)"
        )
    problem = text_problem(head)
    if problem is not None:
        raise TraceFormatError(f"{path}: {problem}")


def _build(converted: Converted, path: Path, source_format: str, block_tokens: int | None) -> Trace:
    notes = list(converted.notes)
    tokens = converted.block_tokens
    if block_tokens is not None and block_tokens != tokens:
        if tokens is not None:
            notes.append(
                f"block_tokens set to {block_tokens} (the {source_format} default is {tokens})"
            )
        tokens = block_tokens
    return build_trace(
        converted.table,
        path=str(path),
        source_format=source_format,
        block_tokens=tokens,
        notes=tuple(notes),
        arrivals_measured=converted.arrivals_measured,
    )


def unreadable_parquet(
    path: str | Path, exc: Exception, *, in_directory: bool = False
) -> TraceFormatError:
    """A parquet file pyarrow cannot read (truncated, corrupt, another format), with the fix."""
    how = (
        "every file in a trace directory must be canonical parquet: move other files out, "
        "or write damaged ones again with `kvadvisor convert`"
        if in_directory
        else "the file is damaged or incomplete: write it again (`kvadvisor convert` writes "
        "canonical parquet)"
    )
    return TraceFormatError(f"{path}: not a readable parquet file ({one_line(exc)}); {how}")


@dataclass(frozen=True)
class StoredMetadata:
    """What ``convert`` and ``synth`` store in a canonical parquet file's schema metadata."""

    source_format: str = "parquet"
    block_tokens: int | None = None
    notes: tuple[str, ...] = ()
    dropped: dict[str, int] = field(default_factory=dict)
    arrivals_measured: bool = True


def stored_metadata(path: str | Path, meta: Mapping[bytes, bytes] | None) -> StoredMetadata:
    """The kvadvisor keys of a parquet schema's metadata; a damaged value is a TraceFormatError."""
    meta = meta or {}
    key = META_SOURCE_FORMAT
    try:
        fmt = meta.get(META_SOURCE_FORMAT, b"parquet").decode() or "parquet"
        key = META_BLOCK_TOKENS
        tokens = int(meta[META_BLOCK_TOKENS]) if META_BLOCK_TOKENS in meta else None
        if tokens is not None and not 0 < tokens <= MAX_STORED_BLOCK_TOKENS:
            # 20 digits overflowed int64 further on; the bound is --block-tokens'.
            raise ValueError(
                f"{str(tokens)[:24]} is not a positive number of tokens up to "
                f"{count(MAX_STORED_BLOCK_TOKENS)}"
            )
        key = META_NOTES
        notes = _loads(meta.get(META_NOTES, b"[]"))
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise ValueError("not a JSON list of text")
        key = META_DROPPED
        dropped = _loads(meta.get(META_DROPPED, b"{}"))
        if not isinstance(dropped, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in dropped.values()
        ):
            raise ValueError("not a JSON object of row counts")
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceFormatError(
            f"{path}: schema metadata '{key.decode()}' is damaged ({one_line(exc)}); write "
            "the file "
            "again with `kvadvisor convert`, or drop the kvadvisor.* metadata keys"
        ) from None
    return StoredMetadata(
        source_format=fmt,
        block_tokens=tokens,
        notes=tuple(notes),
        dropped={str(k): v for k, v in dropped.items()},
        arrivals_measured=meta.get(META_ARRIVALS_MEASURED, b"true") != b"false",
    )


def _read_parquet(
    path: Path, mapping: Mapping[str, ColumnSource], block_tokens: int | None
) -> Trace:
    """Canonical parquet (as written by ``kvadvisor convert``, or any parquet with --map)."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise unreadable_parquet(path, exc) from None
    stored = stored_metadata(path, table.schema.metadata)
    notes = stored.notes
    table = table.replace_schema_metadata(None)
    converted = formats.from_canonical(table, str(path), mapping)
    tokens = block_tokens if block_tokens is not None else stored.block_tokens
    return build_trace(
        converted.table,
        path=str(path),
        source_format=stored.source_format,
        block_tokens=tokens,
        notes=notes + tuple(n for n in converted.notes if n not in notes),
        dropped=stored.dropped,
        arrivals_measured=stored.arrivals_measured,
    )


def _read_jsonl(path: Path, compression: str | None, fmt: TraceFormat) -> pa.Table:
    """One JSON object per line, parsed by pyarrow.json with the format's explicit schema.

    A large uncompressed Mooncake file goes to the compiled reader first; it returns the same
    table, or None for anything outside the plain Mooncake subset, which pyarrow then reads
    (and reports, when it is wrong) exactly as for a small file.
    """
    checked = False
    if fmt is TraceFormat.MOONCAKE and compression is None:
        table, checked = _read_mooncake_compiled(path)
        if table is not None:
            return table
    if not checked:
        # pyarrow.json recurses in C++ per nesting level: a deep value would kill the process.
        _refuse_deep_json(path, compression)
    parse = pajson.ParseOptions(
        explicit_schema=JSONL_SCHEMAS[fmt], unexpected_field_behavior="infer"
    )
    options = pajson.ReadOptions(block_size=JSONL_BLOCK_BYTES)
    try:
        if compression is None:
            # A plain path lets pyarrow read ahead in parallel (faster than a stream).
            return pajson.read_json(_plain(path), read_options=options, parse_options=parse)
        with _open(path, compression) as stream:
            return pajson.read_json(stream, read_options=options, parse_options=parse)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise _locate_jsonl_problem(path, compression, EXPECTED_KINDS[fmt], exc) from None
    except OSError as exc:  # pyarrow's IOError: damage in compressed data past the head
        raise _corrupt(path, compression, exc) from None


def _chunks(path: Path, compression: str | None) -> Iterator[bytes]:
    """The (decompressed) file in bounded chunks, for the vectorised pre-parse scans."""
    try:
        with _open(path, compression) as stream:
            while chunk := stream.read(SCAN_CHUNK_BYTES):
                yield chunk
    except (OSError, pa.ArrowInvalid) as exc:
        raise _corrupt(path, compression, exc) from None


def _refuse_deep_json(
    path: Path, compression: str | None, data: bytes | None = None, row_is_run: bool = False
) -> None:
    """Raise a TraceSchemaError naming the row of a value nested past MAX_JSON_DEPTH levels.

    A large file is scanned by the compiled kernel (numba is loaded for it anyway, and one
    pass at memory speed beats the numpy passes); a small one by the numpy scan, which needs
    no compiler.
    """
    size = len(data) if data is not None else _stored_size(path)
    expanded = size * (COMPRESSION_RATIO if compression is not None and data is None else 1)
    if expanded >= FAST_JSONL_MIN_BYTES:
        from kvadvisor.trace import fastjsonl

        deep = fastjsonl.too_deep(_scan_chunks(path, compression, data), MAX_JSON_DEPTH)
    else:
        scan = NestingScan()
        for chunk in _scan_chunks(path, compression, data):
            if scan.feed(chunk):
                break
        deep = scan.too_deep_at
    if deep is not None:
        _raise_too_deep(path, _scan_chunks(path, compression, data), deep, row_is_run)


def _stored_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _scan_chunks(
    path: Path, compression: str | None, data: bytes | np.ndarray | None
) -> Iterator[bytes | np.ndarray]:
    """The bytes to scan: ``data`` when given, an uncompressed file mapped, else decompressed."""
    if data is not None:
        yield data
    elif compression is None:
        try:
            mapped = np.memmap(path, dtype=np.uint8, mode="r") if _stored_size(path) else None
        except (OSError, ValueError) as exc:
            raise TraceFormatError(f"{path}: cannot be read ({exc})") from None
        if mapped is not None:
            for start in range(0, mapped.shape[0], SCAN_CHUNK_BYTES):
                yield mapped[start : start + SCAN_CHUNK_BYTES]
    else:
        yield from _chunks(path, compression)


def _raise_too_deep(
    path: Path, chunks: Iterable[bytes | np.ndarray], offset: int, row_is_run: bool
) -> None:
    line, row = _line_and_row(chunks, offset)
    what = "run object" if row_is_run else "record"
    raise TraceSchemaError(
        str(path),
        [
            Problem(
                row,
                "(record)",
                TraceProblem.UNPARSEABLE,
                f"a value nested deeper than {MAX_JSON_DEPTH} levels (line {line}); no trace "
                f"{what} nests like that: delete or fix it",
            )
        ],
    )


def _line_and_row(chunks: Iterable[bytes | np.ndarray], offset: int) -> tuple[int, int]:
    """(line, row) of the non-blank byte at ``offset`` (rows: non-blank lines, as readers count)."""
    line, rows, seen, content = 1, 0, 0, False
    for chunk in chunks:
        whole = np.frombuffer(chunk, dtype=np.uint8) if isinstance(chunk, bytes) else chunk
        part = whole[: max(offset - seen + 1, 0)]
        newlines = np.flatnonzero(part == 10)
        filled = np.flatnonzero((part != 32) & (part != 9) & (part != 13) & (part != 10))
        starts = np.concatenate(([0], newlines[:-1] + 1)) if newlines.size else newlines
        has = np.searchsorted(filled, newlines) > np.searchsorted(filled, starts)
        if newlines.size:
            has[0] |= content
            content = bool(filled.size and filled[-1] > newlines[-1])
        else:
            content = content or bool(filled.size)
        rows += int(np.count_nonzero(has))
        line += newlines.size
        seen += whole.shape[0]
        if seen > offset:
            break
    return line, rows + 1


def _read_mooncake_compiled(path: Path) -> tuple[pa.Table | None, bool]:
    """The compiled reader's table, or None (file too small to pay off, or not handled).

    The flag says whether the file's nesting was checked: a file the kernels hand back is
    scanned by the compiled nesting kernel on the bytes already read, before pyarrow sees it.
    """
    try:
        if path.stat().st_size < FAST_JSONL_MIN_BYTES:
            return None, False
        data = np.fromfile(path, dtype=np.uint8)
    except OSError:
        return None, False  # pyarrow's path reports an unreadable file in its usual words
    from kvadvisor.trace import fastjsonl  # numba only when a large Mooncake file is read

    table = fastjsonl.parse_mooncake(data, JSONL_SCHEMAS[TraceFormat.MOONCAKE])
    if table is None:
        deep = fastjsonl.too_deep([data], MAX_JSON_DEPTH)
        if deep is not None:
            _raise_too_deep(path, [data], deep, row_is_run=False)
    del data  # the file's bytes: free them before the caller builds the trace
    return table, True


_QUOTE_BYTE = 34
# Bytes beside a quote that delimits a field: comma, CR, LF, and another quote ("" pairs).
_DELIMITING = np.zeros(256, dtype=bool)
_DELIMITING[[44, 13, 10, 34]] = True


class _BoundedText(io.RawIOBase):
    """A decompressing stream that stops, with a TraceFormatError, past ``limit`` bytes."""

    def __init__(self, stream: pa.NativeFile, path: Path, limit: int) -> None:
        super().__init__()
        self.stream, self.path, self.limit, self.seen = stream, path, limit, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size if size >= 0 else None)
        self.seen += len(data)
        if self.seen > self.limit:
            raise _too_much_text(self.path, self.limit)
        return data

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _too_much_text(path: Path, limit: int) -> TraceFormatError:
    return TraceFormatError(
        f"{path}: the CSV holds more than {count(limit)} bytes of text (decompressed), the "
        "memory limit for reading it whole; raise --memory-limit, or split the file"
    )


def _read_csv(
    path: Path,
    compression: str | None,
    fmt: TraceFormat,
    mapping: Mapping[str, ColumnSource],
    max_text_bytes: int | None = None,
) -> pa.Table:
    """A CSV with a header line, parsed by pyarrow.csv (types inferred, then checked).

    ``max_text_bytes`` bounds the text read (see :func:`read_trace`).
    """
    if max_text_bytes is not None and compression is None:
        if _stored_size(path) > max_text_bytes:
            raise _too_much_text(path, max_text_bytes)
    if fmt is TraceFormat.CSV:
        kinds = {}
        for name, (arrow_type, _) in CANONICAL_COLUMNS.items():
            source = mapping[name].column if name in mapping else name
            if pa.types.is_integer(arrow_type):
                kinds[source] = INT
            elif pa.types.is_floating(arrow_type) and name != "arrival_s":
                kinds[source] = NUMBER
    else:
        kinds = EXPECTED_KINDS[fmt]
    # Only empty cells are nulls: pyarrow's defaults would also turn "NaN" into a null,
    # hiding a NaN token count behind an "empty" message.
    convert = pacsv.ConvertOptions(null_values=[""], strings_can_be_null=True)
    read = pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES)
    try:
        if compression is None:
            table = pacsv.read_csv(_plain(path), read_options=read, convert_options=convert)
        else:
            with _open(path, compression) as stream:
                source = (
                    stream if max_text_bytes is None else _BoundedText(stream, path, max_text_bytes)
                )
                table = pacsv.read_csv(source, read_options=read, convert_options=convert)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise _locate_csv_problem(path, compression, kinds, exc) from None
    except OSError as exc:  # pyarrow's IOError: damage in compressed data past the head
        raise _corrupt(path, compression, exc) from None
    refuse_duplicate_columns(path, table.column_names)
    if _ends_inside_quotes(_chunks(path, compression)):
        # pyarrow takes everything after an unclosed quote as one value, silently.
        raise _locate_csv_problem(path, compression, kinds, None)
    for name, kind in kinds.items():
        if name in table.column_names and not _arrow_kind_ok(table[name].type, kind):
            raise _locate_csv_problem(path, compression, kinds, None)
    if _may_hold_hex(_chunks(path, compression)):
        # pyarrow reads "0x10" as the integer 16; the JSONL readers refuse it, and a token
        # count in hexadecimal is a mistake, not a notation: the cell is named, as any other.
        located = _locate_csv_problem(path, compression, kinds, None)
        if isinstance(located, TraceSchemaError):
            raise located
    return table


def _may_hold_hex(chunks: Iterable[bytes]) -> bool:
    """Whether the text holds "0x" or "0X" anywhere (a chunk boundary between them too)."""
    prev = b""
    for chunk in chunks:
        joined = prev + chunk[:1]
        if b"0x" in joined or b"0X" in joined or b"0x" in chunk or b"0X" in chunk:
            return True
        prev = chunk[-1:]
    return False


def refuse_duplicate_columns(path: str | Path, names: Sequence[str]) -> None:
    """A header naming a column twice is ambiguous (which one is the trace's?): say which."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names, 1):
        if name in seen:
            raise TraceFormatError(
                f"{path}: column '{name}' appears twice in the header (columns {seen[name]} "
                f"and {i}); rename or delete one"
            )
        seen[name] = i


def _ends_inside_quotes(chunks: Iterable[bytes]) -> bool:
    """Whether a CSV ends inside a quoted field (its closing quote is missing).

    In a quoted field every quote is doubled except the opening and the closing one, so the
    quotes that can delimit fields (those next to a comma, a line end, the file's ends or
    another quote) come in pairs in a well-formed file; a quote inside an unquoted value
    (``ab"c``, which pyarrow keeps as text) is between two other characters and not counted.
    An odd count means the last quoted field never closed.
    """
    count = 0
    prev = 10  # the file starts like a line
    deferred: int | None = None  # the byte before a quote that ended the previous chunk
    for chunk in chunks:
        buf = np.frombuffer(chunk, dtype=np.uint8)
        n = buf.shape[0]
        if n == 0:
            continue
        if deferred is not None:
            count += int(_DELIMITING[deferred] or _DELIMITING[buf[0]])
            deferred = None
        quotes = np.flatnonzero(buf == _QUOTE_BYTE)
        if quotes.size:
            if quotes[-1] == n - 1:  # its successor is in the next chunk
                deferred = int(buf[n - 2]) if n > 1 else prev
                quotes = quotes[:-1]
            before = np.where(quotes > 0, buf[np.maximum(quotes - 1, 0)], prev)
            after = buf[quotes + 1]
            count += int(np.count_nonzero(_DELIMITING[before] | _DELIMITING[after]))
        prev = int(buf[-1])
    if deferred is not None:
        count += 1  # a quote that ends the file closes (or opens) a field
    return count % 2 == 1


def _arrow_kind_ok(arrow_type: pa.DataType, kind: str) -> bool:
    if pa.types.is_null(arrow_type):
        return True
    if kind in (INT, NUMBER):
        # Floats pass for INT too: build_trace names a NaN or fractional cell with its own reason.
        return pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)
    if kind == TIMESTAMP:
        return pa.types.is_timestamp(arrow_type)
    if kind == NUMBERS:
        return pa.types.is_list(arrow_type) and _arrow_kind_ok(arrow_type.value_type, NUMBER)
    return True


def _read_bench(path: Path, compression: str | None) -> pa.Table:
    """vLLM/SGLang results: one (possibly pretty-printed) object per run; files are small."""
    data = _read_document(path, compression)
    _refuse_deep_json(path, compression, data, row_is_run=True)
    try:
        table = pajson.read_json(
            pa.BufferReader(data),
            read_options=pajson.ReadOptions(block_size=max(len(data) + 1, 1 << 20)),
            parse_options=pajson.ParseOptions(newlines_in_values=True),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise _locate_bench_problem(path, data, exc) from None
    try:
        table.validate(full=True)
    except pa.ArrowInvalid:
        # pyarrow.json's type inference builds an invalid list array from a list that starts
        # with null ([null, 0]); the runs are small: build the table from Python's parse.
        table = _bench_table_from_python(path, data)
    lifted = formats._lift_details(table)
    for key, kind in BENCH_KINDS:
        if key not in lifted.column_names:
            continue
        col_type = lifted[key].type
        if not pa.types.is_list(col_type) or not _arrow_kind_ok(col_type.value_type, kind):
            raise _locate_bench_problem(path, data, None)
    return table


def _bench_table_from_python(path: Path, data: bytes) -> pa.Table:
    """The benchmark runs parsed by Python's json and converted by pyarrow (small files)."""
    text = data.decode("utf-8-sig", errors="replace")
    try:
        try:
            runs = [_loads(text)]
        except json.JSONDecodeError:
            runs = [_loads(line) for _, _, line in _json_lines(text)]
        table = pa.Table.from_pylist(runs)
        table.validate(full=True)
    except (
        json.JSONDecodeError,
        pa.ArrowInvalid,
        pa.ArrowTypeError,
        pa.ArrowNotImplementedError,
        TypeError,
    ) as exc:
        raise _locate_bench_problem(path, data, exc) from None
    return table


def _read_llmperf(path: Path, compression: str | None) -> pa.Table:
    """LLMPerf ``*_individual_responses.json``: one JSON array of per-request objects (small)."""
    data = _read_document(path, compression)
    try:
        records = _loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _document_problem(path, data, exc) from None
    if not isinstance(records, list):
        raise TraceFormatError(
            f"{path}: LLMPerf results must be a JSON array of per-request objects, got a JSON "
            f"{_json_type(records)}; give the *_individual_responses.json file"
        )
    for row, record in enumerate(records, 1):
        if not isinstance(record, dict):
            raise _not_an_object(
                path,
                row,
                repr(record),
                record,
                "not a per-request object; delete it or regenerate the results file",
            )
    problem = _first_kind_problem(enumerate(records, 1), EXPECTED_KINDS[TraceFormat.LLMPERF])
    if problem:
        raise TraceSchemaError(str(path), [problem])
    try:
        return pa.Table.from_pylist(records)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # A column the reader only tests for null or reads as text (error_code holds an HTTP
        # status in one request and a message in another) may mix JSON types: kept as text.
        mixed = _mixed_columns(records) - EXPECTED_KINDS[TraceFormat.LLMPERF].keys()
        for record in records:
            for key in mixed & record.keys():
                value = record[key]
                if value is not None and not isinstance(value, str):
                    record[key] = json.dumps(value)
    try:
        return pa.Table.from_pylist(records)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise TraceFormatError(
            f"{path}: not readable LLMPerf results ({one_line(exc)}); each key must hold the "
            "same JSON type in every request: regenerate the results file"
        ) from None


def _mixed_columns(records: Sequence[dict]) -> set[str]:
    """Keys whose non-null values are of more than one JSON type (ints and floats one)."""
    seen: dict[str, set[str]] = {}
    for record in records:
        for key, value in record.items():
            if value is not None:
                seen.setdefault(key, set()).add(_json_type(value))
    return {key for key, kinds in seen.items() if len(kinds) > 1}


# --- error paths: find the first bad row and column (Python loops are fine here) -----------


def _value_ok(value: object, kind: str) -> bool:
    if value is None:
        return True
    if isinstance(value, bool):
        return False
    if kind == INT:
        return isinstance(value, int) and INT64_MIN <= value <= INT64_MAX
    if kind == NUMBER:
        return isinstance(value, (int, float))
    if kind == INTS:
        return isinstance(value, list) and all(
            isinstance(v, int) and not isinstance(v, bool) and INT64_MIN <= v <= INT64_MAX
            for v in value
        )
    if kind == NUMBERS:
        return isinstance(value, list) and all(_value_ok(v, NUMBER) for v in value)
    return True


def _first_kind_problem(rows, kinds: Mapping[str, str]) -> Problem | None:
    """The first (row, record) whose value in a known column has the wrong kind."""
    for row, record in rows:
        for key, kind in kinds.items():
            if key in record and not _value_ok(record[key], kind):
                return _kind_problem(row, key, record[key], kind)
    return None


def _kind_problem(row: int, column: str, value: object, kind: str) -> Problem:
    """A value of the wrong kind, or an integer beyond int64, as its Problem."""
    values = value if kind == INTS and isinstance(value, list) else [value]
    huge = next((v for v in values if isinstance(v, int) and not INT64_MIN <= v <= INT64_MAX), None)
    if huge is not None and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return Problem(
            row,
            column,
            TraceProblem.OUT_OF_RANGE,
            f"{str(huge)[:40]} is outside the 64-bit integer range",
        )
    what = {
        INT: "an integer",
        NUMBER: "a number",
        INTS: "a list of integers",
        NUMBERS: "a list of numbers",
    }[kind]
    return Problem(row, column, TraceProblem.WRONG_TYPE, f"{value!r:.60} is not {what}")


def _not_an_object(path: Path, row: int, shown: str, value: object, why: str) -> TraceSchemaError:
    """Row ``row`` parsed as a JSON ``value`` that is not an object: say what it is and ``why``."""
    return TraceSchemaError(
        str(path),
        [
            Problem(
                row,
                "(record)",
                TraceProblem.UNPARSEABLE,
                f"{shown:.60} is a JSON {_json_type(value)}, {why}",
            )
        ],
    )


def _json_type(value: object) -> str:
    """The JSON name of a parsed value's type, for messages."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {dict: "object", list: "array", str: "string"}.get(type(value), "null")


def _json_problem(
    row: int, line: int, text: str, exc: Exception, before: str | None = None
) -> Problem:
    """A JSON syntax error as a Problem naming the key being parsed where it broke.

    ``text`` is the line that broke (``colno`` counts in it); ``before``, when given, is all the
    text before the error (a multi-line document), searched for the key instead.
    """
    pos = getattr(exc, "colno", 1)
    prefix = before if before is not None else text[: max(pos - 1, 0)]
    keys = re.findall(r'"([^"\\]+)"\s*:', prefix)
    column = keys[-1] if keys else "(record)"
    msg = getattr(exc, "msg", str(exc))
    fix = (
        "delete or fix it" if "nested deeper" in msg else "a truncated line? complete or delete it"
    )
    return Problem(
        row,
        column,
        TraceProblem.UNPARSEABLE,
        f"not valid JSON at line {line}, character {pos} ({msg}); {fix}",
    )


def _document_problem(
    path: Path, data: bytes, exc: Exception, row: int | None = None
) -> TraceSchemaError:
    """A whole JSON document (it may span lines) that does not parse, as a one-Problem error.

    ``row`` is the record that broke; None counts the objects opened before the break (a JSON
    array with one object per request).
    """
    # "utf-8-sig": json.loads drops a byte order mark, so exc.pos counts without it.
    text = data.decode("utf-8-sig", errors="replace")
    pos = getattr(exc, "pos", 0)
    if row is None:
        row = max(text.count("{", 0, pos), 1)
    line = text.count("\n", 0, pos) + 1
    return TraceSchemaError(str(path), [_json_problem(row, line, text, exc, before=text[:pos])])


def _json_lines(text: str) -> Iterator[tuple[int, int, str]]:
    """(row, line number, line) of every non-blank line: pyarrow skips blank lines too."""
    row = 0
    for line_no, line in enumerate(io.StringIO(text), 1):
        if line.strip():
            row += 1
            yield row, line_no, line


def _locate_jsonl_problem(
    path: Path, compression: str | None, kinds: Mapping[str, str], exc: Exception
) -> TraceError:
    # "utf-8-sig": a byte order mark is not part of row 1.
    text = _read_all(path, compression).decode("utf-8-sig", errors="replace")
    for row, line_no, line in _json_lines(text):
        try:
            record = _loads(line)
        except json.JSONDecodeError as err:
            return TraceSchemaError(str(path), [_json_problem(row, line_no, line, err)])
        if not isinstance(record, dict):
            return _not_an_object(
                path,
                row,
                repr(line.strip()),
                record,
                f"not an object (line {line_no}; one request object per line): delete or fix it",
            )
        problem = _first_kind_problem([(row, record)], kinds)
        if problem:
            return TraceSchemaError(str(path), [problem])
    # Every line parses and its known keys are fine: pyarrow refused something else, most
    # often a key of another format holding different JSON types on different lines.
    return TraceFormatError(
        f"{path}: not valid JSONL ({one_line(exc)}); each line must be one JSON object, with "
        "each key holding the same JSON type on every line"
    )


def _locate_csv_problem(
    path: Path, compression: str | None, kinds: Mapping[str, str], exc: Exception | None
) -> TraceError:
    # "utf-8-sig": a byte order mark is not part of the first column's name.
    text = _read_all(path, compression).decode("utf-8-sig", errors="replace")
    # newline="": CR-only and CRLF line ends, and line breaks inside quoted values, are the
    # csv module's to split, as pyarrow splits them.
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, len(text) + 1))  # pyarrow has no per-field limit
    try:
        return _first_csv_problem(path, reader, kinds, exc)
    finally:
        csv.field_size_limit(limit)


def _first_csv_problem(
    path: Path, reader: Iterator[list[str]], kinds: Mapping[str, str], exc: Exception | None
) -> TraceError:
    row = 0
    try:
        header = next(reader, [])
        for fields in reader:
            if not fields:
                continue  # pyarrow skips empty lines too: they are not rows
            row += 1
            problem = _csv_row_problem(row, header, fields, kinds)
            if problem is not None:
                return TraceSchemaError(str(path), [problem])
    except csv.Error as err:
        row += 1
        what = str(err)
        if "unexpected end of data" in what or "EOF" in what:
            what = (
                "a quoted field is never closed (the file ends inside it); close the quote "
                "or delete the row"
            )
        else:
            what = f"not valid CSV ({what}); fix the quoting of this row"
        return TraceSchemaError(
            str(path), [Problem(row, "(record)", TraceProblem.UNPARSEABLE, what)]
        )
    detail = f" ({one_line(exc)})" if exc else ""
    if exc is not None and "straddling" in str(exc):
        detail = (
            f" (a row longer than {CSV_BLOCK_BYTES // (1024 * 1024)} MiB, which the CSV "
            "reader cannot hold in one block: shorten the long text cells)"
        )
    return TraceFormatError(
        f"{path}: not a readable CSV{detail}; a header line, then comma-separated rows with "
        "standard double-quote quoting (or give --trace-format)"
    )


def _csv_row_problem(
    row: int, header: list[str], fields: list[str], kinds: Mapping[str, str]
) -> Problem | None:
    """The first problem of one CSV row: a field count other than the header's, or a bad value."""
    if len(fields) != len(header):
        column = header[len(fields)] if len(fields) < len(header) else "(extra field)"
        return Problem(
            row,
            column,
            TraceProblem.UNPARSEABLE,
            f"{len(fields)} fields where the header has {len(header)}; "
            "a truncated line? complete or delete it",
        )
    for name, value in zip(header, fields, strict=True):
        kind = kinds.get(name)
        if kind and value.strip() and not _text_ok(value.strip(), kind):
            what = {INT: "an integer", NUMBER: "a number", TIMESTAMP: "a timestamp"}[kind]
            return Problem(row, name, TraceProblem.WRONG_TYPE, f"{value!r:.60} is not {what}")
    return None


def _text_ok(value: str, kind: str) -> bool:
    try:
        if kind == INT:
            int(value)
        elif kind == NUMBER:
            float(value)
        elif kind == TIMESTAMP:
            pa.scalar(value).cast(pa.timestamp("ns"))
    except (ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


def _locate_bench_problem(path: Path, data: bytes, exc: Exception | None) -> TraceError:
    text = data.decode("utf-8-sig", errors="replace")
    try:
        runs = [_loads(text)]
    except json.JSONDecodeError:
        runs = []
        for row, line_no, line in _json_lines(text):
            try:
                runs.append(_loads(line))
            except json.JSONDecodeError as err:
                return TraceSchemaError(str(path), [_json_problem(row, line_no, line, err)])
    for row, run in enumerate(runs, 1):
        if not isinstance(run, dict):
            return _not_an_object(
                path,
                row,
                repr(run),
                run,
                "not a benchmark run object (row = run object): delete it "
                "or regenerate the result file",
            )
        problem = _bench_run_problem(row, run)
        if problem:
            return TraceSchemaError(str(path), [problem])
    detail = f" ({one_line(exc)})" if exc else ""
    return TraceFormatError(
        f"{path}: not a readable benchmark result{detail}; each run must be a JSON object, "
        "with each key holding the same JSON type in every run: regenerate the result file"
    )


def _bench_run_problem(row: int, run: dict) -> Problem | None:
    """The first per-request array of a run that is not a list, or holds a bad value."""
    arrays = run["details"] if isinstance(run.get("details"), dict) else run
    for key, kind in BENCH_KINDS:
        values = arrays.get(key, run.get(key))
        if values is None:
            continue
        if not isinstance(values, list):
            return Problem(row, key, TraceProblem.WRONG_TYPE, f"{values!r:.60} is not a list")
        for i, value in enumerate(values):
            if not _value_ok(value, kind):
                problem = _kind_problem(row, f"{key}[{i}]", value, kind)
                return replace(problem, value=f"{problem.value} (row = run object)")
    return None
