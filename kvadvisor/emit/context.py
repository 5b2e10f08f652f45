"""What every writer needs: the report, the plan read off it and its facts, the command line."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvadvisor.emit.deployment import (
    EmitFacts,
    StageFacts,
    describe,
    role_words,
    tier_label,
)
from kvadvisor.emit.sizing import Share, SizingScope, reuse_at, share
from kvadvisor.emit.text import header
from kvadvisor.plan.model import Plan, StagePlan, TierPlan
from kvadvisor.results import AdviceReport
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_GIB, Unit, format_value
from kvadvisor.vocab import Topology

# Engines read sizes in their own unit; a size is rounded down so ranks x size stays within
# the capacity the advisor recommends for the instance.
GIB_STEP = 0.1


def floor_gib(nbytes: float) -> float:
    """Bytes as GiB, rounded down to 0.1 GiB."""
    return math.floor(nbytes / BYTES_PER_GIB / GIB_STEP) * GIB_STEP


def floor_gb(nbytes: float) -> int:
    """Bytes as whole decimal GB, rounded down."""
    return math.floor(nbytes / BYTES_PER_GB)


@dataclass(frozen=True)
class EmitContext:
    """The report, the plan of its recommended deployment with its facts, and the command."""

    report: AdviceReport
    plan: Plan
    facts: EmitFacts
    command: str

    def head(self, what: str, prefix: str = "#") -> list[str]:
        """The header every file starts with."""
        return header(
            self.report, describe(self.plan, self.facts), self.facts, what, self.command, prefix
        )

    @property
    def disaggregated(self) -> bool:
        """Prefill and decode on their own instances, KV moved between them."""
        return self.plan.topology == Topology.DISAGGREGATED

    def stage_facts(self, stage: StagePlan) -> StageFacts:
        """What the advisor knows of ``stage`` that the plan does not state (GPU, pool, fabric)."""
        return self.facts.stage(stage)

    def share(self, stage: StagePlan, tier: TierPlan, scope: SizingScope) -> Share:
        """``tier``'s capacity for one ``scope`` unit of ``stage``."""
        return share(self.facts.kv_bytes_per_rank_per_token, stage, tier, scope)

    def tier_reason(self, stage: StagePlan, sh: Share, unit: str) -> str:
        """Why a size: the tier, the split to the engine's unit, and the reuse it buys.

        ``unit`` names the engine's unit and how the engine reads the number, e.g.
        "GiB per worker process (one TP rank)".
        """
        reuse = reuse_at(self.report, sh.stage_tokens)
        held = (
            f"one replica keeps {format_value(sh.tokens_per_replica, Unit.TOKENS)} there, the "
            f"{stage.replicas} replica(s) of the stage {format_value(sh.stage_tokens, Unit.TOKENS)}"
            if sh.tokens_per_replica
            else f"the pool keeps {format_value(sh.stage_tokens, Unit.TOKENS)}"
        )
        return (
            f"{stage.stage} {role_words(sh.tier)} ({tier_label(sh.tier)}): {sh.split_text()} = "
            f"{format_value(sh.bytes, Unit.BYTES)}, {unit}; {held}; {reuse.text(sh.stage_tokens)}"
        )

    @property
    def mean_input_tokens(self) -> float | None:
        """Mean prompt tokens of the trace (None when it has no requests)."""
        t = self.report.trace
        return t.input_tokens_total / t.requests if t.requests else None
