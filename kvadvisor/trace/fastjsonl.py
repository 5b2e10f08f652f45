"""Compiled reader for the strict subset of Mooncake JSONL that real Mooncake traces use.

This module imports numba at import time; ``kvadvisor.trace.readers`` imports it only when a
large uncompressed Mooncake file is read, so every other read never pays for numba.

pyarrow's JSON reader is general (any key, any JSON type, inference) and spends about 1.4 s on
a 170 MiB Mooncake file; these kernels parse only what a Mooncake trace holds, in about a
quarter of that. They accept exactly this subset and report anything else as "not handled",
so the caller hands the file to pyarrow, which then gives the result or the error message
(row and column of the first bad cell) it always gave:

- between records: any JSON whitespace (space, tab, CR, LF), so blank lines and CRLF pass;
- each record is one object on one line whose keys are exactly ``timestamp``,
  ``input_length``, ``output_length`` and ``hash_ids`` (any order, each once, no escapes);
- inside a record only spaces and tabs separate tokens: pyarrow's JSONL chunker cuts its
  blocks at the last CR or LF (arrow ``NewlinesStrictlyDelimitChunker``), so whether it reads
  a record spread over lines depends on where a block ends; such files stay with pyarrow;
- values are non-negative decimal integers of 1 to 18 digits without leading zeros (so
  they fit int64 and read as float64 exactly as pyarrow does); ``hash_ids`` is an array of
  them, possibly empty.

Minus signs, fractions, exponents, null, true/false, strings as values, nested values,
unknown, missing or duplicate keys, a byte order mark and trailing garbage are not handled.
"""

from __future__ import annotations

from collections.abc import Iterable

import numba as nb
import numpy as np
import pyarrow as pa

from kvadvisor.firstuse import watch_numba_compiles

# The first compilation of a run is announced (the CLI says it once on a terminal).
watch_numba_compiles()

# The four keys, as bytes: a key must equal one of them byte for byte.
_TIMESTAMP = np.frombuffer(b"timestamp", dtype=np.uint8)
_INPUT_LENGTH = np.frombuffer(b"input_length", dtype=np.uint8)
_OUTPUT_LENGTH = np.frombuffer(b"output_length", dtype=np.uint8)
_HASH_IDS = np.frombuffer(b"hash_ids", dtype=np.uint8)

# 18 decimal digits always fit int64 (max 9.2e18, 19 digits); longer numbers go to pyarrow,
# which range-checks them.
MAX_DIGITS = 18
# pyarrow's list<int64> has int32 offsets; a file with more commas than that (commas bound
# the hash ids from above) goes to pyarrow.
MAX_HASH_IDS = int(np.iinfo(np.int32).max)

_TAB, _LF, _CR, _SPACE = 9, 10, 13, 32
_QUOTE, _COMMA, _COLON, _ZERO, _NINE = 34, 44, 58, 48, 57
_LBRACKET, _BACKSLASH, _RBRACKET, _LBRACE, _RBRACE = 91, 92, 93, 123, 125


# Called only from the compiled functions below: no Python-callable wrapper is compiled for them
# (see ``fleet/kernel.py``'s ``_inner``).
_inner = nb.njit(cache=True, nogil=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)


@nb.njit(cache=True, nogil=True)
def count_lines_and_commas(buf):  # pragma: no cover - compiled
    """(LF bytes, comma bytes) in ``buf``: upper bounds that size the output arrays.

    Every accepted record ends its own line, so records <= LF + 1; each has three commas
    between its four members and k - 1 inside a hash list of k ids, so ids <= commas.
    """
    lines = 0
    commas = 0
    for i in range(buf.shape[0]):
        c = buf[i]
        if c == _LF:
            lines += 1
        elif c == _COMMA:
            commas += 1
    return lines, commas


@_inner
def _skip_blanks(buf, i, n):  # pragma: no cover - compiled
    """Past spaces and tabs: the only whitespace handled inside a record."""
    while i < n and (buf[i] == _SPACE or buf[i] == _TAB):
        i += 1
    return i


@_inner
def _same_bytes(buf, start, length, key):  # pragma: no cover - compiled
    if length != key.shape[0]:
        return False
    for j in range(length):
        if buf[start + j] != key[j]:
            return False
    return True


