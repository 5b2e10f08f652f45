"""A plan mapping (a verdict's, or one a test writes) as the replay's deployment, via the loader."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from kvadvisor.fleet import Deployment
from kvadvisor.fleet.fromplan import deployment_from_plan
from kvadvisor.plan.loader import PlanCatalogs, check_plan


@lru_cache(maxsize=1)
def _catalogs() -> PlanCatalogs:
    return PlanCatalogs.packaged()


def deployment_of(
    doc: Mapping[str, Any], catalogs: PlanCatalogs | None = None
) -> tuple[Deployment, tuple[str, ...]]:
    """The replay deployment of a plan mapping, read as `review` reads a plan file.

    Raises ConfigError or PlanError.
    """
    plan = check_plan(str(doc.get("name", "candidate")), dict(doc), catalogs or _catalogs())
    return deployment_from_plan(plan)
