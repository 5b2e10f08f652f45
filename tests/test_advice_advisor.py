"""The recommendation read off a verdict, and the advisor's options.

``advise`` takes the deployment verdicts as given (a fixed verdict here, built in code) and
fills each stage's recommendation and the configuration facts the rules see from it: the
figures must be the verdict's, untouched.
"""

from __future__ import annotations

import pytest
from report_fixtures import verdict_set

from kvadvisor.advice.advisor import advise, parse_instance_choice, parse_providers
from kvadvisor.advice.inputs import load_advisor_inputs
from kvadvisor.errors import ConfigError
from kvadvisor.facts.registry import collect
from kvadvisor.results.verdict import VerdictSet
from kvadvisor.vocab import TierRole

INPUTS = load_advisor_inputs()


def _advice(verdicts: VerdictSet | None):  # type: ignore[no-untyped-def]
    workload = collect([("model_weights_gib", 131.0), ("kv_bytes_per_token", 327_680)])
    return advise(workload, None, INPUTS.storage, INPUTS.instances, INPUTS.rules, verdicts)


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
    assert "decode_storage_read_bytes_per_s" not in facts  # decode buys no storage
    assert rec.verdict is vs


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
