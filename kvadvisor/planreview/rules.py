"""The review's rules run on a plan's scopes: each rule's outcomes as the review's checks.

The review's checks are YAML rules (``rules/review/``, ``rules/lint/``; scopes plan, stage,
tier and engine) evaluated by the same engine as analyze's. A rule that fires is a failed
check (a finding) with its severity, escalated or not; one that applies and stays quiet passes;
one that applies but lacks a fact is skipped, with the reason; one that does not apply (an
LMCache lint on a stage without LMCache) is not reported at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from kvadvisor.facts.registry import FACTS
from kvadvisor.planreview.scope import ScopeFacts
from kvadvisor.results.review import ReviewCheck
from kvadvisor.rules import Firing, Rule, load_rules
from kvadvisor.rules.engine import evaluate_rule
from kvadvisor.rules.model import RuleScope
from kvadvisor.vocab import CheckStatus, Stage

REVIEW_SCOPES = (RuleScope.PLAN, RuleScope.STAGE, RuleScope.TIER, RuleScope.ENGINE)
# The plan stages a rule of each stage runs on: a serving stage prefills and decodes.
RUNS_ON = {
    Stage.BOTH: frozenset(Stage),
    Stage.PREFILL: frozenset({Stage.PREFILL, Stage.SERVING}),
    Stage.DECODE: frozenset({Stage.DECODE, Stage.SERVING}),
}


@lru_cache(maxsize=1)
def builtin_review_rules() -> tuple[Rule, ...]:
    """The built-in rules of the review's scopes (loaded once)."""
    return review_rules(load_rules([], FACTS))


def review_rules(rules: Sequence[Rule]) -> tuple[Rule, ...]:
    """The rules the review runs: those of the plan, stage, tier and engine scopes."""
    return tuple(r for r in rules if r.scope in REVIEW_SCOPES)


def _source(rule: Rule) -> str:
    return "; ".join(rule.docs.references)


def _plain(evidence: dict[str, dict]) -> dict[str, object]:
    return {name: item["value"] for name, item in evidence.items()}


def judge(rules: Sequence[Rule] | None, scopes: Sequence[ScopeFacts]) -> tuple[ReviewCheck, ...]:
    """Every rule on every scope it is for, as checks (None: the built-in review rules)."""
    chosen = builtin_review_rules() if rules is None else review_rules(rules)
    out: list[ReviewCheck] = []
    for sc in scopes:
        for rule in chosen:
            if rule.scope is not sc.scope or sc.stage not in RUNS_ON[rule.stage]:
                continue
            outcome = evaluate_rule(rule, sc.facts, sc.unavailable)
            stage = rule.stage if sc.scope is RuleScope.PLAN else sc.stage
            if isinstance(outcome, Firing):
                out.append(
                    ReviewCheck(
                        rule.code,
                        rule.name,
                        stage,
                        outcome.level,
                        CheckStatus.FAIL,
                        outcome.message,
                        _plain(outcome.evidence),
                        _source(rule),
                        sc.subject,
                    )
                )
                continue
            if not outcome.applicable:
                continue
            out.append(
                ReviewCheck(
                    rule.code,
                    rule.name,
                    stage,
                    rule.gravest,
                    CheckStatus.PASS if outcome.evaluated else CheckStatus.SKIP,
                    outcome.message or outcome.reason,
                    _plain(outcome.evidence),
                    _source(rule),
                    sc.subject,
                )
            )
    return tuple(out)
