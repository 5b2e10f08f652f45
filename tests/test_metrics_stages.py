"""Stage split: hand-computed GPU-time and latency splits, measured columns, real traces."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from kvadvisor.metrics import (
    classify,
    measured_stages,
    profile_stages,
    stage_times,
    summarize_split,
)
from kvadvisor.sections.profile import ProfileOptions, profile_workload
from kvadvisor.trace import read_trace
from kvadvisor.trace.schema import build_trace

STEP_S = 0.01
PREFILL_S_PER_TOKEN = 0.001


class ToyCost:
    """1 ms per prefill token; every decode step 10 ms whatever the batch (a weight read)."""

    def prefill_s(self, new_tokens, cached_tokens):
        """1 ms per new token."""
        return PREFILL_S_PER_TOKEN * np.asarray(new_tokens, dtype=float)

    def decode_step_s(self, batch, batch_kv_rank_bytes):
        """10 ms per step."""
        return np.full(np.shape(batch), STEP_S)

    def decode_gpu_s(self, input_tokens, steps, harmonic_batch):
        """Each step's 10 ms split over the batch."""
        return np.asarray(steps) * STEP_S / np.asarray(harmonic_batch)

    def kv_rank_bytes(self, tokens):
        """One byte per token."""
        return np.asarray(tokens, dtype=float)


def _trace(cols: dict) -> object:
    return build_trace(pa.table(cols), path="test", source_format="test", block_tokens=None)


# Four requests 0.1 s apart, 100 prompt tokens (0.1 s prefill), 101 output tokens (100 decode
# steps = 1 s). Decode intervals [0.1,1.1) [0.2,1.2) [0.3,1.3) [0.4,1.4); the decode batch is
# 1, 2, 3, 4 (0.4..1.1), 3, 2, 1. Each request's GPU share is the integral of dt/B over its
# decode: 0.1 + 0.1/2 + 0.1/3 + 0.7/4 = 0.358333 for the first and last, 0.1/2 + 0.1/3 + 0.7/4
# + 0.1/3 = 0.291667 for the middle two; 1.3 s in all, the time anything decodes.
ARRIVALS = [0.0, 0.1, 0.2, 0.3]
FIRST = 0.1 + 0.1 / 2 + 0.1 / 3 + 0.7 / 4
MIDDLE = 0.1 / 2 + 0.1 / 3 + 0.7 / 4 + 0.1 / 3


def test_hand_computed_split_modeled() -> None:
    """GPU time: prefill 0.4 s vs decode 1.3 s; latency: TTFT 0.4 s vs decode 4.0 s."""
    t = stage_times(np.asarray(ARRIVALS), np.full(4, 100), np.full(4, 101), ToyCost())
    assert t.decode_gpu_s == pytest.approx([FIRST, MIDDLE, MIDDLE, FIRST], rel=1e-5)
    s = summarize_split(t)
    assert s.prefill_gpu_s == pytest.approx(0.4)
    assert s.decode_gpu_s == pytest.approx(1.3, rel=1e-5)
    assert s.prefill_share == pytest.approx(0.4 / 1.7, rel=1e-5)
    assert s.latency_prefill_s == pytest.approx(0.4)
    assert s.latency_decode_s == pytest.approx(4.0)
    assert s.latency_prefill_share == pytest.approx(0.4 / 4.4)
    assert s.classification == "decode-dominated"
    assert s.request_classes == {"prefill-dominated": 0, "decode-dominated": 4, "balanced": 0}


def test_hand_computed_split_measured() -> None:
    """The same timings given as TTFT / end-to-end columns give the same GPU split."""
    trace = _trace(
        {
            "arrival_s": ARRIVALS,
            "input_tokens": [100] * 4,
            "output_tokens": [101] * 4,
            "ttft_s": [0.1] * 4,
            "e2e_s": [1.1] * 4,
        }
    )
    t = profile_stages(trace, ToyCost())
    assert t.measured.all()
    assert t.decode_gpu_s == pytest.approx([FIRST, MIDDLE, MIDDLE, FIRST], rel=1e-5)
    assert t.prefill_gpu_s == pytest.approx([0.1] * 4)
    assert summarize_split(t).measured_requests == 4


def test_measured_overlapping_prefills_share_the_gpu() -> None:
    """Two prefills running together over the same second are charged half each."""
    trace = _trace(
        {
            "arrival_s": [0.0, 0.0],
            "input_tokens": [10, 10],
            "output_tokens": [1, 1],
            "ttft_s": [1.0, 1.0],
            "e2e_s": [1.0, 1.0],
        }
    )
    t = profile_stages(trace, ToyCost())
    assert t.prefill_gpu_s == pytest.approx([0.5, 0.5], rel=1e-5)
    assert t.decode_gpu_s == pytest.approx([0.0, 0.0])


