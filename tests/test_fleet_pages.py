"""Engines cache whole KV pages: a prefix hit ends at the last full page (docs/replay.md R4).

The Bailian sample is hashed in 16-token blocks; replayed at 64-token pages (SGLang HiCache's,
FlashMLA's) each request's hit is its 16-token hit rounded down to a multiple of 64, and the
partial page is recomputed. The routing is the same either way (round robin, one replica).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvadvisor.fleet import run_replay
from kvadvisor.fleet.hits import TraceArrays
from kvadvisor.plan import load_plan
from kvadvisor.trace import read_trace

TRACE = Path(__file__).resolve().parents[1] / "sample_traces" / "bailian_example.jsonl"
PLAN = """\
name: pages
model: {{name: qwen3-32b}}
stages:
  serving:
    instance: p5en.48xlarge
    count: 1
    gpus_per_replica: 8
    router: round_robin
    scheduler: {{page_tokens: {page}}}
    tiers: []
"""


def _hits(tmp_path: Path, page: int) -> np.ndarray:
    path = tmp_path / f"plan-{page}.yaml"
    path.write_text(PLAN.format(page=page), encoding="utf-8")
    run = run_replay(TraceArrays.from_trace(read_trace(TRACE)), load_plan(path))
    (stage,) = run.stages
    assert stage.spec.scheduler.page_tokens == page
    return np.asarray(stage.hit_tokens, dtype=np.int64)


def test_a_coarser_page_loses_the_partial_page_of_each_hit(tmp_path: Path) -> None:
    """Hits at 64-token pages are the 16-token hits rounded down to 64, request by request."""
    trace = read_trace(TRACE)
    assert trace.block_tokens == 16
    fine, coarse = _hits(tmp_path, 16), _hits(tmp_path, 64)
    assert fine.sum() > 0 and (fine % 16 == 0).all()
    # the case: some hits end inside a 64-token page
    assert (fine % 64 != 0).any()
    assert np.array_equal(coarse, fine // 64 * 64)
    assert coarse.sum() < fine.sum()
