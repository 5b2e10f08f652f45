"""Evaluate rules against facts (pure): three-valued logic, messages with units, evidence.

A condition over a fact that the analysis could not produce is *unknown*, not false: ``all``
is false if any part is false, unknown if any part is unknown, else true; ``any`` is true if any
part is true, unknown if any part is unknown, else false; ``not`` keeps unknown (Kleene logic).
A rule whose condition is unknown stays quiet with "not evaluated: fact X unavailable", and the
reason its producer gave for the fact's absence where it gave one.

A rule with an ``applies`` condition that is not true has nothing to judge: it stays quiet as
not applicable (the review does not report it). A firing rule takes the severity and message
of its first escalation whose condition holds too.
"""

from __future__ import annotations

import operator
import string
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kvadvisor.rules.model import (
    AllOf,
    AnyOf,
    Compare,
    Condition,
    Evaluation,
    FactValue,
    Firing,
    Not,
    Op,
    Quiet,
    Rule,
)
from kvadvisor.units import format_value
from kvadvisor.units.format import number

Facts = Mapping[str, FactValue]
# Why a fact is absent, by name, where its producer knows ("decode tiers are not read").
Unavailable = Mapping[str, str]

_OPS: dict[Op, Callable[[Any, Any], bool]] = {
    Op.LT: operator.lt,
    Op.LE: operator.le,
    Op.GT: operator.gt,
    Op.GE: operator.ge,
    Op.EQ: operator.eq,
    Op.NE: operator.ne,
}
_NEGATED = {Op.LT: ">=", Op.LE: ">", Op.GT: "<=", Op.GE: "<", Op.EQ: "!=", Op.NE: "=="}


def format_fact(fact: FactValue) -> str:
    """A fact's value with its unit, as every message, evidence line and renderer shows it."""
    return format_value(fact.value, fact.unit)


def _check(cond: Compare, facts: Facts) -> bool | None:
    fact = facts.get(cond.fact)
    if fact is None:
        return None
    if cond.ref is None:
        other: Any = cond.value
    else:
        ref = facts.get(cond.ref)
        if ref is None:
            return None
        other = ref.value * cond.factor
    return bool(_OPS[cond.op](fact.value, other))


def truth(cond: Condition, facts: Facts) -> bool | None:
    """True, False, or None when a fact it needs is unavailable (Kleene logic)."""
    if isinstance(cond, Compare):
        return _check(cond, facts)
    if isinstance(cond, Not):
        inner = truth(cond.part, facts)
        return None if inner is None else not inner
    values = [truth(p, facts) for p in cond.parts]
    if isinstance(cond, AllOf):
        if any(v is False for v in values):
            return False
        return None if any(v is None for v in values) else True
    if isinstance(cond, AnyOf):
        if any(v is True for v in values):
            return True
        return None if any(v is None for v in values) else False
    raise AssertionError(f"unknown condition {cond!r}")  # the loader builds only the four kinds


def _describe(cond: Compare, facts: Facts, held: bool) -> str:
    fact = facts[cond.fact]
    lhs = f"{cond.fact} = {format_fact(fact)}"
    if cond.ref is None:
        rhs = format_value(cond.value, fact.unit)
    else:
        ref = facts[cond.ref]
        scaled = format_value(ref.value * cond.factor, ref.unit)
        rhs = (
            f"{number(cond.factor)} × {cond.ref} = {scaled}"
            if cond.factor != 1
            else (f"{cond.ref} = {scaled}")
        )
    op = cond.op.value if held else _NEGATED[cond.op]
    return f"{lhs} {op} {rhs}"


def _why(cond: Condition, facts: Facts, held: bool) -> str:
    """Why the condition is ``held`` (true or false), in words: the comparisons that decide it.

    One part decides an ``all`` that is false or an ``any`` that is true (the first such part
    is quoted); otherwise every part does, and all are quoted.
    """
    if isinstance(cond, Compare):
        return _describe(cond, facts, held)
    if isinstance(cond, Not):
        return "not(" + _why(cond.part, facts, not held) + ")"
    if isinstance(cond, AnyOf if held else AllOf):
        for part in cond.parts:
            if truth(part, facts) is held:
                return _why(part, facts, held)
    return " and ".join(_why(p, facts, held) for p in cond.parts)


