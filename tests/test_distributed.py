"""The deployment search on Dask (issue 27): the local report from a cluster, one-line errors.

The cluster tests need the [distributed] extra (the test extra installs it, so CI runs them);
without it they say they skipped, and why. The errors for a missing extra are checked with
Dask hidden from the import system, so they run everywhere.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

import pytest
from cli_checks import one_error_line
from conftest import MOONCAKE_HEAD_JSONL_GZ, SAMPLES
from typer.testing import CliRunner

import kvadvisor
from kvadvisor import execute, phases
from kvadvisor.advice.sizing import Outcome, Replayer, compact
from kvadvisor.cli import app
from kvadvisor.execute import EXTRA, SERIAL, open_executor

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()
STAMP = "2026-01-01T00:00:00+00:00"  # one clock for both runs: the reports compare whole
SMALL = SAMPLES / "vllm_bench_old.json"  # 30 requests: the errors come before any analysis


def _needs_dask() -> None:
    pytest.importorskip("distributed", reason=f"the [distributed] extra is not installed: {EXTRA}")


def _report(**how: object) -> dict:
    """The JSON report of the Mooncake head (the verdict's closed-loop replay off).

    400 real requests with their block hashes: the search and its replays run as on the whole
    trace (what is compared is where they run, not a figure of the whole trace), at a fraction
    of its analysis time.
    """
    report = kvadvisor.analyze(MOONCAKE_HEAD_JSONL_GZ, generated_at=STAMP, replay=False, **how)
    return json.loads(report.to_json())


@dataclass
class Runs:
    """The two reports, the phase each task was sent in, and the serial run's whole outcomes."""

    local: dict
    distributed: dict
    sent: list[str]  # per task sent to the cluster: the phase the analysis was in
    outcomes: list[Outcome]  # the serial run's whole replays (what a task used to return)


@pytest.fixture(scope="module")
def both() -> Runs:
    """The report in one process, on a local cluster of 2 processes, and the tasks it sent."""
    _needs_dask()
    from kvadvisor.execute import cluster

    outcomes: list[Outcome] = []
    replay_whole = Replayer.replay_whole

    def kept(self: Replayer, *args: object) -> Outcome:
        out = replay_whole(self, *args)  # type: ignore[arg-type]
        outcomes.append(out)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Replayer, "replay_whole", kept)
        local = _report()
    sent: list[str] = []
    phase = [""]
    enter = phases.enter
    submit = cluster.DaskExecutor.submit_kept

    def entered(name: str, detail: str = "") -> None:
        phase[0] = name
        enter(name, detail)

    def counted(self: cluster.DaskExecutor, *args: object) -> object:
        sent.append(phase[0])
        return submit(self, *args)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(phases, "enter", entered)
        mp.setattr(cluster.DaskExecutor, "submit_kept", counted)
        distributed = _report(workers=2)
    return Runs(local, distributed, sent, outcomes)


def test_two_workers_give_the_local_report_figure_for_figure(both: Runs) -> None:
    """Every figure, the ranking and every verdict's text equal the serial run's."""
    local, distributed = both.local, both.distributed
    verdicts = local["recommendation"]["verdict"]
    assert verdicts["primary"] is not None  # a real search: a chosen deployment to compare
    assert [v["provider"] for v in verdicts["verdicts"]] == [
        v["provider"] for v in distributed["recommendation"]["verdict"]["verdicts"]
    ]
    assert distributed == local


def test_the_search_and_the_checks_replayed_on_the_workers(both: Runs) -> None:
    """Every replay the report counts went to the cluster as a task, the checks' too.

    The report counts the search's replays and the checks of each pick; the tier values and
    the stresses replay more (on replayers of their own, not counted), also as tasks.
    """
    replayed = both.local["recommendation"]["verdict"]["replayed"]
    assert len(both.sent) >= replayed
    # A cluster announces each provider's search as it ends: its first replays are sent before.
    checks = both.sent.index(phases.CHECK)
    assert checks > 0  # the search's replays
    assert set(both.sent[checks:]) == {phases.CHECK}  # picks checked, tiers valued, stressed
    assert len(both.sent) - checks >= 5  # each provider's pick at least, and the stresses


