"""Rule data: facts, conditions, rules and evaluation results (frozen dataclasses, no behaviour)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Union

from kvadvisor.results.vocab import Severity, Stage
from kvadvisor.units import Unit


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
}


@dataclass(frozen=True)
class FactSpec:
    """A named number the analysis may produce: what rules and docs may refer to."""

    name: str
    unit: Unit
    description: str
    source: str = ""  # which part of the analysis produces it (for docs/facts.md)


@dataclass(frozen=True)
class FactValue:
    """One produced fact: its value (number or bool) and unit."""

    name: str
    value: float | int | bool
    unit: Unit


@dataclass(frozen=True)
class Compare:
    """``fact op value`` or ``fact op factor × ref`` (ref is another fact)."""

    fact: str
    op: Op
    value: float | bool | None = None
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
class Rule:
    """One rule, as loaded from one YAML file."""

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

    @property
    def facts(self) -> tuple[str, ...]:
        """Every fact the condition reads."""
        return self.when.facts


@dataclass(frozen=True)
class Firing:
    """A rule whose condition held: the formatted message, the facts behind it, and why.

    ``reason`` quotes the comparisons that made the condition hold ("condition met: ...").
    """

    rule: Rule
    message: str
    evidence: dict[str, dict[str, float | int | bool | str]]
    reason: str = ""


@dataclass(frozen=True)
class Quiet:
    """A rule that did not fire, and why (condition false, or a fact it needs is unavailable)."""

    rule: Rule
    reason: str
    evaluated: bool


@dataclass(frozen=True)
class Evaluation:
    """The outcome of running a rule set over one set of facts."""

    fired: tuple[Firing, ...]
    quiet: tuple[Quiet, ...]
