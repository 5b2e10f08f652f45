"""The recommendation read off a verdict, and the advisor's options.

``advise`` takes the deployment verdicts as given (a fixed verdict here, built in code) and
fills each stage's recommendation and the configuration facts the rules see from it: the
figures must be the verdict's, untouched.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from report_fixtures import verdict_set

from kvadvisor.advice.advisor import advise, parse_instance_choice, parse_providers
from kvadvisor.advice.inputs import load_advisor_inputs
from kvadvisor.advice.verdicts import _tier_choice
from kvadvisor.errors import ConfigError
from kvadvisor.facts.registry import collect
from kvadvisor.plan.loader import storage_capability
from kvadvisor.plan.model import TierPlan
from kvadvisor.results.replay import ReplayTierDemand, WindowRate
from kvadvisor.results.verdict import Rate as VRate
from kvadvisor.results.verdict import TierChoice, VerdictSet
from kvadvisor.vocab import Stage, TierRole

INPUTS = load_advisor_inputs()


IO_SIZE_BYTES = 256 * 327_680  # LMCache's 256-token chunk of Llama-3.1-70B KV


def _advice(verdicts: VerdictSet | None):  # type: ignore[no-untyped-def]
    workload = collect(
        [
            ("model_weights_gib", 131.0),
            ("kv_bytes_per_token", 327_680),
            ("io_size_bytes", IO_SIZE_BYTES),
        ]
    )
    return advise(workload, None, INPUTS.storage, INPUTS.instances, INPUTS.rules, verdicts)


def _with_tiers(vs: VerdictSet, *tiers: TierChoice) -> VerdictSet:
    """The fixture's chosen verdict with its serving stage's tiers replaced."""
    chosen = vs.verdicts[0]
    stage = replace(chosen.stages[0], tiers=tiers)
    return replace(vs, verdicts=(replace(chosen, stages=(stage,)), *vs.verdicts[1:]))


def test_an_aggregated_verdict_fills_both_stages() -> None:
    """One serving stage: prefill and decode name it; only prefill holds the tiers."""
    vs = verdict_set()
    advice = _advice(vs)
    rec = advice.recommendation
    pre, dec = rec.prefill, rec.decode
    assert (pre.instance, pre.instance_count, pre.tp, pre.replicas_per_instance) == (
        "p5en.48xlarge",
        3,
        2,
        4,
    )
    assert (dec.instance, dec.instance_count, dec.topology) == ("p5en.48xlarge", 3, "aggregated")
    assert pre.storage == "aws-ebs-gp3" and dec.storage is None
    assert [t.role for t in pre.tiers] == [TierRole.HOST_POOL, TierRole.CAPACITY]
    assert pre.tiers[1].capacity_gib == pytest.approx(4 * 1024)
    # The replayed utilization of the capacity tier, as the verdict states it.
    assert (pre.utilization.mean, pre.utilization.p99, pre.utilization.peak) == (0.12, 0.48, 0.6)
    assert pre.required.write_bytes_per_s == 4.0e9 and pre.required.read_bytes_per_s == 4.0e9
    assert dec.required.write_bytes_per_s is None and dec.required.read_bytes_per_s is None
    facts = advice.facts
    assert facts["prefill_instance_count"].value == 3
    assert facts["prefill_storage_write_utilization_p99"].value == 0.48
    assert facts["host_kv_pool_gib"].value == pytest.approx(0.8 * 2048)
    assert facts["gpu_kv_pool_gib"].value == pytest.approx(0.9 * 8 * 141 - 131)
    assert not any(name.startswith("decode_storage") for name in facts)  # decode buys none
    assert "shared_storage_spec" not in facts
    assert rec.verdict is vs


def test_the_read_side_facts_are_the_tier_cached_kv_is_loaded_from() -> None:
    """Loads of prefix hits run on the serving stage; the lowest tier they read is judged.

    The fixture's capacity tier: 4 gp3 volumes per node, each 80,000 read IOPS (catalog
    aws-ebs-gp3), 320,000 per node under p5en.48xlarge's 400,000-IOPS disk cap; replayed load
    demand 1.68e8 B/s mean and 1.2e9 B/s at p99 per node (an instance-scope tier: per node).
    """
    facts = _advice(verdict_set()).facts
    assert facts["load_tier_storage"].value == "aws-ebs-gp3"
    assert facts["load_tier_read_iops"].value == 4 * 80_000
    assert facts["load_read_bytes_per_s_mean"].value == 1.68e8
    assert facts["load_read_bytes_per_s_p99"].value == 1.2e9
    assert facts["load_read_iops_p99"].value == pytest.approx(1.2e9 / IO_SIZE_BYTES)
    # gp3 publishes neither a read latency nor a GPUDirect path: absent, not guessed.
    assert "load_tier_read_latency_us" not in facts and "load_tier_gds" not in facts


def test_a_pool_is_shared_by_the_loading_nodes() -> None:
    """A pooled tier's demand and IOPS are the pool's: each of the 3 nodes gets its share.

    Object storage publishes a 100 ms latency (catalog latency_us: 100000), no IOPS, no GDS.
    """
    vs = verdict_set()
    host, cap = vs.verdicts[0].stages[0].tiers
    pool = replace(cap, storage="object-storage", category="object", scope="pooled", devices=1)
    facts = _advice(_with_tiers(vs, host, pool)).facts
    assert facts["load_tier_storage"].value == "object-storage"
    assert facts["load_read_bytes_per_s_p99"].value == pytest.approx(1.2e9 / 3)
    assert facts["load_read_bytes_per_s_mean"].value == pytest.approx(1.68e8 / 3)
    assert facts["load_tier_read_latency_us"].value == 100_000
    assert "load_tier_read_iops" not in facts
    advice = _advice(_with_tiers(vs, host, pool))
    assert "ST06" in {f.code for f in advice.findings}  # a 100 ms tier on the load path


def test_host_memory_is_the_load_tier_when_the_tier_below_is_not_read() -> None:
    """No load reads the capacity tier: host memory is the tier loads read, named by its entry."""
    vs = verdict_set()
    host, cap = vs.verdicts[0].stages[0].tiers
    host = replace(host, read_demand=VRate(5.0e8, 3.0e9, 4.0e9))
    cap = replace(cap, read_demand=VRate(0.0, 0.0, 0.0))
    facts = _advice(_with_tiers(vs, host, cap)).facts
    assert facts["load_tier_storage"].value == "host-dram-ddr5-spr"  # p5en's host_memory_tier
    assert facts["load_read_bytes_per_s_p99"].value == 3.0e9
    # Host memory has no IOPS, latency or GDS figure: the read-side rules are not evaluated.
    for name in ("load_tier_read_iops", "load_tier_read_latency_us", "load_tier_gds"):
        assert name not in facts
    no_reads = _advice(_with_tiers(vs, replace(host, read_demand=None), cap)).facts
    assert not any(name.startswith("load_") for name in no_reads)


def test_the_verdict_tier_carries_the_replayed_load_demand() -> None:
    """TierChoice.read_demand is the replay's loads asked of the tier, not what it delivered."""
    demand = ReplayTierDemand(
        name="capacity",
        stage=Stage.SERVING,
        kind="block",
        scope="instance",
        devices=1,
        capacity_bytes=1e12,
        read_capability_bytes_per_s=2e9,
        write_capability_bytes_per_s=2e9,
        hit_ratio=0.1,
        read_bytes_per_s=WindowRate(1e8, 2e9, 2e9),
        write_bytes_per_s=WindowRate(1e8, 1e9, 1e9),
        read_demand_bytes_per_s=WindowRate(1e8, 5e9, 7e9),
        write_demand_bytes_per_s=WindowRate(1e8, 1e9, 1e9),
        read_iops=WindowRate(1.0, 24.0, 24.0),
        read_utilization=WindowRate(0.05, 1.0, 1.0),
        write_utilization=WindowRate(0.05, 0.5, 0.5),
        utilization=WindowRate(0.05, 1.0, 1.0),
    )
    gp3 = INPUTS.storage["aws-ebs-gp3"]
    pick = TierPlan("capacity", storage_capability(gp3, 1e12), 1e12, spec=gp3, category="block")
    tier = _tier_choice(pick, demand, Stage.SERVING)
    assert tier.read_demand == VRate(1e8, 5e9, 7e9)
    assert tier.read_p99_bytes_per_s == 2e9  # delivered: the tier's bandwidth bounds it


