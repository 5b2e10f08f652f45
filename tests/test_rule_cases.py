"""Every built-in rule against its YAML cases: facts in, must fire or must stay quiet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvadvisor.errors import RuleSyntaxError
from kvadvisor.facts.registry import FACTS
from kvadvisor.io.yamlio import load_yaml
from kvadvisor.rules import FactValue, evaluate, load_rules

CASES_DIR = Path(__file__).parent / "fixtures" / "rule_cases"


def load_cases() -> list[tuple[str, str, dict[str, Any]]]:
    """(rule code, case name, case) for every case file."""
    out = []
    for path in sorted(CASES_DIR.glob("*.yaml")):
        doc = load_yaml(path, RuleSyntaxError)
        for name, case in doc["cases"].items():
            out.append((doc["rule"], name, case))
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per case, named CODE_case."""
    if "rule_case" in metafunc.fixturenames:
        cases = load_cases()
        metafunc.parametrize("rule_case", cases, ids=[f"{c}_{n}" for c, n, _ in cases])


RULES = {r.code: r for r in load_rules([], FACTS)}


def _facts(raw: dict[str, Any]) -> dict[str, FactValue]:
    unknown = set(raw) - set(FACTS)
    assert not unknown, f"case uses unregistered facts {unknown}"
    for name, value in raw.items():  # YAML 1.1 reads 5.0e8 as text: catch it here
        if FACTS[name].unit == "text":
            assert isinstance(value, str), (name, value)
            continue
        assert isinstance(value, (bool, int, float)), (name, value)
        assert isinstance(value, bool) == (FACTS[name].unit == "bool"), (name, value)
    return {k: FactValue(k, v, FACTS[k].unit) for k, v in raw.items()}


def test_rule_case(rule_case: tuple[str, str, dict[str, Any]]) -> None:
    """The rule fires or stays quiet as the case says, with the message or reason it names."""
    code, _, case = rule_case
    rule = RULES[code]
    result = evaluate([rule], _facts(case.get("facts") or {}))
    if case["expect"] == "fire":
        assert len(result.fired) == 1, result.quiet[0].reason if result.quiet else ""
        message = result.fired[0].message
        assert "unavailable" not in message or case.get("allow_na"), message
        if "severity" in case:  # an escalated rule names the severity it fires at
            assert result.fired[0].level.value == case["severity"], result.fired[0].level
        for text in case.get("message_contains") or []:
            assert text in message, f"{text!r} not in {message!r}"
        # Evidence carries every available fact the rule read or quoted, with its unit.
        for name, item in result.fired[0].evidence.items():
            assert item["unit"] == FACTS[name].unit
    else:
        assert case["expect"] == "quiet"
        assert not result.fired, result.fired[0].message
        reason = result.quiet[0].reason
        text = case.get("reason_contains")
        if text:
            assert text in reason, f"{text!r} not in {reason!r}"
        if "applies" in case:  # a rule that does not apply is not reported by the review
            assert result.quiet[0].applicable is case["applies"], reason
