"""The review model: a deployment plan replayed against a trace, and every check run on it.

Renderers of `kvadvisor review` (Markdown, text, JUnit) and the HTML report's plan section read
this module only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvadvisor.results.common import IoRate, Meta, TraceSummary, Utilization
from kvadvisor.vocab import CheckStatus, Severity, Stage


@dataclass(frozen=True)
class TierReview:
    """One KV tier of a plan replayed against the trace.

    Hit ratios are shares of all prompt tokens served from this tier (not from a faster one).
    Demand is per instance for node-local tiers and for the whole pool for shared ones, after
    the plan's traffic scale; capability is the tier's bandwidth times its devices (and the
    instance's disk-bandwidth cap where it applies).
    """

    stage: Stage
    tier: str
    kind: str
    shared: bool
    capacity_bytes: float | None
    capacity_tokens: float | None
    hit_ratio_all: float | None
    hit_ratio_steady: float | None
    cumulative_hit_ratio_steady: float | None
    write: IoRate
    read: IoRate | None
    write_capability_bytes_per_s: float | None
    read_capability_bytes_per_s: float | None
    write_utilization: Utilization
    read_utilization: Utilization
    break_even_tokens: float | None = None
    below_break_even_share: float | None = None


@dataclass(frozen=True)
class StageReview:
    """One stage of a plan: instances, its tiers, and its busiest tier's utilization."""

    stage: Stage
    instance: str | None
    count: int
    tiers: tuple[TierReview, ...]
    utilization: Utilization
    load_time_p99_s: float | None = None


@dataclass(frozen=True)
class ReviewCheck:
    """One check run on a plan: ``status`` is pass, fail or skip; a failed check is a finding.

    ``source`` names where the check comes from (an engine's documentation or issue tracker,
    or DESIGN.md's definitions), so a user can judge it.
    """

    code: str
    name: str
    stage: Stage
    severity: Severity
    status: CheckStatus
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    subject: str = ""

    def __post_init__(self) -> None:
        """A stage, severity or status given by its spelling becomes its enum (or fails here)."""
        object.__setattr__(self, "stage", Stage(self.stage))
        object.__setattr__(self, "severity", Severity(self.severity))
        object.__setattr__(self, "status", CheckStatus(self.status))

    @property
    def test_id(self) -> str:
        """A stable, unique identifier within a plan (JUnit test case name)."""
        parts = [self.code, self.stage]
        if self.subject:
            parts.append(self.subject)
        return ".".join(parts)


@dataclass(frozen=True)
class PlanReview:
    """A plan replayed against a trace: per-stage and per-tier numbers and every check."""

    name: str
    path: str
    traffic_scale: float
    kv_bytes_per_token: int | None
    stages: tuple[StageReview, ...]
    checks: tuple[ReviewCheck, ...]
    notes: tuple[str, ...] = ()

    @property
    def findings(self) -> tuple[ReviewCheck, ...]:
        """Checks that failed, most severe first."""
        failed = [c for c in self.checks if c.status is CheckStatus.FAIL]
        return tuple(sorted(failed, key=lambda c: -c.severity.rank))

    def worst_severity(self) -> Severity | None:
        """The most severe failed check's severity, or None when nothing failed."""
        return self.findings[0].severity if self.findings else None


@dataclass(frozen=True)
class ReviewReport:
    """One or more plans reviewed against one trace (renderers take this and nothing else)."""

    meta: Meta
    trace: TraceSummary
    plans: tuple[PlanReview, ...]
    window_s: float
    warmup_fraction: float
    notes: tuple[str, ...] = ()

    def fails(self, fail_on: Severity | str) -> bool:
        """Whether any plan has a finding at or above ``fail_on`` (warning or error)."""
        floor = Severity(fail_on).rank
        return any(c.severity.rank >= floor for p in self.plans for c in p.findings)