def test_no_verdict_names_no_instance_and_says_why() -> None:
    """Abstaining verdicts: no instance, the reason in the notes; rules see the workload only."""
    vs = verdict_set()
    abstaining = VerdictSet(vs.slo, vs.verdicts[1:], "onprem", "--provider onprem")
    rec = _advice(abstaining).recommendation
    assert rec.prefill.instance is None and rec.decode.instance is None
    assert "fits no instance" in rec.prefill.notes[0]
    assert _advice(None).recommendation.prefill.notes == ("no deployment: the search did not run",)


def test_option_parsing() -> None:
    """--provider and --instance values, with errors that name the choices."""
    assert parse_providers(["aws", "gcp,onprem", "aws"]) == ("aws", "gcp", "onprem")
    with pytest.raises(ConfigError, match="expected one of aws, gcp, azure, alibaba, onprem"):
        parse_providers(["oracle"])
    assert parse_instance_choice(["p5en.48xlarge", "decode=g6.48xlarge"]) == {
        "both": "p5en.48xlarge",
        "decode": "g6.48xlarge",
    }
    with pytest.raises(ConfigError, match="prefill=NAME"):
        parse_instance_choice(["serving=x"])


def test_a_rate_that_is_not_on_demand_is_not_called_on_demand() -> None:
    """A4's only public rate is DWS calendar mode (ZP2): its cost says so, unconfirmed.

    The verdict's price basis is this cost's (advice/verdicts.py), so a verdict on A4 never
    calls its rate on demand.
    """
    from kvadvisor.deploy import instance_cost

    a4 = instance_cost(INPUTS.instances["a4-highgpu-8g"])
    assert a4.usd_per_hour == 90.22 and a4.unconfirmed
    assert a4.basis.startswith("$90.22/h (us-central1, 2026-09-27): not an on-demand rate")
    assert "DWS calendar-mode" in a4.basis
