"""The engine data files (kvadvisor/engines/data/<engine>.yaml) are checked on load.

Each packaged file passes; a planted mistake, each of the kind a merge or a hand edit makes,
is reported with its file, its line (found here in the planted text) and its key path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvadvisor.checker import Checker
from kvadvisor.engines import registry
from kvadvisor.engines.datafile import check_engine_data, engine_problem
from kvadvisor.errors import PlanError
from kvadvisor.io.yamlio import parse_yaml_lines

DATA = Path(registry.__file__).parent / "data"
FILES = sorted(DATA.glob("*.yaml"))


def _problems(name: str, text: str) -> list:
    """Every problem check_engine_data finds in ``text``, as the file ``name``."""
    doc, lines = parse_yaml_lines(text, name, PlanError)
    c = Checker(name, lines)
    check_engine_data(c, doc)
    return c.problems


def _line_of(text: str, needle: str) -> int:
    """The 1-based line of the only line holding ``needle``."""
    found = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(found) == 1, (needle, found)
    return found[0]


def _plant(name: str, old: str, new: str) -> str:
    text = (DATA / name).read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    return text.replace(old, new)


def test_the_five_built_in_engines_have_a_data_file() -> None:
    """Every built-in module has its file here (the list below is not empty by accident)."""
    assert [p.stem for p in FILES] == sorted(registry.BUILTIN)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_each_packaged_engine_file_passes(path: Path) -> None:
    """A file kvadvisor ships has no problem."""
    assert _problems(path.name, path.read_text(encoding="utf-8")) == []


def test_a_source_under_page_is_reported_with_its_line() -> None:
    """The merge that moved two sources: lines under page: (sglang.yaml)."""
    moved = '  SGL-X: "SGLang some/file.py@abc1234"\n'
    text = _plant("sglang.yaml", "page:\n", "page:\n" + moved)
    (p,) = _problems("sglang.yaml", text)
    assert (p.where, p.line) == ("page.SGL-X", _line_of(text, "SGL-X"))
    assert "looks like a source: move it under sources:" in p.what
    assert str(p).startswith(f"sglang.yaml:{p.line}: page.SGL-X: unknown field")


def test_an_unknown_top_level_key() -> None:
    """A key beside sources, page and engine is named, with the ones the file may hold."""
    text = _plant("vllm.yaml", "engine:\n", "extras: {a: 1}\nengine:\n")
    (p,) = _problems("vllm.yaml", text)
    assert (p.where, p.line) == ("extras", _line_of(text, "extras:"))
    assert "known fields: sources, page, engine" in p.what


def test_a_page_without_tokens() -> None:
    """A dense model's page must say its tokens."""
    text = _plant("vllm.yaml", "gqa: {tokens: 16, ", "gqa: {")
    (p,) = _problems("vllm.yaml", text)
    assert (p.where, p.line) == ("page.gqa.tokens", _line_of(text, "gqa: {"))
    assert p.what.startswith("is required (the KV page in tokens")


def test_a_picked_backends_page_without_tokens() -> None:
    """sglang.yaml's MLA shape: the back-end per GPU architecture, then each one's page."""
    text = _plant("sglang.yaml", "cutlass_mla: {tokens: 128, ", "cutlass_mla: {")
    (p,) = _problems("sglang.yaml", text)
    assert p.where == "page.mla.backends.cutlass_mla.tokens"
    assert p.line == _line_of(text, "cutlass_mla: {")


def test_a_backend_picked_but_not_defined() -> None:
    """A GPU architecture picks a back-end that has no page under backends:."""
    text = _plant("sglang.yaml", "blackwell: trtllm_mla,", "blackwell: trtlm_mla,")
    (p,) = _problems("sglang.yaml", text)
    assert (p.where, p.line) == ("page.mla.backend.blackwell", _line_of(text, "blackwell:"))
    assert "did you mean 'trtllm_mla'?" in p.what


def test_a_setting_citing_an_undefined_source() -> None:
    """A setting's source must be an id sources: defines; the closest one is suggested."""
    old = "block-size: {kind: int, minimum: 1, unit: tokens, source: VLLM-CACHE,"
    text = _plant("vllm.yaml", old, old.replace("VLLM-CACHE", "VLLM-CASHE"))
    (p,) = _problems("vllm.yaml", text)
    assert p.where == "engine.settings.block-size.source"
    assert p.line == _line_of(text, "block-size:")
    assert "cites source 'VLLM-CASHE', not defined under sources:" in p.what
    assert p.what.endswith("did you mean 'VLLM-CACHE'?")


def test_a_page_citing_an_undefined_source() -> None:
    """So must a page's."""
    text = _plant("vllm.yaml", "source: VLLM-FLASHMLA,", "source: VLLM-FLASH,")
    (p,) = _problems("vllm.yaml", text)
    assert (p.where, p.line) == ("page.mla.source", _line_of(text, "source: VLLM-FLASH,"))


def test_a_misspelt_key_gets_did_you_mean() -> None:
    """A mistyped key of a setting: the key it meant, and the required key now missing."""
    old = "    hicache-ratio: {kind: number,"
    text = _plant("sglang.yaml", old, "    hicache-ratio: {knid: number,")
    found = {(p.where, p.what) for p in _problems("sglang.yaml", text)}
    line = _line_of(text, "hicache-ratio:")
    assert found == {
        ("engine.settings.hicache-ratio.knid", "unknown field; did you mean 'kind'?"),
        (
            "engine.settings.hicache-ratio.kind",
            "is required (int | number | str | bool | mapping | list | mooncake-size)",
        ),
    }
    assert {p.line for p in _problems("sglang.yaml", text)} == {line}


