"""JSON report: the DESIGN.md contract, the shipped JSON Schema, determinism, round trips."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import types
import typing
from typing import Any, Union

import jsonschema
import numpy as np
from analysis_cache import analyze_run
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st
from report_fixtures import (
    GENERATED_AT,
    VERSION,
    analysed,
    analysed_small,
    full_report,
    small_trace,
)

from kvadvisor.report.jsonreport import JsonRenderer, schema
from kvadvisor.results.report import AdviceReport

# DESIGN.md, "The JSON report: a public contract".
CONTRACT_KEYS = {
    "format_version",
    "kvadvisor_version",
    "trace",
    "model",
    "stage_split",
    "prefix_cache",
    "io",
    "recommendation",
    "findings",
}
VALIDATOR = jsonschema.Draft202012Validator


def _json_scalar() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**53), 2**53),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=8),
    )


def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    """A hypothesis strategy for any type the advice model uses, read from its type hints.

    Fields that other parts add later are covered without touching this test.
    """
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return st.one_of(*(strategy_for(a) for a in typing.get_args(tp)))
    if tp is type(None):
        return st.none()
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        fields = {f.name: strategy_for(hints[f.name]) for f in dataclasses.fields(tp) if f.init}
        return st.builds(tp, **fields)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy_for(args[0]), max_size=3).map(tuple)
        return st.tuples(*(strategy_for(a) for a in args))
    if origin is dict:
        key_tp, val_tp = typing.get_args(tp)
        return st.dictionaries(strategy_for(key_tp), strategy_for(val_tp), max_size=3)
    if origin is list:
        return st.lists(strategy_for(typing.get_args(tp)[0]), max_size=3)
    simple = {
        int: st.integers(-(2**53), 2**53),
        float: st.floats(allow_nan=False, allow_infinity=False),
        str: st.text(max_size=12),
        bool: st.booleans(),
        Any: _json_scalar(),
    }
    if tp in simple:
        return simple[tp]
    raise TypeError(f"no strategy for {tp!r}: extend strategy_for")


@settings(max_examples=60, deadline=None)
@given(strategy_for(AdviceReport))
def test_from_dict_inverts_to_dict(report: AdviceReport) -> None:
    """AdviceReport.from_dict(r.to_dict()) == r for any report the model can hold."""
    assert AdviceReport.from_dict(report.to_dict()) == report


def test_parsed_json_reloads_to_the_same_document() -> None:
    """JSON text -> from_dict -> JSON text is a fixed point (lists come back as tuples)."""
    text = JsonRenderer().render(full_report())
    again = AdviceReport.from_dict(json.loads(text))
    assert JsonRenderer().render(again) == text


def test_contract_keys_and_determinism() -> None:
    """The contract's top-level keys are present; the same inputs give the same bytes."""
    report = analysed(small_trace())
    text = JsonRenderer().render(report)
    doc = json.loads(text)
    assert CONTRACT_KEYS <= set(doc)
    assert doc["format_version"] == 2
    assert doc["kvadvisor_version"] == VERSION and doc["generated_at"] == GENERATED_AT
    assert JsonRenderer().render(analysed(small_trace())) == text
    assert list(doc) == sorted(doc)


def test_schema_is_valid_and_accepts_the_fixtures() -> None:
    """The shipped schema is a valid 2020-12 schema; empty, small and full reports pass it."""
    VALIDATOR.check_schema(schema())
    for report in (analysed_small(0), analysed_small(1), full_report()):
        VALIDATOR(schema()).validate(json.loads(JsonRenderer().render(report)))


def test_schema_rejects_a_broken_contract() -> None:
    """The schema is not vacuous: a missing contract key or a ratio above 1 is rejected."""
    doc = json.loads(JsonRenderer().render(full_report()))
    errors = []
    for broken in (
        {k: v for k, v in doc.items() if k != "findings"},
        {**doc, "prefix_cache": {**doc["prefix_cache"], "hit_ratio": {"all": 1.5, "steady": 0}}},
        {**doc, "format_version": 3},
    ):
        errors.append(list(VALIDATOR(schema()).iter_errors(broken)))
    assert all(errors), errors


def test_mooncake_report_validates_and_holds_true_values(
    mooncake_path, mooncake_rows, tmp_path_factory
) -> None:
    """Real output on the Mooncake trace validates; its workload data match the raw rows.

    The output is the README's command's JSON (every default, the file's sha256), run once per
    test run and shared with tests/test_readme_answer.py, tests/test_verdict_block.py and
    tests/test_cli.py. This file analysed the trace with every default a second time, in
    memory; within its memory budget the command's streamed read gives the in-memory report
    (tests/test_pipeline_streaming.py).
    """
    run = analyze_run(tmp_path_factory, str(mooncake_path.relative_to(REPO)), 80)
    assert run.returncode == 0, run.stderr
    sha = hashlib.sha256(mooncake_path.read_bytes()).hexdigest()
    doc = json.loads(run.report.read_text())
    VALIDATOR(schema()).validate(doc)
    # Independent of the reader and the analysis: the rows as pyarrow reads them.
    rows = mooncake_rows
    assert doc["trace"]["requests"] == len(rows) == 12031
    assert doc["trace"]["sha256"] == sha
    arrivals = doc["trace"]["arrivals"]
    window_s = arrivals["x"][1] - arrivals["x"][0]
    assert round(sum(arrivals["y"]) * window_s) == len(rows)
    lengths = np.array([r["input_length"] for r in rows])
    hist = doc["trace"]["input_tokens_hist"]
    assert sum(hist["y"]) == len(rows)
    # Requests in [2^k, 2^(k+1)) counted by int.bit_length, not by the analysis' log2.
    for lower, n in zip(hist["x"], hist["y"], strict=True):
        k = max(int(lower).bit_length() - 1, 0)
        in_bin = sum(1 for v in lengths.tolist() if max(int(v).bit_length() - 1, 0) == k)
        assert n == in_bin, (lower, n, in_bin)
