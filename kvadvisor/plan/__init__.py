"""Deployment plans: plan.yaml read, checked and turned into a frozen Plan."""

from kvadvisor.plan.loader import (
    PlanCatalogs,
    PlanError,
    check_plan,
    engine_settings_table,
    load_plan,
)
from kvadvisor.plan.model import Plan, StagePlan, StorageCapability, TierPlan

__all__ = [
    "Plan",
    "PlanCatalogs",
    "PlanError",
    "StagePlan",
    "StorageCapability",
    "TierPlan",
    "check_plan",
    "engine_settings_table",
    "load_plan",
]
