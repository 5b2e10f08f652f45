"""JSON that cannot crash its reader: nesting and size bounded before parsing, errors for people.

pyarrow's JSON reader recurses once per nesting level in C++, so a value nested 50,000 deep
overflows the stack and kills the process (a segmentation fault, no message); Python's json
module raises RecursionError instead, which is a traceback. No trace or model config nests
deeper than a few levels, so every JSON input is scanned for its nesting depth first
(:func:`too_deep`, vectorised, in bounded chunks) and refused past :data:`MAX_JSON_DEPTH`,
the same limit YAML documents have.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from kvadvisor.errors import KvAdvisorError
from kvadvisor.units.format import count

# Deepest nesting accepted in any JSON input (traces, model configs): as for YAML.
MAX_JSON_DEPTH = 32
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# A model config.json is a few KiB; anything past this is not one.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
SCAN_CHUNK_BYTES = 16 * 1024 * 1024

_QUOTE, _BACKSLASH = 34, 92
# Byte classes: 0 plain, then quote, opening bracket ([ {), closing bracket (] }), backslash.
_IS_QUOTE, _IS_OPEN, _IS_CLOSE, _IS_BACKSLASH = 1, 2, 3, 4
_CLASS = np.zeros(256, dtype=np.int8)
_CLASS[_QUOTE] = _IS_QUOTE
_CLASS[[91, 123]] = _IS_OPEN
_CLASS[[93, 125]] = _IS_CLOSE
_CLASS[_BACKSLASH] = _IS_BACKSLASH


class NestingScan:
    """Running JSON nesting depth over chunks of bytes, outside strings only.

    A bracket inside a string does not nest; a quote preceded by an odd run of backslashes
    does not end a string. The scan only bounds the depth: it does not validate the JSON, and
    on malformed input it may count differently from a parser, which then fails on the
    malformed part before reaching any deeper level.
    """

    def __init__(self, limit: int = MAX_JSON_DEPTH) -> None:
        self.limit = limit
        self.depth = 0
        self.in_string = False
        self.backslashes = 0  # length of the backslash run that ended the previous chunk
        self.offset = 0  # bytes scanned before the current chunk
        self.too_deep_at: int | None = None  # byte offset of the first bracket past the limit

    def feed(self, chunk: bytes | np.ndarray) -> bool:
        """Scan the next chunk; True once the limit was passed (the rest need not be fed)."""
        if self.too_deep_at is not None:
            return True
        buf = np.frombuffer(chunk, dtype=np.uint8) if isinstance(chunk, bytes) else chunk
        n = buf.shape[0]
        if n == 0:
            return False
        # One pass classifies every byte; the rest works on the few special positions only.
        classes = _CLASS[buf]
        special = np.flatnonzero(classes)
        kinds = classes[special]
        quotes = special[kinds == _IS_QUOTE]
        if quotes.size:
            quotes = quotes[~self._escaped(buf, quotes, special, kinds)]
        bracket = kinds >= _IS_OPEN
        brackets = special[bracket & (kinds != _IS_BACKSLASH)]
        if brackets.size:
            # Quotes before each bracket, plus the string state carried in, give its side.
            inside = (np.searchsorted(quotes, brackets) + int(self.in_string)) % 2 == 1
            outside = ~inside
            steps = np.where(classes[brackets[outside]] == _IS_OPEN, 1, -1).astype(np.int64)
            brackets = brackets[outside]
            depth = self.depth + np.cumsum(steps)
            over = np.flatnonzero(depth > self.limit)
            if over.size:
                self.too_deep_at = self.offset + int(brackets[over[0]])
                return True
            self.depth = int(depth[-1]) if depth.size else self.depth
        self.in_string = (self.in_string + quotes.size) % 2 == 1
        run = 0
        if buf[-1] == _BACKSLASH:
            others = np.flatnonzero(buf != _BACKSLASH)
            run = n - 1 - (int(others[-1]) if others.size else -1)
        self.backslashes = self.backslashes + run if run == n else run
        self.offset += n
        return False

    def _escaped(
        self, buf: np.ndarray, quotes: np.ndarray, special: np.ndarray, kinds: np.ndarray
    ) -> np.ndarray:
        """Which quotes follow an odd run of backslashes (vectorised over the runs)."""
        escaped = np.zeros(quotes.shape[0], dtype=bool)
        after_backslash = np.flatnonzero(
            np.where(quotes > 0, buf[np.maximum(quotes - 1, 0)] == _BACKSLASH, self.backslashes > 0)
        )
        if after_backslash.size == 0:
            return escaped
        slashes = special[kinds == _IS_BACKSLASH]
        # Index of each backslash's run start: a run starts where positions stop being
        # consecutive; the run before a quote at q ends at q - 1.
        starts = np.ones(slashes.shape[0], dtype=bool)
        starts[1:] = slashes[1:] != slashes[:-1] + 1
        run_start = np.maximum.accumulate(np.where(starts, np.arange(slashes.shape[0]), 0))
        q = quotes[after_backslash]
        at_start = q == 0
        lengths = np.zeros(q.shape[0], dtype=np.int64)
        inner = ~at_start
        if inner.any():
            last = np.searchsorted(slashes, q[inner] - 1)
            lengths[inner] = last - run_start[last] + 1
            # A run that starts the chunk continues the previous chunk's trailing run.
            lengths[inner] += np.where(slashes[run_start[last]] == 0, self.backslashes, 0)
        lengths[at_start] = self.backslashes
        escaped[after_backslash] = lengths % 2 == 1
        return escaped


def too_deep(chunks: Iterable[bytes | np.ndarray], limit: int = MAX_JSON_DEPTH) -> int | None:
    """Byte offset of the first bracket nested deeper than ``limit`` in the chunks, or None."""
    scan = NestingScan(limit)
    for chunk in chunks:
        if scan.feed(chunk):
            break
    return scan.too_deep_at


def line_of(data: bytes, offset: int) -> int:
    """1-based line number of byte ``offset`` in ``data``."""
    return data.count(b"\n", 0, offset) + 1


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class _Strict(ValueError):
    """A value a strict document may not hold (raised from the parser's hooks)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            shown = key if len(key) <= 40 else key[:37] + "..."
            raise _Strict(
                f"key {shown!r} appears twice in one object; a second value would silently "
                "replace the first: keep one"
            )
        out[key] = value
    return out


def _int64(text: str) -> int:
    # More than 19 digits is past 64 bits whatever they are: refused before int() reads them.
    value = int(text) if len(text.lstrip("-")) <= 19 else None
    if value is None or not INT64_MIN <= value <= INT64_MAX:
        raise _Strict(
            f"the integer {text[:30]} does not fit in 64 bits; no value here is that large"
        )
    return value


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Strict(f"{text[:30]} is not a finite number; write a finite value")
    return value


def loads(
    data: bytes | str,
    where: str,
    error: type[KvAdvisorError],
    *,
    allow_nan: bool = True,
    limit: int = MAX_JSON_DEPTH,
    strict: bool = False,
) -> Any:
    """Parse one JSON document, or raise ``error`` (one line naming ``where``).

    Nesting past ``limit`` is refused before parsing; a syntax error names its line and
    column; ``allow_nan`` False refuses NaN and Infinity (Python's json accepts them, JSON
    does not); an integer too long to convert is refused as such. ``strict`` applies the YAML
    loader's checks too (for configuration files): a key given twice in one object, an
    integer outside 64 bits, and NaN or Infinity are refused.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    deep = too_deep([raw], limit)
    if deep is not None:
        raise error(
            f"{where}: line {line_of(raw, deep)}: JSON nested deeper than {limit} levels; "
            "not a file kvadvisor reads"
        )
    hook: dict[str, Any] = {} if allow_nan and not strict else {"parse_constant": _refuse_constant}
    if strict:
        hook.update(object_pairs_hook=_unique_keys, parse_int=_int64, parse_float=_finite)
    try:
        return json.loads(data, **hook)
    except json.JSONDecodeError as exc:
        raise error(
            f"{where}: not valid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})"
        ) from None
    except UnicodeDecodeError as exc:
        raise error(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except _Strict as exc:
        raise error(f"{where}: {exc}") from None
    except (ValueError, RecursionError) as exc:
        # NaN or Infinity refused, or an integer past the digit limit of int().
        raise error(f"{where}: not valid JSON ({' '.join(str(exc).split())})") from None


def load_file(
    path: Path, error: type[KvAdvisorError], *, max_bytes: int, allow_nan: bool = False
) -> Any:
    """Read and parse a small JSON file (a model config): size, nesting and numbers bounded."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise error(
                f"{path}: {count(size)} bytes is over the {count(max_bytes)}-byte limit for JSON"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return loads(data, str(path), error, allow_nan=allow_nan)
