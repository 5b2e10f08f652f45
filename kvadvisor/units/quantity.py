"""A quantity: a value and the unit it is in, so every place that shows it shows it the same way."""

from __future__ import annotations

from dataclasses import dataclass

from kvadvisor.units.format import format_value
from kvadvisor.units.unit import Unit


@dataclass(frozen=True)
class Quantity:
    """A value with its unit; None means not measured. ``str()`` is the one formatting."""

    value: float | int | bool | None
    unit: Unit

    def __str__(self) -> str:
        """The value as every report shows it (kvadvisor.units.format)."""
        return format_value(self.value, self.unit)
