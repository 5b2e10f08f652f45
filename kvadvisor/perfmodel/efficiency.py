"""Efficiency coefficients of the step-time model: the catalog's, per GPU (re-exported here)."""

from __future__ import annotations

from kvadvisor.catalog.efficiency import Efficiency, efficiency_for


def default_efficiency(gpu_name: str) -> Efficiency:
    """The packaged coefficients for a packaged GPU: its own entry or a borrowed one."""
    return efficiency_for(gpu_name)[0]


__all__ = ["Efficiency", "default_efficiency", "efficiency_for"]
