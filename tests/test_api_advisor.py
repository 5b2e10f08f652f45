"""kvadvisor.Advisor: rules and catalogs loaded once; the module's functions take its keywords."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
import yaml

import kvadvisor
from kvadvisor.api.advisor import Advisor
from kvadvisor.pipeline import AnalyzeOptions

# What an Advisor holds; every module-level function takes these besides the method's own.
HELD = {"rules", "select", "ignore", "catalogs"}
# AnalyzeOptions' fields that are not settings: the loaded inputs, the plans, where it runs.
NOT_SETTINGS = {"advisor_inputs", "plans", "executor"}


def _params(fn: object) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(fn).parameters)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["analyze", "review", "replay", "verify", "load_plan"])
def test_each_function_is_the_advisors_method_plus_what_an_advisor_holds(name: str) -> None:
    """Same keywords, same defaults, all keyword-only past the trace and plans."""
    function, method = _params(getattr(kvadvisor, name)), _params(getattr(Advisor, name))
    del method["self"]
    held = set(function) - set(method)
    assert held and held <= HELD, held
    assert set(method) - set(function) == (
        {"allow_outside_plan_dir"} if name == "load_plan" else set()
    )
    for key, param in method.items():
        if key in function:
            assert function[key].default == param.default, key
            assert function[key].kind == param.kind, key
    assert not any(p.kind is p.VAR_KEYWORD for p in [*function.values(), *method.values()])


def test_the_settings_are_analyze_options_fields_with_its_defaults() -> None:
    """Every AnalyzeOptions setting is a keyword of analyze, defaulting to the field's default."""
    params = _params(Advisor.analyze)
    defaults = AnalyzeOptions()
    settings = {f.name for f in dataclasses.fields(AnalyzeOptions)} - NOT_SETTINGS
    assert len(settings) == 31 and settings <= set(params)
    for name in settings:
        assert params[name].default == getattr(defaults, name), name


def test_an_unknown_setting_is_a_type_error_naming_it() -> None:
    """Python's own refusal of an unknown keyword, before any file is read."""
    with pytest.raises(TypeError, match="no_such_knob"):
        kvadvisor.analyze("no-such-trace.jsonl", no_such_knob=1)  # type: ignore[call-arg]


# A GPU and a model of the user's (test_catalog_perfcatalogs.py's lab figures).
LAB_GPU = {
    "display_name": "Lab GPU 96GB",
    "architecture": "hopper",
    "bf16_dense_tflops": 900.0,
    "fp8_dense_tflops": 1800.0,
    "memory_gb": 96,
    "memory_bandwidth_gbps": 4800,
    "pcie_gbps": 64,
    "nvlink_gbps": 900,
}
LAB_MODEL = {
    "display_name": "Lab model 8B",
    "layers": 32,
    "q_heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "total_params_billion": 8,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "vocab_size": 128256,
}


def _catalog(path: Path, kind: str, name: str, entry: dict) -> str:
    sources = {"LAB": "our lab measurements"}
    entry = {**entry, "source": ["LAB"]}
    path.write_text(yaml.safe_dump({"kind": kind, "sources": sources, "entries": {name: entry}}))
    return str(path)


def test_an_advisor_reads_its_catalog_files_once(tmp_path: Path) -> None:
    """Once loaded, an Advisor's catalogs serve every call; a one-off call reads its files again.

    The user's GPU and model resolve a plan; with the files gone the Advisor still resolves
    it and the function cannot.
    """
    files = [
        _catalog(tmp_path / "gpus.yaml", "gpus", "lab-gpu", LAB_GPU),
        _catalog(tmp_path / "models.yaml", "models", "lab-model", LAB_MODEL),
    ]
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        yaml.safe_dump(
            {
                "name": "lab",
                "model": {"name": "lab-model", "tp": 1},
                "topology": "aggregated",
                "stages": {"serving": {"gpu": "lab-gpu", "count": 1}},
            }
        )
    )
    advisor = Advisor(catalogs=files)
    first = advisor.load_plan(plan)
    assert advisor.catalog_set.perf.gpus["lab-gpu"].memory_gb == LAB_GPU["memory_gb"]
    for f in files:
        Path(f).unlink()
    assert advisor.load_plan(plan) == first
    with pytest.raises(kvadvisor.KvAdvisorError, match="gpus.yaml: no such file"):
        kvadvisor.load_plan(plan, catalogs=files)


def test_the_default_advisor_is_loaded_once_per_process() -> None:
    """The module's functions share one Advisor of the built-in rules and packaged catalogs."""
    default = kvadvisor.default_advisor()
    assert kvadvisor.default_advisor() is default
    assert default.rule_set is default.rule_set
    assert [r.code for r in default.rule_set] == [r.code for r in kvadvisor.load_rules()]
    assert set(default.catalog_set.instances) == set(kvadvisor.load_catalogs().instances)
    assert repr(default) == "Advisor()"
    assert repr(Advisor(select=["CA"])) == "Advisor(select=('CA',))"
