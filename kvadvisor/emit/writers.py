"""Which writer makes which engine's files, and the one entry point, :func:`emit_config`.

Each writer takes the advice report (through :class:`EmitContext`) and returns {file name:
text}; every setting carries a comment with the measured number it comes from and the engine
file that defines its unit and scope. Names are spelled as each engine's source spells them
(tests/fixtures/engine_keys/ lists them with their sources).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvadvisor.emit.context import EmitContext
from kvadvisor.emit.deployment import deployment_from_report
from kvadvisor.emit.kvbm import emit_kvbm
from kvadvisor.emit.lmcache import emit_lmcache
from kvadvisor.emit.mooncake import emit_mooncake
from kvadvisor.emit.plan import emit_plan
from kvadvisor.emit.sglang import emit_sglang
from kvadvisor.emit.vllm import emit_vllm
from kvadvisor.errors import ConfigError
from kvadvisor.results import AdviceReport

EMITTERS: dict[str, Callable[[EmitContext], dict[str, str]]] = {
    "lmcache": emit_lmcache,
    "sglang-hicache": emit_sglang,
    "dynamo-kvbm": emit_kvbm,
    "mooncake": emit_mooncake,
    "vllm": emit_vllm,
}
TARGETS = (*EMITTERS, "plan")

# Files that feed the engine lint, by stage; files every stage reads (a Mooncake master, the
# engine's Mooncake client) are listed with each stage.
_SHARED_FILES = ("mooncake-master.sh", "mooncake-client.json")
_LINTED = (".yaml", ".env", ".json", ".sh")


def _engine_files(names: Sequence[str]) -> dict[str, list[str]]:
    """{stage: [files]} for the engine files among ``names`` that configure each stage."""
    out: dict[str, list[str]] = {}
    stages = {n.rsplit(".", 1)[0].rsplit("-", 1)[-1] for n in names}
    for name in sorted(names):
        if not name.endswith(_LINTED) or name == "plan.yaml":
            continue
        stage = name.rsplit(".", 1)[0].rsplit("-", 1)[-1]
        if name in _SHARED_FILES:
            targets = [s for s in ("prefill", "decode", "serving") if s in stages]
        elif stage in ("prefill", "decode", "serving"):
            targets = [stage]
        else:
            continue
        for s in targets:
            out.setdefault("prefill" if s == "serving" else s, []).append(name)
    return out


def emit_config(
    report: AdviceReport,
    engine: str,
    *,
    command: str = "kvadvisor analyze",
    with_files: Sequence[str] = (),
) -> dict[str, str]:
    """``engine``'s configuration files for ``report`` as {file name: text}.

    ``command`` is the command line that asked for them (it goes into every header);
    ``with_files`` are the other files written in the same run, which the plan references.
    """
    if engine not in TARGETS:
        raise ConfigError(f"unknown engine '{engine}': choose one of {', '.join(TARGETS)}")
    ctx = EmitContext(report, deployment_from_report(report), command)
    if engine == "plan":
        return emit_plan(ctx, _engine_files(with_files))
    return EMITTERS[engine](ctx)


def emit_all(report: AdviceReport, engines: Sequence[str], command: str) -> dict[str, str]:
    """Every file of ``engines`` (plan last, referencing the others), checked for clashes."""
    files: dict[str, str] = {}
    for engine in [e for e in engines if e != "plan"]:
        for name, text in emit_config(report, engine, command=command).items():
            if name in files and files[name] != text:
                raise ConfigError(f"--emit: two targets write {name} differently")
            files[name] = text
    if "plan" in engines:
        files.update(emit_config(report, "plan", command=command, with_files=list(files)))
    return files
