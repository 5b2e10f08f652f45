"""Like with like (issue 25, part 8): prices of different kinds are ranked apart.

The catalog says each instance rate's kind (A4's $90.22/h is a DWS calendar-mode rate, ZP2),
the verdict carries it, and the primary verdict compares confirmed on-demand rates first; the
others are named as ranked apart. ``--price-kind any`` compares every priced verdict.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from kvadvisor.advice.inputs import load_advisor_inputs
from kvadvisor.advice.recommend import _closest_provider, _primary
from kvadvisor.cli import app
from kvadvisor.deploy import instance_cost
from kvadvisor.results.verdict import ClosestMiss, Verdict, VerdictStatus

INSTANCES = load_advisor_inputs().instances


def _v(provider: str, usd: float, kind: str, unconfirmed: bool) -> Verdict:
    return Verdict(
        provider,
        VerdictStatus.CHOSEN,
        "met",
        usd_per_hour=usd,
        price_kind=kind,
        price_unconfirmed=unconfirmed,
    )


# The Mooncake sample at ttft_p99=6s,tpot_p99=200ms: these four verdicts and their rates.
SAMPLE = (
    _v("aws", 379.776, "on_demand", False),  # 6 x p5en.48xlarge, AWS price list
    _v("gcp", 270.66, "calendar", True),  # 3 x a4-highgpu-8g, DWS calendar mode
    _v("azure", 503.05, "on_demand", True),  # secondary copies of the Retail Prices API
    Verdict("onprem", VerdictStatus.CHOSEN, "met"),  # bought, not rented: unpriced
)


def test_the_catalog_says_each_rate_kind() -> None:
    """A4's only rate is calendar mode; AWS's price-list rates are on demand."""
    assert INSTANCES["a4-highgpu-8g"].price.kind == "calendar"
    assert instance_cost(INSTANCES["a4-highgpu-8g"]).kind == "calendar"
    assert INSTANCES["p5en.48xlarge"].price.kind == "on_demand"
    priced = [i for i in INSTANCES.values() if i.price_usd_per_hour is not None]
    assert {i.price.kind for i in priced} == {"on_demand", "calendar"}


def test_primary_is_the_cheapest_confirmed_on_demand_verdict() -> None:
    """AWS at $379.78/h, not GCP's cheaper calendar rate, which is named as ranked apart."""
    provider, why = _primary(SAMPLE, ())
    assert provider == "aws"
    assert why.startswith("the lowest $/h among the verdicts priced at confirmed on-demand rates")
    assert "($379.78/h)" in why
    apart = why.split("ranked apart")[1]
    assert "gcp $270.66/h at calendar-mode (reserved 1 to 90 days) rates, unconfirmed" in apart
    assert "azure $503.05/h at on-demand rates, unconfirmed" in apart
    assert "onprem" not in why


def test_unconfirmed_on_demand_before_other_kinds() -> None:
    """Without a confirmed on-demand verdict, Azure's unconfirmed on-demand rate still wins."""
    provider, why = _primary(SAMPLE[1:], ())
    assert provider == "azure" and "on-demand rates, some unconfirmed" in why


def test_price_kind_any_compares_every_priced_verdict() -> None:
    """--price-kind any: GCP's $270.66/h calendar rate is the lowest."""
    provider, why = _primary(SAMPLE, (), "any")
    assert provider == "gcp" and "--price-kind any" in why


def test_the_nearest_miss_is_ranked_like_with_like() -> None:
    """Two closest misses needing the same loosening: on-demand before a cheaper calendar rate.

    The headline names the nearest when nothing meets the SLO; as the primary verdict, it
    compares confirmed on-demand rates first, so a calendar-mode rate is not called nearest
    for being cheaper.
    """

    def miss(provider: str, usd: float, kind: str) -> Verdict:
        c = ClosestMiss(
            label=f"{provider} fleet",
            gpus=24,
            usd_per_hour=usd,
            price_basis="",
            reached={"ttft_p99_s": 3.25},
            loosest={"ttft_p99_s": 3.3},
            slo_text="ttft_p99=3.3s",
            basis="the search's sample",
            why_not="misses TTFT p99",
            price_kind=kind,
        )
        return Verdict(provider, VerdictStatus.NO_DEPLOYMENT_MEETS_SLO, "none", closest=c)

    targets = {"ttft_p99_s": 2.0}
    gcp, aws = miss("gcp", 270.66, "calendar"), miss("aws", 341.80, "on_demand")
    assert _closest_provider([gcp, aws], targets) == "aws"
    cheaper = miss("azure", 300.0, "on_demand")
    assert _closest_provider([gcp, aws, cheaper], targets) == "azure"
    # A smaller loosening wins whatever the rate's kind.
    closer = replace(gcp, closest=replace(gcp.closest, loosest={"ttft_p99_s": 2.4}))
    assert _closest_provider([closer, aws], targets) == "gcp"


def test_an_unknown_price_kind_is_refused_on_the_command_line() -> None:
    """A kind of rate `--price-kind` does not know is exit 2 with the option named."""
    trace = str(Path(__file__).resolve().parents[1] / "sample_traces" / "azure_code_head.csv.zst")
    bad = CliRunner().invoke(app, ["analyze", trace, "--price-kind", "spot"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "--price-kind" in bad.output and "'spot' is not one of" in bad.output
