"""One checker for YAML documents (plans, rules, catalogs): every problem, its path and line.

A loader declares its schema as :class:`Field` values (kind or unit, required or not, allowed
values, bounds, nested mappings and lists) and walks the parsed document with a
:class:`Checker`, which records every problem instead of stopping at the first, each with its
key path (``stages.prefill.tiers[0].capacity``), the file, the line YAML gave for it, what is
wrong and how to write it. Unknown keys and values outside a closed set get the closest known
names through :func:`did_you_mean`, the one suggester every part of kvadvisor uses. The
loader raises its own error class once, with every problem (``raise_if_any``); the CLI prints
one line per problem. Nothing here reads files or evaluates anything: the document is plain
data from the safe loader (kvadvisor.io.yamlio).
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kvadvisor.errors import KvAdvisorError
from kvadvisor.quoting import name_problem, one_line
from kvadvisor.units.format import MAX_DIGITS, number
from kvadvisor.units.parse import QuantityError, parse_quantity

# No figure a plan or catalog holds comes near this in its unit (IOPS ~1e7, MB/s ~1e6, GiB
# ~1e7, counts ~1e6): larger is a typo, and would overflow sums or make the replay loop by it.
MAX_NUMBER = 1e12
MAX_SUGGESTIONS = 3
QUANTITY_KINDS = ("size", "rate", "time")
# Fields in these units are rates something is divided by: 0 would mean "never finishes".
RATE_SUFFIXES = ("_mbps", "_gbps", "_iops", "_gbit", "_tflops")
UNIT_SUFFIXES = {
    "_gbps": "GB/s",
    "_mbps": "MB/s",
    "_gib": "GiB",
    "_gb": "GB",
    "_tb": "TB",
    "_tib": "TiB",
    "_tflops": "TFLOPS",
    "_us": "microseconds",
    "_ms": "milliseconds",
    "_s": "seconds",
    "_bytes": "bytes",
    "_tokens": "tokens",
    "_iops": "I/O per second",
    "_gbit": "Gbit/s",
    "_w": "watts",
    "_per_gib": "per GiB",
    "_usd": "US dollars",
    "_month": "US dollars per month",
    "_hour": "US dollars per hour",
}


def close_names(name: str, known: Iterable[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """The names a mistyped ``name`` most likely meant, best first (case-insensitive).

    A name the typed one begins (``p5e`` -> ``p5e.48xlarge``) or is part of comes first,
    shortest first: difflib's ratio alone rejects a short prefix of a long name, which is the
    commonest slip (a family given for its size). Then difflib's close matches.
    """
    key = str(name).strip().lower()
    names = [str(k) for k in dict.fromkeys(known)]
    lower = {c: c.lower() for c in names}
    starts = sorted((c for c in names if key and lower[c].startswith(key)), key=len)
    inside = sorted((c for c in names if key and key in lower[c] and c not in starts), key=len)
    near = difflib.get_close_matches(key, list(lower.values()), n=n, cutoff=cutoff)
    by_lower = {v: k for k, v in lower.items()}
    found = [*starts, *inside, *(by_lower[m] for m in near)]
    return list(dict.fromkeys(found))[:n]


def did_you_mean(name: str, known: Iterable[str], n: int = 1, cutoff: float = 0.6) -> str:
    """``"did you mean 'a'?"`` (or ``'a', 'b'``) for a mistyped name; empty when none is close."""
    close = close_names(name, known, n, cutoff)
    return f"did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def with_hint(what: str, hint: str) -> str:
    """``what``, then ``; hint`` when there is one."""
    return f"{what}; {hint}" if hint else what


def unit_hint(field_name: str) -> str:
    """The unit a field's name carries (``_gbps``: GB/s), as a hint for a mistyped value."""
    for suffix, unit in UNIT_SUFFIXES.items():
        if field_name.endswith(suffix):
            return f" (a plain number in {unit}, as the field name says)"
    return ""


