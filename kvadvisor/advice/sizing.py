"""Replaying candidates and finding the fewest instances per stage that meet the SLO.

Every replay runs the Plan the search built (:mod:`kvadvisor.advice.plans`) as its written form
reads back; that written form is the cache key and the verdict's plan.
A candidate meets the SLO when the share of requests within each target reaches the target's
percentile (a request that never finished misses every target, as in the replay's own SLO
check), and its tiers keep up: p99 utilization at most :data:`TIER_P99_TARGET` and no window
above the tier (review's RV02/RV03), and a tier bought for capacity is used at least
:data:`TIER_MEAN_FLOOR` of its bandwidth on average (RV04, the seed's first cause).

The instance count of a stage is searched between a bound that cannot keep up (the analytic
busy-time bound less one) and the first count that meets the SLO: growing by
:data:`GROWTH` until one meets it, then bisecting. The SLO is assumed monotone in the count.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from kvadvisor.advice.plans import as_written
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.errors import ConfigError
from kvadvisor.execute import Executor, Kept
from kvadvisor.fleet import (
    ReplayContext,
    ReplayOptions,
    ReplayResult,
    ReplayRun,
    TraceArrays,
    replay_notes,
    request_columns,
    run_prefill_alone,
    run_replay,
    slo_percentiles,
    summarize,
)
from kvadvisor.fleet.summary import SLO_TOLERANCE
from kvadvisor.perfmodel import kv_size
from kvadvisor.plan.loader import PlanCatalogs, PlanError
from kvadvisor.plan.model import Plan
from kvadvisor.plan.writer import plan_mapping
from kvadvisor.units import Unit, format_value
from kvadvisor.units.format import MAX_DIGITS, apart, number

# Replays for the search stop this long after the last arrival: a fleet that has not drained
# by then has missed its targets (requests left unfinished miss every target).
SEARCH_DRAIN_S = 300.0
# Instances per stage the search tries at most.
MAX_INSTANCES = 64
GROWTH = 1.5
# A growth step that leaves more than this share of the shortfall is a stall; two in a row
# end the search (latency, not capacity, is what misses the target).
STALL_SHARE = 0.75
# Tier bounds every chosen tier keeps (docs/advisor.md): p99 demand within 80% of the tier,
# no window above it, and a tier bought for capacity used at least 10% on average.
TIER_P99_TARGET = 0.8
TIER_PEAK_LIMIT = 1.0
TIER_MEAN_FLOOR = 0.10
_TARGET = re.compile(r"^(ttft|tpot|e2e|queue)_p(\d{1,2}(?:\.\d+)?)_s$")


@dataclass(frozen=True, eq=False)
class Outcome:
    """One replay of a plan: whether it could run, its latencies, whether it meets the SLO.

    ``error`` says why the candidate cannot be replayed (a constraint), else it is "". The
    percentile figures (:func:`kvadvisor.fleet.slo_percentiles`, the pNN the SLO check reads:
    within a target exactly when the target is met) are seconds; ``met`` per target, and
    ``targets`` the targets in seconds. :attr:`run` is the whole replay: held here, or, for a
    replay that ran on a cluster's worker, kept there and fetched on first use (``kept``;
    :func:`compact` is what came back).
    """

    plan: Plan  # as the search built it (its prices and reasons with it)
    doc: dict[str, Any]
    error: str = ""
    met: dict[str, bool] = field(default_factory=dict)
    attainment: dict[str, float] = field(default_factory=dict)
    ttft_s: dict[str, float] = field(default_factory=dict)  # "p90", "p99" and each target's
    tpot_s: dict[str, float] = field(default_factory=dict)
    tier_problem: str = ""
    held: ReplayRun | None = None  # the run, when it is here (see :attr:`run`)
    overloaded: bool = False  # the queue grew over the arrivals: capacity, not latency, binds
    targets: dict[str, float] = field(default_factory=dict)  # "ttft_p99_s": seconds
    overload_reason: str = ""  # why the fleet did not keep up ("" when it did)
    headroom: float = 0.0  # ``targets`` are the SLO's less this share (the --headroom)
    kept: Kept | None = field(default=None, repr=False)  # the whole outcome, on a worker

    @property
    def run(self) -> ReplayRun | None:
        """The replay's per-request and per-stage results (None: a stage alone, or an error)."""
        if self.held is None and self.kept is not None:
            whole: Outcome = self.kept.get()
            return whole.held
        return self.held

    @property
    def whole(self) -> bool:
        """A whole deployment replayed: :attr:`run` is not None (read without fetching it)."""
        return self.held is not None or self.kept is not None

    @property
    def meets(self) -> bool:
        """Every target met, every tier within its bounds, and the fleet keeps up.

        A queue that grows over the arrivals is review's RV10 error however the percentiles
        read: a fleet sized on a window would fall behind on a longer one.
        """
        return (
            not self.error
            and not self.tier_problem
            and not self.overloaded
            and bool(self.met)
            and all(self.met.values())
        )

    def why_not(self) -> str:
        """The first reason it does not meet the SLO, in words ("" when it does)."""
        if self.error:
            return self.error
        missed = [k for k, ok in self.met.items() if not ok]
        if missed:
            return "misses " + ", ".join(self._miss(key) for key in missed)
        if self.tier_problem:
            return self.tier_problem
        return f"does not keep up: {self.overload_reason}" if self.overloaded else ""

    def _miss(self, key: str) -> str:
        """One missed target: "TPOT p99 101 ms > 100 ms (98.9% of requests within it)"."""
        metric, pct = _split(key)
        label = percentile_label(pct)
        got = {"ttft": self.ttft_s, "tpot": self.tpot_s}.get(metric, {}).get(label)
        target = self.targets.get(key)
        if got is None:
            figure = ""  # an e2e or queue target: its share says it
        elif not math.isfinite(got):
            figure = " unbounded (requests left unfinished)"
        elif target is None:
            figure = " " + format_value(got, Unit.SECONDS)
        else:
            figure = " " + over(got, target)
        share = self.attainment.get(key)
        within = ""
        if share is not None:
            within = f" ({apart(share, pct / 100.0, Unit.RATIO)[0]} of requests within it)"
        return f"{metric.upper()} {label}{figure}{within}"


