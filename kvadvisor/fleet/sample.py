"""A stated sample of a fleet: the traffic round robin sends to k of its replicas, on k replicas.

With round-robin routing and tiers private to a replica or an instance, replicas (or
instances) share nothing, so replaying k of them with exactly the requests routed to them
gives those replicas' figures exactly; the fleet's are estimated from the sample (per-request
distributions and per-device demand as they are, GPU time totals x R / k). A pooled tier or a
load-aware router joins every replica, so the sample would not be exact and is refused.
benchmarks/bench_replay.py measures the sample's error against a full run.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kvadvisor.errors import ConfigError
from kvadvisor.fleet.hits import TraceArrays
from kvadvisor.fleet.resolved import ResolvedFleet, RouterPolicy, Scope
from kvadvisor.vocab import Topology


def sample_replicas(
    arrays: TraceArrays, deployment: ResolvedFleet, replicas: int
) -> tuple[TraceArrays, ResolvedFleet, float]:
    """The sampled trace, the sampled deployment, and the scale of fleet totals (R / k)."""
    if deployment.topology is not Topology.AGGREGATED:
        raise ConfigError("a replica sample needs an aggregated deployment")
    stage = deployment.stages[0]
    total, rpi = stage.replicas, stage.replicas_per_instance
    if stage.router is not RouterPolicy.ROUND_ROBIN:
        raise ConfigError("a replica sample needs round-robin routing (others look at load)")
    if any(t.scope is Scope.POOLED for t in stage.tiers):
        raise ConfigError("a replica sample cannot split a pooled tier")
    if not 1 <= replicas <= total or replicas % rpi:
        raise ConfigError(f"sample whole instances: a multiple of {rpi} replicas, at most {total}")
    rows = np.flatnonzero(np.arange(arrays.requests) % total < replicas)
    sampled = arrays.take(rows)
    small = replace(deployment, stages=(replace(stage, instances=replicas // rpi),))
    return sampled, small, total / replicas