@dataclass(frozen=True)
class Field:
    """What one key of a mapping must hold.

    ``kind``: number | int | str | text (non-blank) | name (text on one printable line) |
    bool | date | size | rate | time (a quantity with its unit) | list[str] | list[number] |
    list (``items`` each) | mapping (``fields``, or any keys when None) | any (checked by the
    loader). ``help`` says how to write the value; it follows every problem with it.
    """

    kind: str
    required: bool = False
    minimum: float | None = 0.0
    maximum: float = MAX_NUMBER
    choices: tuple[str, ...] | None = None
    help: str = ""
    fields: Mapping[str, Field] | None = None
    items: Field | None = None
    # Must be more than 0 (a bandwidth, a rate: a divisor). None: decided by the field's unit
    # suffix (RATE_SUFFIXES); False where 0 means "none" (an absent NVLink).
    positive: bool | None = None

    def must_be_positive(self, field: str) -> bool:
        """Whether 0 is refused for ``field`` (see ``positive``)."""
        return self.positive if self.positive is not None else field.endswith(RATE_SUFFIXES)


@dataclass(frozen=True)
class Problem:
    """One problem: the file, the line YAML gave (0: none), the key path, what and how to fix."""

    path: str
    line: int
    where: str
    what: str
    reference: bool = False  # names something that does not exist (a fact, a catalog entry)

    def __str__(self) -> str:
        at = f"{self.path}:{self.line}" if self.line else self.path
        return f"{at}: {self.where}: {self.what}" if self.where else f"{at}: {self.what}"


class Invalid(Exception):
    """Raised by :meth:`Checker.fail` after recording: the part being built cannot go on."""


