"""Rule engine: three-valued logic, value/ref comparisons, messages with units, evidence."""

from __future__ import annotations

import pytest

from kvadvisor.facts.registry import FACTS
from kvadvisor.rules import FactValue, evaluate, format_message, parse_rule
from kvadvisor.rules.engine import matches, resolve_where, truth
from kvadvisor.rules.model import AllOf, AnyOf, Compare, Not, Op


def facts(**values: float | bool) -> dict[str, FactValue]:
    """Facts with their registered units."""
    return {k: FactValue(k, v, FACTS[k].unit) for k, v in values.items()}


A = Compare("prefill_share_gpu_time", Op.GE, value=0.75)  # true below
B = Compare("write_peak_to_mean", Op.GE, value=3)  # false below
C = Compare("kv_working_set_gib", Op.GT, value=1)  # unknown below
F = facts(prefill_share_gpu_time=0.9, write_peak_to_mean=1.5)


@pytest.mark.parametrize(
    ("cond", "expected"),
    [
        (A, True),
        (B, False),
        (C, None),
        (AllOf((A, B)), False),
        (AllOf((A, C)), None),
        (AllOf((B, C)), False),
        (AnyOf((A, C)), True),
        (AnyOf((B, C)), None),
        (AnyOf((B, B)), False),
        (Not(A), False),
        (Not(B), True),
        (Not(C), None),
    ],
)
def test_kleene_logic(cond, expected) -> None:  # type: ignore[no-untyped-def]
    """Unknown (a missing fact) is neither true nor false; and/or/not follow Kleene."""
    assert truth(cond, F) is expected


def test_ref_with_factor() -> None:
    """Fact op factor × ref compares against another fact, scaled."""
    cond = Compare("host_kv_pool_gib", Op.LT, ref="gpu_kv_pool_gib", factor=2)
    assert truth(cond, facts(host_kv_pool_gib=900, gpu_kv_pool_gib=600)) is True
    assert truth(cond, facts(host_kv_pool_gib=1200, gpu_kv_pool_gib=600)) is False
    assert truth(cond, facts(host_kv_pool_gib=1200)) is None


def test_message_uses_units_and_specs() -> None:
    """{fact} gets its unit; {fact:.2f} the bare number; a missing fact says unavailable."""
    f = facts(write_bytes_per_s_p99=4.5e9, prefix_hit_ratio_steady=0.5)
    text = format_message(
        "{write_bytes_per_s_p99} / {prefix_hit_ratio_steady:.2f} / {kv_working_set_gib}", f
    )
    assert text == "4.5 GB/s / 0.50 / unavailable"


def test_evaluate_reports_why_quiet() -> None:
    """Fired rules explain themselves, quiet rules say why.

    Fired rules carry message and evidence; quiet ones say which fact was missing or which
    comparison failed.
    """
    doc = {
        "code": "XX01",
        "name": "custom.test",
        "groups": ["custom"],
        "severity": "info",
        "stage": "both",
        "summary": "s",
        "when": {
            "all": [
                {"fact": "write_peak_to_mean", "op": ">=", "value": 3},
                {"fact": "prefill_share_gpu_time", "op": ">=", "value": 0.5},
            ]
        },
        "message": "peak/mean {write_peak_to_mean}",
        "docs": {"what": "w", "why": "y", "example": "e", "references": ["r"]},
    }
    rule = parse_rule(doc, "x.yaml", FACTS)
    fired = evaluate([rule], facts(write_peak_to_mean=4.0, prefill_share_gpu_time=0.6))
    assert fired.fired[0].message == "peak/mean 4×"
    # Why it fired: every part of a true `all` is quoted (the HTML's "Fired" table shows it).
    assert fired.fired[0].reason == (
        "condition met: write_peak_to_mean = 4× >= 3× and prefill_share_gpu_time = 60.0% >= 50.0%"
    )
    assert fired.fired[0].evidence["write_peak_to_mean"] == {
        "value": 4.0,
        "unit": "x",
        "text": "4×",
    }
    false = evaluate([rule], facts(write_peak_to_mean=4.0, prefill_share_gpu_time=0.2))
    assert false.quiet[0].evaluated
    assert false.quiet[0].reason == ("condition not met: prefill_share_gpu_time = 20.0% < 50.0%")
    missing = evaluate([rule], facts(write_peak_to_mean=4.0))
    assert not missing.quiet[0].evaluated
    assert missing.quiet[0].reason == "not evaluated: fact prefill_share_gpu_time unavailable"
    # A false part decides `all` even when another part is unknown.
    decided = evaluate([rule], facts(write_peak_to_mean=1.0))
    assert decided.quiet[0].evaluated


_PA = {"fact": "prefill_share_gpu_time", "op": ">=", "value": 0.75}  # true in F
_PB = {"fact": "write_peak_to_mean", "op": ">=", "value": 3}  # false in F
_SA = "prefill_share_gpu_time = 90.0% >= 75.0%"
_SB_FALSE = "write_peak_to_mean = 1.5× < 3×"


@pytest.mark.parametrize(
    ("when", "reason"),
    [
        # `any` is false only when every part is: each part says why.
        ({"any": [_PB, {"not": _PA}]}, f"{_SB_FALSE} and not({_SA})"),
        # `not any` is false because one part held: that part alone is quoted.
        ({"not": {"any": [_PA, _PB]}}, f"not({_SA})"),
        # `not all` is false because every part held, a negated part included.
        ({"not": {"all": [_PA, {"not": _PB}]}}, f"not({_SA} and not({_SB_FALSE}))"),
        # `all` is false because of its first false part.
        ({"all": [_PA, _PB, _PB]}, _SB_FALSE),
    ],
)
def test_quiet_reason_through_nested_conditions(when, reason) -> None:  # type: ignore[no-untyped-def]
    """A false condition is explained by the comparisons that decided it, through not/any/all."""
    doc = {
        "code": "XX02",
        "name": "custom.nested",
        "groups": ["custom"],
        "severity": "info",
        "stage": "both",
        "summary": "s",
        "when": when,
        "message": "m",
        "docs": {"what": "w", "why": "y", "example": "e", "references": ["r"]},
    }
    result = evaluate([parse_rule(doc, "x.yaml", FACTS)], F)
    assert not result.fired
    assert result.quiet[0].reason == "condition not met: " + reason


def test_where_clause_resolution() -> None:
    """Fact-valued bounds become numbers (with factor); unknown facts mean no query."""
    where = {
        "write_mbps": {">=": {"fact": "write_bytes_per_s_p99", "factor": 1e-6}},
        "category": {"!=": "block"},
    }
    query = resolve_where(where, facts(write_bytes_per_s_p99=4.5e9))
    assert query == {"write_mbps": [(">=", 4500.0)], "category": [("!=", "block")]}
    assert matches({"write_mbps": 6600, "category": "local_nvme"}, query)
    assert not matches({"write_mbps": 4200, "category": "local_nvme"}, query)
    assert not matches({"write_mbps": None, "category": "local_nvme"}, query)
    assert resolve_where(where, {}) is None