def test_a_task_returns_only_what_the_search_reads(both: Runs) -> None:
    """The compact outcome keeps every figure; it drops the run, the plan and its document.

    What comes back pickles to a small fraction of the whole outcome.
    """
    whole = [o for o in both.outcomes if o.held is not None]
    assert len(whole) >= 10
    for out in whole:
        small, has_run = compact(out)
        assert has_run and small.run is None and not small.whole
        for f in fields(Outcome):
            if f.name not in ("held", "kept", "doc", "plan"):
                assert getattr(small, f.name) == getattr(out, f.name), f.name
        assert small.meets == out.meets and small.why_not() == out.why_not()
        assert small.doc == {} and small.plan is None  # the caller has them
        # the run is what is large: per request and per stage, so it grows with the sample
        assert len(pickle.dumps(small)) * 20 < len(pickle.dumps(out))


def test_each_worker_has_its_own_numba_cache() -> None:
    """Two worker processes never write one kernel cache (numba's index has no lock)."""
    _needs_dask()
    with open_executor(2) as ex:
        assert ex.parallel and ex.workers == 2
        # A lambda travels by value (a bound os.environ.get would carry this process's).
        dirs = ex.client.run(lambda: os.environ.get("NUMBA_CACHE_DIR"))  # type: ignore[attr-defined]
        # ... and runs with Dask's housekeeping slowed (cluster.QUIET: idle CPU, measured)
        profiling = ex.client.run(  # type: ignore[attr-defined]
            lambda: __import__("dask").config.get("distributed.worker.profile.enabled")
        )
    assert list(profiling.values()) == [False, False]
    assert len(set(dirs.values())) == 2, dirs
    assert sorted(Path(d).name for d in dirs.values()) == ["numba-dask-0", "numba-dask-1"]


def test_an_existing_scheduler_is_joined() -> None:
    """--scheduler: the cluster's own workers, checked to run this kvadvisor, each its cache."""
    _needs_dask()
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
    ) as existing:
        with open_executor(scheduler=existing.scheduler_address) as ex:
            assert ex.parallel and ex.workers == 1
            assert ex.submit(sum, [1, 2, 3]).result() == 6
            dirs = ex.client.run(lambda: os.environ.get("NUMBA_CACHE_DIR"))  # type: ignore[attr-defined]
    assert [Path(d).name for d in dirs.values()] == ["numba-dask-0"]


def test_one_process_is_the_default_and_imports_no_dask() -> None:
    """Without --workers the search runs here, exactly as before: Dask is not even imported."""
    assert open_executor() is SERIAL
    code = (
        "import sys, kvadvisor; "
        f"kvadvisor.analyze({str(SMALL)!r}, replay=False); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.fixture
def without_dask(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dask as if not installed: importing it fails as a missing module does."""
    for name in list(sys.modules):
        if name.split(".")[0] in ("dask", "distributed") or name == "kvadvisor.execute.cluster":
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(execute, "cluster", raising=False)  # imported before: import it again
    monkeypatch.setitem(sys.modules, "dask", None)
    monkeypatch.setitem(sys.modules, "distributed", None)


@pytest.mark.usefixtures("without_dask")
@pytest.mark.parametrize("argv", [["--workers", "2"], ["--scheduler", "tcp://127.0.0.1:8786"]])
def test_without_the_extra_one_line_names_it(argv: list[str]) -> None:
    """--workers or --scheduler without Dask: exit 2, one line naming the extra to install."""
    res = runner.invoke(app, ["analyze", str(SMALL), "-q", *argv])
    one_error_line(res, argv[0], EXTRA, "not installed")


def test_an_unreachable_scheduler_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduler nobody listens at: exit 2, one line with the address and the reason."""
    _needs_dask()
    from kvadvisor.execute import cluster

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 2)
    address = "tcp://127.0.0.1:9"  # the discard port: nothing listens there
    res = runner.invoke(app, ["analyze", str(SMALL), "-q", "--scheduler", address])
    one_error_line(res, address, "cannot reach the Dask scheduler")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--workers", "0"], "at least 1"),
        (["--workers", "2", "--scheduler", "tcp://127.0.0.1:8786"], "give one"),
    ],
)
def test_bad_worker_options_are_one_line(argv: list[str], needle: str) -> None:
    """No workers, or workers and a scheduler both: exit 2, one line."""
    res = runner.invoke(app, ["analyze", str(SMALL), "-q", *argv])
    one_error_line(res, needle)