@_inner
def _key_id(buf, start, length):  # pragma: no cover - compiled
    """0 timestamp, 1 input_length, 2 output_length, 3 hash_ids, -1 anything else."""
    if _same_bytes(buf, start, length, _TIMESTAMP):
        return 0
    if _same_bytes(buf, start, length, _INPUT_LENGTH):
        return 1
    if _same_bytes(buf, start, length, _OUTPUT_LENGTH):
        return 2
    if _same_bytes(buf, start, length, _HASH_IDS):
        return 3
    return -1


@_inner
def _integer(buf, i, n):  # pragma: no cover - compiled
    """(value, index after it), or (-1, index) unless 1-18 digits without a leading zero.

    The caller checks the byte after the digits, so "1.5", "1e3" or "12abc" are refused there.
    """
    start = i
    value = 0
    while i < n and _ZERO <= buf[i] <= _NINE:
        value = value * 10 + (np.int64(buf[i]) - _ZERO)
        i += 1
    digits = i - start
    if digits == 0 or digits > MAX_DIGITS or (digits > 1 and buf[start] == _ZERO):
        return -1, i
    return value, i


@nb.njit(cache=True, nogil=True)
def parse_records(buf, timestamps, inputs, outputs, offsets, hash_ids):  # pragma: no cover
    """Parse ``buf`` into the output arrays; (records, hash ids), or (-1 - position, 0).

    A negative first value means "not handled" and gives the byte where the subset was left
    (for tests and debugging). ``offsets`` gets records + 1 entries, starting at 0.
    """
    n = buf.shape[0]
    max_rows = timestamps.shape[0]
    max_ids = hash_ids.shape[0]
    i = 0
    r = 0
    h = 0
    offsets[0] = 0
    while True:
        # Between records: any JSON whitespace (blank lines, CRLF line ends).
        while i < n and (buf[i] == _SPACE or buf[i] == _LF or buf[i] == _CR or buf[i] == _TAB):
            i += 1
        if i >= n:
            break
        if buf[i] != _LBRACE or r >= max_rows:
            return -1 - i, 0
        i += 1
        seen = 0
        # Exactly four members: a fifth, a missing one or a trailing comma is refused below.
        for member in range(4):
            i = _skip_blanks(buf, i, n)
            if i >= n or buf[i] != _QUOTE:
                return -1 - i, 0
            i += 1
            key_start = i
            while i < n and buf[i] != _QUOTE:
                if buf[i] == _BACKSLASH:  # an escaped key: pyarrow unescapes, we do not
                    return -1 - i, 0
                i += 1
            if i >= n:
                return -1 - i, 0
            k = _key_id(buf, key_start, i - key_start)
            if k < 0 or seen & (1 << k):
                return -1 - key_start, 0
            seen |= 1 << k
            i = _skip_blanks(buf, i + 1, n)
            if i >= n or buf[i] != _COLON:
                return -1 - i, 0
            i = _skip_blanks(buf, i + 1, n)
            if k == 3:
                if i >= n or buf[i] != _LBRACKET:
                    return -1 - i, 0
                i = _skip_blanks(buf, i + 1, n)
                if i < n and buf[i] == _RBRACKET:
                    i += 1
                else:
                    while True:
                        # _integer written out: this loop runs once per hash id, and the
                        # helper's tuple return made the whole parse about 15% slower.
                        start = i
                        value = 0
                        while i < n and _ZERO <= buf[i] <= _NINE:
                            value = value * 10 + (np.int64(buf[i]) - _ZERO)
                            i += 1
                        digits = i - start
                        if digits == 0 or digits > MAX_DIGITS or h >= max_ids:
                            return -1 - i, 0
                        if digits > 1 and buf[start] == _ZERO:
                            return -1 - start, 0
                        hash_ids[h] = value
                        h += 1
                        i = _skip_blanks(buf, i, n)
                        if i < n and buf[i] == _COMMA:
                            # A value must follow: "[1, ]" is not JSON.
                            i = _skip_blanks(buf, i + 1, n)
                            continue
                        if i < n and buf[i] == _RBRACKET:
                            i += 1
                            break
                        return -1 - i, 0
            else:
                value, i = _integer(buf, i, n)
                if value < 0:
                    return -1 - i, 0
                if k == 0:
                    timestamps[r] = value  # int64 -> float64 rounds to nearest, as pyarrow
                elif k == 1:
                    inputs[r] = value
                else:
                    outputs[r] = value
            i = _skip_blanks(buf, i, n)
            if i >= n:
                return -1 - i, 0
            if member < 3:
                if buf[i] != _COMMA:
                    return -1 - i, 0
            elif buf[i] != _RBRACE:
                return -1 - i, 0
            i += 1
        # Four members with distinct known keys are all four keys: nothing is missing.
        r += 1
        offsets[r] = h
        # The record must end its line: "} {" or "}x" is refused.
        while i < n and (buf[i] == _SPACE or buf[i] == _TAB or buf[i] == _CR):
            i += 1
        if i < n and buf[i] != _LF:
            return -1 - i, 0
    return r, h


