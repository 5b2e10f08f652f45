"""I/O size per tier: engine chunk, TP shard, KV layout and device unit, computed by hand."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kvadvisor.plan import PlanCatalogs, check_plan
from kvadvisor.planreview.perf import plan_perf
from kvadvisor.verifyjobs.shape import gds_support, io_shape

CATALOGS = PlanCatalogs.packaged()


def _plan(model: dict[str, Any], engines: dict[str, Any], storage: Any = "nvme-gen4-x4"):
    doc = {
        "name": "p",
        "model": model,
        "stages": {
            "prefill": {
                "count": 1,
                "engines": engines,
                "tiers": [{"name": "t", "storage": storage, "capacity": "1 TB"}],
            }
        },
    }
    plan = check_plan("p.yaml", yaml.safe_load(yaml.safe_dump(doc)), CATALOGS)
    stage = plan.stages[0]
    tier = stage.tiers[0]
    spec = CATALOGS.storage.get(tier.storage.catalog_name or "")
    return io_shape(plan, stage, tier, plan_perf(plan).kv_bytes_per_token, spec), plan


# Llama-3.1-70B, bf16: 2 (K, V) x 80 layers x 8 KV heads x 128 x 2 B = 327,680 B per token.
LLAMA70 = {"name": "llama-3.1-70b", "tp": 8}


@pytest.mark.parametrize(
    ("engines", "io_bytes", "layout", "writers"),
    [
        # LMCache chunk of 256 tokens, one object per rank: 256 x 327,680 / 8 = 10 MiB.
        ({"lmcache": {"chunk_size": 256}}, 10_485_760, "contiguous", 8),
        # use_layerwise: one object per layer: 10 MiB / 80 = 131,072 B.
        ({"lmcache": {"chunk_size": 256, "use_layerwise": True}}, 131_072, "layer_wise", 8),
        # SGLang page of 64 tokens, flat across layers (layer_first): 64 x 40,960 = 2.5 MiB.
        ({"sglang-hicache": {"page-size": 64}}, 2_621_440, "contiguous", 8),
        # page_first: K and V apart, half each: 1,310,720 B.
        (
            {"sglang-hicache": {"page-size": 64, "hicache-mem-layout": "page_first"}},
            1_310_720,
            "kv_split",
            8,
        ),
        # vLLM blocks of 16 tokens: 16 x 40,960 = 655,360 B.
        ({"vllm": {"block-size": 16}}, 655_360, "contiguous", 8),
    ],
)
def test_llama70b_tp8(engines: dict, io_bytes: int, layout: str, writers: int) -> None:
    """Each engine's chunk and layout, split over 8 ranks, in whole 4 KiB units."""
    shape, _ = _plan(LLAMA70, engines)
    assert shape.io_bytes == io_bytes
    assert shape.layout == layout
    assert shape.writers == writers
    assert shape.io_unit_bytes == 4096
    assert "nvme-gen4-x4 io_unit_bytes" in shape.io_unit_from


def test_mla_is_written_by_one_rank() -> None:
    """DeepSeek-V3: 61 x (512 + 64) x 2 B = 70,272 B per token, the same on every rank."""
    shape, _ = _plan({"name": "deepseek-v3", "tp": 8}, {"sglang-hicache": {"page-size": 64}})
    assert shape.writers == 1
    assert shape.kv_bytes_per_io == 64 * 70_272
    assert shape.io_bytes == 4_497_408  # already a multiple of 4,096


def test_fewer_kv_heads_than_ranks() -> None:
    """Qwen3-235B: 4 KV heads over TP 8 are 4 distinct shards of 2 x 94 x 128 x 2 B each."""
    shape, _ = _plan({"name": "qwen3-235b-a22b", "tp": 8}, {"lmcache": {"chunk_size": 256}})
    assert shape.writers == 4
    assert shape.io_bytes == 256 * 2 * 94 * 128 * 2  # one head per shard: 12,320,768 B
    assert "distinct shards" in shape.writers_from


def test_rounding_to_the_device_unit_and_inline_storage() -> None:
    """1,000 B/token x 16-token blocks = 16,000 B, rounded up to 16,384; no catalog: 4 KiB."""
    inline = {"kind": "ssd", "read_bandwidth": "1 GB/s", "write_bandwidth": "1 GB/s"}
    shape, plan = _plan({"kv_bytes_per_token": 1000}, {"vllm": {"block-size": 16}}, inline)
    assert shape.kv_bytes_per_io == 16_000
    assert shape.io_bytes == 16_384
    assert "no io_unit_bytes" in shape.io_unit_from
    gds, why = gds_support(plan.stages[0].tiers[0], CATALOGS.storage)
    assert not gds and "inline storage spec" in why


def test_gds_from_the_catalog() -> None:
    """nvme-gen4-x4 documents a GPUDirect Storage path (gds_support: true)."""
    _, plan = _plan(LLAMA70, {"lmcache": {"chunk_size": 256}})
    gds, why = gds_support(plan.stages[0].tiers[0], CATALOGS.storage)
    assert gds and "gds_support" in why
