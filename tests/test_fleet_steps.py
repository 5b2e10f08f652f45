"""Busy time, occupancy, the front-end cost and the step log, each against a hand computation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner

import kvadvisor
from kvadvisor.catalog.models import get_model
from kvadvisor.cli import EXIT_OK, app
from kvadvisor.fleet import ReplayOptions, TraceArrays, request_columns, run_replay, summarize
from kvadvisor.fleet.build import kv_model

# Toy resolved fleets, built by hand: a test sets one mechanism's input directly (a plan
# reaches it only through defaults), which only tests and benchmarks may (test_architecture).
from kvadvisor.fleet.engine import run_resolved
from kvadvisor.fleet.resolved import (
    ResolvedFleet,
    ResolvedScheduler,
    ResolvedStage,
    ResolvedTier,
    Scope,
)
from kvadvisor.fleet.steps import STEP_COLUMNS, busiest_minute, step_batches
from kvadvisor.perfmodel.step import StepTable
from kvadvisor.plan import load_plan
from kvadvisor.trace import read_trace
from kvadvisor.vocab import Stage, Topology

REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO / "sample_traces" / "mooncake_conversation_head.jsonl.gz"
STEP_S = 0.1  # every step takes this long, whatever it holds
LOAD_S = 5.0  # request B's 48-token prefix crosses the tier in this long

PLAN = """\
name: agg
model: {name: qwen3-32b}
stages:
  serving:
    instance: p5e.48xlarge
    count: 1
    gpus_per_replica: 2
    router: least_outstanding
    scheduler: {max_num_batched_tokens: 4096, max_num_seqs: 128}
    tiers:
      - name: nvme
        storage: nvme-gen4-x4
        devices: 8
        capacity: 10 TB
        write_buffer: 4 GB
