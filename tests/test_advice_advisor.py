"""Advisor tests with figures computed by hand.

Advisor: instance counts, tier sizing for p99, utilization, --storage for both stages,
alternatives and findings, with figures computed by hand.
"""

from __future__ import annotations

import math

import pytest

from kvadvisor.advice.advisor import (
    AdvisorOptions,
    advise,
    fit_tier,
    instance_count,
    parse_instance_choice,
)
from kvadvisor.advice.stages import DECODE, PREFILL
from kvadvisor.catalog.instances import load_instances
from kvadvisor.catalog.storage import load_storage
from kvadvisor.errors import ConfigError
from kvadvisor.facts.registry import FACTS, collect
from kvadvisor.facts.workload import workload_facts
from kvadvisor.results.common import IoRate, TraceSummary
from kvadvisor.results.report import IoDemand, ModelSummary, StageSplit
from kvadvisor.rules import load_rules, workload_rules

STORAGE = load_storage()
INSTANCES = load_instances()
RULES = load_rules([], FACTS)
TRACE = TraceSummary(
    path="t",
    format="mooncake",
    requests=10_000,
    duration_s=1000.0,
    block_tokens=512,
    columns=("arrival_s", "input_tokens", "output_tokens"),
    input_tokens_total=20_000_000,
    output_tokens_total=300_000,
    arrival_rate_per_s=10.0,
)


def workload(write=(1.0e9, 3.0e9, 6.0e9), read=(0.5e9, 1.0e9, 2.0e9)):  # type: ignore[no-untyped-def]
    """Llama-3.1-70B on 8 x H200 replicas, 900 s prefill and 100 s decode per replica.

    The stage split counts GPU-seconds: 900 s x 8 GPUs = 7,200 and 100 s x 8 = 800.
    """
    f = workload_facts(
        TRACE,
        ModelSummary("llama-3.1-70b", 327_680),
        StageSplit("modeled", 7200.0, 800.0, 0.9),
        None,
        IoDemand(IoRate(*write), IoRate(*read), 1.0),
    )
    f.update(
        collect(
            [
                ("split_gpus_per_replica", 8),
                ("split_gpu_bf16_tflops", 989.4),
                ("split_gpu_memory_bandwidth_gbps", 4800.0),
                ("model_weights_gib", 131.0),
            ]
        )
    )
    return f


def test_instance_count_by_hand() -> None:
    """Instance counts from GPU time, by hand.

    7,200 GPU-s (900 replica-s x 8 GPUs) / 1,000 s = 7.2 busy H200s; / 8 per p5e / 0.7 = 1.29
    -> 2.
    On B200 (2,250 TFLOPS): 7.2 x 989.4 / 2,250 = 3.17 -> / 8 / 0.7 = 0.57 -> 1.
    """
    f = workload()
    assert instance_count(PREFILL, INSTANCES["p5e.48xlarge"], f)[0] == 2
    assert instance_count(PREFILL, INSTANCES["p6-b200.48xlarge"], f)[0] == 1
    # Decode: 800 GPU-s / 1,000 s = 0.8 busy GPUs -> 1 instance.
    assert instance_count(DECODE, INSTANCES["p5e.48xlarge"], f)[0] == 1
    count, why = instance_count(PREFILL, INSTANCES["p5e.48xlarge"], {})
    assert count is None and "unknown" in why


def test_essd_sized_for_bandwidth() -> None:
    """200 MB/s p99 at an 80% target needs 250 MB/s: PL1 size (250 - 120) / 0.5 = 260 GiB."""
    fit = fit_tier(
        STORAGE["alibaba-essd-pl1"],
        PREFILL,
        INSTANCES["ecs.gn8v-8x.48xlarge"],
        2.0e8,
        None,
        100.0,
    )
    assert fit.capacity_gib == 260 and fit.devices == 1
    assert fit.write_bytes_per_s == pytest.approx(2.5e8)
    assert fit.feasible
    # Beyond one volume's 350 MB/s ceiling the tier stripes over several volumes.
    big = fit_tier(
        STORAGE["alibaba-essd-pl1"],
        PREFILL,
        INSTANCES["ecs.gn8v-8x.48xlarge"],
        1.0e9,
        None,
        100.0,
    )
    assert big.devices == math.ceil(1.25e9 / 3.5e8)


