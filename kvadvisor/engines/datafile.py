"""The schema of an engine data file (kvadvisor/engines/data/<engine>.yaml), checked on load.

Each file holds the references its numbers cite (``sources``), the KV page the engine runs a
model with (``page``) and the settings a plan may give it (``engine``). The registry checks
every file with the one YAML checker when its engine registers, so a mistake (a merge that
left two sources under ``page:``, a setting citing a source nobody defined) stops kvadvisor
at once with the file, the line, the key path and the fix, instead of surfacing later as a
wrong page or a missing citation. Whether ``page: {engine: other}`` and ``flags_of`` name a
registered engine is checked once every engine has registered (:func:`engine_problem`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kvadvisor.checker import Checker, Field, did_you_mean, join, with_hint, yaml_type

# The kinds plan/schema.py's engine_fields turns into checker fields (mooncake-size: a number
# or a size in Mooncake's units, read by the plan loader).
SETTING_KINDS = ("int", "number", "str", "bool", "mapping", "list", "mooncake-size")
# The attentions page_for picks a page by (a dense model takes gqa's).
ATTENTIONS = ("gqa", "mla")
KV_STORES = ("bf16", "fp8")
SOURCE_HELP = "a source id defined under sources:"

SETTING_FIELDS = {
    "kind": Field("text", required=True, choices=SETTING_KINDS, help=" | ".join(SETTING_KINDS)),
    "unit": Field("text", help="the unit the engine reads it in, e.g. 'GB per engine instance'"),
    "source": Field("name", required=True, help=SOURCE_HELP),
    "default": Field("any"),
    "choices": Field("list[str]", help="the values the engine accepts, each as text"),
    "minimum": Field("number", help="the least value the engine accepts"),
    "maximum": Field("number", help="the largest value the engine accepts"),
    "stores": Field("mapping", help="{choice: bf16 | fp8}: the dtype each choice stores KV in"),
}
ENGINE_FIELDS = {
    "format": Field("text", required=True, help="how the engine's files carry them, in words"),
    "flags_of": Field("name", help="the engine whose flags its launch files take too"),
    "settings": Field("mapping", required=True, help="{setting: {kind, source, ...}}"),
}
TOP_FIELDS = {
    "sources": Field(
        "mapping", required=True, help="{source id: the reference, pinned to a commit}"
    ),
    "page": Field(
        "mapping",
        required=True,
        help="{engine: <engine>}, or {gqa: {tokens, source, why}, mla: ...} per attention",
    ),
    "engine": Field("mapping", required=True, fields=ENGINE_FIELDS),
}
PAGE_FIELDS = {
    "tokens": Field("int", required=True, minimum=1, help="the KV page in tokens"),
    "source": Field("name", required=True, help=SOURCE_HELP),
    "why": Field("text", required=True, help="why the engine runs this page, in words"),
}
PAGE_ENTRY = {**PAGE_FIELDS, "backend": Field("name", help="the attention back-end that fixes it")}
PICKED_ENTRY = {
    "backend": Field(
        "mapping", required=True, help="{GPU architecture or '*': the back-end it picks}"
    ),
    "backends": Field("mapping", required=True, help="{back-end: {tokens, source, why}}"),
}


def check_engine_data(c: Checker, doc: Any) -> None:
    """Record every problem of one engine data file's document in ``c``."""
    top = c.record("", doc, TOP_FIELDS)
    sources = _sources(c, top.get("sources", {}))
    if "page" in top:
        _page(c, top["page"], sources)
    settings = top.get("engine", {}).get("settings", {})
    for name, spec in settings.items():
        _setting(c, join("engine.settings", str(name)), spec, sources)


def engine_problem(c: Checker, where: str, name: Any, registered: Iterable[str]) -> None:
    """Record that ``where`` names an engine not registered (``page.engine``, ``flags_of``)."""
    known = list(registered)
    if name not in known:
        hint = did_you_mean(str(name), known) or f"registered engines: {', '.join(known)}"
        c.add(where, f"names no registered engine {name!r}; {hint}", reference=True)


def _sources(c: Checker, sources: Mapping[Any, Any]) -> set[str]:
    """The source ids defined, each checked to hold its reference as text."""
    for sid, text in sources.items():
        c.value(join("sources", str(sid)), Field("text", help="the reference, in words"), text)
    return {str(s) for s in sources}


