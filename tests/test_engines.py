"""The engine registry: one module makes an engine; vLLM's batch defaults are defined once.

An engine defined in one module is an --emit target, a plan engine and a review fact source,
with no other file touched. The engine below ("toycache") exists only in this test. Its writer
gives each engine instance the stage's host tier in whole decimal GB; the expected numbers are
worked from the fixture report's figures (emit_fixtures.py): a 1,600 GiB host tier per
instance, TP 2 on 8 GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from emit_fixtures import GIB, HOST_TIER_GIB
from emit_fixtures import emit_report as _report
from typer.testing import CliRunner

from kvadvisor.catalog.gpus import get_gpu
from kvadvisor.cli import app
from kvadvisor.cli.analyze import emit_target
from kvadvisor.emit import TARGETS, emit_all
from kvadvisor.emit.context import EmitContext
from kvadvisor.emit.deployment import StageFacts, TierKind, tier_of
from kvadvisor.emit.text import Setting, shell_script
from kvadvisor.engines import registry
from kvadvisor.engines.registry import Engine, setting_fact
from kvadvisor.errors import ConfigError
from kvadvisor.fleet.fromplan import resolve_plan
from kvadvisor.plan import engine_settings_table, load_plan
from kvadvisor.plan.model import StagePlan
from kvadvisor.planreview.scope import FactSet
from kvadvisor.planreview.settings import EngineSettings, engine_facts, settings_facts
from kvadvisor.units import Unit

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
# The fixture: 8 GPUs per instance at TP 2 are 4 engine instances sharing 1,600 GiB of host.
REPLICAS = 4
TOY_GB = math.floor(HOST_TIER_GIB * GIB / REPLICAS / 1e9)  # 429 GB per engine instance


def _toy_gb(stage: StagePlan) -> int:
    host = tier_of(stage, TierKind.HOST)
    assert host is not None and host.capacity_bytes is not None
    return math.floor(host.capacity_bytes / (stage.replicas_per_instance or 1) / 1e9)


def _emit_toy(ctx: EmitContext) -> dict[str, str]:
    files = {}
    for stage in ctx.plan.stages:
        flag = Setting("toy-size-gb", str(_toy_gb(stage)), "the host tier per engine instance")
        files[f"toycache-{stage.stage}.sh"] = shell_script(
            ctx.head("toycache"), [], "TOYCACHE_ARGS", [flag], ["toycache serve"]
        )
    return files


def _toy_facts(f: FactSet, s: EngineSettings) -> None:
    size = s.get("toycache", "toy-size-gb")
    f.add("toycache_size_bytes", None if size is None else size * 1e9)


def _toy_host(s: EngineSettings) -> tuple[float, str] | None:
    size = s.get("toycache", "toy-size-gb")
    n = s.replicas("toycache")
    return None if size is None else (size * 1e9 * n, f"toy-size-gb {size} x {n}")


TOY = Engine(
    name="toycache",
    settings={
        "format": "toycache serve flags",
        "settings": {
            "toy-size-gb": {"kind": "int", "unit": "GB per engine instance", "source": "TOY"}
        },
    },
    sources={"TOY": "this test"},
    label="Toy cache",
    files={"TOYCACHE_ARGS": ""},
    emit=_emit_toy,
    tier_keys=lambda ctx, stage: {"toy-size-gb"},
    host_keys=frozenset({"toy-size-gb"}),
    facts=_toy_facts,
    fact_specs=(setting_fact("toycache_size_bytes", Unit.BYTES, "toy-size-gb x 10^9."),),
    host_demand=_toy_host,
)


@pytest.fixture
def toycache() -> Iterator[Engine]:
    """The toy engine, registered for one test."""
    engine = registry.register(TOY)
    yield engine
    registry.unregister(engine.name)


def test_built_in_engines_in_their_order() -> None:
    """The five built-in modules register in the order --emit has always listed them."""
    assert registry.names() == ("lmcache", "sglang-hicache", "dynamo-kvbm", "mooncake", "vllm")
    assert TARGETS == (*registry.names(), "plan")
    assert set(engine_settings_table()["engines"]) == set(registry.names())


def test_a_registered_engine_is_an_emit_target_plan_engine_and_fact_source(
    toycache: Engine, tmp_path: Path
) -> None:
    """--emit writes it, a plan accepts it and reads its files, the review makes its facts."""
    assert "toycache" in _targets_now() and emit_target("toycache") == "toycache"
    files = emit_all(_report(), ["toycache", "plan"], "kvadvisor analyze trace.parquet")
    assert sorted(files) == ["plan.yaml", "toycache-decode.sh", "toycache-prefill.sh"]
    assert f"--toy-size-gb {TOY_GB}" in files["toycache-prefill.sh"]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    plan = load_plan(tmp_path / "plan.yaml")
    for stage in plan.stages:
        # The plan kept the host tier the engine was given, and read its file back.
        assert [t.name for t in stage.tiers] == ["host-dram-ddr5-spr"]
        assert stage.engines == {"toycache": {"toy-size-gb": TOY_GB}}
        f = FactSet()
        settings_facts(f, EngineSettings(stage, plan, None))
        assert f.values["toycache_size_bytes"].value == TOY_GB * 1e9
        [(engine, ef)] = engine_facts(plan, stage, None)
        assert engine == "toycache"
        assert ef.values["engine_host_bytes_needed"].value == TOY_GB * 1e9 * REPLICAS
    # The replay takes the plan as it takes any other (vLLM's scheduler defaults on an H200).
    dep, _ = resolve_plan(plan)
    assert [(s.scheduler.max_batched_tokens, s.scheduler.max_seqs) for s in dep.stages] == [
        (8192, 1024),
        (8192, 1024),
    ]


def test_an_unregistered_engine_is_refused_everywhere(tmp_path: Path) -> None:
    """Without the module the same names are errors: --emit, and a plan that names it."""
    assert "toycache" not in _targets_now()
    with pytest.raises(ConfigError, match="unknown engine 'toycache'"):
        emit_all(_report(), ["toycache"], "kvadvisor analyze")
    res = CliRunner().invoke(
        app,
        [
            "analyze",
            str(SAMPLES / "bailian_example.jsonl"),
            "--emit",
            "toycache",
            "-o",
            str(tmp_path / "o"),
        ],
    )
    assert (
        res.exit_code == 2
        and "must be one of lmcache," in res.output
        and "got 'toycache'" in res.output
    )


def test_a_name_registers_once(toycache: Engine) -> None:
    """A second engine of a registered name (or 'plan', the other target) is refused."""
    for name in ("toycache", "vllm", "plan"):
        with pytest.raises(ConfigError, match="registered already"):
            registry.register(Engine(name=name, settings={}, emit=_emit_toy))


def _targets_now() -> tuple[str, ...]:
    """What kvadvisor.emit.TARGETS reads now (from the registry, at this moment)."""
    from kvadvisor import emit

    return emit.TARGETS


@pytest.mark.parametrize(
    ("gpu", "memory_gib", "expected"),
    [
        # vllm/engine/arg_utils.py@99d7eb5 get_batch_defaults: >= 70 GiB and "a100" not in the
        # lower-cased device name -> 8,192 tokens / 1,024 sequences; else 2,048 / 256.
        ("NVIDIA H200", 141, (8192, 1024)),
        ("NVIDIA A100-SXM4-80GB", 80, (2048, 256)),  # the device name vLLM reads
        ("a100-80gb", 80, (2048, 256)),  # the catalog's name
        ("NVIDIA A800-SXM4-80GB", 80, (8192, 1024)),  # an A800 is not an A100 to vLLM
        ("NVIDIA L40S", 48, (2048, 256)),
        ("NVIDIA H100 80GB HBM3", 69.9, (2048, 256)),  # just under the line
    ],
)
def test_batch_defaults_are_vllms_get_batch_defaults(gpu, memory_gib, expected) -> None:
    """One definition, read by the advisor, the replay and the emitted files alike."""
    assert registry.batch_defaults(gpu, memory_gib * GIB) == expected


def test_the_search_and_the_emitted_files_agree_on_the_a100() -> None:
    """The emit writer once tested 'a100 in the name', the search 'name starts with a100'."""
    from kvadvisor.advice.space import batch_defaults
    from kvadvisor.engines.vllm import serve_defaults

    for name in ("a100-80gb", "a100-40gb", "h200", "a800", "l4"):
        gpu = get_gpu(name)
        facts = StageFacts(gpu.display_name, gpu.memory_bytes, None)
        assert serve_defaults(facts) == batch_defaults(gpu), name


# Modules outside kvadvisor/engines/ that still name an engine: none.
STILL_NAMING: set[str] = set()


def test_engine_names_stay_in_their_modules() -> None:
    """The plan keys of the engines whose names no trace format shares appear in engines/ only.

    ("vllm" and "mooncake" are also trace formats and benchmark names, so they are not counted.)
    """
    package = Path(__file__).resolve().parents[1] / "kvadvisor"
    quoted = [f'"{n}"' for n in ("lmcache", "sglang-hicache", "dynamo-kvbm")]
    naming = {
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if p.parent.name != "engines" and any(q in p.read_text(encoding="utf-8") for q in quoted)
    }
    assert naming == STILL_NAMING
