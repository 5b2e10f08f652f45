"""The rule survey's decisions name rules that exist and fire cases that are really there.

`benchmarks/rule_survey.py` writes, for each rule no survey run fired, why it was kept; most
decisions say the rule's fire cases are in tests/fixtures/rule_cases. Each such claim is read
back here: the rule exists, and its case file has at least one case expected to fire. A
retired rule (``RETIRED``) is gone from the rules and the cases, and says what judges its topic
now.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import yaml

from kvadvisor.advice.inputs import load_rule_set

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "fixtures" / "rule_cases"


def _survey():  # type: ignore[no-untyped-def]
    """benchmarks/rule_survey.py as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location(
        "rule_survey", REPO / "benchmarks" / "rule_survey.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["rule_survey"] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["rule_survey"]
    return module


def _decisions() -> dict[str, str]:
    return _survey().DECISIONS


def test_decisions_cite_fire_cases_that_exist() -> None:
    """Every decided rule is a rule; every 'fire cases' claim has a firing case on file."""
    decisions = _decisions()
    codes = {r.code for r in load_rule_set()}
    assert decisions and set(decisions) <= codes, sorted(set(decisions) - codes)
    for code, text in decisions.items():
        if "rule_cases" not in text:
            continue
        (path,) = CASES.glob(f"{code}-*.yaml")
        cases = yaml.safe_load(path.read_text(encoding="utf-8"))["cases"]
        assert any(c["expect"] == "fire" for c in cases.values()), code


def test_retired_rules_are_gone_and_say_what_replaces_them() -> None:
    """A retired code is no rule, has no decision and no case file, and names its successor."""
    survey = _survey()
    codes = {r.code for r in load_rule_set()}
    assert survey.RETIRED
    for code, why in survey.RETIRED.items():
        assert code not in codes and code not in survey.DECISIONS, code
        assert not list(CASES.glob(f"{code}-*.yaml")), code
        assert any(f"{c} `" in why for c in codes), (code, "names no rule that replaces it")
