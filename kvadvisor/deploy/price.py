"""What a tier or an instance costs per hour, from the catalog's prices (None where not published).

Cloud storage is priced per GB- or GiB-month of capacity, plus provisioned IOPS and throughput
above what is included (EBS gp3); AWS bills a month as 730 hours, and that convention is used
for every per-month price here. A built-in drive costs nothing beyond its instance. A drive you
buy has a street price (capital, not hourly): it is returned apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.units import (
    BYTES_PER_GB,
    BYTES_PER_GIB,
    BYTES_PER_MIB,
    Unit,
    format_value,
)
from kvadvisor.units.format import count, usd
from kvadvisor.units.format import price as priced

# AWS's pricing convention (its calculator and price pages count 730 hours in a month).
HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class Cost:
    """A price per hour (and a one-off purchase for bought drives), with where it comes from."""

    usd_per_hour: float | None
    capex_usd: float | None
    basis: str
    unconfirmed: bool = False
    kind: str = "on_demand"  # the rate's kind (catalog PRICE_KINDS)


def tier_cost(
    spec: StorageSpec,
    capacity_gib: float | None,
    devices: int = 1,
    iops: float | None = None,
    bytes_per_s: float | None = None,
) -> Cost:
    """What ``devices`` of ``spec`` holding ``capacity_gib`` in all cost.

    ``iops`` and ``bytes_per_s`` are what is provisioned per volume where the option charges
    for them above an included amount.
    """
    price = spec.price
    if spec.built_in:
        return Cost(0.0, None, "included in the instance price")
    if price is None or not price.known:
        why = price.note if price is not None and price.note else "no price in the catalog"
        return Cost(None, None, why)
    hourly = 0.0
    parts: list[str] = []
    if price.usd_per_hour is not None:
        hourly += price.usd_per_hour * max(1, devices)
        parts.append(f"{priced(price.usd_per_hour, 'h')} x {max(1, devices)}")
    if capacity_gib is not None:
        # Capacity as the count of units the price bills (GB or GiB), so the sum can be checked.
        gb = capacity_gib * BYTES_PER_GIB / BYTES_PER_GB
        if price.usd_per_gb_month is not None:
            hourly += price.usd_per_gb_month * gb / HOURS_PER_MONTH
            parts.append(f"{count(gb)} GB x {priced(price.usd_per_gb_month, 'GB-month')}")
        if price.usd_per_gib_month is not None:
            hourly += price.usd_per_gib_month * capacity_gib / HOURS_PER_MONTH
            each = priced(price.usd_per_gib_month, "GiB-month")
            parts.append(f"{count(capacity_gib)} GiB x {each}")
        if price.usd_per_gib_hour is not None:
            hourly += price.usd_per_gib_hour * capacity_gib
            each = priced(price.usd_per_gib_hour, "GiB-hour")
            parts.append(f"{count(capacity_gib)} GiB x {each}")
    elif any(
        getattr(price, k) is not None
        for k in ("usd_per_gb_month", "usd_per_gib_month", "usd_per_gib_hour")
    ):
        return Cost(None, None, "priced by capacity: size unknown", price.unconfirmed)
    n = max(1, devices)
    if iops is not None and price.usd_per_provisioned_iops_month is not None:
        extra = max(0.0, iops - (price.included_iops or 0.0)) * n
        hourly += extra * price.usd_per_provisioned_iops_month / HOURS_PER_MONTH
        parts.append(f"{format_value(extra, Unit.IOPS)} provisioned")
    if bytes_per_s is not None and price.usd_per_provisioned_mibps_month is not None:
        mibps = bytes_per_s / BYTES_PER_MIB
        extra = max(0.0, mibps - (price.included_mibps or 0.0)) * n
        hourly += extra * price.usd_per_provisioned_mibps_month / HOURS_PER_MONTH
        parts.append(f"{count(extra)} MiB/s provisioned")  # billed per MiB/s
    capex = None if price.usd_each is None else price.usd_each * n
    if capex is not None:
        parts.append(f"{n} x {usd(price.usd_each)} each (bought)")
    where = ", ".join(p for p in (price.region, price.as_of) if p)
    basis = "; ".join(parts) + (f" ({where})" if where else "")
    has_hourly = any(
        getattr(price, k) is not None
        for k in ("usd_per_hour", "usd_per_gb_month", "usd_per_gib_month", "usd_per_gib_hour")
    )
    return Cost(hourly if has_hourly else None, capex, basis, price.unconfirmed)


def instance_cost(instance: InstanceSpec) -> Cost:
    """The instance's on-demand price per hour (None where not published or not offered)."""
    price = instance.price
    if price is None or price.usd_per_hour is None:
        why = price.note if price is not None and price.note else "no price in the catalog"
        return Cost(None, None, why)
    where = ", ".join(p for p in (price.region, price.as_of) if p)
    # A note qualifies the rate (DWS calendar mode, approximate, not on demand in general):
    # it travels with the figure instead of an "on demand" the catalog does not claim.
    basis = priced(price.usd_per_hour, "h") + ("" if price.note else " on demand")
    basis += (f" ({where})" if where else "") + (f": {price.note}" if price.note else "")
    return Cost(price.usd_per_hour, None, basis, price.unconfirmed, price.kind)