class Checker:
    """Walks one document, recording every problem with its path and line (never stops early).

    ``lines`` maps a key path to the line YAML gave for it (kvadvisor.io.yamlio.load_yaml_lines);
    a problem at a path it lacks takes its nearest enclosing path's line.
    """

    def __init__(self, path: str, lines: Mapping[str, int] | None = None) -> None:
        self.path = path
        self.lines = lines or {}
        self.problems: list[Problem] = []

    # -- recording ---------------------------------------------------------------------
    def add(self, where: str, what: str, *, reference: bool = False) -> None:
        """Record one problem at key path ``where`` (empty: the whole document)."""
        self.problems.append(Problem(self.path, self.line(where), where, what, reference))

    def fail(self, where: str, what: str) -> Invalid:
        """Record a problem and return the exception that abandons the part being built."""
        self.add(where, what)
        return Invalid(what)

    def line(self, where: str) -> int:
        """The line of ``where``, or of the nearest enclosing key path YAML gave one for."""
        at = where
        while at:
            if at in self.lines:
                return self.lines[at]
            cut = max(at.rfind("."), at.rfind("["))
            at = at[:cut] if cut > 0 else ""
        return self.lines.get("", 0)

    def attempt(self, where: str, find: Callable[..., Any], *args: Any) -> Any:
        """``find(*args)`` (a catalog lookup); its user error is recorded at ``where``: None."""
        try:
            return find(*args)
        except KvAdvisorError as exc:
            self.add(where, str(exc), reference=True)
            return None

    def failed(self, where: str = "") -> bool:
        """Whether a problem was recorded at ``where`` or below it (anywhere, for "")."""
        return any(
            not where or p.where == where or p.where.startswith((f"{where}.", f"{where}["))
            for p in self.problems
        )

    def lines_of_problems(self) -> tuple[str, ...]:
        """Every problem as its one line, in file order (the order found where no line is known)."""
        return tuple(str(p) for p in sorted(self.problems, key=lambda p: p.line))

    def raise_if_any(self, error: Callable[[str, tuple[str, ...]], Exception]) -> None:
        """Raise ``error(message, problems)`` once, with every problem, if there are any.

        The message is the first problem and a count of the rest (a notebook's one line);
        the CLI prints every problem, one line each.
        """
        if not self.problems:
            return
        every = self.lines_of_problems()
        more = len(every) - 1
        suffix = f" (and {more} more problem{'' if more == 1 else 's'})" if more else ""
        raise error(every[0] + suffix, every)

    # -- walking a mapping against its fields -------------------------------------------
    def unknown_keys(self, where: str, record: Mapping[Any, Any], known: Iterable[str]) -> None:
        """One problem per key of ``record`` not in ``known``, with the closest known key."""
        known = known if isinstance(known, Mapping) else dict.fromkeys(known)
        for key in record:
            if key not in known:
                hint = did_you_mean(str(key), known) or f"known fields: {', '.join(known)}"
                self.add(join(where, str(key)), f"unknown field; {hint}")

    def record(self, where: str, record: Any, fields: Mapping[str, Field]) -> dict[str, Any]:
        """Check one mapping against ``fields``: unknown keys, required keys, every value.

        Returns the checked values of the keys given and valid (a null counts as absent).
        """
        if not isinstance(record, dict):
            self.add(
                where,
                f"expected a mapping with keys {', '.join(fields)}, got {yaml_type(record)}",
            )
            return {}
        self.unknown_keys(where, record, fields)
        checked: dict[str, Any] = {}
        for key, spec in fields.items():
            # Most keys of a schema are absent from a given document: skip them cheaply (the
            # advisor checks one plan per candidate it replays).
            raw = record.get(key)
            if raw is not None or spec.required:
                value = self.value(join(where, key), spec, raw)
                if value is not None:
                    checked[key] = value
        return checked

    def value(self, where: str, spec: Field, value: Any) -> Any:
        """The checked value, or None after recording why it is wrong."""
        name = where.rsplit(".", 1)[-1]
        if value is None:
            if spec.required:
                self.add(where, f"is required ({spec.help})" if spec.help else "is required")
            return None
        check = _KINDS.get(spec.kind)
        if check is None:
            raise AssertionError(f"unknown field kind {spec.kind}")  # a schema bug, not input
        try:
            return check(self, where, name, spec, value)
        except Invalid:
            return None

    # -- single values (each records its problem and raises Invalid) --------------------
    def _bad(self, where: str, spec: Field, what: str) -> Invalid:
        return self.fail(where, f"{what} ({spec.help})" if spec.help else what)

    def number(self, where: str, name: str, spec: Field, value: Any) -> float | int:
        """A finite number within the field's bounds (a whole one for kind "int")."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            unit = unit_hint(name) or (f" ({spec.help})" if spec.help else "")
            raise self.fail(where, f"expected a number, got {value!r}{unit}")
        if spec.kind == "int" and not isinstance(value, int):
            raise self._bad(where, spec, f"expected a whole number, got {value!r}")
        if not math.isfinite(value):
            raise self.fail(where, f"must be finite, got {value!r}")
        if spec.minimum is not None and value < spec.minimum:
            raise self._bad(where, spec, f"must be >= {limit(spec.minimum)}, got {value!r}")
        if value <= 0 and spec.must_be_positive(name):
            raise self.fail(where, f"must be more than 0{unit_hint(name)}, got {value!r}")
        if value > spec.maximum == MAX_NUMBER:
            raise self.fail(
                where, f"{value!r} is beyond any real figure (at most {limit(MAX_NUMBER)})"
            )
        if value > spec.maximum:
            raise self._bad(where, spec, f"must be at most {limit(spec.maximum)}, got {value!r}")
        return value

    def text(self, where: str, name: str, spec: Field, value: Any) -> str:
        """Text (non-blank for text and name kinds), one of ``choices`` when given."""
        if not isinstance(value, str) or (spec.kind != "str" and not value.strip()):
            raise self._bad(where, spec, f"expected text, got {value!r}")
        if spec.choices and value not in spec.choices:
            raise self.fail(where, choice_problem(value, spec.choices))
        if spec.kind == "name" and (problem := name_problem(value)) is not None:
            raise self.fail(where, problem)
        return value

    def quantity(self, where: str, name: str, spec: Field, value: Any) -> float:
        """A size, rate or time with its unit, in bytes, bytes/s or seconds."""
        try:
            amount = parse_quantity(value, spec.kind)
        except QuantityError as exc:
            raise self.fail(where, str(exc)) from None
        if amount <= 0 and spec.positive:
            raise self.fail(where, with_hint(f"must be above zero, got {value!r}", spec.help))
        return amount


def choice_problem(value: Any, choices: Iterable[str]) -> str:
    """Why ``value`` is not one of ``choices``, with the closest one."""
    choices = list(choices)
    return with_hint(
        f"must be one of {', '.join(choices)}, got {value!r}", did_you_mean(str(value), choices)
    )


def join(where: str, key: str) -> str:
    """The key path of ``key`` inside ``where``."""
    return f"{where}.{key}" if where else key


def limit(value: float) -> str:
    """A bound as a user's YAML number is written against it ("1", "1,000,000,000,000")."""
    return number(value, MAX_DIGITS)


