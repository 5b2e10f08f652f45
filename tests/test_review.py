"""Plan review: hand-computed tier hits and demand, and every check firing and staying quiet."""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest

from kvadvisor.plan import check_plan
from kvadvisor.planreview.demand import TraceReplay, io_rate
from kvadvisor.planreview.perf import PlanPerf, StagePerf
from kvadvisor.planreview.review import review_plan

BLOCK = 2  # tokens per hash block in the tiny trace
HASHES = [[1, 2], [1, 2, 3], [4], [1, 2, 3]]
INPUT = np.array([4, 6, 2, 5])
OUTPUT = np.array([10, 20, 30, 40])
ARRIVAL = np.array([0.0, 0.5, 1.0, 2.5])
KVB = 100  # bytes per token


def reference_hits(capacity_tokens: float | None) -> np.ndarray:
    """DESIGN.md's prefix hit, replayed literally with an ordered-dict LRU (slow reference)."""
    cap = np.inf if capacity_tokens is None else int(capacity_tokens // BLOCK)
    lru: OrderedDict[int, None] = OrderedDict()
    out = []
    for hashes, n in zip(HASHES, INPUT, strict=True):
        lead = 0
        for h in hashes:
            if h in lru:
                lead += 1
            else:
                break
        out.append(min(lead * BLOCK, int(n)))
        for h in hashes:
            lru[h] = None
            lru.move_to_end(h)
            while len(lru) > cap:
                lru.popitem(last=False)
    return np.array(out, dtype=np.int64)


REPLAY = TraceReplay(ARRIVAL, INPUT, OUTPUT, warmup_requests=2, hit_tokens_at=reference_hits)


def test_reference_hits_by_hand() -> None:
    """The reference reproduces the hand replay (2 blocks evict block 1 before request 3)."""
    assert reference_hits(4).tolist() == [0, 4, 0, 0]
    assert reference_hits(6).tolist() == [0, 4, 0, 0]
    assert reference_hits(8).tolist() == [0, 4, 0, 5]
    assert reference_hits(None).tolist() == [0, 4, 0, 5]
    assert reference_hits(0).tolist() == [0, 0, 0, 0]


BASE: dict[str, Any] = {
    "name": "tiny",
    "model": {"kv_bytes_per_token": KVB, "tp": 2},
    "stages": {
        "prefill": {
            "count": 1,
            "gpu_kv_pool": "400 B",  # 4 tokens = 2 blocks
            "tiers": [
                {
                    "name": "host",
                    "storage": {
                        "kind": "dram",
                        "read_bandwidth": "1 KB/s",
                        "write_bandwidth": "1 KB/s",
                    },
                    "capacity": "600 B",
                },
                {
                    "name": "ssd",
                    "storage": {
                        "kind": "ssd",
                        "read_bandwidth": "1 KB/s",
                        "write_bandwidth": "1 KB/s",
                        "latency": "1 ms",
                    },
                    "capacity": "800 B",
                },
            ],
        },
    },
}


def _plan(patch: dict[str, Any] | None = None, base: dict[str, Any] = BASE):
    doc = copy.deepcopy(base)
    for dotted, value in (patch or {}).items():
        node = doc
        keys = dotted.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        last = keys[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return check_plan("plan.yaml", doc)


def _checks(review, code: str):
    return [c for c in review.checks if c.code == code]


def test_tiers_by_hand() -> None:
    """GPU pool 2 blocks, host 3 blocks (shadowed), SSD 4 blocks serves request 3's 5 tokens."""
    review = review_plan(_plan(), REPLAY, PlanPerf(KVB), window_s=1.0)
    host, ssd = review.stages[0].tiers
    assert host.hit_ratio_all == 0.0 and host.capacity_tokens == 6
    assert ssd.hit_ratio_all == pytest.approx(5 / 17)
    assert ssd.hit_ratio_steady == pytest.approx(5 / 7)
    assert ssd.cumulative_hit_ratio_steady == pytest.approx(5 / 7)
    # Host writes: input - h(3 blocks) = [4, 2, 2, 5] tokens × 100 B in windows [0,1), [1,2), [2,3).
    assert host.write.peak_bytes_per_s == 600.0
    assert host.write.mean_bytes_per_s == pytest.approx(1300 / 3)
    assert host.write.p99_bytes_per_s == pytest.approx(500 + 0.98 * 100)
    # SSD writes input - h(4 blocks) = [4, 2, 2, 0]; reads: 5 tokens in the last window.
    assert ssd.write.peak_bytes_per_s == 600.0
    assert ssd.write.mean_bytes_per_s == pytest.approx(800 / 3)
    assert ssd.read is not None and ssd.read.peak_bytes_per_s == 500.0
    assert ssd.read_utilization.peak == pytest.approx(0.5)
    # Load time of request 3: 1 ms + 500 B / 1000 B/s; p99 over [0, 0, 0, 0.501] interpolates.
    assert review.stages[0].load_time_p99_s == pytest.approx(0.97 * 0.501)


def test_traffic_scale_compresses_time() -> None:
    """Arrivals 2× faster: the same bytes land in half the time; hit ratios do not change."""
    review = review_plan(_plan({"traffic": {"scale": 2}}), REPLAY, PlanPerf(KVB), window_s=1.0)
    host = review.stages[0].tiers[0]
    # times [0, .25, .5, 1.25]: windows hold 800 B and 500 B.
    assert host.write.peak_bytes_per_s == 800.0 and host.write.mean_bytes_per_s == 650.0
    assert review.stages[0].tiers[1].hit_ratio_all == pytest.approx(5 / 17)
    assert review.traffic_scale == 2.0


def test_io_rate_counts_idle_windows() -> None:
    """Empty windows are part of the mean; p99 interpolates between windows."""
    rate = io_rate(np.array([0.1, 0.2, 3.5]), np.array([10.0, 30.0, 20.0]), 1.0, 3.5)
    assert rate.mean_bytes_per_s == pytest.approx(60 / 4)
    assert rate.peak_bytes_per_s == 40.0
    assert rate.p99_bytes_per_s == pytest.approx(np.percentile([40, 0, 0, 20], 99))


def _status(review, code: str, subject: str | None = None) -> str:
    found = [c for c in _checks(review, code) if subject is None or c.subject == subject]
    assert len(found) == 1, (code, subject, review.checks)
    return found[0].status


def _recompute(tokens: np.ndarray) -> np.ndarray:
    return np.asarray(tokens, dtype=np.float64) * 1e-3  # 1 ms per token


GOOD_TIERS = [
    {
        "name": "host",
        "storage": {"kind": "dram", "read_bandwidth": "2 KB/s", "write_bandwidth": "2 KB/s"},
        "capacity": "1 KB",
    },
]

# Each case: a patch that breaks exactly one check, the check and its subject.
BREAKERS = [
    ("RV01", "host", {}),  # host (3 blocks) shadowed by the GPU pool of 2 blocks... and SSD
    ("RV02", "host", {"stages.prefill.tiers.0.storage.write_bandwidth": "500 B/s"}),
    ("RV03", "ssd", {"stages.prefill.tiers.1.storage.read_bandwidth": "400 B/s"}),
    # Eight catalog drives for 800 bytes of KV and a few hundred bytes per second: one would do.
    (
        "RV04",
        "ssd",
        {
            "stages.prefill.tiers.1.storage": "kioxia-cm6",
            "stages.prefill.tiers.1.devices": 8,
        },
    ),
    ("RV06", "ssd", {}),
    ("RV07", None, {"slo": {"ttft_p99": "100 ms"}}),
    ("EL08", "ssd", {"stages.prefill.tiers.1.capacity": None}),
]


def _good_doc() -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["stages"]["prefill"]["tiers"] = copy.deepcopy(GOOD_TIERS)
    doc["stages"]["prefill"]["tiers"].append(
        {
            "name": "ssd",
            "storage": {
                "kind": "ssd",
                "read_bandwidth": "2 KB/s",
                "write_bandwidth": "2 KB/s",
                "latency": "1 ms",
            },
            "capacity": "2 KB",
        }
    )
    doc["slo"] = {"ttft_p99": "2 s"}
    return doc


def test_good_plan_passes_every_tier_check() -> None:
    """A plan sized to the tiny trace passes every check it can run."""
    perf = PlanPerf(KVB, {"prefill": StagePerf(recompute_s=lambda t: np.asarray(t) * 1.0)})
    review = review_plan(_plan(base=_good_doc()), REPLAY, perf, window_s=1.0)
    # host 10 tokens = 5 blocks serves the hits; ssd (20 tokens) is shadowed: RV01 fails there
    # by design, so the good plan's SSD must be what serves: check the others pass.
    statuses = {c.test_id: c.status for c in review.checks}
    assert statuses["RV01.prefill.host"] == "pass"
    for code in ("RV02", "RV03", "RV06", "EL08"):
        assert all(c.status == "pass" for c in _checks(review, code)), code
    assert statuses["RV07.prefill"] == "pass"
    assert statuses["RV04.prefill.ssd"] == "pass"
    assert statuses["RV04.prefill.host"] == "skip"  # DRAM bandwidth is not sized on its own


@pytest.mark.parametrize(("code", "subject", "patch"), BREAKERS, ids=[b[0] for b in BREAKERS])
def test_each_review_check_fires(code, subject, patch) -> None:
    """A plan built to break one check makes that check fail."""
    perf = PlanPerf(KVB, {"prefill": StagePerf(recompute_s=_recompute)})
    review = review_plan(_plan(patch), REPLAY, perf, window_s=1.0)
    assert _status(review, code, subject) == "fail"
    failed = next(c for c in review.findings if c.code == code)
    assert failed.evidence, "a finding carries its evidence"


def test_bandwidth_severity_p99_vs_peak() -> None:
    """Demand above capability at p99 is an error; only at the peak, a warning."""
    review = review_plan(
        _plan({"stages.prefill.tiers.0.storage.write_bandwidth": "500 B/s"}),
        REPLAY,
        PlanPerf(KVB),
        window_s=1.0,
    )
    (rv02,) = [c for c in _checks(review, "RV02") if c.subject == "host"]
    assert rv02.severity == "error"  # 598 B/s p99 > 500 B/s
    review = review_plan(
        _plan({"stages.prefill.tiers.0.storage.write_bandwidth": "599 B/s"}),
        REPLAY,
        PlanPerf(KVB),
        window_s=1.0,
    )
    (rv02,) = [c for c in _checks(review, "RV02") if c.subject == "host"]
    assert rv02.status == "fail" and rv02.severity == "warning"  # p99 598 < 599 < peak 600


def test_load_vs_recompute_break_even() -> None:
    """1 ms latency + 0.1 s per token to load against 1 ms per token to recompute: never pays."""
    perf = PlanPerf(KVB, {"prefill": StagePerf(recompute_s=_recompute)})
    review = review_plan(_plan(), REPLAY, perf, window_s=1.0)
    ssd = review.stages[0].tiers[1]
    assert ssd.break_even_tokens == float("inf")
    assert ssd.below_break_even_share == 1.0
    # Recompute at 1 s per token: loading (0.001 + 0.1 p) wins from 1 token.
    perf = PlanPerf(KVB, {"prefill": StagePerf(recompute_s=lambda t: np.asarray(t) * 1.0)})
    ssd = review_plan(_plan(), REPLAY, perf, window_s=1.0).stages[0].tiers[1]
    assert ssd.break_even_tokens == 1.0 and ssd.below_break_even_share == 0.0


ENGINE_CASES = [
    # (code, engines, extra stage fields, expected status)
    ("EL01", {"dynamo-kvbm": {"DYN_KVBM_CPU_CACHE_GB": 50}}, {"gpu_kv_pool": "100 GB"}, "fail"),
    ("EL01", {"dynamo-kvbm": {"DYN_KVBM_CPU_CACHE_GB": 100}}, {"gpu_kv_pool": "100 GB"}, "pass"),
    (
        "EL02",
        {"dynamo-kvbm": {"DYN_KVBM_CPU_CACHE_GB": 200, "DYN_KVBM_DISK_CACHE_GB": 100}},
        {},
        "fail",
    ),
    (
        "EL02",
        {"dynamo-kvbm": {"DYN_KVBM_CPU_CACHE_GB": 200, "DYN_KVBM_DISK_CACHE_GB": 200}},
        {},
        "pass",
    ),
    ("EL03", {"sglang-hicache": {"hicache-ratio": 1.5}}, {"gpu_kv_pool": "80 GB"}, "fail"),
    ("EL03", {"sglang-hicache": {"hicache-ratio": 2.0}}, {"gpu_kv_pool": "80 GB"}, "pass"),
    # hicache-size 10 GB per rank over a 80 GB pool / 8 ranks = ratio 1.0
    (
        "EL03",
        {"sglang-hicache": {"hicache-size": 10}},
        {"gpu_kv_pool": "80 GB", "gpus_per_instance": 8},
        "fail",
    ),
    # 8 ranks × 200 GB > 1 TB host memory
    (
        "EL04",
        {"sglang-hicache": {"hicache-size": 200}},
        {"gpus_per_instance": 8, "host_memory": "1 TB"},
        "fail",
    ),
    (
        "EL04",
        {"sglang-hicache": {"hicache-size": 100}},
        {"gpus_per_instance": 8, "host_memory": "1 TB"},
        "pass",
    ),
    ("EL05", {"lmcache": {"chunk_size": 100}}, {}, "fail"),
    ("EL05", {"lmcache": {"chunk_size": 256}}, {}, "pass"),
    ("EL05", {"lmcache": {"chunk_size": 256}, "vllm": {"block-size": 96}}, {}, "fail"),
    ("EL05", {"lmcache": {"chunk_size": 256}, "sglang-hicache": {"page-size": 64}}, {}, "pass"),
    (
        "EL06",
        {"lmcache": {"l2-adapter": {"type": "fs_native", "max_capacity_gb": 4000}}},
        {},
        "fail",
    ),
    (
        "EL06",
        {
            "lmcache": {
                "l2-adapter": {
                    "type": "fs_native",
                    "max_capacity_gb": 4000,
                    "eviction": {"policy": "LRU"},
                }
            }
        },
        {},
        "pass",
    ),
    ("EL07", {"mooncake": {"root_fs_dir": "/mnt/kv", "enable_offload": True}}, {}, "fail"),
    ("EL07", {"mooncake": {"enable_offload": True}}, {}, "pass"),
    ("EL07", {"mooncake": {"root_fs_dir": "/mnt/kv"}}, {}, "pass"),
]


@pytest.mark.parametrize(("code", "engines", "fields", "expected"), ENGINE_CASES)
def test_engine_lint(code, engines, fields, expected) -> None:
    """Each engine lint fires on the plan built to break it and stays quiet on the fixed one."""
    doc = copy.deepcopy(BASE)
    stage = doc["stages"]["prefill"]
    stage.pop("gpu_kv_pool")
    stage.update(fields)
    stage["engines"] = engines
    plan = check_plan("plan.yaml", doc)
    review = review_plan(plan, REPLAY, PlanPerf(KVB), window_s=1.0)
    assert _status(review, code) == expected


def test_engine_lint_absent_without_engine() -> None:
    """A plan without an engine gets none of that engine's lints."""
    review = review_plan(_plan(), REPLAY, PlanPerf(KVB), window_s=1.0)
    assert not [c for c in review.checks if c.code.startswith("EL0") and c.code != "EL08"]


def test_stage_balance_fires_when_one_stage_idles() -> None:
    """Same storage for both stages: decode idles while prefill saturates (RV05)."""
    doc = copy.deepcopy(BASE)
    spec = {"kind": "ssd", "read_bandwidth": "700 B/s", "write_bandwidth": "700 B/s"}
    doc["stages"]["prefill"]["tiers"] = [{"name": "ssd", "storage": spec, "capacity": "2 KB"}]
    doc["stages"]["decode"] = {
        "count": 80,
        "tiers": [{"name": "ssd", "storage": spec, "capacity": "2 KB"}],
    }
    review = review_plan(check_plan("p.yaml", doc), REPLAY, PlanPerf(KVB), window_s=1.0)
    assert _status(review, "RV05") == "fail"
    decode = review.stages[1]
    # decode writes input+output = [14, 26, 32, 45] tokens × 100 B over 80 instances.
    assert decode.tiers[0].write.peak_bytes_per_s == pytest.approx(45 * 100 / 80)
    assert decode.tiers[0].read is None
    doc["stages"]["decode"]["count"] = 1
    doc["stages"]["decode"]["tiers"][0]["storage"] = dict(spec, write_bandwidth="5 KB/s")
    review = review_plan(check_plan("p.yaml", doc), REPLAY, PlanPerf(KVB), window_s=1.0)
    assert _status(review, "RV05") == "pass"


def test_no_hashes_skips_hit_checks() -> None:
    """Without hashes: hit checks skip, writes count every prompt token (upper bound)."""
    replay = TraceReplay(ARRIVAL, INPUT, OUTPUT, warmup_requests=2, hit_tokens_at=None)
    review = review_plan(_plan(), replay, PlanPerf(KVB), window_s=1.0)
    assert _status(review, "RV01", "host") == "skip"
    assert _status(review, "RV03", "host") == "skip"
    host = review.stages[0].tiers[0]
    assert host.write.peak_bytes_per_s == 1000.0 and host.hit_ratio_all is None


def test_shared_tier_capacity_is_not_multiplied() -> None:
    """Node tiers scale with the instance count; a shared pool does not."""
    doc = copy.deepcopy(BASE)
    doc["stages"]["prefill"]["count"] = 2
    doc["stages"]["prefill"]["tiers"][1]["shared"] = True
    review = review_plan(check_plan("p.yaml", doc), REPLAY, PlanPerf(KVB), window_s=1.0)
    host, ssd = review.stages[0].tiers
    assert host.capacity_tokens == 12 and ssd.capacity_tokens == 8
    assert host.write.peak_bytes_per_s == 300.0  # per instance: half the fleet's 600 B/s


@pytest.mark.parametrize(
    ("iops", "status", "severity"),
    [("10", "fail", "error"), ("11.99", "fail", "warning"), ("12", "pass", "error")],
)
def test_iops_at_the_chunk_size(iops, status, severity) -> None:
    """1-token chunks: host writes [4, 2, 2, 5] tokens → 6, 2, 5 chunks per window (p99 5.98).

    No engine: a chunk is one object per rank (LMCache's default), and at TP 2 each rank
    stores its half of every token's KV, so each chunk is 2 I/Os: 12, 4, 10 (p99 11.96).
    """
    doc = copy.deepcopy(BASE)
    doc["stages"]["prefill"]["chunk_tokens"] = 1
    doc["stages"]["prefill"]["tiers"][0]["storage"]["write_iops"] = float(iops)
    review = review_plan(check_plan("p.yaml", doc), REPLAY, PlanPerf(KVB), window_s=1.0)
    (rv08,) = [c for c in _checks(review, "RV08") if c.subject == "host"]
    assert rv08.status == status and rv08.severity == severity
    assert rv08.evidence["tier_write_iops_p99"] == pytest.approx(5.98 * 2)
    assert rv08.evidence["tier_write_iops_peak"] == 6.0 * 2
    assert _status(review, "RV08", "ssd") == "skip"  # no IOPS figure for that tier


def test_chunk_tokens_follow_the_engine() -> None:
    """The I/O size comes from the plan, then LMCache, SGLang, vLLM, else LMCache's default."""
    from kvadvisor.planreview.demand import stage_chunk_tokens

    def chunk(stage: dict[str, Any]) -> int:
        doc = copy.deepcopy(BASE)
        doc["stages"]["prefill"].update(stage)
        return stage_chunk_tokens(check_plan("p.yaml", doc).stages[0])[0]

    assert chunk({}) == 256
    assert chunk({"engines": {"lmcache": {"chunk_size": 512}}}) == 512
    assert chunk({"engines": {"sglang-hicache": {"page-size": 64}}}) == 64
    assert chunk({"engines": {"dynamo-kvbm": {}}}) == 16
    assert chunk({"chunk_tokens": 128, "engines": {"lmcache": {"chunk_size": 512}}}) == 128


def test_plan_perf_from_catalogs() -> None:
    """Llama-3.1-70B: 327,680 B/token (field.md §4.1); p5e pool = 8 × (0.9 × HBM − weights / 8)."""
    from kvadvisor.planreview.perf import plan_perf

    plan = check_plan(
        "p.yaml",
        {
            "model": {"name": "llama-3.1-70b", "tp": 8},
            "stages": {"prefill": {"instance": "p5e.48xlarge"}},
        },
    )
    perf = plan_perf(plan)
    assert perf.kv_bytes_per_token == 327_680
    stage = plan.stages[0]
    assert stage.gpu is not None and plan.model.spec is not None
    per_gpu = 0.9 * stage.gpu.memory_bytes - plan.model.spec.params.total * 2 / 8
    assert perf.stages["prefill"].device_pool_bytes == pytest.approx(8 * per_gpu)
    recompute = perf.stages["prefill"].recompute_s
    assert recompute is not None
    times = recompute(np.array([1_000.0, 2_000.0]))
    assert 0 < times[0] < times[1]  # prefill time grows with the prefix


def test_analyze_plan_review_equals_a_fresh_replay() -> None:
    """`analyze --plan` reuses its own cache pass; the reviews equal a replay from scratch."""
    from pathlib import Path

    from kvadvisor.pipeline.analyze import analyze
    from kvadvisor.pipeline.options import AnalyzeOptions
    from kvadvisor.pipeline.review import review_plans
    from kvadvisor.plan import load_plan
    from kvadvisor.trace import read_trace

    repo = Path(__file__).resolve().parents[1]
    trace = read_trace(repo / "sample_traces" / "mooncake_conversation_head.jsonl.gz")
    plans = tuple(load_plan(p) for p in sorted((repo / "examples" / "plans").glob("*.yaml")))
    # One provider's search, no closed-loop replay: the plans' reviews read neither.
    options = AnalyzeOptions(plans=plans, providers=("aws",), replay=False)
    report = analyze(trace, options, version="t", generated_at="t")
    assert report.plan_reviews == review_plans(trace, plans, warmup_fraction=0.5)
    assert len(report.plan_reviews) == len(plans) >= 2


def test_replay_refuses_a_warmup_outside_0_1_without_hashes() -> None:
    """A trace without hashes gets the same warm-up check as one whose cache is replayed."""
    import pyarrow as pa

    from kvadvisor.errors import ConfigError
    from kvadvisor.pipeline.review import replay_trace
    from kvadvisor.trace.model import Trace

    table = pa.table({"arrival_s": ARRIVAL, "input_tokens": INPUT, "output_tokens": OUTPUT})
    trace = Trace(table=table, block_tokens=None, source_format="canonical", source_path="t")
    with pytest.raises(ConfigError, match="warmup fraction 1.5"):
        replay_trace(trace, 1.5)
    replay, _ = replay_trace(trace, 0.5)
    assert replay.warmup_requests == 2 and replay.hit_tokens_at is None


# -- the facts the rules read -----------------------------------------------------------------
def _tier_facts(engines: dict[str, Any], model: str = "llama-3.1-70b", tp: int = 8):
    """The nvme tier's facts (a scope dict of name -> value) for a plan with these engines."""
    from kvadvisor.planreview.review import plan_scopes
    from kvadvisor.rules import RuleScope

    doc = {
        "name": "io",
        "model": {"name": model, "tp": tp},
        "stages": {
            "prefill": {
                "count": 1,
                "gpu_kv_pool": "400 B",
                "engines": engines,
                "tiers": [
                    {"name": "nvme", "storage": "kioxia-cm6", "devices": 8, "capacity": "8 KB"}
                ],
            }
        },
    }
    from kvadvisor.planreview.perf import plan_perf

    plan = check_plan("p.yaml", doc)
    _, scopes = plan_scopes(plan, REPLAY, plan_perf(plan))
    (tier,) = [s for s in scopes if s.scope is RuleScope.TIER]
    return {k: v.value for k, v in tier.facts.items()}


@pytest.mark.parametrize(
    ("engines", "io_bytes", "layer_first"),
    [
        # Llama-3.1-70B: 2 x 80 layers x 8 KV heads x 128 x 2 B = 327,680 B per token, so
        # 40,960 B per token on each of 8 ranks and 512 B per token per layer per rank.
        ({"lmcache": {"chunk_size": 256}}, 256 * 40_960, False),
        ({"lmcache": {"chunk_size": 16, "use_layerwise": True}}, 16 * 512, True),
        ({"vllm": {"block-size": 16}}, 16 * 512, True),
        ({"sglang-hicache": {"page-size": 64}}, 64 * 40_960, False),
        ({"dynamo-kvbm": {}, "vllm": {"block-size": 16}}, 16 * 40_960, False),
        ({}, 256 * 40_960, False),  # no engine: LMCache's default chunk
    ],
)
def test_the_io_size_the_engine_really_issues(engines, io_bytes, layer_first) -> None:
    """Page x KV bytes per token / TP shard, / layers when the engine moves it layer by layer."""
    f = _tier_facts(engines)
    assert f["stage_kv_layer_first"] is layer_first
    assert f["tier_io_bytes"] == io_bytes
    # Kioxia CM6: 4,200 MB/s and 170k write IOPS at 4 KiB (catalog).
    assert f["tier_efficient_io_bytes"] == pytest.approx(4.2e9 / 170_000)
    assert f["tier_io_bandwidth_share"] == pytest.approx(min(1.0, 170_000 * io_bytes / 4.2e9))
    assert f["tier_write_amplification"] == math.ceil(io_bytes / 4096) * 4096 / io_bytes


def test_mla_kv_is_not_sharded() -> None:
    """DeepSeek-V3's latent is whole on every rank: a 1-token SGLang page is one token's KV."""
    f = _tier_facts({"sglang-hicache": {"page-size": 1}}, model="deepseek-v3", tp=8)
    assert f["stage_kv_shard_ranks"] == 1
    # 61 layers x (kv_lora_rank 512 + rope 64) x 2 bytes (the plan's kv_dtype, bf16):
    # 70,272 B, written as 18 units of 4 KiB.
    assert f["tier_io_bytes"] == 61 * (512 + 64) * 2 == 70_272
    assert f["tier_write_amplification"] == pytest.approx(18 * 4096 / 70_272)


def test_devices_each_direction_needs() -> None:
    """Devices for the p99 at 80%, for the peak, for the capacity: ceil(devices x share)."""
    f = _tier_facts({"lmcache": {"chunk_size": 256}})
    # 8 KB on drives sold up to 30.72 TB: one holds it.
    assert f["tier_devices"] == 8 and f["tier_devices_for_capacity"] == 1
    peak, p99 = f["tier_utilization_peak"], f["tier_utilization_p99"]
    assert f["tier_devices_for_peak"] == max(1, math.ceil(8 * peak))
    assert f["tier_devices_for_p99"] == max(1, math.ceil(8 * p99 / 0.8))
    assert f["tier_devices_needed"] == max(f["tier_devices_for_p99"], 1)


# -- RV14: both stages in one deployment ------------------------------------------------------
def _two_stage_plan(prefill: str | None, decode: str | None):
    """A disaggregated plan on catalog instances (or none), tiers left out: RV14 needs none."""

    def stage(instance: str | None) -> dict[str, Any]:
        return {"count": 1, "gpu_kv_pool": "400 B"} | ({"instance": instance} if instance else {})

    return check_plan(
        "plan.yaml",
        {
            "name": "split",
            "model": {"kv_bytes_per_token": KVB, "tp": 8},
            "stages": {"prefill": stage(prefill), "decode": stage(decode)},
        },
    )


@pytest.mark.parametrize(
    ("prefill", "decode", "status"),
    [
        ("p5en.48xlarge", "p5.48xlarge", "pass"),  # both AWS
        ("dgx-h200", "dgx-b200", "pass"),  # both on your own servers
        ("p5en.48xlarge", "Standard_ND96isr_H200_v5", "fail"),  # AWS prefill, Azure decode
        ("a3-ultragpu-8g", "dgx-h200", "fail"),  # GCP prefill, your own decode
        ("p5en.48xlarge", None, "skip"),  # decode names no catalog instance
    ],
)
def test_stages_in_one_deployment(prefill, decode, status) -> None:
    """RV14 fires when prefill and decode run with two providers, stays quiet within one.

    The rule the advisor applies (deploy.same_deployment, docs/catalog.md): each request's KV
    moves from prefill to decode over one network, which two deployments do not share.
    """
    review = review_plan(_two_stage_plan(prefill, decode), REPLAY, PlanPerf(KVB), window_s=1.0)
    (rv14,) = _checks(review, "RV14")
    assert rv14.status == status and rv14.stage == "both"
    if status == "fail":
        assert rv14 in review.findings and rv14.severity == "error"
        assert prefill in rv14.message and decode in rv14.message
        assert "two deployments do not share" in rv14.message
    if status == "pass":
        assert prefill in rv14.message and decode in rv14.message
    if status == "skip":
        assert "decode names no catalog instance" in rv14.message


def test_aggregated_and_single_stage_plans_have_no_rv14() -> None:
    """A plan without both a prefill and a decode stage moves no KV between two stages."""
    assert not _checks(review_plan(_plan(), REPLAY, PlanPerf(KVB), window_s=1.0), "RV14")