def _split(key: str) -> tuple[str, float]:
    m = _TARGET.match(key)
    if m is None:
        raise ConfigError(f"SLO target '{key}': expected e.g. ttft_p99_s")
    return m.group(1), float(m.group(2))


def split_target(key: str) -> tuple[str, float]:
    """A target's metric and percentile: "ttft_p99_s" -> ("ttft", 99.0)."""
    return _split(key)


def percentile_label(pct: float) -> str:
    """A percentile as a target names it: 99.0 -> "p99", 99.9 -> "p99.9"."""
    return "p" + number(pct, MAX_DIGITS)


def over(got_s: float, target_s: float) -> str:
    """A latency over its target, "101 ms > 100 ms", with the digits it takes to read so."""
    shown, limit = apart(got_s, target_s, Unit.SECONDS)
    return f"{shown} > {limit}"


def check_targets(
    targets: Mapping[str, float], cols: Mapping[str, np.ndarray]
) -> tuple[dict[str, bool], dict[str, float]]:
    """Per target: met, and the share of requests within it (unfinished requests miss)."""
    met: dict[str, bool] = {}
    attain: dict[str, float] = {}
    for key, target in targets.items():
        metric, pct = _split(key)
        values = cols[f"{metric}_s"]
        if metric == "tpot":
            values = values[cols["output_tokens"] > 1]
        v = np.where(np.isfinite(values), values, np.inf)
        attain[key] = float(np.mean(v <= target)) if v.size else 1.0
        met[key] = attain[key] >= pct / 100.0 - SLO_TOLERANCE
    return met, attain