def test_a_plan_travels_without_the_catalogs_its_replayer_has() -> None:
    """A replay sent to a worker leaves its plan's catalogs behind and gets the same outcome.

    The catalogs are most of a plan pickled; the worker's copy of the replayer has them. A plan
    checked against other catalogs keeps its own.
    """
    from kvadvisor.advice.plans import fleet_plan, stage_plan
    from kvadvisor.advice.search import SearchSpec
    from kvadvisor.advice.sizing import _replay_there
    from kvadvisor.advice.space import shapes
    from kvadvisor.catalog.instances import load_instances
    from kvadvisor.catalog.models import get_model
    from kvadvisor.catalog.storage import load_storage
    from kvadvisor.fleet import TraceArrays
    from kvadvisor.plan.loader import PlanCatalogs
    from kvadvisor.vocab import Stage, Topology

    np = pytest.importorskip("numpy")
    instances, model = load_instances(), get_model("llama-3.1-8b")
    targets = {"ttft_p99_s": 5.0, "tpot_p99_s": 0.2}
    spec = SearchSpec(model, "bf16", "bf16", instances, load_storage(), targets, 0, 0, False, None)
    shape = shapes(instances["g2-standard-96"], model, "bf16", "bf16", 20_000)[0][0]
    stage = stage_plan(spec.basis, Stage.SERVING, shape, 2, ())
    plan = fleet_plan(spec.basis, "gcp", Topology.AGGREGATED, (stage,))
    n = 200
    arrays = TraceArrays.of(np.arange(n) / 4.0, np.full(n, 2048), np.full(n, 64))
    replayer = Replayer(arrays, targets, PlanCatalogs.packaged())
    written = replayer.replayed(plan)
    assert written.catalogs is replayer.catalogs.perf  # the search's plans share them
    travelling = replayer._travelling(written)
    assert travelling.catalogs is None
    assert len(pickle.dumps(travelling)) + len(pickle.dumps(written.catalogs)) // 2 < len(
        pickle.dumps(written)
    )
    cloudpickle = pytest.importorskip("cloudpickle", reason=f"needs the {EXTRA} extra")
    there = pickle.loads(cloudpickle.dumps(replayer))  # the worker's copy, as it is sent
    got, has_run = compact(_replay_there(there, Replayer.replay_whole, travelling, frozenset()))
    doc = replayer.document(plan)
    want, _ = compact(replayer.replay_whole(plan, doc, written, frozenset()))
    assert has_run and got.met and got.ttft_s
    for f in fields(Outcome):
        assert getattr(got, f.name) == getattr(want, f.name), f.name
    own = replace(written, catalogs=pickle.loads(pickle.dumps(written.catalogs)))
    assert replayer._travelling(own) is own


def test_the_runners_keep_results_until_nothing_here_holds_them() -> None:
    """Kept results and shared values stay on their worker while held here, then are dropped.

    A shared value crosses once per worker; a kept result crosses when read; what is let go
    here is forgotten there with that worker's next task. A task's error is raised here.
    """
    _needs_dask()
    import gc
    import time

    def held(dask_worker: object) -> list[tuple[int, int]]:
        actors = dask_worker.state.actors.values()  # type: ignore[attr-defined]
        return [(len(a.kept), len(a.shared)) for a in actors]

    with open_executor(2) as ex:
        data = list(range(1000))
        handle = ex.share(data)
        jobs = [ex.submit_kept(list, len, handle) for _ in range(6)]
        assert [small.result() for small, _ in jobs] == [1000] * 6
        assert jobs[0][1].get() == data  # fetched from its worker (and no longer kept there)
        counts = [c for cs in ex.client.run(held).values() for c in cs]  # type: ignore[attr-defined]
        assert sum(k for k, _ in counts) == 5
        assert all(s == 1 for k, s in counts if k) and sum(s for _, s in counts) <= 2
        del jobs, handle
        gc.collect()
        # both workers busy at once: each takes a task, and drops what it held with it
        busy = [ex.submit_kept(time.sleep, str, 0.3) for _ in range(4)]
        assert [small.result() for small, _ in busy] == ["None"] * 4
        counts = [c for cs in ex.client.run(held).values() for c in cs]  # type: ignore[attr-defined]
        assert sum(k for k, _ in counts) == 4 and sum(s for _, s in counts) == 0
        small, kept = ex.submit_kept(int, str, "not a number")
        with pytest.raises(ValueError):
            small.result()
        with pytest.raises(ValueError):
            kept.get()