@pytest.mark.parametrize(
    ("old", "new", "where", "what"),
    [
        # choices are for text settings; a bound for whole numbers; a default a choice
        (
            "max-num-seqs: {kind: int, minimum: 1,",
            "max-num-seqs: {kind: int, minimum: 1, choices: [a],",
            "engine.settings.max-num-seqs.choices",
            "applies to kind str only (this setting is int)",
        ),
        (
            "gpu-memory-utilization: {kind: number,",
            "gpu-memory-utilization: {kind: number, minimum: 0.1,",
            "engine.settings.gpu-memory-utilization.minimum",
            "applies to kind int only (this setting is number)",
        ),
        (
            "source: VLLM-CACHE, default: native}",
            "source: VLLM-CACHE, default: nativ}",
            "engine.settings.kv-offloading-backend.default",
            "'nativ' is not one of the choices: native, lmcache",
        ),
        (
            "block-size: {kind: int, minimum: 1, unit: tokens, source: VLLM-CACHE, default: 16}",
            "block-size: {kind: int, minimum: 1, unit: tokens, source: VLLM-CACHE, default: 0}",
            "engine.settings.block-size.default",
            "0 is below the setting's minimum, 1",
        ),
        (
            "{kind: bool, source: VLLM-CACHE, default: true}",
            "{kind: bool, source: VLLM-CACHE, default: 'yes'}",
            "engine.settings.enable-prefix-caching.default",
            "'yes' is not a value of kind bool",
        ),
        (
            "{kind: int, minimum: 1, source: VLLM-PAR, default: 1}",
            "{kind: integer, minimum: 1, source: VLLM-PAR, default: 1}",
            "engine.settings.tensor-parallel-size.kind",
            "must be one of int, number, str, bool, mapping, list, mooncake-size, got 'integer'; "
            "did you mean 'int'?",
        ),
        (
            "fp8_e4m3: fp8, fp8_e5m2: fp8}}",
            "fp8_e4m3: fp8, fp8_e5m2: fp16}}",
            "engine.settings.kv-cache-dtype.stores.fp8_e5m2",
            "stores KV as 'fp16'; one of bf16, fp8",
        ),
    ],
)
def test_kinds_choices_and_bounds_are_well_formed(old, new, where, what) -> None:
    """Each field of a setting fits its kind (as plan/schema.py's engine_fields reads it)."""
    text = _plant("vllm.yaml", old, new)
    (p,) = _problems("vllm.yaml", text)
    assert (p.where, p.what) == (where, what)
    assert p.line == _line_of(text, f"    {where.split('.')[2]}: {{")


def test_a_page_naming_an_unregistered_engine() -> None:
    """page: {engine: ...} and flags_of are checked against the registered engines."""
    text = _plant("kvbm.yaml", "page: {engine: vllm}", "page: {engine: vlm}")
    doc, lines = parse_yaml_lines(text, "kvbm.yaml", PlanError)
    c = Checker("kvbm.yaml", lines)
    check_engine_data(c, doc)
    assert c.problems == []  # the names are known only once every engine has registered
    engine_problem(c, "page.engine", doc["page"]["engine"], registry.names())
    (p,) = c.problems
    assert (p.where, p.line) == ("page.engine", _line_of(text, "page: {engine: vlm}"))
    assert p.what == "names no registered engine 'vlm'; did you mean 'vllm'?"
    with pytest.raises(PlanError, match=r"^kvbm\.yaml:\d+: page\.engine: names no registered"):
        c.raise_if_any(PlanError)


def test_every_problem_is_raised_at_once() -> None:
    """Two mistakes: one PlanError, its message the first with a count, both in .problems."""
    text = _plant("vllm.yaml", "engine:\n", "extras: 1\nengine:\n")
    text = text.replace("gqa: {tokens: 16, ", "gqa: {")
    doc, lines = parse_yaml_lines(text, "vllm.yaml", PlanError)
    c = Checker("vllm.yaml", lines)
    check_engine_data(c, doc)
    with pytest.raises(PlanError) as raised:
        c.raise_if_any(PlanError)
    assert str(raised.value).endswith("(and 1 more problem)")
    assert len(raised.value.problems) == 2


def test_the_registry_checks_a_file_as_it_loads_it(monkeypatch) -> None:
    """packaged_settings raises every problem of the file, its line and path first."""
    text = _plant("sglang.yaml", "page:\n", 'page:\n  SGL-X: "moved by a merge"\n')
    doc, lines = parse_yaml_lines(text, "sglang.yaml", PlanError)
    monkeypatch.setattr(registry, "_data_file", lambda module: (Checker("sglang.yaml", lines), doc))
    line = _line_of(text, "SGL-X")
    with pytest.raises(PlanError, match=rf"^sglang\.yaml:{line}: page\.SGL-X: unknown field"):
        registry.packaged_settings("sglang")


def test_the_registry_checks_the_engines_a_file_names() -> None:
    """Once every engine has registered, flags_of must name one (kvbm.yaml's line is given)."""
    text = (DATA / "kvbm.yaml").read_text(encoding="utf-8")
    wrong = registry.Engine(name="dynamo-kvbm", settings={"flags_of": "vlm"}, emit=lambda ctx: {})
    registry.engines()
    with pytest.raises(PlanError) as raised:
        registry._check_engine_names(wrong, "kvbm")
    where = f"kvbm.yaml:{_line_of(text, 'flags_of:')}: engine.flags_of: "
    assert where in str(raised.value)
    assert str(raised.value).endswith("names no registered engine 'vlm'; did you mean 'vllm'?")