def _pcts(values: np.ndarray, targets: Mapping[str, float], metric: str) -> dict[str, float]:
    """p90, p99 and each ``metric`` target's percentile, as the SLO check reads them."""
    v = np.where(np.isfinite(values), values, np.inf)
    if v.size == 0:
        return {}
    labels = {"p90": 90.0, "p99": 99.0}
    for key in targets:
        m, pct = _split(key)
        if m == metric:
            labels[percentile_label(pct)] = pct
    got = slo_percentiles(v, tuple(labels.values()))
    return dict(zip(labels, got, strict=True))


def tier_problem(result: ReplayResult, capacity_tiers: set[str]) -> str:
    """Why a replayed candidate's tiers do not keep up or are underused ("" when fine)."""
    for t in result.tiers:
        u = t.utilization
        if u.p99 > TIER_P99_TARGET:
            used, most = apart(u.p99, TIER_P99_TARGET, Unit.RATIO)
            return f"tier {t.name}: p99 demand uses {used} of it (at most {most} kept for the tail)"
        if u.peak > TIER_PEAK_LIMIT:
            asked = apart(u.peak, TIER_PEAK_LIMIT, Unit.RATIO)[0]
            return f"tier {t.name}: the busiest window asks {asked} of it"
        if t.name in capacity_tiers and u.mean < TIER_MEAN_FLOOR:
            used, least = apart(u.mean, TIER_MEAN_FLOOR, Unit.RATIO)
            return (
                f"tier {t.name}: used {used} of its bandwidth on average, under {least}: "
                "bought for the peak, run at the average (cause 1)"
            )
    return ""


