"""Rule data: facts, conditions, rules and evaluation results (frozen dataclasses, no behaviour)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Union

from kvadvisor.units import Unit
from kvadvisor.vocab import Severity, Stage


class RuleScope(str, Enum):
    """What one evaluation of a rule speaks about, and so which facts it may read.

    ``analyze`` evaluates the workload rules once, over the trace's measurements and the
    recommended deployment. ``review`` evaluates the others on each plan: plan rules once per
    plan, stage rules once per stage, tier rules once per tier of a stage, engine rules once per
    engine configured on a stage. A rule reads facts of its own scope and of the scopes around
    it (:data:`VISIBLE`): a tier rule sees its tier's, its stage's and its plan's facts.
    """

    WORKLOAD = "workload"
    PLAN = "plan"
    STAGE = "stage"
    TIER = "tier"
    ENGINE = "engine"

    def __str__(self) -> str:
        """The spelling, as rule files write it."""
        return str(self.value)


# The fact scopes a rule of each scope may read (its own and the ones around it).
VISIBLE: dict[RuleScope, frozenset[RuleScope]] = {
    RuleScope.WORKLOAD: frozenset({RuleScope.WORKLOAD}),
    RuleScope.PLAN: frozenset({RuleScope.PLAN}),
    RuleScope.STAGE: frozenset({RuleScope.PLAN, RuleScope.STAGE}),
    RuleScope.TIER: frozenset({RuleScope.PLAN, RuleScope.STAGE, RuleScope.TIER}),
    RuleScope.ENGINE: frozenset({RuleScope.PLAN, RuleScope.STAGE, RuleScope.ENGINE}),
}


class Op(str, Enum):
    """Comparison operators a condition may use (a closed set; nothing is evaluated as code)."""

    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    EQ = "=="
    NE = "!="


# What each unit a fact may carry means (docs/facts.md lists them); one formatter prints each.
UNIT_MEANINGS: dict[Unit, str] = {
    Unit.RATIO: "a share between 0 and 1, printed as a percentage",
    Unit.MULTIPLE: "a multiple (dimensionless), printed as '3.2×'",
    Unit.BYTES: "bytes, printed in KiB/MiB/GiB/TiB (binary)",
    Unit.BYTES_PER_S: "bytes per second, printed in MB/s or GB/s (decimal)",
    Unit.GIB: "GiB (2^30 bytes), printed as a size",
    Unit.TOKENS: "tokens",
    Unit.REQUESTS: "requests",
    Unit.PER_S: "events per second",
    Unit.IOPS: "I/O operations per second",
    Unit.SECONDS: "seconds, printed in ms, s, min or h",
    Unit.US: "microseconds",
    Unit.TFLOPS: "dense BF16 tera floating-point operations per second",
    Unit.GBPS: "GB/s (decimal), printed as a bandwidth",
    Unit.COUNT: "a plain count (or a mean of counts)",
    Unit.BOOL: "true or false",
    Unit.DWPD: "drive writes per day",
    Unit.USD: "US dollars",
    Unit.BYTES_PER_TOKEN: "bytes per token, printed as a size per token",
    Unit.TEXT: "a name or a list of names, printed as it is; compared only with == and !=",
}


@dataclass(frozen=True)
class FactSpec:
    """A named number the analysis may produce: what rules and docs may refer to."""

    name: str
    unit: Unit
    description: str
    source: str = ""  # which part of the analysis produces it (for docs/facts.md)
    scope: RuleScope = RuleScope.WORKLOAD


@dataclass(frozen=True)
class FactValue:
    """One produced fact: its value (number, bool, or text for a ``text`` fact) and unit."""

    name: str
    value: float | int | bool | str
    unit: Unit


@dataclass(frozen=True)
class Compare:
    """``fact op value`` or ``fact op factor × ref`` (ref is another fact)."""

    fact: str
    op: Op
    value: float | bool | str | None = None
    ref: str | None = None
    factor: float = 1.0

    @property
    def facts(self) -> tuple[str, ...]:
        """The fact names this comparison reads."""
        return (self.fact,) if self.ref is None else (self.fact, self.ref)


@dataclass(frozen=True)
class _Parts:
    """A condition over several parts (the base of AllOf and AnyOf)."""

    parts: tuple[Condition, ...]

    @property
    def facts(self) -> tuple[str, ...]:
        """The fact names the parts read, in order, without repeats."""
        return tuple(dict.fromkeys(f for p in self.parts for f in p.facts))


@dataclass(frozen=True)
class AllOf(_Parts):
    """True when every part is true."""


@dataclass(frozen=True)
class AnyOf(_Parts):
    """True when at least one part is true."""


@dataclass(frozen=True)
class Not:
    """True when the part is false."""

    part: Condition

    @property
    def facts(self) -> tuple[str, ...]:
        """The fact names the part reads."""
        return self.part.facts


Condition = Union[Compare, AllOf, AnyOf, Not]  # noqa: UP007 (a runtime alias on 3.10)


@dataclass(frozen=True)
class RuleDocs:
    """The same headings for every rule (ruff's rule docs): what, why, example, references."""

    what: str
    why: str
    example: str
    references: tuple[str, ...]


@dataclass(frozen=True)
class Recommend:
    """What to do when the rule fires, and which catalog entries would do it.

    ``where`` filters catalog entries (field -> {op: value}); ``rank_by`` orders the survivors
    (a field name, ``-`` prefix for descending).
    """

    action: str
    catalog: str | None = None
    where: dict[str, dict[str, float | str | bool]] = field(default_factory=dict)
    rank_by: str | None = None


@dataclass(frozen=True)
class Escalation:
    """A graver severity (and its own message) when a further condition holds too.

    One check, one code, one severity at a time: RV02 is an error when the p99 window exceeds
    the tier, a warning when only the peak does and the plan was not replayed. A rule lists its
    escalations gravest first; the first whose condition holds applies.
    """

    severity: Severity
    when: Condition
    message: str


@dataclass(frozen=True)
class Rule:
    """One rule, as loaded from one YAML file.

    ``applies`` (optional) says where the rule has anything to judge: where it is false or
    unknown the rule is not reported at all (an LMCache lint on a stage without LMCache), as
    opposed to a rule that applies but lacks a fact (reported as not evaluated, with why).
    ``passed`` (optional) is the message of a rule that applies and stayed quiet; ``shows``
    (optional, ``evidence:`` in the file) names facts its evidence carries besides the ones
    its conditions read and its messages quote.
    """

    code: str
    name: str
    groups: tuple[str, ...]
    severity: Severity
    stage: Stage
    summary: str
    when: Condition
    message: str
    docs: RuleDocs
    recommend: Recommend | None = None
    path: str = ""
    scope: RuleScope = RuleScope.WORKLOAD
    applies: Condition | None = None
    escalate: tuple[Escalation, ...] = ()
    passed: str = ""
    shows: tuple[str, ...] = ()  # facts shown as evidence besides those it reads or quotes

    @property
    def facts(self) -> tuple[str, ...]:
        """Every fact the conditions read (``when``, then each escalation's)."""
        names = list(self.when.facts)
        for esc in self.escalate:
            names += esc.when.facts
        return tuple(dict.fromkeys(names))

    @property
    def gravest(self) -> Severity:
        """The gravest severity the rule can fire at (its own, or an escalation's)."""
        return max((self.severity, *(e.severity for e in self.escalate)), key=lambda s: s.rank)


@dataclass(frozen=True)
class Firing:
    """A rule whose condition held: its severity (escalated or not), message and evidence.

    ``reason`` quotes the comparisons that made the condition hold ("condition met: ...").
    """

    rule: Rule
    message: str
    evidence: dict[str, dict[str, float | int | bool | str]]
    severity: Severity | None = None  # None: the rule's own
    reason: str = ""

    @property
    def level(self) -> Severity:
        """The severity this firing carries."""
        return self.severity or self.rule.severity


@dataclass(frozen=True)
class Quiet:
    """A rule that did not fire, and why (condition false, or a fact it needs is unavailable).

    ``applicable`` is false where the rule's ``applies`` condition did not hold: there was
    nothing for it to judge. ``message`` is the rule's ``passed`` text when it applies and its
    condition is false (else the reason).
    """

    rule: Rule
    reason: str
    evaluated: bool
    applicable: bool = True
    message: str = ""
    evidence: dict[str, dict[str, float | int | bool | str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Evaluation:
    """The outcome of running a rule set over one set of facts."""

    fired: tuple[Firing, ...]
    quiet: tuple[Quiet, ...]
