"""Choose rules by code, dotted name (or a prefix of it) or group: ``--select`` / ``--ignore``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kvadvisor.checker import did_you_mean, with_hint
from kvadvisor.errors import RuleError
from kvadvisor.rules.model import Rule, RuleScope


def split_selectors(values: Iterable[str] | None) -> list[str]:
    """Accept repeated options and comma-separated lists alike: ``-s ST01,cache -s GP02``."""
    return [v.strip() for item in values or () for v in item.split(",") if v.strip()]


def _matches(rule: Rule, selector: str) -> bool:
    s = selector.lower()
    return (
        s == rule.code.lower()
        or s == rule.name
        or rule.name.startswith(s + ".")
        or s in rule.groups
    )


def _check_known(rules: Sequence[Rule], selectors: list[str], option: str) -> None:
    for selector in selectors:
        if not any(_matches(r, selector) for r in rules):
            known = sorted(
                {r.code for r in rules}
                | {r.name for r in rules}
                | {g for r in rules for g in r.groups}
            )
            hint = did_you_mean(selector, known, n=3, cutoff=0.5)
            raise RuleError(
                with_hint(f"{option} {selector!r} matches no rule code, name or group", hint)
                + " (`kvadvisor rules list` shows them)"
            )


def select_rules(
    rules: Sequence[Rule],
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
) -> tuple[Rule, ...]:
    """Rules matching any ``select`` selector (all when none given), minus any ``ignore`` match.

    A selector that matches nothing is a user error with the closest codes, names and groups.
    """
    chosen, dropped = split_selectors(select), split_selectors(ignore)
    _check_known(rules, chosen, "--select")
    _check_known(rules, dropped, "--ignore")
    return tuple(
        r
        for r in rules
        if (not chosen or any(_matches(r, s) for s in chosen))
        and not any(_matches(r, s) for s in dropped)
    )


def workload_rules(rules: Iterable[Rule]) -> tuple[Rule, ...]:
    """The rules `analyze` evaluates: the workload scope (the review runs the others)."""
    return tuple(r for r in rules if r.scope is RuleScope.WORKLOAD)
