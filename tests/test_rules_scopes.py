"""Scoped rules: the loader keeps each rule to its scope's facts; applies, escalate, text facts.

The review's checks are rules over plan, stage, tier and engine facts; these are the language
features they use, each shown firing and staying quiet.
"""

from __future__ import annotations

import pytest

from kvadvisor.errors import RuleSyntaxError
from kvadvisor.facts.registry import FACTS
from kvadvisor.rules import FactValue, RuleScope, Severity, parse_rule
from kvadvisor.rules.engine import evaluate_rule
from kvadvisor.rules.model import Firing, Quiet

DOCS = {"what": "w", "why": "y", "example": "e", "references": ["r"]}
TIER = {
    "code": "XT01",
    "name": "custom.tier_busy",
    "scope": "tier",
    "groups": ["custom"],
    "severity": "info",
    "stage": "both",
    "summary": "A busy tier",
    "applies": {"all": [{"fact": "tier_bandwidth_sized", "op": "==", "value": True}]},
    "when": {"all": [{"fact": "tier_write_utilization_peak", "op": ">", "value": 1}]},
    "escalate": [
        {
            "severity": "error",
            "when": {"all": [{"fact": "tier_write_utilization_p99", "op": ">", "value": 1}]},
            "message": "'{tier_name}' cannot keep up",
        },
        {
            "severity": "warning",
            "when": {"all": [{"fact": "plan_replayed", "op": "==", "value": False}]},
            "message": "'{tier_name}' bursts, not replayed",
        },
    ],
    "message": "'{tier_name}' bursts",
    "passed": "'{tier_name}' keeps up",
    "evidence": ["tier_write_capability_bytes_per_s"],
    "docs": DOCS,
}


def facts(**values: float | bool | str) -> dict[str, FactValue]:
    """Facts with their registered units."""
    return {k: FactValue(k, v, FACTS[k].unit) for k, v in values.items()}


RULE = parse_rule(TIER, "x.yaml", FACTS)


def test_scope_and_features_parse() -> None:
    """scope, applies, a list of escalations, passed and evidence all load."""
    assert RULE.scope is RuleScope.TIER
    assert [e.severity for e in RULE.escalate] == [Severity.ERROR, Severity.WARNING]
    assert RULE.gravest is Severity.ERROR
    assert RULE.shows == ("tier_write_capability_bytes_per_s",)


@pytest.mark.parametrize(
    ("p99", "replayed", "level", "text"),
    [
        (1.2, True, Severity.ERROR, "cannot keep up"),
        (0.9, False, Severity.WARNING, "not replayed"),
        (0.9, True, Severity.INFO, "'nvme' bursts"),
    ],
)
def test_first_escalation_that_holds(p99: float, replayed: bool, level, text: str) -> None:
    """Escalations are tried gravest first; none holding leaves the rule's own severity."""
    out = evaluate_rule(
        RULE,
        facts(
            tier_bandwidth_sized=True,
            tier_name="nvme",
            tier_write_utilization_peak=1.5,
            tier_write_utilization_p99=p99,
            plan_replayed=replayed,
            tier_write_capability_bytes_per_s=1e9,
        ),
    )
    assert isinstance(out, Firing) and out.level is level and text in out.message
    assert out.evidence["tier_write_capability_bytes_per_s"]["text"] == "1 GB/s"


def test_applies_false_is_not_applicable() -> None:
    """A rule whose applies condition is false (or unknown) has nothing to judge."""
    for f in (facts(tier_bandwidth_sized=False), facts()):
        out = evaluate_rule(RULE, f)
        assert isinstance(out, Quiet) and not out.applicable and "does not apply" in out.reason


def test_quiet_passes_with_its_message_and_skips_with_the_reason() -> None:
    """Quiet and evaluated: the passed message; a fact missing: why, from its producer."""
    ok = evaluate_rule(
        RULE, facts(tier_bandwidth_sized=True, tier_name="nvme", tier_write_utilization_peak=0.5)
    )
    assert isinstance(ok, Quiet) and ok.evaluated and ok.message == "'nvme' keeps up"
    skip = evaluate_rule(
        RULE,
        facts(tier_bandwidth_sized=True),
        {"tier_write_utilization_peak": "the tier's write bandwidth is not known"},
    )
    assert isinstance(skip, Quiet) and skip.applicable and not skip.evaluated
    assert skip.reason == (
        "not evaluated: fact tier_write_utilization_peak unavailable: the tier's write "
        "bandwidth is not known"
    )


def test_text_facts_compare_by_equality() -> None:
    """A text fact compares with == or != against text; the message shows it as it is."""
    doc = {
        **TIER,
        "code": "XT02",
        "scope": "stage",
        "applies": {"all": [{"fact": "sglang_configured", "op": "==", "value": True}]},
        "when": {"all": [{"fact": "sglang_mem_layout", "op": "!=", "value": "page_first"}]},
        "escalate": None,
        "passed": None,
        "evidence": None,
        "message": "layout {sglang_mem_layout}",
    }
    rule = parse_rule({k: v for k, v in doc.items() if v is not None}, "x.yaml", FACTS)
    fired = evaluate_rule(rule, facts(sglang_configured=True, sglang_mem_layout="layer_first"))
    assert isinstance(fired, Firing) and fired.message == "layout layer_first"
    quiet = evaluate_rule(rule, facts(sglang_configured=True, sglang_mem_layout="page_first"))
    assert isinstance(quiet, Quiet) and quiet.evaluated
    assert quiet.reason == "condition not met: sglang_mem_layout = page_first == page_first"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        # A workload rule cannot read a tier fact: analyze has no tier to give it.
        ({"scope": "workload"}, "belongs to the tier scope; a workload rule reads workload"),
        # A tier rule cannot read an engine's facts (another scope, not around it).
        (
            {"when": {"all": [{"fact": "engine_placeholder_count", "op": ">", "value": 0}]}},
            "belongs to the engine scope",
        ),
        (
            {"scope": "fleet"},
            "scope: must be one of workload, plan, stage, tier, engine, got 'fleet'",
        ),
        (
            {"when": {"all": [{"fact": "tier_name", "op": ">", "value": "a"}]}},
            "a text fact compares with a text value, by == or !=",
        ),
        (
            {"when": {"all": [{"fact": "tier_name", "op": "==", "value": 3}]}},
            "a text fact compares with a text value",
        ),
        (
            {
                "escalate": [
                    {"severity": "warning", "when": TIER["when"], "message": "m"},
                    {"severity": "error", "when": TIER["when"], "message": "m"},
                ]
            },
            "list escalations gravest first",
        ),
        (
            {"escalate": {"severity": "info", "when": TIER["when"], "message": "m"}},
            "must be graver than the rule's own",
        ),
        ({"evidence": "tier_name"}, "evidence: expected a list of fact names"),
        ({"message": "{tier_name:.1f}"}, "a text fact takes no format"),
    ],
)
def test_scoped_rule_errors(changes: dict, expected: str) -> None:
    """Each mistake is one error naming the key path."""
    doc = {k: v for k, v in {**TIER, **changes}.items() if v is not None}
    with pytest.raises(RuleSyntaxError, match="x.yaml: .*" + expected.replace("(", r"\(")):
        parse_rule(doc, "x.yaml", FACTS)