def format_message(template: str, facts: Facts) -> str:
    """Fill ``{fact}`` with the value and its unit, ``{fact:.1f}`` with the bare number.

    Placeholders are plain names checked by the loader; only ``format()`` of a number with a
    checked spec runs, never attribute access or code.
    """
    out: list[str] = []
    for literal, name, spec, _ in string.Formatter().parse(template):
        out.append(literal)
        if name is None:
            continue
        fact = facts.get(name)
        if fact is None:
            out.append("unavailable")
        elif spec:
            out.append(format(fact.value, spec))
        else:
            out.append(format_fact(fact))
    return "".join(out)


def _message_facts(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def evidence_for(rule: Rule, facts: Facts) -> dict[str, dict[str, Any]]:
    """The available facts a rule reads or quotes: name -> {value, unit, text}."""
    quoted = [*_message_facts(rule.message), *_message_facts(rule.passed)]
    for esc in rule.escalate:
        quoted += _message_facts(esc.message)
    names = dict.fromkeys([*rule.facts, *quoted, *rule.shows])
    return {
        n: {
            "value": facts[n].value,
            "unit": facts[n].unit,
            "text": format_fact(facts[n]),
        }
        for n in names
        if n in facts
    }


def _missing(cond: Condition, facts: Facts, unavailable: Unavailable) -> str:
    """The facts a condition lacks, each with the reason its producer gave."""
    missing = [n for n in cond.facts if n not in facts]
    reasons = list(dict.fromkeys(unavailable[n] for n in missing if n in unavailable))
    text = "fact " + ", ".join(missing) + " unavailable"
    return text + (": " + "; ".join(reasons) if reasons else "")


def evaluate_rule(
    rule: Rule, facts: Facts, unavailable: Unavailable | None = None
) -> Firing | Quiet:
    """One rule over one set of facts: a firing, or why it stayed quiet."""
    unavailable = unavailable or {}
    if rule.applies is not None:
        applies = truth(rule.applies, facts)
        if applies is not True:
            why = (
                _why(rule.applies, facts, held=False)
                if applies is False
                else _missing(rule.applies, facts, unavailable)
            )
            return Quiet(rule, "does not apply: " + why, evaluated=False, applicable=False)
    result = truth(rule.when, facts)
    if result is True:
        met = "condition met: " + _why(rule.when, facts, held=True)
        for esc in rule.escalate:
            if truth(esc.when, facts) is True:
                return Firing(
                    rule,
                    format_message(esc.message, facts),
                    evidence_for(rule, facts),
                    esc.severity,
                    f"{met}; escalated: {_why(esc.when, facts, held=True)}",
                )
        return Firing(
            rule, format_message(rule.message, facts), evidence_for(rule, facts), reason=met
        )
    if result is None:
        reason = "not evaluated: " + _missing(rule.when, facts, unavailable)
        return Quiet(rule, reason, evaluated=False, message=reason)
    reason = "condition not met: " + _why(rule.when, facts, held=False)
    message = format_message(rule.passed, facts) if rule.passed else reason
    return Quiet(rule, reason, evaluated=True, message=message, evidence=evidence_for(rule, facts))


def evaluate(
    rules: Iterable[Rule], facts: Facts, unavailable: Unavailable | None = None
) -> Evaluation:
    """Run every rule over the facts: which fired (message, evidence), which stayed quiet, why.

    ``unavailable`` maps absent facts to the reason they are absent, quoted when a rule cannot
    be evaluated for want of them.
    """
    fired: list[Firing] = []
    quiet: list[Quiet] = []
    for rule in rules:
        outcome = evaluate_rule(rule, facts, unavailable)
        (fired if isinstance(outcome, Firing) else quiet).append(outcome)  # type: ignore[arg-type]
    return Evaluation(tuple(fired), tuple(quiet))


def resolve_where(
    where: Mapping[str, Mapping[str, Any]], facts: Facts
) -> dict[str, list[tuple[str, Any]]] | None:
    """A recommend.where clause with fact-valued bounds replaced by numbers.

    Returns None when a bound names a fact that is unavailable (the query cannot be run).
    """
    out: dict[str, list[tuple[str, Any]]] = {}
    for field_name, tests in where.items():
        for op, value in tests.items():
            if isinstance(value, dict):
                fact = facts.get(value["fact"])
                if fact is None:
                    return None
                value = fact.value * float(value.get("factor", 1.0))
            out.setdefault(field_name, []).append((op, value))
    return out


def matches(entry: Mapping[str, Any], query: Mapping[str, list[tuple[str, Any]]]) -> bool:
    """Whether a catalog entry passes every bound of a resolved where clause (missing = no)."""
    for field_name, tests in query.items():
        have = entry.get(field_name)
        if have is None:
            return False
        for op, value in tests:
            try:
                if not _OPS[Op(op)](have, value):
                    return False
            except TypeError:
                return False
    return True