def test_recommendation_per_stage_by_hand() -> None:
    """The per-stage recommendation on p5e, by hand, with only what a p5e can have.

    2 prefill instances write 1.5 GB/s each at p99; at the 80% target one needs 1.875 GB/s.
    The p5e's own instance store has no published bandwidth (not sizable against demand);
    bought drives cannot be fitted. One gp3 volume gives 2,000 MiB/s = 2,097.2 MB/s (71.5% at
    p99). FSx PERSISTENT_2 125 MB/s/TiB is sized for both instances' 3.75 GB/s: 3,750 / (125 /
    1,024) = 30,720 GiB, in 2,400 GiB steps 31,200 GiB, giving 3,808.6 MB/s shared by two
    nodes = 1,904.3 MB/s each (78.8%): the closest to 80%, so it is the prefill tier.
    """
    advice = advise(
        workload(),
        None,
        STORAGE,
        INSTANCES,
        RULES,
        AdvisorOptions(instance={"both": "p5e.48xlarge"}),
    )
    pre, dec = advice.recommendation.prefill, advice.recommendation.decode
    assert (pre.instance, pre.instance_count, dec.instance_count) == ("p5e.48xlarge", 2, 1)
    assert pre.required.write_bytes_per_s == pytest.approx(1.5e9)
    assert pre.storage == "aws-fsx-lustre-persistent2-125"
    assert pre.tiers[-1].capacity_gib == 31200
    per_node = 31200 * 125 / 1024 * 1e6 / 2
    assert (pre.utilization.mean, pre.utilization.p99, pre.utilization.peak) == pytest.approx(
        (0.5e9 / per_node, 1.5e9 / per_node, 3.0e9 / per_node)
    )
    assert pre.required.derivation and "p99" in pre.required.derivation[0]
    # Alternatives are ranked with reasons, storage and instances both; every storage
    # alternative is something a p5e can have (AWS options or its own drives).
    kinds = {a.kind for a in pre.alternatives}
    assert kinds == {"storage", "instance"}
    assert all(a.reason for a in pre.alternatives)
    storage_alts = [a for a in pre.alternatives if a.kind == "storage"]
    assert [a.rank for a in storage_alts] == list(range(1, 1 + len(storage_alts)))
    assert {STORAGE[a.name].provider for a in storage_alts} == {"aws"}
    gp3 = next(a for a in storage_alts if a.name == "aws-ebs-gp3")
    assert "2.10 GB/s" in gp3.reason and "72%" in gp3.reason
    store = next(a for a in storage_alts if a.name == "aws-instance-store-nvme")
    assert not store.feasible and "not published" in store.reason
    # Decode reads 1.0 GB/s at p99 on one instance: io2 Block Express (500 us, the only
    # option with a published latency under 1 ms) in one volume of 4,194.3 MB/s.
    assert dec.required.read_bytes_per_s == pytest.approx(1.0e9)
    assert dec.storage == "aws-ebs-io2-block-express"
    assert dec.utilization.p99 == pytest.approx(1.0e9 / 4194.3e6)
    # GPU KV pool: 0.9 x 1,128 GiB - 131 GiB weights; host pool 0.8 x 2,048 GiB of the p5e's
    # own (DDR4) host memory.
    facts = advice.facts
    assert facts["gpu_kv_pool_gib"].value == pytest.approx(0.9 * 8 * 141 - 131)
    assert facts["host_kv_pool_gib"].value == pytest.approx(0.8 * 2048)
    assert pre.tiers[0].name == "host-dram-ddr4"
    codes = {f.code for f in advice.findings}
    assert "WL01" in codes  # 90% prefill
    assert "ST03" not in codes  # sized for p99
    # The notes carry the instance's price with its source date, and name what is unconfirmed.
    assert any("$55.04/h" in n for n in pre.notes) is False  # p5e has no on-demand SKU
    assert any("Capacity Blocks only" in n for n in pre.notes)


def test_shared_storage_idle_and_saturated() -> None:
    """--storage for both stages: prefill saturates a gp3 volume while decode idles on it."""
    f = workload(write=(1.6e9, 4.0e9, 6.0e9), read=(1.0e7, 2.0e7, 4.0e7))
    advice = advise(
        f,
        None,
        STORAGE,
        INSTANCES,
        RULES,
        AdvisorOptions(storage="aws-ebs-gp3", instance={"both": "p5e.48xlarge"}),
    )
    rec = advice.recommendation
    assert rec.shared_storage and rec.prefill.storage == rec.decode.storage == "aws-ebs-gp3"
    assert "UT02" in {x.code for x in advice.findings}
    # Prefill: 2 instances, 2.0 GB/s p99 each on one 2,000 MiB/s (2,097.2 MB/s) gp3 volume
    # (95%); decode reads 10 MB/s on average on its one instance (under 1%).
    assert rec.prefill.tiers[-1].devices == 1
    assert rec.prefill.utilization.p99 == pytest.approx(2.0e9 / 2097.2e6)
    assert rec.decode.utilization.mean == pytest.approx(1.0e7 / 2097.2e6)


