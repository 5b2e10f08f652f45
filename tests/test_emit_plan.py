"""`--emit plan`: the recommended deployment as plan files, one per engine, review and replay read.

Values are worked out by hand from tests/emit_fixtures.py: one p5e.48xlarge per stage (8 H200
of 141 GiB), TP 2, a 1,600 GiB host tier, 8,000 GiB of NVMe on prefill; the stage profile gives
weights and KV 90% of each GPU, the weights take 70 GB / TP per GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from emit_fixtures import FSX, GIB, HOST, NVME, WEIGHTS
from emit_fixtures import emit_report as _report

import kvadvisor
from kvadvisor.emit import TARGETS, emit_all
from kvadvisor.plan import load_plan

ENGINES = [t for t in TARGETS if t != "plan"]
TRACE = (
    Path(__file__).resolve().parents[1] / "sample_traces" / "mooncake_conversation_head.jsonl.gz"
)
# The GPU KV pool of one instance: 8 GPUs x (90% of 141 GiB - 35 GB of weights at TP 2).
POOL_BYTES = 8 * (0.9 * 141 * GIB - WEIGHTS / 2)


def _plans(report, engines, tmp_path: Path) -> dict[str, Path]:
    """Write every file of ``engines`` + plan into tmp_path; {plan file name: path}."""
    for name, text in emit_all(report, [*engines, "plan"], "kvadvisor analyze t").items():
        (tmp_path / name).write_text(text)
    return {p.name: p for p in tmp_path.glob("plan*.yaml")}


def _doc(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_one_engine_writes_plan_yaml_several_write_one_plan_each(tmp_path: Path) -> None:
    """plan.yaml for one engine (or none); plan-<engine>.yaml for each of several."""
    for case in ("one", "none", "several"):
        (tmp_path / case).mkdir()
    assert list(_plans(_report(), ["vllm"], tmp_path / "one")) == ["plan.yaml"]
    assert list(_plans(_report(), [], tmp_path / "none")) == ["plan.yaml"]
    several = _plans(_report(), ENGINES, tmp_path / "several")
    assert sorted(several) == sorted(f"plan-{e}.yaml" for e in ENGINES)


def test_the_deployment_and_the_advisor_tiers_without_an_engine(tmp_path: Path) -> None:
    """No engine: the advisor's tiers and chunk, parallelism and GPU pool stated, no files."""
    doc = _doc(_plans(_report(), [], tmp_path)["plan.yaml"])
    assert doc["topology"] == "disaggregated"
    pre = doc["stages"]["prefill"]
    assert pre["instance"] == "p5e.48xlarge" and pre["count"] == 1
    assert pre["gpus_per_replica"] == 2 and pre["replicas_per_instance"] == 4
    assert pre["chunk_tokens"] == 256 and "engine_files" not in pre
    assert [t["name"] for t in pre["tiers"]] == [HOST.name, NVME.name]
    assert [t["scope"] for t in pre["tiers"]] == ["instance", "instance"]
    assert pre["tiers"][1]["capacity"] == "8000 GiB" and pre["tiers"][1]["devices"] == 4
    plan = load_plan(tmp_path / "plan.yaml")
    stage = plan.stage("prefill")
    assert stage is not None
    # Rounded up to a millionth of a GiB, so the engine sizes (rounded down) stay within it.
    assert stage.gpu_kv_pool_bytes == pytest.approx(POOL_BYTES, abs=1e-6 * GIB)
    assert stage.gpu_kv_pool_bytes >= POOL_BYTES


def test_vllm_plan_keeps_the_tiers_vllm_was_given(tmp_path: Path) -> None:
    """Native vLLM offloading holds CPU memory only: the NVMe tier is not in its plan.

    Its token budget is the one in its launch files: prefill 10,000 (the mean prompt, above
    vllm serve's 8,192 on an H200), decode 8,192; decode offloads every block it computes.
    """
    doc = _doc(_plans(_report(), ["vllm"], tmp_path)["plan.yaml"])
    pre, dec = doc["stages"]["prefill"], doc["stages"]["decode"]
    assert [t["name"] for t in pre["tiers"]] == [HOST.name]
    # the router file every stage sits behind is listed too (review lints its placeholders)
    assert pre["engine_files"] == ["vllm-prefill.sh", "vllm-router.sh"]
    assert pre["scheduler"] == {"max_num_batched_tokens": 10_000}
    assert dec["scheduler"] == {"max_num_batched_tokens": 8192}
    assert dec["save_decode_kv"] is True and "save_decode_kv" not in pre
    assert "chunk_tokens" not in pre  # the engine's own I/O unit comes from its files


