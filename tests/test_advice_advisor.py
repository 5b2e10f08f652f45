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
from kvadvisor.catalog.instances import load_instances
from kvadvisor.catalog.storage import load_storage
from kvadvisor.errors import ConfigError
from kvadvisor.facts.registry import FACTS, collect
from kvadvisor.facts.workload import workload_facts
from kvadvisor.results.common import IoRate, TraceSummary
from kvadvisor.results.report import IoDemand, ModelSummary, StageSplit
from kvadvisor.rules import load_rules

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
    """Llama-3.1-70B on 8 x H200 replicas, 900 s prefill and 100 s decode per replica."""
    f = workload_facts(
        TRACE,
        ModelSummary("llama-3.1-70b", 327_680),
        StageSplit("modeled", 900.0, 100.0, 0.9),
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

    900 replica-s x 8 GPUs / 1,000 s = 7.2 busy H200s; / 8 per p5e / 0.7 = 1.29 -> 2.
    On B200 (2,250 TFLOPS): 7.2 x 989.4 / 2,250 = 3.17 -> / 8 / 0.7 = 0.57 -> 1.
    """
    f = workload()
    assert instance_count("prefill", INSTANCES["p5e.48xlarge"], f)[0] == 2
    assert instance_count("prefill", INSTANCES["p6-b200.48xlarge"], f)[0] == 1
    # Decode: 100 x 8 / 1,000 = 0.8 busy GPUs -> 1 instance.
    assert instance_count("decode", INSTANCES["p5e.48xlarge"], f)[0] == 1
    count, why = instance_count("prefill", INSTANCES["p5e.48xlarge"], {})
    assert count is None and "unknown" in why


def test_essd_sized_for_bandwidth() -> None:
    """200 MB/s p99 at an 80% target needs 250 MB/s: PL1 size (250 - 120) / 0.5 = 260 GiB."""
    fit = fit_tier(
        STORAGE["alibaba-essd-pl1"],
        "prefill",
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
        "prefill",
        INSTANCES["ecs.gn8v-8x.48xlarge"],
        1.0e9,
        None,
        100.0,
    )
    assert big.devices == math.ceil(1.25e9 / 3.5e8)


def test_recommendation_per_stage_by_hand() -> None:
    """The per-stage recommendation, by hand.

    p5e for both stages: 2 prefill instances, so 1.5 GB/s p99 writes each; the built-in NVMe
    drive closest to 80% at p99 is the 4,000 MB/s P5810 (37.5%).
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
    assert pre.storage == "solidigm-d7-p5810"
    assert (pre.utilization.mean, pre.utilization.p99, pre.utilization.peak) == pytest.approx(
        (0.5e9 / 4.0e9, 1.5e9 / 4.0e9, 3.0e9 / 4.0e9)
    )
    assert pre.required.derivation and "p99" in pre.required.derivation[0]
    # Alternatives are ranked with reasons, storage and instances both.
    kinds = {a.kind for a in pre.alternatives}
    assert kinds == {"storage", "instance"}
    assert all(a.reason for a in pre.alternatives)
    assert [a.rank for a in pre.alternatives if a.kind == "storage"] == list(
        range(1, 1 + sum(a.kind == "storage" for a in pre.alternatives))
    )
    # Decode reads 1.0 GB/s at p99 on one instance; its tier is a local NVMe drive too.
    assert dec.required.read_bytes_per_s == pytest.approx(1.0e9)
    assert STORAGE[dec.storage].category == "local_nvme"
    # GPU KV pool: 0.9 x 1,128 GiB - 131 GiB weights; host pool 0.8 x 2,048 GiB.
    facts = advice.facts
    assert facts["gpu_kv_pool_gib"].value == pytest.approx(0.9 * 8 * 141 - 131)
    assert facts["host_kv_pool_gib"].value == pytest.approx(0.8 * 2048)
    codes = {f.code for f in advice.findings}
    assert "WL01" in codes  # 90% prefill
    assert "ST03" not in codes  # sized for p99


def test_shared_storage_idle_and_saturated() -> None:
    """--storage for both stages: prefill saturates a gp3 volume while decode idles on it."""
    f = workload(write=(0.8e9, 2.0e9, 3.0e9), read=(1.0e7, 2.0e7, 4.0e7))
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
    # Prefill: 2 instances, 1.0 GB/s p99 each on one 1,048.6 MB/s volume (95%); decode reads
    # 10 MB/s on average on its one instance (under 1%).
    assert rec.prefill.tiers[-1].devices == 1
    assert rec.prefill.utilization.p99 == pytest.approx(1.0e9 / 1048.6e6)
    assert rec.decode.utilization.mean == pytest.approx(1.0e7 / 1048.6e6)


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
    assert "612.0 MB/s" in findings["IN01"].message
    assert findings["IN01"].candidates  # a catalog query ran for the recommendation
    assert all(STORAGE[c].category != "block" for c in findings["IN01"].candidates)


def test_quiet_rules_say_why() -> None:
    """Rules over facts the workload lacks are listed as not evaluated."""
    advice = advise(collect([("requests_count", 10)]), None, STORAGE, INSTANCES, RULES)
    outcomes = {o.code: o for o in advice.recommendation.rules}
    assert set(outcomes) == {r.code for r in RULES}
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
    for stage in ("prefill", "decode"):
        ranked = rank_tiers(
            stage, INSTANCES["p5e.48xlarge"], STORAGE, 2.0e9, 1.0e4, 1000.0, 1000.0, 2.0e9
        )
        flags = [f.spec.announced_only for f in ranked]
        assert flags == sorted(flags), f"{stage}: an announced part outranks a shipping one"
        assert not flags[0]
