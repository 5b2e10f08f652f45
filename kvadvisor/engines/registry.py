"""The one table of serving engines: who registers, and what the rest of kvadvisor asks it.

The layers below the engine modules (plan loading, the replay, emit's dispatch, the review) ask
this table and never name an engine; the engine modules (kvadvisor/engines/<engine>.py) import
the emit toolkit and the plan model, so the table loads them by name on first use, as a plugin
registry does (tests/test_architecture.py gives this module a row of its own).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from kvadvisor.checker import Checker
from kvadvisor.engines.datafile import check_engine_data, engine_problem
from kvadvisor.errors import ConfigError, PlanError
from kvadvisor.io.yamlio import load_yaml_lines
from kvadvisor.rules.model import FactSpec, RuleScope
from kvadvisor.units import Unit

# The built-in engine modules, in the order --emit and the plan schema list them.
BUILTIN = ("lmcache", "sglang", "kvbm", "mooncake", "vllm")


def setting_fact(name: str, unit: Unit, text: str) -> FactSpec:
    """A stage fact one engine's settings give (the engine lint reads it)."""
    return FactSpec(name, unit, text, "review (engine settings)", RuleScope.STAGE)


def _no_keys(ctx: Any, stage: Any) -> set[str]:
    return set()


@dataclass(frozen=True, eq=False)  # by identity: caches key on it
class Engine:
    """One serving engine: its name as plans and ``--emit`` spell it, and its hooks.

    ``settings``: its block of the plan's settings schema (``format``, ``settings``) and
    ``sources``, the references those settings cite. ``emit``: EmitContext -> {file: text}.
    ``tier_keys``: (EmitContext, StagePlan) -> the setting names its files write for the stage's
    tiers; ``host_keys``/``storage_keys`` say which of those give it the host tier and the tier
    below. ``facts``: (FactSet, EngineSettings) -> None, the review's facts of its settings.
    """

    name: str
    settings: Mapping[str, Any]
    emit: Callable[[Any], dict[str, str]]
    tier_keys: Callable[[Any, Any], set[str]] = _no_keys
    host_keys: frozenset[str] = frozenset()
    storage_keys: frozenset[str] = frozenset()
    # the token budget per step its launch files give it, (EmitContext, StagePlan) -> tokens,
    # which the emitted plan's scheduler states; None when its files set none
    step_tokens: Callable[[Any, Any], int] | None = None
    # whether its decode servers write the KV they generate: (EmitContext, StagePlan) -> bool
    decode_saves: Callable[[Any, Any], bool] = lambda ctx, stage: False
    # The review (planreview/settings.py): its facts of a stage's settings, (FactSet,
    # EngineSettings) -> None, declared in ``fact_specs``; the host and disk its settings take
    # on one instance, EngineSettings -> (bytes, how) / (bytes, tier, how) or None; whether it
    # moves KV layer by layer, EngineSettings -> (bool, in words).
    facts: Callable[[Any, Any], None] | None = None
    fact_specs: tuple[FactSpec, ...] = ()
    host_demand: Callable[[Any], tuple[float, str] | None] | None = None
    disk_demand: Callable[[Any], tuple[float, Any, str] | None] | None = None
    layout: Callable[[Any], tuple[bool, str]] | None = None
    # (engine, setting) that gives its tensor parallelism, and its data-parallel setting
    tp_setting: tuple[str, str] | None = None
    dp_setting: str | None = None
    # The plan and the replay (plan/model.py, fleet/fromplan.py), each hook given the stage's
    # engine settings {engine: settings}, answering None when its settings do not say: tokens
    # per KV I/O and where that comes from; the KV page its scheduler allocates; how it loads
    # prefix hits (a plan.model.KvLoadPlan, in words); its write policy; the name of the
    # local-disk backend through which it reaches a file system; whether its decode servers save
    # the KV they generate; its scheduler flags {gpu_memory_utilization, max_batched_tokens,
    # max_seqs}, those given.
    io_chunk: Callable[[Mapping[str, Any]], tuple[int, str] | None] | None = None
    page_tokens: Callable[[Mapping[str, Any]], int | None] | None = None
    kv_load: Callable[[Mapping[str, Any]], tuple[Any, str] | None] | None = None
    write_policy: Callable[[Mapping[str, Any]], str | None] | None = None
    local_disk_backend: Callable[[Mapping[str, Any]], str | None] | None = None
    saves_decode_kv: Callable[[Mapping[str, Any]], bool | None] | None = None
    scheduler: Callable[[Mapping[str, Any]], dict[str, float] | None] | None = None
    # The front end that serves requests when it is configured, and whether that front end
    # hashes every block (perfmodel/frontend.py): ("sglang", True); None: not its front end.
    front_end: Callable[[Mapping[str, Any]], tuple[str, bool] | None] | None = None
    # How a chunk is written to storage for `verify`'s fio jobs (verifyjobs/shape.py), given
    # the stage's engine settings, where the chunk size came from, and the model's layers (None
    # if unknown): (layout, pieces per chunk per rank, why), or None when its settings say not.
    io_shape: Callable[[Mapping[str, Any], str, int | None], tuple[str, int, str] | None] | None = (
        None
    )
    # (max_num_batched_tokens, max_num_seqs) its server takes by default on a GPU, from the
    # GPU's name and memory in bytes
    batch_defaults: Callable[[str, float], tuple[int, int]] | None = None
    # The engine files that are its own, by file suffix (".env") or by the flag array of a bash
    # launch file (``SGLANG_ARGS``) or the module a router file launches
    # (``sglang_router.launch_router``), each with the key its settings go under ("" for the
    # top: a Mooncake client JSON goes under ``client``); plan/engine_files.py reads them.
    files: Mapping[str, str] = field(default_factory=dict)
    label: str = ""  # how its documentation names it ("Dynamo KVBM"), for messages
    # emitted files every stage reads (a Mooncake master)
    shared_files: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    # The KV page it runs a model with, by attention (engines/data/<engine>.yaml ``page``;
    # ``{engine: other}``: the other engine's, whose processes it runs); read by page_for.
    page: Mapping[str, Any] = field(default_factory=dict)
    # How its scheduler preempts a running request when the KV pool is full, and why (with its
    # source): ("recompute", "..."); None: it does not say (an engine registered from outside).
    preemption: tuple[str, str] | None = None


