"""What can be bought together: an instance, the storage it can have, the caps on that path, price.

The advisor, ``review`` and the deployment search share these rules, so a recommendation never
pairs storage with an instance that cannot have it, and no capped path is credited with more
bandwidth than its cap.
"""

from kvadvisor.deploy.access import (
    Access,
    Via,
    access,
    accessible,
    deployment,
    host_tier,
    host_tier_name,
    refusals,
    same_deployment,
)
from kvadvisor.deploy.options import StorageOption, storage_options
from kvadvisor.deploy.plan import TierReach, tier_reach
from kvadvisor.deploy.price import HOURS_PER_MONTH, Cost, instance_cost, tier_cost
from kvadvisor.deploy.reach import Reach, nic_bytes_per_s, reach

__all__ = [
    "HOURS_PER_MONTH",
    "Access",
    "Cost",
    "Reach",
    "StorageOption",
    "TierReach",
    "Via",
    "access",
    "accessible",
    "deployment",
    "host_tier",
    "host_tier_name",
    "instance_cost",
    "nic_bytes_per_s",
    "reach",
    "refusals",
    "same_deployment",
    "storage_options",
    "tier_cost",
    "tier_reach",
]
