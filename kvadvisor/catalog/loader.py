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

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kvadvisor.checker import (
    MAX_SUGGESTIONS,
    Checker,
    Field,
    did_you_mean,
    with_hint,
)
from kvadvisor.errors import CatalogError, CatalogProblems
from kvadvisor.io.yamlio import load_yaml_lines
from kvadvisor.quoting import name_problem, one_line

COMMON_FIELDS: dict[str, Field] = {
    "source": Field("list[str]", required=True, help="keys of `sources`"),
    "as_of": Field("date", help="when the figures were checked against their sources"),
    "notes": Field("str"),
    "aliases": Field("list[str]"),
    "display_name": Field("str"),
}


class CatalogChecker(Checker):
    """The one checker (kvadvisor.checker), raising CatalogProblems for a catalog file."""

    def raise_if_any(self, error: Any = None) -> None:  # type: ignore[override]
        """Raise one CatalogProblems listing every problem recorded, if there are any."""
        super().raise_if_any(error or (lambda _, every: CatalogProblems(self.path, every)))


def check_sources(
    where: str, refs: Iterable[str], sources: Mapping[str, str], problems: Checker
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
    schema: Mapping[str, Field],
    problems: CatalogChecker | None = None,
    lines: Mapping[str, int] | None = None,
) -> dict[str, dict[str, Any]]:
    """Check a parsed catalog document; return {entry name: checked fields}.

    With ``problems`` given, every problem is recorded there and the caller raises once it has
    added its own cross-field checks; without, the problems are raised here. A file whose top
    level is not a catalog raises at once: nothing below it can be checked.
    """
    own = problems is None
    problems = problems or CatalogChecker(path, lines)
    fields = {**COMMON_FIELDS, **schema}
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: expected a mapping with 'kind', 'sources' and 'entries'")
    problems.unknown_keys("", data, ("kind", "sources", "entries", "description"))
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
        checked = problems.record(where, entry, fields)
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
    path: str | Path, kind: str, schema: Mapping[str, Field]
) -> dict[str, dict[str, Any]]:
    """Load one catalog file with the safe loader and check it (problems name their line)."""
    data, lines = load_yaml_lines(path, CatalogError)
    return check_entries(str(path), kind, data, schema, lines=lines)


def list_command(kind: str | None) -> str:
    """The command that lists a catalog's names (``kind``: storage, instances, gpus, models)."""
    if kind is None:
        return "`kvadvisor catalog list storage|instances|gpus|models`"
    return f"`kvadvisor catalog list {kind}`"


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
    hint = did_you_mean(name, candidates, MAX_SUGGESTIONS, cutoff=0.5)
    raise CatalogError(
        with_hint(f"unknown {what} '{name}'", hint) + f" ({list_command(kind)} shows them all)"
    )


class _Named(Protocol):
    @property
    def aliases(self) -> tuple[str, ...]: ...


SpecT = TypeVar("SpecT")
NamedT = TypeVar("NamedT", bound=_Named)


def load_layered(
    parse: Callable[[Any, str, Mapping[str, int]], dict[str, SpecT]],
    packaged: Path,
    extra_files: Iterable[str | Path] = (),
) -> dict[str, SpecT]:
    """The packaged catalog file parsed, then each extra file's entries added or overriding."""
    specs: dict[str, SpecT] = {}
    for path in (packaged, *extra_files):
        data, lines = load_yaml_lines(path, CatalogError)
        specs.update(parse(data, str(path), lines))
    return specs


def find_named(
    specs: Mapping[str, NamedT], name: str, what: str, kind: str | None = None
) -> NamedT:
    """A built spec by name or alias, as :func:`lookup` finds it among raw entries."""
    rows = {n: {"aliases": list(getattr(s, "aliases", ()))} for n, s in specs.items()}
    found, _ = lookup(rows, name, what, kind)
    return specs[found]