def test_storage_an_instance_cannot_have_is_a_user_error() -> None:
    """--storage with --instance naming a drive the cloud VM cannot take: exit 2, with why."""
    with pytest.raises(ConfigError, match=r"its local NVMe is fixed \(8 x aws-instance-store"):
        advise(
            workload(),
            None,
            STORAGE,
            INSTANCES,
            RULES,
            AdvisorOptions(storage="kioxia-cm6", instance={"both": "p5e.48xlarge"}),
        )
    # Without --instance, only instances that can have the drive are candidates: on-premises.
    advice = advise(
        workload(), None, STORAGE, INSTANCES, RULES, AdvisorOptions(storage="kioxia-cm6")
    )
    assert INSTANCES[advice.recommendation.prefill.instance].provider == "onprem"


def test_instance_ties_broken_by_price_not_name() -> None:
    """Two instances equal on every ranking key are ordered by on-demand price, not by name.

    p5e (no on-demand price) and p5en ($63.296/h) have the same GPU, count and memory; the
    priced one ranks first although 'p5e' sorts before 'p5en'. Swapping prices swaps them.
    """
    from dataclasses import replace

    from kvadvisor.advice.advisor import rank_instances
    from kvadvisor.catalog.storage import Price

    f = workload()
    pair = {k: INSTANCES[k] for k in ("p5e.48xlarge", "p5en.48xlarge")}
    ranked = [i.name for i, _, _ in rank_instances(PREFILL, pair, f)]
    assert ranked == ["p5en.48xlarge", "p5e.48xlarge"]
    cheap = replace(pair["p5e.48xlarge"], price=Price(usd_per_hour=10.0))
    dear = replace(pair["p5en.48xlarge"], price=Price(usd_per_hour=20.0))
    ranked = [
        i.name
        for i, _, _ in rank_instances(PREFILL, {"p5en.48xlarge": dear, "p5e.48xlarge": cheap}, f)
    ]
    assert ranked == ["p5e.48xlarge", "p5en.48xlarge"]
    # Equal prices keep the order given (catalog order), whatever the names.
    same = {"zz": replace(cheap, name="zz"), "aa": replace(cheap, name="aa")}
    assert [i.name for i, _, _ in rank_instances(PREFILL, same, f)] == ["zz", "aa"]


def test_disk_cap_below_demand() -> None:
    """ND H100 v5 caps attached disks at 612 MB/s: Premium SSD v2 cannot carry 1.5 GB/s."""
    advice = advise(
        workload(),
        None,
        STORAGE,
        INSTANCES,
        RULES,
        AdvisorOptions(
            storage="azure-premium-ssd-v2", instance={"both": "Standard_ND96isr_H100_v5"}
        ),
    )
    findings = {f.code: f for f in advice.findings}
    assert "IN01" in findings and findings["IN01"].severity == "error"
    assert "612 MB/s" in findings["IN01"].message
    assert findings["IN01"].candidates  # a catalog query ran for the recommendation
    assert all(STORAGE[c].category != "block" for c in findings["IN01"].candidates)


def test_quiet_rules_say_why() -> None:
    """Rules over facts the workload lacks are listed as not evaluated."""
    advice = advise(collect([("requests_count", 10)]), None, STORAGE, INSTANCES, RULES)
    outcomes = {o.code: o for o in advice.recommendation.rules}
    assert set(outcomes) == {r.code for r in workload_rules(RULES)}
    assert outcomes["CA01"].reason.startswith("not evaluated: fact")


def test_parse_instance_choice() -> None:
    """NAME for both stages, or stage=NAME; anything else is a user error."""
    assert parse_instance_choice(["p5e.48xlarge", "decode=ecs.gn8v-8x.48xlarge"]) == {
        "both": "p5e.48xlarge",
        "decode": "ecs.gn8v-8x.48xlarge",
    }
    with pytest.raises(ConfigError):
        parse_instance_choice(["train=p5"])
    # The message names the bad value and the accepted forms; an empty name is also rejected.
    for bad in ("train=p5", "prefill="):
        with pytest.raises(
            ConfigError,
            match=rf"--instance '{bad}': expected NAME, prefill=NAME "
            "or decode=NAME",
        ):
            parse_instance_choice([bad])


def test_modeled_gpu_picks_family_and_smallest_fitting_size() -> None:
    """A modeled GPU picks its family and the smallest fitting size.

    With H20 chosen and 131 GiB of weights (x 1.5 = 196.5 GiB needed), the 1-GPU gn8v
    (96 GiB) does not fit and the 4-GPU gn8v (384 GiB) is the smallest H20 size that does.
    """
    advice = advise(
        workload(), None, STORAGE, INSTANCES, RULES, AdvisorOptions(preferred_gpu="h20")
    )
    assert advice.recommendation.prefill.instance == "ecs.gn8v-4x.8xlarge"
    ranked = [a for a in advice.recommendation.prefill.alternatives if a.kind == "instance"]
    assert ranked[0].name == "ecs.gn8v-4x.8xlarge" and "384 GiB GPU memory > 1.5 x 131" in (
        ranked[0].reason
    )