def _cite(c: Checker, where: str, source: Any, sources: set[str]) -> None:
    if source is not None and str(source) not in sources:
        hint = did_you_mean(str(source), sources) or f"defined: {', '.join(sorted(sources))}"
        c.add(where, f"cites source {source!r}, not defined under sources:; {hint}", reference=True)


def _page(c: Checker, page: Mapping[Any, Any], sources: set[str]) -> None:
    """``{engine: other}`` alone, or one entry per attention (gqa required)."""
    if "engine" in page:
        c.record("page", page, {"engine": Field("name", help="the engine whose page it runs")})
        return
    for key, value in page.items():
        if key not in ATTENTIONS:
            # The mistake a merge makes: a line of sources: landing under page:.
            what = f"unknown field; page: holds {', '.join(ATTENTIONS)} (or engine: <engine>)"
            if isinstance(value, str):
                what += f"; {key!r} looks like a source: move it under sources:"
            c.add(join("page", str(key)), with_hint(what, did_you_mean(str(key), ATTENTIONS)))
    if "gqa" not in page:
        c.add("page.gqa", "is required: the page a dense model gets ({tokens, source, why})")
    for attention in ATTENTIONS:
        if attention in page:
            _page_entry(c, f"page.{attention}", page[attention], sources)


def _page_entry(c: Checker, where: str, entry: Any, sources: set[str]) -> None:
    """One attention's page, or the back-end each GPU architecture picks and their pages."""
    picked = isinstance(entry, dict) and (
        "backends" in entry or isinstance(entry.get("backend"), dict)
    )
    if not picked:
        checked = c.record(where, entry, PAGE_ENTRY)
        _cite(c, f"{where}.source", checked.get("source"), sources)
        return
    checked = c.record(where, entry, PICKED_ENTRY)
    backends = checked.get("backends", {})
    for name, page in backends.items():
        at = join(f"{where}.backends", str(name))
        _cite(c, f"{at}.source", c.record(at, page, PAGE_FIELDS).get("source"), sources)
    picks = checked.get("backend", {})
    if picks and "*" not in picks:
        c.add(f"{where}.backend", "needs '*': the back-end on any other GPU architecture")
    for arch, name in picks.items():
        if name not in backends:
            hint = did_you_mean(str(name), backends) or f"defined: {', '.join(map(str, backends))}"
            c.add(
                join(f"{where}.backend", str(arch)), f"picks {name!r}, not under backends:; {hint}"
            )


def _setting(c: Checker, where: str, spec: Any, sources: set[str]) -> None:
    """One setting: its kind, source, and choices/minimum/default that fit the kind."""
    checked = c.record(where, spec, SETTING_FIELDS)
    _cite(c, f"{where}.source", checked.get("source"), sources)
    kind = checked.get("kind")  # None: a missing or unknown kind, recorded already
    choices = checked.get("choices")
    if choices is not None and kind not in ("str", None):
        c.add(f"{where}.choices", f"applies to kind str only (this setting is {kind})")
    for bound in ("minimum", "maximum"):
        if bound in checked and kind not in ("int", None):
            c.add(f"{where}.{bound}", f"applies to kind int only (this setting is {kind})")
    for choice, stored in checked.get("stores", {}).items():
        at = join(f"{where}.stores", str(choice))
        if choices is None or choice not in choices:
            c.add(at, f"{choice!r} is not one of the setting's choices")
        if stored not in KV_STORES:
            c.add(at, f"stores KV as {yaml_type(stored)}; one of {', '.join(KV_STORES)}")
    if "default" in checked and kind is not None:
        _default(c, f"{where}.default", kind, checked, choices)


def _default(c: Checker, where: str, kind: str, spec: Mapping[str, Any], choices: Any) -> None:
    """The default must be a value of the setting's kind (and one of its choices)."""
    value = spec["default"]
    fits = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
    }.get(kind, True)
    if not fits:
        c.add(where, f"{yaml_type(value)} is not a value of kind {kind}")
    elif choices and value not in choices:
        c.add(where, f"{value!r} is not one of the choices: {', '.join(choices)}")
    elif kind == "int" and "minimum" in spec and value < spec["minimum"]:
        c.add(where, f"{value!r} is below the setting's minimum, {spec['minimum']!r}")
