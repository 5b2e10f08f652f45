"""--select / --ignore by code, name, name prefix or group."""

from __future__ import annotations

import pytest

from kvadvisor.errors import RuleError
from kvadvisor.facts.registry import FACTS
from kvadvisor.rules import load_rules, select_rules

RULES = load_rules([], FACTS)


def codes(select=None, ignore=None) -> list[str]:  # type: ignore[no-untyped-def]
    """Codes left after selection."""
    return [r.code for r in select_rules(RULES, select, ignore)]


def test_no_selection_keeps_all() -> None:
    """Without options every rule runs."""
    assert codes() == [r.code for r in RULES]


def test_by_code_name_prefix_and_group() -> None:
    """Codes (any case), full names, dotted prefixes and groups all select."""
    assert codes(["st03"]) == ["ST03"]
    assert codes(["cache.read_less_first"]) == ["CA01"]
    assert codes(["tiers"]) == ["TI01", "TI02"]
    group = codes(["gds"])
    assert group == ["ST07"]
    assert codes(["CA01,ST03"]) == ["CA01", "ST03"]


def test_ignore_wins() -> None:
    """--ignore removes from what --select chose."""
    assert codes(["tiers"], ["TI02"]) == ["TI01"]
    assert "ST03" not in codes(None, ["storage.prefill_write_bandwidth"])


def test_unknown_selector_suggests() -> None:
    """A selector matching nothing is a user error with the closest names."""
    with pytest.raises(RuleError, match="did you mean 'storage'"):
        codes(["stroage"])
    with pytest.raises(RuleError, match="--ignore"):
        codes(None, ["XX99"])
