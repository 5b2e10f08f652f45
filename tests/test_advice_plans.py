"""The search's Plans: the replayed form is the very plan its written plan loads to."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from plan_documents import plan_of

from kvadvisor.advice.plans import PlanBasis, as_written, fleet_plan, stage_plan
from kvadvisor.advice.space import shapes
from kvadvisor.advice.tiers import capacity_options, capacity_pick, host_tier
from kvadvisor.catalog.instances import load_instances
from kvadvisor.catalog.models import get_model
from kvadvisor.catalog.storage import load_storage
from kvadvisor.fleet.fromplan import resolve_plan
from kvadvisor.plan.loader import PlanCatalogs
from kvadvisor.plan.model import Plan
from kvadvisor.plan.writer import plan_mapping
from kvadvisor.vocab import Stage, Topology

INSTANCES = load_instances()
STORAGE = load_storage()
MODEL = get_model("llama-3.1-8b")
SLO = {"ttft_p99_s": 2.0, "tpot_p99_s": 0.05, "ttft_p90_s": 1.0}
BASIS = PlanBasis(
    name="candidate",
    model=MODEL.name,
    attention=MODEL.attention,
    kv_dtype="bf16",
    weight_dtype="bf16",
    chunk_tokens=256,
    description="a candidate of the test",
    slo=SLO,
)


def _same(got: object, want: object, where: str) -> None:
    """Equal field by field, arrays element by element."""
    if isinstance(want, np.ndarray):
        np.testing.assert_array_equal(got, want, err_msg=where)  # type: ignore[arg-type]
    elif dataclasses.is_dataclass(want) and not isinstance(want, type):
        for f in dataclasses.fields(want):
            _same(getattr(got, f.name), getattr(want, f.name), f"{where}.{f.name}")
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{where}[{i}]")
    else:
        assert got == want, where


def _plan(instance: str, topology: Topology, count: int) -> Plan:
    shape = shapes(INSTANCES[instance], MODEL, "bf16", "bf16", 20_000)[0][0]
    host = host_tier(shape, STORAGE)
    assert host is not None
    fits, _ = capacity_options(shape, STORAGE, 500e9, 1e9, count)
    tiers = (host, capacity_pick(fits[0], count))
    if topology is Topology.AGGREGATED:
        stages = (stage_plan(BASIS, Stage.SERVING, shape, count, tiers),)
    else:
        stages = (
            stage_plan(BASIS, Stage.PREFILL, shape, count, tiers),
            stage_plan(BASIS, Stage.DECODE, shape, count, router="least_outstanding"),
        )
    return fleet_plan(BASIS, "any", topology, stages)


@pytest.mark.parametrize(
    ("instance", "topology", "count"),
    [
        ("g2-standard-96", Topology.AGGREGATED, 3),
        ("p5en.48xlarge", Topology.DISAGGREGATED, 2),
    ],
)
def test_the_replayed_plan_is_the_one_its_written_plan_loads_to(
    instance: str, topology: Topology, count: int
) -> None:
    """The deployment of the Plan as replayed equals the deployment of its plan read back.

    Host memory inline, a catalog capacity tier sized per instance, the scheduler, router and
    write policy: nothing is lost or rounded into a different replay by writing the plan.
    """
    catalogs = PlanCatalogs.packaged()
    plan = as_written(_plan(instance, topology, count), SLO)
    built, built_notes = resolve_plan(plan)
    doc = plan_mapping(plan)
    read, read_notes = resolve_plan(plan_of(doc, catalogs))
    _same(built, read, "deployment")
    assert built_notes == read_notes
    # The p99 targets are the plan's; a p90 target is the search's own and not written.
    assert doc["slo"] == {"ttft_p99": "2 s", "tpot_p99": "0.05 s"}
    assert [t["name"] for t in doc["stages"][plan.stages[0].stage.value]["tiers"]] == [
        "host",
        "capacity",
    ]