@nb.njit(cache=True, nogil=True)
def _nesting_kernel(buf, limit, state):  # pragma: no cover - compiled
    """Index of the first bracket of ``buf`` nested past ``limit``, or -1.

    ``state`` (int64[3]: depth, inside a string, after a backslash in a string) carries the
    scan from one chunk to the next. A bracket inside a string does not nest; a quote after
    a backslash inside a string does not end it; outside strings a byte is what it is.
    """
    depth, inside, escaped = state[0], state[1], state[2]
    found = -1
    for i in range(buf.shape[0]):
        c = buf[i]
        if inside:
            if escaped:
                escaped = 0
            elif c == _BACKSLASH:
                escaped = 1
            elif c == _QUOTE:
                inside = 0
        elif c == _QUOTE:
            inside = 1
        elif c == _LBRACKET or c == _LBRACE:
            depth += 1
            if depth > limit:
                found = i
                break
        elif c == _RBRACKET or c == _RBRACE:
            depth -= 1
    state[0], state[1], state[2] = depth, inside, escaped
    return found


def too_deep(chunks: Iterable[np.ndarray | bytes], limit: int) -> int | None:
    """Byte offset of the first bracket nested deeper than ``limit`` in the chunks, or None.

    The compiled counterpart of ``kvadvisor.io.jsonio.too_deep`` for large files (one pass at
    memory speed instead of several numpy passes), checked against the same reference.
    """
    state = np.zeros(3, dtype=np.int64)
    offset = 0
    for chunk in chunks:
        buf = np.frombuffer(chunk, dtype=np.uint8) if isinstance(chunk, bytes) else chunk
        found = _nesting_kernel(buf, limit, state)
        if found >= 0:
            return offset + int(found)
        offset += buf.shape[0]
    return None


def parse_mooncake(data: np.ndarray, schema: pa.Schema) -> pa.Table | None:
    """The Mooncake table of a JSONL file's bytes (uint8), or None when not handled.

    ``schema`` is the reader's Mooncake schema (timestamp float64, input_length and
    output_length int64, hash_ids list<int64>); the columns are built from the parsed arrays
    without copying (nothing is allocated in arrow's pool). None also for a file without
    records, or with more commas than int32 list offsets can index: pyarrow decides those.
    """
    lines, commas = count_lines_and_commas(data)
    max_rows = lines + 1
    if commas > MAX_HASH_IDS:
        return None
    timestamps = np.empty(max_rows, dtype=np.float64)
    inputs = np.empty(max_rows, dtype=np.int64)
    outputs = np.empty(max_rows, dtype=np.int64)
    offsets = np.empty(max_rows + 1, dtype=np.int32)
    hash_ids = np.empty(commas, dtype=np.int64)
    rows, ids = parse_records(data, timestamps, inputs, outputs, offsets, hash_ids)
    if rows <= 0:
        return None
    hashes = pa.ListArray.from_arrays(
        _arrow(offsets[: rows + 1], pa.int32()), _arrow(hash_ids[:ids], pa.int64())
    )
    columns = [
        _arrow(timestamps[:rows], pa.float64()),
        _arrow(inputs[:rows], pa.int64()),
        _arrow(outputs[:rows], pa.int64()),
        hashes,
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _arrow(values: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    """A no-null arrow array over ``values``'s memory (no copy; pa.array would import pandas)."""
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])
