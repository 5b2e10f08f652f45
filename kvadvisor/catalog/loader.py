"""Load and check a catalog YAML file against a field schema (no code runs from the file).

A catalog file looks like::

    kind: gpus
    sources:
      N1: "https://... (what the page is)"
    entries:
      h200:
        bf16_dense_tflops: 989.4
        source: [N5, N6]
        as_of: 2026-11-30

Every entry must cite at least one key of ``sources``; unknown fields are rejected with a
suggestion; numbers must be finite and not below the field's minimum. Field names carry their
unit (``_gbps``, ``_gib``, ...), so a value written with a unit ("4.8 TB/s") is a type error that
names the unit expected. Checking is lazy: every problem of a file is collected (file and key
path each) before one :class:`CatalogProblems` error reports them all.
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kvadvisor.errors import CatalogError, CatalogProblems
from kvadvisor.io.yamlio import load_yaml
from kvadvisor.quoting import name_problem, one_line
from kvadvisor.units.format import MAX_DIGITS, number


@dataclass(frozen=True)
class FieldSpec:
    """What one entry field must hold.

    ``kind`` "mapping" with ``fields`` is a nested record checked like an entry (a price).
    """

    kind: str  # number | int | str | bool | date | list[str] | list[number] | mapping
    required: bool = False
    minimum: float | None = 0.0
    choices: tuple[str, ...] | None = None
    help: str = ""
    fields: Mapping[str, FieldSpec] | None = None
    # Must be more than 0 (a bandwidth, a rate, a throughput: a divisor). None: decided by the
    # field's unit suffix (RATE_SUFFIXES); False where 0 means "none" (an absent NVLink).
    positive: bool | None = None

    def must_be_positive(self, field: str) -> bool:
        """Whether 0 is refused for ``field`` (see ``positive``)."""
        return self.positive if self.positive is not None else field.endswith(RATE_SUFFIXES)


# Fields in these units are rates something is divided by: 0 would mean "never finishes".
RATE_SUFFIXES = ("_mbps", "_gbps", "_iops", "_gbit", "_tflops")
# No catalog figure comes near this in its field's unit (IOPS ~1e7, MB/s ~1e6, GiB ~1e7,
# TFLOPS ~1e4, microseconds ~1e7, bytes ~1e9): larger is a typo, and would overflow sums.
MAX_NUMBER = 1e12


COMMON_FIELDS: dict[str, FieldSpec] = {
    "source": FieldSpec("list[str]", required=True, help="keys of `sources`"),
    "as_of": FieldSpec("date", help="when the figures were checked against their sources"),
    "notes": FieldSpec("str"),
    "aliases": FieldSpec("list[str]"),
    "display_name": FieldSpec("str"),
}


def _limit(value: float) -> str:
    """A schema bound as a user's YAML number is written against it ("1", "1,000,000,000,000")."""
    return number(value, MAX_DIGITS)


