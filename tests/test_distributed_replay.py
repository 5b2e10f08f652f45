"""The replay on Dask (issue 27): replica groups and time slices as tasks, the local figures.

Like tests/test_distributed.py, the cluster tests need the [distributed] extra (the test extra
installs it, so CI runs them); without it they say they skipped, and why.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import MOONCAKE_HEAD_JSONL_GZ

import kvadvisor
from kvadvisor.execute import EXTRA

REPO = Path(__file__).resolve().parents[1]
# 6 instances whose NVMe tier joins each one's 4 replicas: the stage replays as 6 groups.
FLEET = REPO / "benchmarks" / "data" / "replay_slices_fleet.yaml"
STAMP = "2026-01-01T00:00:00+00:00"


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """The tasks a DaskExecutor submits in the test, by their function's name."""
    pytest.importorskip("distributed", reason=f"the [distributed] extra is not installed: {EXTRA}")
    from kvadvisor.execute import cluster

    sent: Counter = Counter()
    submit = cluster.DaskExecutor.submit

    def counted(self: cluster.DaskExecutor, fn: object, *args: object) -> object:
        sent[getattr(fn, "__name__", "?")] += 1
        return submit(self, fn, *args)

    monkeypatch.setattr(cluster.DaskExecutor, "submit", counted)
    return sent


def _replay(**how: object) -> dict:
    result = kvadvisor.replay(MOONCAKE_HEAD_JSONL_GZ, FLEET, generated_at=STAMP, **how)
    return json.loads(result.to_json())


def test_replica_groups_on_two_workers_give_the_local_replay(counting: Counter) -> None:
    """`replay --workers 2`: the 6 groups are 6 tasks; the report equals the local one."""
    local = _replay()
    distributed = _replay(workers=2)
    assert counting == {"group_task": 6}
    assert local["replay"]["requests"]["count"] == 400
    assert distributed == local


def test_time_slices_on_two_workers_give_the_local_slices(counting: Counter) -> None:
    """Slices are tasks (each replays its groups on its worker); the figures are the local ones."""
    how = {"slice_s": 60.0, "slice_warmup_s": 30.0}
    local = _replay(**how)
    distributed = _replay(workers=2, **how)
    assert counting == {"slice_task": 3}  # 400 requests over 2.5 minutes
    assert distributed == local


def test_the_verdict_replays_its_groups_on_the_workers(counting: Counter) -> None:
    """`analyze --workers 2` with the verdict's replay: its groups went out; same report.

    The verdict on the Mooncake head is 6 independent replicas (a group each), so the replay
    sends at least 6 group tasks (more when a stage is doubled to carry the load). One
    provider's search: the verdict's replay is what is compared, and the other providers'
    searches only add tasks of the kind tests/test_distributed.py checks.
    """
    how = {"generated_at": STAMP, "providers": ("aws",)}
    local = json.loads(kvadvisor.analyze(MOONCAKE_HEAD_JSONL_GZ, **how).to_json())
    distributed = kvadvisor.analyze(MOONCAKE_HEAD_JSONL_GZ, workers=2, **how)
    replicas = sum(s["replicas"] for s in local["replay"]["stages"])
    assert replicas > 1
    assert counting["group_task"] >= replicas
    assert json.loads(distributed.to_json()) == local