def yaml_type(value: Any) -> str:
    """A parsed YAML value as a message shows it: a scalar as written, a container by kind."""
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return repr(one_line(value)[:60])
    return repr(value)


def _boolean(c: Checker, where: str, name: str, spec: Field, value: Any) -> bool:
    if not isinstance(value, bool):
        raise c._bad(where, spec, f"expected true or false, got {value!r}")
    return value


def _date(c: Checker, where: str, name: str, spec: Field, value: Any) -> str:
    # YAML reads an unquoted 2026-11-30 as a date; a quoted one stays text.
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    raise c.fail(where, f"expected a date written YYYY-MM-DD, got {value!r}")


def _words(c: Checker, where: str, name: str, spec: Field, value: Any) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise c._bad(where, spec, f"expected a list of text, got {value!r:.60}")
    for i, item in enumerate(items):
        if spec.choices and item not in spec.choices:
            c.add(f"{where}[{i}]", choice_problem(item, spec.choices))
    return items


def _numbers(c: Checker, where: str, name: str, spec: Field, value: Any) -> list[float]:
    if not isinstance(value, list) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= spec.maximum
        for v in value
    ):
        raise c.fail(
            where, f"expected a list of numbers from 0 to {limit(spec.maximum)}, got {value!r:.60}"
        )
    return value


def _items(c: Checker, where: str, name: str, spec: Field, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise c._bad(where, spec, f"expected a list, got {yaml_type(value)}")
    if spec.items is None:
        return value
    # A bad item is None in place, so the loader still checks the others (and their names).
    out = []
    for i, item in enumerate(value):
        if item is None:  # `- ` with nothing after it: a mistake, not an absent key
            c.add(f"{where}[{i}]", f"expected a {spec.items.kind}, got an empty item")
        out.append(c.value(f"{where}[{i}]", spec.items, item))
    return out


def _mapping(c: Checker, where: str, name: str, spec: Field, value: Any) -> dict[str, Any]:
    if spec.fields is None:
        if not isinstance(value, dict):
            raise c._bad(where, spec, f"expected a mapping, got {yaml_type(value)}")
        return value
    return c.record(where, value, spec.fields)


_KINDS: dict[str, Callable[[Checker, str, str, Field, Any], Any]] = {
    "number": Checker.number,
    "int": Checker.number,
    "str": Checker.text,
    "text": Checker.text,
    "name": Checker.text,
    "bool": _boolean,
    "date": _date,
    "size": Checker.quantity,
    "rate": Checker.quantity,
    "time": Checker.quantity,
    "list[str]": _words,
    "list[number]": _numbers,
    "list": _items,
    "mapping": _mapping,
    "any": lambda c, where, name, spec, value: value,
}
