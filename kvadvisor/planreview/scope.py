"""The facts one evaluation of the review's rules sees: a scope's own and those around it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kvadvisor.facts.registry import fact
from kvadvisor.plan.model import StagePlan
from kvadvisor.rules.model import FactValue, RuleScope
from kvadvisor.vocab import Stage


@dataclass(frozen=True)
class ScopeFacts:
    """The facts one evaluation of the review's rules sees, and why any are absent.

    ``stage`` is the plan stage (``both`` for the plan scope); ``subject`` names the tier or
    the engine (empty for plan and stage), as the review's checks do.
    """

    scope: RuleScope
    stage: Stage
    subject: str
    facts: dict[str, FactValue]
    unavailable: dict[str, str] = field(default_factory=dict)


class FactSet:
    """Facts being gathered: values (None = absent) and the reasons for absent ones."""

    def __init__(self) -> None:
        self.values: dict[str, FactValue] = {}
        self.why: dict[str, str] = {}

    def add(self, name: str, value: Any, why: str | None = None) -> None:
        """Add fact ``name`` (None: absent, with ``why`` when the reason is known)."""
        made = fact(name, value)
        if made is not None:
            self.values[name] = made
        elif why:
            self.why[name] = why

    def scope(self, scope: RuleScope, stage: Stage, subject: str, *outer: FactSet) -> ScopeFacts:
        """These facts with those of the ``outer`` scopes, as one evaluation sees them."""
        facts: dict[str, FactValue] = {}
        why: dict[str, str] = {}
        for part in (*outer, self):
            facts.update(part.values)
            why.update(part.why)
        return ScopeFacts(scope, stage, subject, facts, why)


def all_scopes(
    plan_f: FactSet,
    stages: Iterable[tuple[StagePlan, FactSet, list[tuple[str, FactSet]], list[FactSet]]],
) -> list[ScopeFacts]:
    """Every evaluation's facts: the plan, then per stage its own, its engines', its tiers'."""
    out = [plan_f.scope(RuleScope.PLAN, Stage.BOTH, "")]
    for stage, sf, engines, tiers in stages:
        st = Stage(stage.stage)
        out.append(sf.scope(RuleScope.STAGE, st, "", plan_f))
        for tf in tiers:
            out.append(tf.scope(RuleScope.TIER, st, str(tf.values["tier_name"].value), plan_f, sf))
        for name, ef in engines:
            out.append(ef.scope(RuleScope.ENGINE, st, name, plan_f, sf))
    return out