@pytest.mark.parametrize(
    ("engine", "prefill", "decode", "saves"),
    [
        # LMCache: host and local disk on prefill, host on decode with save_decode_cache.
        ("lmcache", [HOST.name, NVME.name], [HOST.name], True),
        # SGLang: the file backend on the NVMe; decode keeps no host pool without a shared L3.
        ("sglang-hicache", [HOST.name, NVME.name], [], False),
        # KVBM runs on prefill workers only (decode takes the KV over NIXL).
        ("dynamo-kvbm", [HOST.name, NVME.name], [], False),
        # Mooncake: every node gives the pool its host tier; decode's connector only loads.
        ("mooncake", [HOST.name, NVME.name], [HOST.name], False),
    ],
)
def test_each_engine_plan_has_the_engine_tiers(tmp_path, engine, prefill, decode, saves) -> None:
    """The tiers an engine's files configure, and whether its decode saves KV."""
    doc = _doc(_plans(_report(), [engine], tmp_path)["plan.yaml"])
    pre, dec = doc["stages"]["prefill"], doc["stages"]["decode"]
    assert [t["name"] for t in pre["tiers"]] == prefill
    assert [t["name"] for t in dec["tiers"]] == decode
    assert dec["save_decode_kv"] is saves


def test_sglang_decode_offload_to_a_shared_l3_is_in_its_plan(tmp_path: Path) -> None:
    """With FSx on both stages SGLang decode offloads to it: host + FSx, saving KV."""
    report = _report(prefill=(HOST, FSX), decode=(HOST, FSX))
    doc = _doc(_plans(report, ["sglang-hicache"], tmp_path)["plan.yaml"])
    dec = doc["stages"]["decode"]
    assert [t["name"] for t in dec["tiers"]] == [HOST.name, FSX.name]
    assert [t["scope"] for t in dec["tiers"]] == ["instance", "pooled"]
    assert dec["save_decode_kv"] is True


def test_aggregated_plan_is_one_serving_stage(tmp_path: Path) -> None:
    """One stage: the plan's serving block, topology aggregated, no P/D keys."""
    report = _report(tp=4, decode=None)
    doc = _doc(_plans(report, ["vllm"], tmp_path)["plan.yaml"])
    assert doc["topology"] == "aggregated" and list(doc["stages"]) == ["serving"]
    serving = doc["stages"]["serving"]
    assert serving["gpus_per_replica"] == 4 and serving["replicas_per_instance"] == 2
    assert (
        serving["engine_files"] == ["vllm-router.sh", "vllm-serving.sh"]
        and "save_decode_kv" not in serving
    )
    plan = load_plan(tmp_path / "plan.yaml")
    assert plan.topology == "aggregated"
    assert plan.stage("serving").engines["vllm"]["kv-offloading-size"] == 800


@pytest.mark.parametrize("engine", ENGINES)
def test_replay_runs_each_engine_plan(tmp_path: Path, engine) -> None:
    """`kvadvisor replay` reads the plan: parallelism, pool, page, budget and tiers as written.

    The page is the engine's (SGLang --page-size 64: the trace's 512-token block and the
    best-practice 64; vLLM's 16-token block elsewhere); the pool per replica is the instance's
    pool over its 4 replicas, in KV bytes of one replica (both TP ranks).
    """
    path = _plans(_report(), ENGINES, tmp_path)[f"plan-{engine}.yaml"]
    doc = _doc(path)
    result = kvadvisor.replay(TRACE, path).replay
    assert result.deployment.topology == "disaggregated"
    page = 64 if engine == "sglang-hicache" else 16
    # Dynamo's workers take vLLM's budget flag; SGLang's chunk is written only as replayed
    budget = 8192 if engine == "sglang-hicache" else 10_000
    for stage in result.stages:
        plan_stage = doc["stages"][stage.role.value]
        assert stage.instances == 1 and stage.replicas == 4 and stage.gpus_per_replica == 2
        assert stage.page_tokens == page
        assert stage.pool_tokens_per_replica == pytest.approx(POOL_BYTES / 4 / 327_680, abs=2)
        want = budget if stage.role.value == "prefill" else 8192
        assert stage.max_batched_tokens == want
        tiers = [t.name for t in result.tiers if t.stage == stage.role]
        assert tiers == [t["name"] for t in plan_stage["tiers"]]