class Replayer:
    """Replays the search's plans on one trace sample, remembering each result (pure, no files).

    ``capacity_tiers`` names the tiers bought for capacity (RV04's floor applies to them).
    """

    def __init__(
        self,
        arrays: TraceArrays,
        targets: Mapping[str, float],
        catalogs: PlanCatalogs,
        drain_s: float | None = SEARCH_DRAIN_S,
        share: bool = True,
        headroom: float = 0.0,
        step_factor: float = 1.0,
        executor: Executor | None = None,
    ) -> None:
        self.ctx = ReplayContext(arrays)
        self.arrays = arrays
        self.targets = dict(targets)  # the user's: the plan documents state them
        # What a replay must reach: each target less the headroom (docs/advisor.md, margin).
        self.limits = {k: v * (1.0 - headroom) for k, v in targets.items()}
        self.headroom = headroom
        self.step_factor = step_factor  # every step this many times as long (a stress)
        self.catalogs = catalogs
        self.options = ReplayOptions(drain_cap_s=drain_s)
        self.replays = 0
        self.share = share
        self._cache: dict[str, Outcome] = {}
        # A parallel executor replays on its workers (each replay once: _pending holds those
        # under way); None or the serial one replays here, one after another.
        self.executor = executor
        self._pending: dict[str, tuple[Future[tuple[Outcome, bool]], Kept]] = {}
        self._lock = threading.Lock()
        self._shared: Any = None  # this replayer as the executor's workers hold it

    def __getstate__(self) -> dict[str, Any]:
        """What a worker needs to replay: no cache, executor or replay context (rebuilt)."""
        state = dict(self.__dict__)
        for name in ("ctx", "_cache", "executor", "_pending", "_lock", "_shared"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.ctx = ReplayContext(self.arrays)
        self._cache = {}
        self.executor = None
        self._pending = {}
        self._lock = threading.Lock()
        self._shared = None

    def like(
        self, arrays: TraceArrays, headroom: float | None = None, step_factor: float = 1.0
    ) -> Replayer:
        """A replayer of ``arrays`` with this one's targets, catalogs, drain, sharing, executor.

        ``headroom`` None keeps this one's; a stress passes 0 (the stress takes its place).
        """
        return Replayer(
            arrays,
            self.targets,
            self.catalogs,
            drain_s=self.options.drain_cap_s,
            share=self.share,
            headroom=self.headroom if headroom is None else headroom,
            step_factor=step_factor,
            executor=self.executor,
        )

    def replayed(self, plan: Plan) -> Plan:
        """``plan`` as this replayer replays it: against its targets, as written plans read."""
        return as_written(plan, self.targets)

    def document(self, plan: Plan) -> dict[str, Any]:
        """``plan`` as plan.yaml holds it (what the verdict keeps, the cache key)."""
        return plan_mapping(self.replayed(plan))

    def _key(self, doc: Mapping[str, Any]) -> str:
        """What the replay depends on: the document, each instance by what the replay reads.

        Two providers' instances with the same GPUs, disk cap and network replay alike (their
        names and prices do not enter the replay), so one replay serves both.
        """
        if not self.share:
            return json.dumps(doc, sort_keys=True, default=str)
        plain = json.loads(json.dumps(doc, default=str))
        for stage in plain.get("stages", {}).values():
            inst = self.catalogs.instances.get(stage.get("instance", ""))
            if inst is not None:
                stage["instance"] = [
                    inst.gpu,
                    inst.gpu_count,
                    inst.disk_cap_mbps,
                    inst.backend_network_gbit,
                    inst.frontend_network_gbit,
                    inst.fabric.name,  # a TCP fabric's link is derated (fabric catalog)
                ]
        plain.pop("name", None)
        plain.pop("description", None)
        return json.dumps(plain, sort_keys=True)

    def _hit(self, key: str, plan: Plan, doc: dict[str, Any]) -> Outcome | None:
        got = self._cache.get(key)
        return None if got is None else replace(got, plan=plan, doc=doc)

    def outcome(self, plan: Plan, capacity_tiers: frozenset[str] = frozenset()) -> Outcome:
        """Replay the whole deployment (cached by its plan document)."""
        written = self.replayed(plan)
        doc = plan_mapping(written)
        key = self._key(doc)
        if (hit := self._hit(key, plan, doc)) is not None:
            return hit
        try:
            replay_notes(written)  # a plan the replay cannot resolve is an outcome, not a replay
        except (ConfigError, PlanError) as exc:
            out = Outcome(plan, doc, error=str(exc))
            self._cache[key] = out
            return out
        return self._replayed(key, plan, doc, Replayer.replay_whole, written, capacity_tiers)

    def _replayed(
        self,
        key: str,
        plan: Plan,
        doc: dict[str, Any],
        replay: Callable[..., Outcome],
        *args: Any,
    ) -> Outcome:
        """``replay(self, plan, doc, *args)`` here, or once on the executor's workers.

        Counted and cached by ``key`` either way: the replays run, and what each returns, do
        not depend on where (or in which order) they ran. From a worker only the outcome's
        :func:`compact` form comes back; its run stays there until a verdict reads it.
        """
        ex = self.executor
        if ex is None or not ex.parallel:
            self.replays += 1
            out = replay(self, plan, doc, *args)
            self._cache[key] = out
            return out
        with self._lock:
            if (hit := self._hit(key, plan, doc)) is not None:
                return hit
            pending = self._pending.get(key)
            if pending is None:
                self.replays += 1
                if self._shared is None:
                    self._shared = ex.share(self)
                written, *rest = args
                pending = ex.submit_kept(
                    _replay_there, compact, self._shared, replay, self._travelling(written), *rest
                )
                self._pending[key] = pending
        small, kept = pending
        got, whole = small.result()
        got = replace(got, plan=plan, doc=doc, kept=kept if whole else None)
        with self._lock:
            got = self._cache.setdefault(key, got)
            self._pending.pop(key, None)
        return replace(got, plan=plan, doc=doc)

    def _travelling(self, written: Plan) -> Plan:
        """``written`` for a worker: without its catalogs when they are this replayer's.

        They are most of a plan pickled (42 of 50 kB, and 1.3 ms to unpickle): the worker's
        copy of the replayer has them already (:func:`_replay_there` puts them back).
        """
        if written.catalogs is self.catalogs.perf:
            return replace(written, catalogs=cast(PerfCatalogs, None))
        return written

    def replay_whole(
        self,
        plan: Plan,
        doc: dict[str, Any],
        written: Plan,
        capacity_tiers: frozenset[str],
    ) -> Outcome:
        """Replay ``written`` (``plan`` as written, ``doc``) closed loop and check it (no cache)."""
        run = run_replay(self.ctx, written, self.options, step_factor=self.step_factor)
        cols = request_columns(run)
        met, attain = check_targets(self.limits, cols)
        summary = summarize(run)
        problem = tier_problem(summary, set(capacity_tiers)) if run.stages[0].spec.tiers else ""
        tpot = cols["tpot_s"][cols["output_tokens"] > 1]
        return Outcome(
            plan,
            doc,
            "",
            met,
            attain,
            _pcts(cols["ttft_s"], self.targets, "ttft"),
            _pcts(tpot, self.targets, "tpot"),
            problem,
            run,
            summary.overload.overloaded,
            dict(self.limits),
            summary.overload.reason if summary.overload.overloaded else "",
            self.headroom,
        )

    def prefill_outcome(self, plan: Plan, link_bytes_per_s: float) -> Outcome:
        """A disaggregated plan's prefill stage alone, against the TTFT targets.

        TTFT here is the prefill stage's first token plus the prompt's KV crossing the link
        alone (``link_bytes_per_s`` per decode instance): a bound the whole fleet can only
        exceed. TPOT targets are left to the decode stage.
        """
        written = self.replayed(plan)
        doc = plan_mapping(written)
        pre = dict(doc, stages={"prefill": doc["stages"]["prefill"]})
        key = f"prefill:{link_bytes_per_s:.9g}:" + self._key(pre)  # exact: a cache key
        if (hit := self._hit(key, plan, doc)) is not None:
            return hit
        try:
            replay_notes(written)  # as in outcome: unresolvable is an outcome
        except (ConfigError, PlanError) as exc:
            return Outcome(plan, doc, error=str(exc))
        return self._replayed(key, plan, doc, Replayer.replay_prefill, written, link_bytes_per_s)

    def replay_prefill(
        self, plan: Plan, doc: dict[str, Any], written: Plan, link_bytes_per_s: float
    ) -> Outcome:
        """Replay ``written``'s prefill stage alone against the TTFT targets (no cache)."""
        a = self.arrays
        run = run_prefill_alone(self.ctx, written, self.options, step_factor=self.step_factor)
        first = np.full(a.requests, np.inf)
        first[run.rows] = run.first_s
        model = written.model.spec
        assert model is not None  # a plan without a catalog model does not resolve
        # the prompt's distinct KV bytes cross the link (the replay's link transfer, tp 1)
        kv_bytes = kv_size(model, written.model.kv_dtype).total_bytes_per_token
        transfer = a.input_tokens * kv_bytes / link_bytes_per_s
        cols = {
            "ttft_s": first - a.arrival_s + transfer,
            "output_tokens": a.output_tokens,
        }
        ttft_targets = {k: v for k, v in self.limits.items() if k.startswith("ttft")}
        met, attain = check_targets(ttft_targets, cols)
        ttft = _pcts(cols["ttft_s"], ttft_targets, "ttft")
        return Outcome(
            plan,
            doc,
            "",
            met,
            attain,
            ttft,
            {},
            "",
            None,
            False,
            ttft_targets,
            "",
            self.headroom,
        )


def _replay_there(
    replayer: Replayer, replay: Callable[..., Outcome], written: Plan, *args: Any
) -> Outcome:
    """``replay`` of ``written`` on a worker (its catalogs the replayer's if sent without).

    The plan and its document are not sent: only :func:`compact`'s form of the outcome
    comes back, and the caller puts its own with it; the whole outcome kept on the worker
    is read for its run alone.
    """
    if written.catalogs is None:
        written = replace(written, catalogs=replayer.catalogs.perf)
    return replay(replayer, written, {}, written, *args)


def compact(out: Outcome) -> tuple[Outcome, bool]:
    """What the search reads of a replay, and whether it has a run (fetched apart, if read).

    Every figure the branch and bound, :func:`min_count`, the ranking and the verdicts' texts
    read stays (0.37 kB pickled on the Mooncake trace); the run does not (per-request and
    per-stage results: 0.85 MB for a replay of the 3,000-request sample, docs/benchmarks.md
    5d), nor the candidate and its plan document (about 10 kB: the caller has them).
    """
    bare = replace(out, plan=cast(Plan, None), doc={}, held=None, kept=None)
    return bare, out.held is not None


def headroom(out: Outcome) -> float:
    """The smallest margin of any target: share of requests within it over its percentile."""
    margins = [share - _split(key)[1] / 100.0 for key, share in out.attainment.items()]
    return min(margins) if margins else 0.0


def shortfall(out: Outcome) -> float:
    """How far an outcome is from its targets: the summed share of requests short of each."""
    total = 0.0
    for key, share in out.attainment.items():
        _, pct = _split(key)
        total += max(0.0, pct / 100.0 - share)
    return total


def min_count(
    evaluate: Callable[[int], Outcome],
    cannot_below: int,
    start: int,
    cap: int = MAX_INSTANCES,
) -> tuple[Outcome | None, list[Outcome]]:
    """The fewest instances meeting the SLO, and every outcome tried (ascending by count).

    ``cannot_below``: counts below it are known not to keep up (the analytic bound). Grows
    from ``start`` by :data:`GROWTH` until a count meets the SLO, then tries one fewer and
    bisects down to the bound. Gives up (None) past ``cap``, or when two growth steps in a
    row leave more than :data:`STALL_SHARE` of the shortfall while the fleet keeps up (its
    queue does not grow): latency, not capacity, misses the target, and more instances do not
    help.
    """
    tried: dict[int, Outcome] = {}
    fail = max(0, cannot_below - 1)
    n = max(start, cannot_below, 1)
    ok: int | None = None
    stalled = 0
    previous: float | None = None
    while ok is None:
        out = evaluate(n)
        tried[n] = out
        if out.error:
            return None, [tried[k] for k in sorted(tried)]
        if out.meets:
            ok = n
            break
        fail = n
        short = shortfall(out)
        if previous is not None and not out.tier_problem and not out.overloaded:
            stalled = stalled + 1 if short > STALL_SHARE * previous else 0
        previous = short
        if n >= cap or stalled >= 2:
            return None, [tried[k] for k in sorted(tried)]
        n = min(cap, max(n + 1, math.ceil(n * GROWTH)))
    # The estimate is usually close: one fewer first, then bisect what is left.
    while ok - fail > 1:
        mid = ok - 1 if ok == n else (ok + fail) // 2
        out = evaluate(mid)
        tried[mid] = out
        if out.meets:
            ok = mid
        else:
            fail = mid
    return tried[ok], [tried[k] for k in sorted(tried)]


def reached(out: Outcome) -> dict[str, float]:
    """Each target's replayed figure (seconds; inf: requests left unfinished), as checked.

    The pNN the SLO check reads (:func:`kvadvisor.fleet.slo_percentiles`): a target at least
    this figure is met. E2E and queue figures are read off the replay's request columns.
    """
    out_figures: dict[str, float] = {}
    cols = None  # read only for a figure the outcome does not carry (a kept run is fetched)
    for key in out.targets:
        metric, pct = _split(key)
        label = percentile_label(pct)
        got = {"ttft": out.ttft_s, "tpot": out.tpot_s}.get(metric, {}).get(label)
        if got is None and cols is None and (run := out.run) is not None:
            cols = request_columns(run)
        if got is None and cols is not None:
            values = cols[f"{metric}_s"]
            if metric == "tpot":
                values = values[cols["output_tokens"] > 1]
            v = np.where(np.isfinite(values), values, np.inf)
            got = slo_percentiles(v, (pct,))[0] if v.size else 0.0
        if got is not None:
            out_figures[key] = float(got)
    return out_figures