@dataclass(frozen=True)
class Page:
    """The KV page an engine runs a model with: tokens, why (with its source), the back-end."""

    tokens: int
    why: str
    backend: str | None = None  # the attention back-end that fixes it, when one does


_TABLE: dict[str, Engine] = {}
_loading: list[bool] = []


def _load() -> None:
    """Import the built-in engine modules once; each registers itself, listed in BUILTIN order."""
    if _loading:
        return
    _loading.append(True)
    for module in BUILTIN:
        importlib.import_module(f"kvadvisor.engines.{module}")
    # One engine module may import another (LMCache launches vLLM), so they register in import
    # order; the table lists them in BUILTIN's.
    rank = {f"kvadvisor.engines.{m}": i for i, m in enumerate(BUILTIN)}
    ordered = sorted(_TABLE.values(), key=lambda e: rank.get(e.emit.__module__, len(rank)))
    _TABLE.clear()
    _TABLE.update((e.name, e) for e in ordered)
    for e in ordered:
        if e.emit.__module__ in rank:
            _check_engine_names(e, e.emit.__module__.rsplit(".", 1)[-1])


def _data_file(module: str) -> tuple[Checker, Any]:
    """A built-in engine's data file, parsed, and a checker that names its file and lines."""
    text = resources.files("kvadvisor.engines").joinpath(f"data/{module}.yaml")
    with resources.as_file(text) as path:
        doc, lines = load_yaml_lines(path, PlanError)
        return Checker(str(path), lines), doc


def _check_engine_names(e: Engine, module: str) -> None:
    """The engines a data file names (page: {engine: ...}, flags_of) are registered ones.

    Checked once every built-in engine has registered (a file may name one registered after
    it); the file is read again only to say where a wrong name is.
    """
    named = {"page.engine": e.page.get("engine"), "engine.flags_of": e.settings.get("flags_of")}
    if all(name is None or name in _TABLE for name in named.values()):
        return
    c, _ = _data_file(module)
    for where, name in named.items():
        if name is not None:
            engine_problem(c, where, name, _TABLE)
    c.raise_if_any(PlanError)


