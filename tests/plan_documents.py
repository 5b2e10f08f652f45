"""A plan mapping (a verdict's, or one a test writes) as a Plan, read as `review` reads a plan."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from kvadvisor.plan.loader import PlanCatalogs, check_plan
from kvadvisor.plan.model import Plan


@lru_cache(maxsize=1)
def _catalogs() -> PlanCatalogs:
    return PlanCatalogs.packaged()


def plan_of(doc: Mapping[str, Any], catalogs: PlanCatalogs | None = None) -> Plan:
    """The Plan of a plan mapping, through the plan loader (raises ConfigError or PlanError)."""
    return check_plan(str(doc.get("name", "candidate")), dict(doc), catalogs or _catalogs())