"""


def constant_step(seconds: float) -> StepTable:
    """A step that takes ``seconds`` whatever it holds."""
    grid = np.array([1.0, 2.0, 4.0])
    return StepTable("constant", grid, np.full(3, seconds), 0.0, 0.0, 1)


def hand_trace(**stage_kw: float) -> tuple[TraceArrays, ResolvedFleet]:
    """Three one-token requests on one replica whose GPU pool holds 4 blocks of 16 tokens.

    A (t = 0) prefills blocks 0-2; C (t = 10) prefills blocks 10-13, pushing A's out of the
    GPU's prefix cache; B (t = 20) repeats A's three blocks plus one, so its 48-token prefix is
    loaded from the tier (LOAD_S seconds at the tier's bandwidth) while B holds its pages.
    """
    arrays = TraceArrays.of(
        np.array([0.0, 10.0, 20.0]),
        np.array([48, 64, 64]),
        np.ones(3, np.int64),
        offsets=np.array([0, 3, 7, 11]),
        hashes=np.array([0, 1, 2, 10, 11, 12, 13, 0, 1, 2, 20]),
        block_tokens=16,
    )
    kv = kv_model(get_model("qwen3-32b"))
    tier = ResolvedTier("disk", "ssd", Scope.REPLICA, None, 48 * kv.bytes_per_token / LOAD_S, 1e15)
    stage = ResolvedStage(
        role=Stage.SERVING,
        instances=1,
        replicas_per_instance=1,
        gpus_per_replica=1,
        step=constant_step(STEP_S),
        pool_tokens=64,
        scheduler=ResolvedScheduler(8192, 16, 16),
        tiers=(tier,),
        **stage_kw,  # type: ignore[arg-type]
    )
    return arrays, ResolvedFleet("hand", Topology.AGGREGATED, (stage,), kv)


def test_busy_is_time_in_steps_and_occupancy_time_holding_requests() -> None:
    """Three one-step requests: busy 3 steps; occupied also through B's 5 s load."""
    arrays, dep = hand_trace()
    run = run_resolved(arrays, dep)
    st = run.stages[0]
    assert list(st.loaded_tokens) == [0, 0, 48]
    # B: admitted at 20 s holding its pages, loads 5 s, then its 16-token step
    assert run.end_s == pytest.approx(20.0 + LOAD_S + STEP_S, abs=1e-12)
    busy = 3 * STEP_S
    occupied = STEP_S + STEP_S + (LOAD_S + STEP_S)
    assert st.busy_s[0] == pytest.approx(busy, abs=1e-12)
    assert st.occupied_s[0] == pytest.approx(occupied, abs=1e-12)
    summary = summarize(run).stages[0]
    assert summary.busy_fraction == pytest.approx(busy / run.end_s, rel=1e-12)
    assert summary.occupancy_fraction == pytest.approx(occupied / run.end_s, rel=1e-12)


def test_frontend_cost_lengthens_the_admitting_step_and_ttft() -> None:
    """R13: each request's fixed + per-token front-end work runs in the step admitting it."""
    fixed, per_token = 0.02, 1e-4
    arrays, dep = hand_trace(frontend_fixed_s=fixed, frontend_per_token_s=per_token)
    run = run_resolved(arrays, dep, ReplayOptions(step_log=True))
    cols = request_columns(run)
    fe = fixed + per_token * np.array([48, 64, 64])
    # A and C: one step each, its compute plus their front end
    assert cols["ttft_s"][:2] == pytest.approx(STEP_S + fe[:2], abs=1e-12)
    # B: its front end runs alone at admission (its KV is loading), the load overlaps it
    assert cols["ttft_s"][2] == pytest.approx(LOAD_S + STEP_S, abs=1e-12)
    st = run.stages[0]
    assert st.busy_s[0] == pytest.approx(3 * STEP_S + fe.sum(), abs=1e-12)
    assert cols["prefill_gpu_s"] == pytest.approx(STEP_S + fe, abs=1e-12)
    rows = next(step_batches(run))
    assert list(rows["frontend_s"]) == pytest.approx([fe[0], fe[1], fe[2], 0.0], abs=1e-15)
    assert list(rows["prefill_tokens"]) == [48, 64, 0, 16]
    assert list(rows["loads_in_flight"]) == [0, 0, 1, 0]


def test_step_log_rows_are_the_steps_and_their_time_the_gpu_seconds(tmp_path: Path) -> None:
    """On the Mooncake sample: one row per step; sum of step times x GPUs = GPU-seconds."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    arrays = TraceArrays.from_trace(read_trace(MOONCAKE))
    run = run_replay(arrays, load_plan(plan), ReplayOptions(step_log=True))
    res = summarize(run)
    batches = list(step_batches(run, rows=2_000))
    assert len(batches) > 1  # written a batch at a time
    assert all(set(b) == set(STEP_COLUMNS) for b in batches)
    durations = np.concatenate([b["duration_s"] for b in batches])
    assert durations.size == res.counts.steps
    gpus = run.stages[0].spec.gpus_per_replica
    gpu_s = res.stage_split.prefill_gpu_s + res.stage_split.decode_gpu_s
    assert durations.sum() * gpus == pytest.approx(gpu_s, rel=1e-9)
    replicas = np.concatenate([b["replica"] for b in batches])
    per_replica = np.bincount(replicas, weights=durations, minlength=run.stages[0].spec.replicas)
    assert per_replica == pytest.approx(run.stages[0].busy_s, rel=1e-9)
    # fast-forwarded decode steps: their expanded starts follow one another exactly
    starts = np.concatenate([b["start_s"] for b in batches])
    for r in range(run.stages[0].spec.replicas):
        mine = replicas == r
        assert (np.diff(starts[mine]) >= durations[mine][:-1] * (1 - 1e-9)).all()
    tokens = np.concatenate([b["prefill_tokens"] for b in batches])
    assert tokens.sum() == pytest.approx(
        float((arrays.input_tokens - run.stages[0].hit_tokens).sum()), rel=0.01
    )
    found = busiest_minute(run)
    assert found is not None
    role, replica, start, rows = found
    in_minute = (replicas == replica) & (starts >= start) & (starts < start + 60.0)
    assert rows["duration_s"].sum() == pytest.approx(durations[in_minute].sum(), rel=1e-12)
    # no other replica-minute spends more time in steps
    minute = np.floor(starts / 60.0)
    for r in np.unique(replicas):
        for m_ in np.unique(minute[replicas == r]):
            cell = durations[(replicas == r) & (minute == m_)].sum()
            assert cell <= rows["duration_s"].sum() * (1 + 1e-12)
    assert role == "serving"


def test_steps_out_writes_the_step_log_and_html_charts_the_busiest_minute(
    tmp_path: Path,
) -> None:
    """`replay --steps-out` writes one row per step; the page charts the busiest minute."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    out, page = tmp_path / "steps.parquet", tmp_path / "r.html"
    args = ["replay", str(MOONCAKE), "--plan", str(plan), "--steps-out", str(out), "-o"]
    result = CliRunner().invoke(app, [*args, str(page), "-o", str(tmp_path / "r.json")])
    assert result.exit_code == EXIT_OK, result.output
    table = pq.read_table(out)
    assert tuple(table.column_names) == STEP_COLUMNS
    doc = kvadvisor.replay(MOONCAKE, plan)
    assert table.num_rows == doc.replay.counts.steps
    split = doc.replay.stage_split
    assert table["duration_s"].to_numpy().sum() * 2 == pytest.approx(
        split.prefill_gpu_s + split.decode_gpu_s, rel=1e-9
    )
    html = page.read_text(encoding="utf-8")
    assert 'id="steps"' in html and "The busiest minute, step by step" in html
    assert not list(tmp_path.glob("*.tmp*"))  # written whole, no temporary left


def test_steps_out_under_a_file_is_a_one_line_error_before_the_replay(tmp_path: Path) -> None:
    """A --steps-out whose parent is a file is refused before the trace is read: exit 2."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    bad = plan / "steps.parquet"
    result = CliRunner().invoke(
        app, ["replay", str(MOONCAKE), "--plan", str(plan), "--steps-out", str(bad)]
    )
    one_error_line(result, "--steps-out", "is not a directory")