def packaged_settings(module: str) -> dict[str, Any]:
    """A built-in engine's settings schema and sources, from kvadvisor/engines/data/<module>.yaml.

    Returned as the keyword arguments ``settings``, ``sources`` and ``page`` of :class:`Engine`.
    The file is checked first (kvadvisor.engines.datafile): a broken packaged file is a
    developer's mistake, reported as every problem with its file, line, key path and fix.
    """
    c, doc = _data_file(module)
    check_engine_data(c, doc)
    c.raise_if_any(PlanError)
    return {"settings": doc["engine"], "sources": doc["sources"], "page": doc["page"]}


def page_for(name: str, attention: str, architecture: str | None = None) -> Page:
    """The KV page engine ``name`` runs a model of ``attention`` with on a GPU ``architecture``.

    A dense model (``gqa``) gets the engine's page; an MLA model the page its MLA attention
    back-end fixes, the back-end picked per GPU architecture where the engine picks one.
    """
    e = engine(name)
    table = e.page
    if "engine" in table:
        return page_for(str(table["engine"]), attention, architecture)
    if not table:
        raise ConfigError(f"engine '{name}' declares no KV page")
    entry = table["mla" if attention == "mla" and "mla" in table else "gqa"]
    backend = entry.get("backend")
    if "backends" in entry:
        picks = entry["backend"]
        backend = str(picks.get(architecture or "*", picks["*"]))
        entry = entry["backends"][backend]
    why = f"{entry['why']} ({e.sources[entry['source']]})"
    return Page(int(entry["tokens"]), why, None if backend is None else str(backend))


def register(engine: Engine) -> Engine:
    """Add ``engine`` to the table (after the built-in ones); a second one of a name is refused."""
    _load()
    if engine.name in _TABLE or engine.name == "plan":
        raise ConfigError(f"engine '{engine.name}' is registered already")
    _TABLE[engine.name] = engine
    return engine


def unregister(name: str) -> None:
    """Remove engine ``name`` (a test's own engine, once the test is done)."""
    _TABLE.pop(name, None)


def engines() -> tuple[Engine, ...]:
    """Every registered engine, built-in ones first."""
    _load()
    return tuple(_TABLE.values())


def file_owner(kind: str) -> tuple[str, str] | None:
    """(engine, key its settings go under) for an engine file suffix or flag array, or None."""
    return next(((e.name, e.files[kind]) for e in engines() if kind in e.files), None)


def file_kinds() -> tuple[str, ...]:
    """Every engine file suffix and flag array a registered engine owns."""
    return tuple(k for e in engines() for k in e.files)


def batch_defaults(gpu_name: str, memory_bytes: float) -> tuple[int, int]:
    """Tokens per step and running sequences where a plan or search sets none, on this GPU.

    The defaults of the first registered engine that declares them (vLLM's ``vllm serve``
    defaults: the replay schedules every engine as vLLM's scheduler, docs/replay.md).
    """
    for e in engines():
        if e.batch_defaults is not None:
            return e.batch_defaults(gpu_name, memory_bytes)
    raise ConfigError("no registered engine gives default batch sizes")


def answers(stage_engines: Mapping[str, Any], hook: str) -> list[Any]:
    """What each engine configured on a stage answers to ``hook``, in registry order (no None)."""
    out = []
    for e in engines():
        ask = getattr(e, hook)
        if e.name in stage_engines and ask is not None:
            value = ask(stage_engines)
            if value is not None:
                out.append(value)
    return out


def first(stage_engines: Mapping[str, Any], hook: str) -> Any:
    """The first answer to ``hook`` of the engines configured on a stage, else None."""
    found = answers(stage_engines, hook)
    return found[0] if found else None


def names() -> tuple[str, ...]:
    """The engine names a plan and ``--emit`` accept."""
    return tuple(e.name for e in engines())


def engine(name: str) -> Engine:
    """The engine called ``name``; a ConfigError naming the others when there is none."""
    _load()
    if name not in _TABLE:
        raise ConfigError(f"unknown engine '{name}': choose one of {', '.join(_TABLE)}")
    return _TABLE[name]
