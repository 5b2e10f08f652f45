"""Load and check a catalog YAML file against a field schema (no code runs from the file).

A catalog file looks like::

    kind: gpus
    sources:
      N1: "https://... (what the page is)"
    entries:
      h200:
        bf16_dense_tflops: 989.4
        source: [N5, N6]

Every entry must cite at least one key of ``sources``; unknown fields are rejected with a
suggestion; numbers must be finite and not below the field's minimum. Field names carry their
unit (``_gbps``, ``_gib``, ...), so a value written with a unit ("4.8 TB/s") is a type error that
names the unit expected.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kvadvisor.errors import CatalogError
from kvadvisor.yamlio import load_yaml


@dataclass(frozen=True)
class FieldSpec:
    """What one entry field must hold."""

    kind: str  # "number" | "int" | "str" | "bool" | "list[str]" | "list[number]" | "mapping"
    required: bool = False
    minimum: float | None = 0.0
    choices: tuple[str, ...] | None = None
    help: str = ""
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
    "notes": FieldSpec("str"),
    "aliases": FieldSpec("list[str]"),
    "display_name": FieldSpec("str"),
}


def _unit_hint(field: str) -> str:
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
    }
    for suffix, unit in suffixes.items():
        if field.endswith(suffix):
            return f" (a plain number in {unit}, as the field name says)"
    return ""


def _check_value(where: str, field: str, spec: FieldSpec, value: Any) -> Any:
    """Return the checked value or raise CatalogError naming file, entry and field."""

    def fail(what: str) -> CatalogError:
        return CatalogError(f"{where}.{field}: {what}")

    if value is None:
        if spec.required:
            raise fail("is required")
        return None
    if spec.kind in ("number", "int"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail(f"expected a number, got {value!r}{_unit_hint(field)}")
        if spec.kind == "int" and not isinstance(value, int):
            raise fail(f"expected a whole number, got {value!r}")
        if not math.isfinite(value):
            raise fail(f"must be finite, got {value!r}")
        if spec.minimum is not None and value < spec.minimum:
            raise fail(f"must be >= {spec.minimum:g}, got {value!r}")
        if value <= 0 and spec.must_be_positive(field):
            raise fail(f"must be more than 0{_unit_hint(field)}, got {value!r}")
        if value > MAX_NUMBER:
            raise fail(f"{value:g} is beyond any real figure (at most {MAX_NUMBER:g})")
        return value
    if spec.kind == "str":
        if not isinstance(value, str):
            raise fail(f"expected text, got {value!r}")
        if spec.choices and value not in spec.choices:
            raise fail(f"must be one of {', '.join(spec.choices)}, got {value!r}")
        return value
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise fail(f"expected true or false, got {value!r}")
        return value
    if spec.kind == "list[str]":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise fail(f"expected a list of text, got {value!r}")
        return items
    if spec.kind == "list[number]":
        if not isinstance(value, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= MAX_NUMBER
            for v in value
        ):
            raise fail(f"expected a list of numbers from 0 to {MAX_NUMBER:g}, got {value!r:.60}")
        return value
    if spec.kind == "mapping":
        if not isinstance(value, dict):
            raise fail(f"expected a mapping, got {value!r}")
        return value
    raise AssertionError(f"unknown field kind {spec.kind}")  # a bug in a schema, not user input


def check_entries(
    path: str,
    kind: str,
    data: Any,
    schema: Mapping[str, FieldSpec],
) -> dict[str, dict[str, Any]]:
    """Check a parsed catalog document; return {entry name: entry fields}."""
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
        where = f"{path}: entries.{name}"
        if not isinstance(entry, dict):
            raise CatalogError(f"{where}: expected a mapping of fields")
        for key in entry:
            if key not in fields:
                close = difflib.get_close_matches(str(key), list(fields), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise CatalogError(f"{where}.{key}: unknown field{hint}")
        checked: dict[str, Any] = {}
        for key, spec in fields.items():
            if key not in entry and spec.required:
                raise CatalogError(f"{where}.{key}: is required")
            if key in entry:
                checked[key] = _check_value(where, key, spec, entry[key])
        for ref in checked["source"]:
            if ref not in sources and not ref.startswith(("http://", "https://")):
                raise CatalogError(
                    f"{where}.source: '{ref}' is neither a key of 'sources' nor a URL"
                )
        checked["source_text"] = [sources.get(ref, ref) for ref in checked["source"]]
        out[str(name)] = checked
    return out


def load_catalog_file(
    path: str | Path, kind: str, schema: Mapping[str, FieldSpec]
) -> dict[str, dict[str, Any]]:
    """Load one catalog file with the safe loader and check it."""
    return check_entries(str(path), kind, load_yaml(path, CatalogError), schema)


def lookup(entries: Mapping[str, dict[str, Any]], name: str, what: str) -> tuple[str, dict]:
    """Find an entry by name or alias (case-insensitive); unknown names get a suggestion."""
    key = name.lower()
    for entry_name, entry in entries.items():
        names = [entry_name.lower(), *(a.lower() for a in entry.get("aliases") or [])]
        if key in names:
            return entry_name, entry
    candidates = list(entries) + [a for e in entries.values() for a in e.get("aliases") or []]
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise CatalogError(f"unknown {what} '{name}'{hint} (`kvadvisor catalog list` shows them all)")


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


def find_named(specs: Mapping[str, NamedT], name: str, what: str) -> NamedT:
    """A built spec by name or alias, as :func:`lookup` finds it among raw entries."""
    rows = {n: {"aliases": list(s.aliases)} for n, s in specs.items()}
    found, _ = lookup(rows, name, what)
    return specs[found]