def test_announced_parts_are_never_recommended() -> None:
    """Prototypes and announced drives rank after every shipping option, in both stages.

    The Kioxia XL-NAND part has the lowest read latency in the catalog (27 us), so without the
    rule it would top the decode ranking; it must still come after every shipping drive.
    """
    from kvadvisor.advice.advisor import rank_tiers

    announced = {n for n, s in STORAGE.items() if s.announced_only}
    assert {"kioxia-gen5-xl-nand", "kioxia-cm7-prototype"} <= announced
    for stage in (PREFILL, DECODE):
        ranked = rank_tiers(
            stage, INSTANCES["dgx-h200"], STORAGE, 2.0e9, 1.0e4, 1000.0, 1000.0, instances=1
        )
        flags = [f.spec.announced_only for f in ranked]
        assert flags == sorted(flags), f"{stage}: an announced part outranks a shipping one"
        assert not flags[0]


def test_decode_runs_where_prefill_runs() -> None:
    """Unconstrained, decode is chosen from prefill's deployment (one provider, or your own).

    The KV cache moves from prefill to decode; a decode instance on another cloud would be
    best alone but cannot receive it. A user who pins the two stages apart gets a note.
    """
    advice = advise(workload(), None, STORAGE, INSTANCES, RULES)
    pre, dec = advice.recommendation.prefill, advice.recommendation.decode
    assert INSTANCES[pre.instance].provider == INSTANCES[dec.instance].provider
    pinned = advise(
        workload(),
        None,
        STORAGE,
        INSTANCES,
        RULES,
        AdvisorOptions(instance={"prefill": "p5e.48xlarge", "decode": "a4-highgpu-8g"}),
    )
    assert pinned.recommendation.decode.instance == "a4-highgpu-8g"
    assert any("two deployments do not share" in n for n in pinned.recommendation.decode.notes)


def test_non_aws_prices_are_ranked_and_described_as_the_catalog_knows_them() -> None:
    """Every 8 x H200 instance ranks by its price; the reason never passes a doubt off as known.

    p5en's $63.296/h is AWS's price list (WP): "on demand", no doubt. Azure ND H200 v5
    ($84.80/h) and GCP a3-ultragpu-8g ($84.8069/h) are secondary copies: they rank by those
    figures, in that order, and say "(unconfirmed)" with the catalog's note (A3 Ultra is not on
    demand in general, so "on demand" is not claimed). p5e (Capacity Blocks only) and the DGX
    (bought) have no hourly price: they rank last, in catalog order, saying why.
    """
    from kvadvisor.advice.advisor import rank_instances

    names = (
        "dgx-h200",
        "a3-ultragpu-8g",
        "p5e.48xlarge",
        "Standard_ND96isr_H200_v5",
        "p5en.48xlarge",
    )
    ranked = rank_instances(PREFILL, {k: INSTANCES[k] for k in names}, workload())
    assert [i.name for i, _, _ in ranked] == [
        "p5en.48xlarge",
        "Standard_ND96isr_H200_v5",
        "a3-ultragpu-8g",
        "dgx-h200",
        "p5e.48xlarge",
    ]
    why = {i.name: reason for i, _, reason in ranked}
    assert "$63.296/h on demand (us-east-1, 2026-07-28)" in why["p5en.48xlarge"]
    assert "unconfirmed" not in why["p5en.48xlarge"]
    for name in ("Standard_ND96isr_H200_v5", "a3-ultragpu-8g"):
        assert "(unconfirmed); " in why[name] and "secondary" in why[name]
    assert "on demand" not in why["a3-ultragpu-8g"].split("not generally available")[0]
    assert "Capacity Blocks only" in why["p5e.48xlarge"]
    assert "bought, not rented" in why["dgx-h200"]


def test_a_rate_that_is_not_on_demand_is_not_called_on_demand() -> None:
    """A4's only public rate is DWS calendar mode (ZP2): its cost says so, unconfirmed."""
    from kvadvisor.deploy import instance_cost

    a4 = instance_cost(INSTANCES["a4-highgpu-8g"])
    assert a4.usd_per_hour == 90.22 and a4.unconfirmed
    assert a4.basis.startswith("$90.22/h (us-central1, 2026-09-27): not an on-demand rate")
    assert "DWS calendar-mode" in a4.basis