def test_measured_columns_queue_and_tpot() -> None:
    """Prefill = TTFT - queue; decode = TPOT x (output - 1) where e2e is missing."""
    trace = _trace(
        {
            "arrival_s": [0.0, 1.0],
            "input_tokens": [10, 10],
            "output_tokens": [11, 5],
            "ttft_s": [0.5, 0.3],
            "queue_s": [0.2, 0.0],
            "tpot_s": [0.01, 0.02],
            "e2e_s": [None, 0.9],
        }
    )
    m = measured_stages(trace)
    assert m.prefill_s == pytest.approx([0.3, 0.3])
    assert m.decode_s == pytest.approx([0.1, 0.6])


def test_prefix_reuse_shrinks_prefill() -> None:
    """Hits cut the prefill GPU time; the no-reuse figure keeps the full prompt."""
    t = stage_times(
        np.asarray(ARRIVALS),
        np.full(4, 100),
        np.full(4, 101),
        ToyCost(),
        hit_tokens=np.asarray([0, 50, 100, 20]),
    )
    s = summarize_split(t)
    # new tokens 100, 50, 1 (a full hit still computes one), 80 -> 231 ms of prefill.
    assert s.prefill_gpu_s == pytest.approx(0.231)
    assert s.prefill_gpu_no_reuse_s == pytest.approx(0.4)
    assert s.prefill_gpu_saved_by_reuse_s == pytest.approx(0.169)


def test_classification_thresholds() -> None:
    """Stated thresholds: >= 0.6 prefill-dominated, <= 0.4 decode-dominated."""
    assert classify(0.6) == "prefill-dominated"
    assert classify(0.59) == "balanced"
    assert classify(0.41) == "balanced"
    assert classify(0.4) == "decode-dominated"


def test_azure_code_trace_is_prefill_heavy(azure_code_path) -> None:
    """Azure code (~2k-token prompts, ~28 output tokens) is prefill-dominated in GPU time.

    On the default deployment; on other common ones prefill is still the larger share; its
    latency split leans the other way.
    """
    trace = read_trace(azure_code_path)
    assert trace.requests == 8819
    split = profile_workload(trace, ProfileOptions()).stage_split
    assert split.source == "modeled"
    assert split.classification == "prefill-dominated"
    assert split.prefill_share > 0.6
    assert split.latency_prefill_share < split.prefill_share
    for model, gpu in [("qwen3-32b", "h200"), ("llama-3.1-70b", "h100-sxm")]:
        other = profile_workload(trace, ProfileOptions(model=model, gpu=gpu)).stage_split
        assert other.prefill_share > 0.5, (model, gpu)


def test_synthetic_decode_heavy_trace_goes_the_other_way() -> None:
    """Short prompts, long outputs, one request a minute: decode-dominated."""
    n = 60
    trace = _trace(
        {
            "arrival_s": np.arange(n) * 60.0,
            "input_tokens": np.full(n, 200),
            "output_tokens": np.full(n, 2000),
        }
    )
    split = profile_workload(trace, ProfileOptions()).stage_split
    assert split.classification == "decode-dominated"
    assert split.prefill_share < 0.1
    assert split.mean_decode_batch == pytest.approx(1.0)


def test_fixed_point_raises_batch_with_load() -> None:
    """More concurrent requests, bigger decode batches, less decode GPU time per request."""
    from kvadvisor.catalog.gpus import get_gpu
    from kvadvisor.catalog.models import get_model
    from kvadvisor.perfmodel import PerfModel

    pm = PerfModel.build(get_model("llama-3.1-8b"), get_gpu("h100-sxm"))
    n = 400
    sparse = stage_times(np.arange(n) * 100.0, np.full(n, 500), np.full(n, 300), pm)
    dense = stage_times(np.arange(n) * 0.05, np.full(n, 500), np.full(n, 300), pm)
    assert sparse.mean_batch.mean() == pytest.approx(1.0)
    assert dense.mean_batch.mean() > 10
    assert dense.decode_gpu_s.mean() < sparse.decode_gpu_s.mean() / 5
    assert dense.decode_s.mean() > sparse.decode_s.mean()  # but each step is slower


def test_instances_and_memory_cap_limit_the_batch() -> None:
    """Fewer requests per instance, or a KV-memory cap, shrink the decode batch.

    Each decode step then serves fewer requests, so decode costs more GPU time per request.
    """
    from kvadvisor.catalog.gpus import get_gpu
    from kvadvisor.catalog.models import get_model
    from kvadvisor.perfmodel import PerfModel

    pm = PerfModel.build(get_model("llama-3.1-8b"), get_gpu("h100-sxm"))
    n = 400
    args = (np.arange(n) * 0.05, np.full(n, 500), np.full(n, 300), pm)
    one = stage_times(*args)
    four = stage_times(*args, instances=4)
    capped = stage_times(*args, max_batch=3.0)
    assert four.instances == 4
    assert four.mean_batch.mean() < one.mean_batch.mean() / 2
    assert four.decode_gpu_s.sum() > one.decode_gpu_s.sum()
    assert capped.mean_batch.max() <= 3.0 and capped.harmonic_batch.max() <= 3.0
    assert capped.decode_gpu_s.sum() > one.decode_gpu_s.sum()
    assert four.decode_batch_cells.max() < one.decode_batch_cells.max()