def _unit_hint(field_name: str) -> str:
    suffixes = {
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
    for suffix, unit in suffixes.items():
        if field_name.endswith(suffix):
            return f" (a plain number in {unit}, as the field name says)"
    return ""


class Problems:
    """Problems found in one file, each "file: key.path: what", in the order found."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.items: list[str] = []

    def add(self, where: str, what: str) -> None:
        """Record one problem at key path ``where`` (empty for the whole file)."""
        self.items.append(f"{self.path}: {where}: {what}" if where else f"{self.path}: {what}")

    def raise_if_any(self) -> None:
        """Raise one CatalogProblems listing every problem recorded, if there are any."""
        if self.items:
            raise CatalogProblems(self.path, list(self.items))


def _check_value(where: str, spec: FieldSpec, value: Any, problems: Problems) -> Any:
    """The checked value, or None after recording why it is wrong at key path ``where``."""
    name = where.rsplit(".", 1)[-1]

    def fail(what: str) -> None:
        problems.add(where, what)

    if value is None:
        if spec.required:
            fail("is required")
        return None
    if spec.kind in ("number", "int"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return fail(f"expected a number, got {value!r}{_unit_hint(name)}")
        if spec.kind == "int" and not isinstance(value, int):
            return fail(f"expected a whole number, got {value!r}")
        if not math.isfinite(value):
            return fail(f"must be finite, got {value!r}")
        if spec.minimum is not None and value < spec.minimum:
            return fail(f"must be >= {_limit(spec.minimum)}, got {value!r}")
        if value <= 0 and spec.must_be_positive(name):
            return fail(f"must be more than 0{_unit_hint(name)}, got {value!r}")
        if value > MAX_NUMBER:
            return fail(f"{value!r} is beyond any real figure (at most {_limit(MAX_NUMBER)})")
        return value
    if spec.kind == "str":
        if not isinstance(value, str):
            return fail(f"expected text, got {value!r}")
        if spec.choices and value not in spec.choices:
            return fail(f"must be one of {', '.join(spec.choices)}, got {value!r}")
        return value
    if spec.kind == "date":
        # YAML reads an unquoted 2026-11-30 as a date; a quoted one stays text.
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return value.isoformat()
        if isinstance(value, str):
            try:
                return dt.date.fromisoformat(value).isoformat()
            except ValueError:
                pass
        return fail(f"expected a date written YYYY-MM-DD, got {value!r}")
    if spec.kind == "bool":
        if not isinstance(value, bool):
            return fail(f"expected true or false, got {value!r}")
        return value
    if spec.kind == "list[str]":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            return fail(f"expected a list of text, got {value!r}")
        if spec.choices:
            bad = [v for v in items if v not in spec.choices]
            if bad:
                return fail(f"{', '.join(bad)} not among {', '.join(spec.choices)}")
        return items
    if spec.kind == "list[number]":
        if not isinstance(value, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= MAX_NUMBER
            for v in value
        ):
            return fail(
                f"expected a list of numbers from 0 to {_limit(MAX_NUMBER)}, got {value!r:.60}"
            )
        return value
    if spec.kind == "mapping":
        if not isinstance(value, dict):
            return fail(f"expected a mapping, got {value!r}")
        if spec.fields is None:
            return value
        return check_record(where, value, spec.fields, problems)
    raise AssertionError(f"unknown field kind {spec.kind}")  # a bug in a schema, not user input


def check_record(
    where: str, record: Mapping[str, Any], fields: Mapping[str, FieldSpec], problems: Problems
) -> dict[str, Any]:
    """Check one mapping against ``fields``: unknown keys (with a suggestion), then each field."""
    for key in record:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            problems.add(f"{where}.{key}", f"unknown field{hint}")
    checked: dict[str, Any] = {}
    for key, spec in fields.items():
        if key in record or spec.required:
            value = _check_value(f"{where}.{key}", spec, record.get(key), problems)
            if value is not None:
                checked[key] = value
    return checked


def check_sources(
    where: str, refs: Iterable[str], sources: Mapping[str, str], problems: Problems
) -> list[str]:
    """Citation texts of ``refs`` (keys of ``sources`` or URLs); unknown keys are problems."""
    out = []
    for ref in refs:
        if ref not in sources and not ref.startswith(("http://", "https://")):
            problems.add(where, f"'{ref}' is neither a key of 'sources' nor a URL")
        out.append(sources.get(ref, ref))
    return out


def check_entries(
    path: str,
    kind: str,
    data: Any,
    schema: Mapping[str, FieldSpec],
    problems: Problems | None = None,
) -> dict[str, dict[str, Any]]:
    """Check a parsed catalog document; return {entry name: checked fields}.

    With ``problems`` given, every problem is recorded there and the caller raises once it has
    added its own cross-field checks; without, the problems are raised here. A file whose top
    level is not a catalog raises at once: nothing below it can be checked.
    """
    own = problems is None
    problems = problems or Problems(path)
    fields = {**COMMON_FIELDS, **schema}
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: expected a mapping with 'kind', 'sources' and 'entries'")
    extra = set(data) - {"kind", "sources", "entries", "description"}
    if extra:
        raise CatalogError(f"{path}: unknown top-level key(s) {', '.join(sorted(map(str, extra)))}")
    if "kind" not in data:
        raise CatalogError(f"{path}: no 'kind'; start the file with 'kind: {kind}'")
    if data.get("kind") != kind:
        raise CatalogError(
            f"{path}: kind is {data.get('kind')!r}, expected {kind!r}; a {kind} catalog starts "
            f"with 'kind: {kind}'"
        )
    sources = data.get("sources") or {}
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise CatalogError(f"{path}: 'sources' must map a key to a citation text")
    entries = data.get("entries")
    if not isinstance(entries, dict) or not entries:
        raise CatalogError(f"{path}: 'entries' must be a non-empty mapping of name to fields")
    out: dict[str, dict[str, Any]] = {}
    for name, entry in entries.items():
        where = f"entries.{one_line(str(name))}"
        # An entry's name reaches plans, engine files and scripts as a tier or instance name.
        problem = name_problem(str(name))
        if problem is not None:
            problems.add(where, f"the entry's name {problem}")
            continue
        if not isinstance(entry, dict):
            problems.add(where, "expected a mapping of fields")
            continue
        checked = check_record(where, entry, fields, problems)
        checked["source_text"] = check_sources(
            f"{where}.source", checked.get("source", []), sources, problems
        )
        # A nested record that cites its own sources (a price, a model's context) gets their texts.
        for key, spec in fields.items():
            nested = checked.get(key)
            if spec.kind == "mapping" and isinstance(nested, dict) and "source" in nested:
                nested["source_text"] = check_sources(
                    f"{where}.{key}.source", nested["source"], sources, problems
                )
        out[str(name)] = checked
    if own:
        problems.raise_if_any()
    return out


def load_catalog_file(
    path: str | Path, kind: str, schema: Mapping[str, FieldSpec]
) -> dict[str, dict[str, Any]]:
    """Load one catalog file with the safe loader and check it."""
    return check_entries(str(path), kind, load_yaml(path, CatalogError), schema)


def list_command(kind: str | None) -> str:
    """The command that lists a catalog's names (``kind``: storage, instances, gpus, models)."""
    if kind is None:
        return "`kvadvisor catalog list storage|instances|gpus|models`"
    return f"`kvadvisor catalog list {kind}`"


MAX_SUGGESTIONS = 3


def suggestions(name: str, candidates: Iterable[str], n: int = MAX_SUGGESTIONS) -> list[str]:
    """The names a mistyped ``name`` most likely meant, best first (case-insensitive).

    A name the typed one begins (``p5e`` -> ``p5e.48xlarge``) or is part of comes first,
    shortest first: difflib's ratio alone rejects a short prefix of a long name, which is
    the commonest slip (a family given for its size). Then difflib's close matches.
    """
    key = name.strip().lower()
    names = list(dict.fromkeys(candidates))
    lower = {c: c.lower() for c in names}
    starts = sorted((c for c in names if key and lower[c].startswith(key)), key=len)
    inside = sorted((c for c in names if key and key in lower[c] and c not in starts), key=len)
    near = difflib.get_close_matches(key, list(lower.values()), n=n, cutoff=0.5)
    by_lower = {v: k for k, v in lower.items()}
    found = [*starts, *inside, *(by_lower[m] for m in near)]
    return list(dict.fromkeys(found))[:n]


def lookup(
    entries: Mapping[str, dict[str, Any]], name: str, what: str, kind: str | None = None
) -> tuple[str, dict]:
    """Find an entry by name or alias (case-insensitive); unknown names get a suggestion.

    ``kind`` is the catalog as `catalog list` names it, so the error names the command that
    lists this catalog's names (None: every catalog).
    """
    key = name.lower()
    for entry_name, entry in entries.items():
        names = [entry_name.lower(), *(a.lower() for a in entry.get("aliases") or [])]
        if key in names:
            return entry_name, entry
    candidates = list(entries) + [a for e in entries.values() for a in e.get("aliases") or []]
    close = suggestions(name, candidates)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise CatalogError(f"unknown {what} '{name}'{hint} ({list_command(kind)} shows them all)")


class _Named(Protocol):
    @property
    def aliases(self) -> tuple[str, ...]: ...


SpecT = TypeVar("SpecT")
NamedT = TypeVar("NamedT", bound=_Named)


def load_layered(
    parse: Callable[[Any, str], dict[str, SpecT]],
    packaged: Path,
    extra_files: Iterable[str | Path] = (),
) -> dict[str, SpecT]:
    """The packaged catalog file parsed, then each extra file's entries added or overriding."""
    specs: dict[str, SpecT] = {}
    for path in (packaged, *extra_files):
        specs.update(parse(load_yaml(path, CatalogError), str(path)))
    return specs


def find_named(
    specs: Mapping[str, NamedT], name: str, what: str, kind: str | None = None
) -> NamedT:
    """A built spec by name or alias, as :func:`lookup` finds it among raw entries."""
    rows = {n: {"aliases": list(getattr(s, "aliases", ()))} for n, s in specs.items()}
    found, _ = lookup(rows, name, what, kind)
    return specs[found]
