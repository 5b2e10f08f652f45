"""The user's --gpu, --tp, --model and --kv-dtype restrict the deployment search (issue 25, part 5).

Before, ``--gpu`` and ``--tp`` only changed the open-loop profile: ``--gpu h200 --tp 8`` got a
verdict of one H100 at TP 1. Now only instances with that GPU, at that TP, are enumerated (both
stages of a disaggregated fleet); when nothing fits under them, the verdict's reason opens by
saying so and names what it would need.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvadvisor.pipeline import AnalyzeOptions
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.results.verdict import VerdictStatus
from kvadvisor.trace import read_trace

HEAD = Path(__file__).resolve().parents[1] / "sample_traces" / "mooncake_conversation_head.jsonl.gz"
SLO = "ttft_p99=10s,tpot_p99=200ms"


@pytest.fixture(scope="module")
def trace():  # type: ignore[no-untyped-def]
    """The Mooncake conversation head: 400 requests with hashes."""
    return read_trace(HEAD)


def _verdicts(trace, **options):  # type: ignore[no-untyped-def]
    report = analyze(
        trace,
        AnalyzeOptions(slo=SLO, replay=False, **options),
        version="test",
        generated_at="2026-01-01T00:00:00",
    )
    return {v.provider: v for v in report.recommendation.verdict.verdicts}


def test_gpu_and_tp_give_h200_tp8_picks(trace) -> None:  # type: ignore[no-untyped-def]
    """--gpu h200 --tp 8: every stage of every chosen fleet is H200 at TP 8, and says so."""
    got = _verdicts(trace, model="llama-3.1-70b", gpu="h200", tp=8, providers=("aws", "gcp"))
    # AWS's H200 instances are p5en (on demand) and p5e; GCP's is a3-ultragpu-8g.
    assert got["aws"].chosen and got["gcp"].chosen
    for v in got.values():
        assert v.reason.endswith("within --gpu h200 --tp 8 as asked"), v.reason
        assert v.stages
        for s in v.stages:
            assert (s.gpu, s.tp) == ("h200", 8), (v.provider, s)
        # Every configuration it considered was under the constraint, not only the pick.
        assert all("TP 8" in c.label for c in v.candidates), [c.label for c in v.candidates]
    assert {s.instance for s in got["gcp"].stages} == {"a3-ultragpu-8g"}


def test_a_gpu_the_provider_lacks_is_said_first(trace) -> None:  # type: ignore[no-untyped-def]
    """GCP has no B300: its verdict abstains, saying so first and listing the GPUs it has."""
    got = _verdicts(trace, model="llama-3.1-70b", gpu="b300", providers=("gcp",))
    v = got["gcp"]
    assert v.status is VerdictStatus.ABSTAINED and not v.stages
    assert v.reason.startswith("under --gpu b300: no deployment: none of its instances has b300")
    assert "h200" in v.reason and "b200" in v.reason


def test_a_tp_the_model_does_not_fit_names_what_would(trace) -> None:  # type: ignore[no-untyped-def]
    """Llama 3.1 70B in BF16 (141 GB of weights) cannot fit one 141 GB H200: TP 2 or more."""
    got = _verdicts(trace, model="llama-3.1-70b", gpu="h200", tp=1, providers=("aws",))
    v = got["aws"]
    assert v.status is VerdictStatus.ABSTAINED
    assert v.reason.startswith("under --gpu h200 --tp 1: no deployment: at TP 1 the model fits")
    assert "p5en.48xlarge TP 2 (4 replicas)" in v.reason
    assert "TP 1 (" not in v.reason.split("would need")[1]


def test_model_and_kv_dtype_are_the_searched_ones(trace) -> None:  # type: ignore[no-untyped-def]
    """The plan the verdict replayed runs the asked model and KV dtype at the asked TP."""
    got = _verdicts(trace, model="qwen3-32b", kv_dtype="fp8", gpu="h200", tp=8, providers=("aws",))
    v = got["aws"]
    assert v.chosen, v.reason
    model = v.plan["model"]
    assert (model["name"], model["kv_dtype"], model["tp"]) == ("qwen3-32b", "fp8", 8)
    assert {(s.gpu, s.tp) for s in v.stages} == {("h200", 8)}


def test_no_gpu_or_tp_given_restricts_nothing(trace) -> None:  # type: ignore[no-untyped-def]
    """The profile's assumed H200 (no --gpu) does not restrict the search, nor its reason."""
    got = _verdicts(trace, model="llama-3.1-70b", providers=("aws",))
    v = got["aws"]
    assert v.chosen and "--gpu" not in v.reason and "--tp" not in v.reason
    labels = {c.label.split(" TP ")[0].split(" ")[-1] for c in v.candidates}
    assert len(labels) > 1, labels  # more than one instance type was considered
