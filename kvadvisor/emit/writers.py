"""The ``--emit`` targets (the registered engines, and ``plan``) and :func:`emit_config`.

Each engine's writer (``Engine.emit``, kvadvisor/engines/) takes the advice report (through
:class:`EmitContext`) and returns {file name: text}; every setting carries a comment with the
measured number it comes from and the engine file that defines its unit and scope. Names are
spelled as each engine's source spells them (tests/fixtures/engine_keys/ lists them with their
sources).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kvadvisor.emit.context import EmitContext
from kvadvisor.emit.deployment import deployment_from_report
from kvadvisor.emit.kvcache import check_page, check_preemption
from kvadvisor.emit.plan import emit_plan, plan_name
from kvadvisor.engines import registry
from kvadvisor.errors import ConfigError
from kvadvisor.results import AdviceReport


def emitters() -> dict[str, Callable[[EmitContext], dict[str, str]]]:
    """{engine: its writer} for every registered engine."""
    return {e.name: e.emit for e in registry.engines()}


def targets() -> tuple[str, ...]:
    """What ``--emit`` accepts: every registered engine, then ``plan``."""
    return (*registry.names(), "plan")


def __getattr__(name: str) -> Any:
    """EMITTERS and TARGETS, read from the registry when asked (an engine may register late)."""
    if name == "EMITTERS":
        return emitters()
    if name == "TARGETS":
        return targets()
    raise AttributeError(name)


# Files that feed the engine lint, by stage; files every stage reads (``Engine.shared_files``:
# a Mooncake master, the engine's Mooncake client) are listed with each stage.
_LINTED = (".yaml", ".env", ".json", ".sh")
_STAGES = ("prefill", "decode", "serving")


def _engine_files(names: Sequence[str]) -> dict[str, list[str]]:
    """{stage: [files]} for the engine files among ``names`` that configure each stage."""
    out: dict[str, list[str]] = {}
    shared = {f for e in registry.engines() for f in e.shared_files}
    stages = {n.rsplit(".", 1)[0].rsplit("-", 1)[-1] for n in names}
    for name in sorted(names):
        if not name.endswith(_LINTED):
            continue
        stage = name.rsplit(".", 1)[0].rsplit("-", 1)[-1]
        if name in shared:
            targets = [s for s in _STAGES if s in stages]
        elif stage in _STAGES:
            targets = [stage]
        else:
            continue
        for s in targets:
            out.setdefault(s, []).append(name)
    return out


def _context(report: AdviceReport, command: str) -> EmitContext:
    plan, facts = deployment_from_report(report)
    return EmitContext(report, plan, facts, command)


def emit_config(
    report: AdviceReport, engine: str, *, command: str = "kvadvisor analyze"
) -> dict[str, str]:
    """``engine``'s configuration files for ``report`` as {file name: text}.

    ``command`` is the command line that asked for them (it goes into every header). ``plan``
    alone is the recommended deployment without engine files; :func:`emit_all` writes a plan
    per engine that lists the engine's files.
    """
    known = targets()
    if engine not in known:
        raise ConfigError(f"unknown engine '{engine}': choose one of {', '.join(known)}")
    ctx = _context(report, command)
    if engine == "plan":
        return emit_plan(ctx)
    check_page(ctx, engine)
    check_preemption(ctx, engine)
    return registry.engine(engine).emit(ctx)


def emit_targets(
    report: AdviceReport, engines: Sequence[str], command: str
) -> tuple[dict[str, str], dict[str, str]]:
    """(every file of ``engines`` that can be written, {refused engine: why}).

    An engine whose writer refuses the deployment (Mooncake's store on a stage with no host
    tier) is left out with its reason, and the others are still written: one target the
    deployment cannot take does not cost the rest. When every engine asked for refuses, the
    first refusal is raised. With ``plan``, the plan file(s): plan.yaml with no engine or one,
    plan-<engine>.yaml for each written engine when there are several.
    """
    files: dict[str, str] = {}
    by_engine: dict[str, list[str]] = {}
    refused: dict[str, str] = {}
    asked = list(dict.fromkeys(e for e in engines if e != "plan"))
    known = targets()
    for engine in asked:
        if engine not in known:  # a typo is the user's mistake, not the deployment's refusal
            raise ConfigError(f"unknown engine '{engine}': choose one of {', '.join(known)}")
    for engine in asked:
        try:
            written = emit_config(report, engine, command=command)
        except ConfigError as exc:
            refused[engine] = str(exc)
            continue
        for name, text in written.items():
            if name in files and files[name] != text:
                raise ConfigError(f"--emit: two targets write {name} differently")
            files[name] = text
        by_engine[engine] = list(written)
    if asked and not by_engine:
        raise ConfigError(f"--emit {asked[0]}: {refused[asked[0]]}")
    if "plan" in engines:
        ctx = _context(report, command)
        if not by_engine:
            files.update(emit_plan(ctx))
        for engine, names in by_engine.items():
            name = plan_name(engine if len(asked) > 1 else None)
            files.update(emit_plan(ctx, engine, _engine_files(names), name))
    return files, refused


def emit_all(report: AdviceReport, engines: Sequence[str], command: str) -> dict[str, str]:
    """Every file of ``engines``, checked for clashes, and with ``plan`` the plan file(s).

    Strict: any engine that refuses the deployment raises (:func:`emit_targets` writes the
    others and says which refused).
    """
    files, refused = emit_targets(report, engines, command)
    if refused:
        engine, why = next(iter(refused.items()))
        raise ConfigError(f"--emit {engine}: {why}")
    return files
