"""Evaluate rules against facts (pure): three-valued logic, messages with units, evidence.

A condition over a fact that the analysis could not produce is *unknown*, not false: ``all``
is false if any part is false, unknown if any part is unknown, else true; ``any`` is true if any
part is true, unknown if any part is unknown, else false; ``not`` keeps unknown (Kleene logic).
A rule whose condition is unknown stays quiet with "not evaluated: fact X unavailable".
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

Facts = Mapping[str, FactValue]

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
        rhs = format_value(cond.value, fact.unit)  # type: ignore[arg-type]
    else:
        ref = facts[cond.ref]
        scaled = format_value(ref.value * cond.factor, ref.unit)
        rhs = (
            f"{cond.factor:g} × {cond.ref} = {scaled}"
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
    names = dict.fromkeys([*rule.facts, *_message_facts(rule.message)])
    return {
        n: {
            "value": facts[n].value,
            "unit": facts[n].unit,
            "text": format_fact(facts[n]),
        }
        for n in names
        if n in facts
    }


def evaluate(rules: Iterable[Rule], facts: Facts) -> Evaluation:
    """Run every rule over the facts: which fired (message, evidence), which stayed quiet, why."""
    fired: list[Firing] = []
    quiet: list[Quiet] = []
    for rule in rules:
        result = truth(rule.when, facts)
        if result is True:
            fired.append(
                Firing(
                    rule,
                    format_message(rule.message, facts),
                    evidence_for(rule, facts),
                    "condition met: " + _why(rule.when, facts, held=True),
                )
            )
        elif result is None:
            missing = [n for n in rule.facts if n not in facts]
            quiet.append(
                Quiet(
                    rule,
                    "not evaluated: fact " + ", ".join(missing) + " unavailable",
                    evaluated=False,
                )
            )
        else:
            quiet.append(
                Quiet(
                    rule, "condition not met: " + _why(rule.when, facts, held=False), evaluated=True
                )
            )
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
