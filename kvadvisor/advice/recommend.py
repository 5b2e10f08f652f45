"""The advisor's deployment verdicts: gate on the evidence, sample, search each provider, verify.

1. Evidence gates (docs/advisor.md): no arrival times, no sizing (the load is unknown, so no
   instance count or bandwidth); a model outside the catalog, no replay; an empty trace,
   nothing. Every provider then abstains, naming what is missing. Without block hashes the
   fleet is sized with every prompt recomputed and no tier is bought (CA03).
2. Sample: the search replays the busiest window of :data:`SEARCH_REQUESTS` consecutive
   requests (the shortest span holding that many arrivals: the fleet must carry its peak),
   starting from empty caches; the whole trace when it is no larger.
3. Search each provider (:mod:`kvadvisor.advice.search`): one after another, or all at once
   with their replays on a Dask cluster (:mod:`kvadvisor.execute`; the same verdicts). The
   checks below fan out alike: providers at once, the primary's tier values beside its stresses.
4. Verify: traces of up to :data:`VERIFY_REQUESTS` requests are replayed whole on each chosen
   deployment (grown when the whole trace misses the SLO); larger ones are replayed on a
   second window. The relative difference of the chosen deployment's figures between the
   sample and that check is the sample's stated error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from kvadvisor import phases
from kvadvisor.advice.robust import robustness, with_spare
from kvadvisor.advice.search import (
    Config,
    ProviderSearch,
    SearchSpec,
    Tried,
    outcome_key,
    search_provider,
    size_config,
)
from kvadvisor.advice.sizing import MAX_INSTANCES, Outcome, Replayer, min_count
from kvadvisor.advice.space import Work
from kvadvisor.advice.tiervalue import (
    capacity_tiers,
    sizing_bound,
    tier_values,
    with_tier_values,
)
from kvadvisor.advice.verdicts import (
    closest_miss,
    kind_text,
    loosening,
    nearest,
    no_verdict,
    robust_notes,
    verdict_of,
)
from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.catalog.models import ModelSpec
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.execute import SERIAL, Executor
from kvadvisor.fleet import TraceArrays, summarize
from kvadvisor.plan.loader import PlanCatalogs
from kvadvisor.plan.model import Plan
from kvadvisor.results.verdict import (
    ClosestMiss,
    Robustness,
    Sample,
    SloTargets,
    Verdict,
    VerdictSet,
    VerdictStatus,
)
from kvadvisor.units import Unit, format_value
from kvadvisor.units.format import count, price
from kvadvisor.vocab import Stage

# A chosen verdict's outcome on the check set, the other configurations that met the SLO on
# the sample, its capacity tiers, headroom and spare: what its robustness replays need.
Picked = tuple[Outcome, ProviderSearch, Callable[[Plan], frozenset[str]], float, bool]

SEARCH_REQUESTS = 3000
# Configurations verified on the check set per provider at most (the cheapest first): the next
# is checked while its sample cost undercuts the cheapest verified one (a grown one may not).
VERIFY_CONFIGS = 6
VERIFY_REQUESTS = 20000
PROVIDERS = ("aws", "gcp", "azure", "alibaba", "onprem")
ERROR_FIGURES = ("ttft_p90_s", "ttft_p99_s", "tpot_p90_s", "tpot_p99_s")


@dataclass(frozen=True)
class TraceView:
    """What the search reads of a trace: columns, evidence, and rows as replay arrays.

    ``rows(start, stop)`` builds :class:`~kvadvisor.fleet.TraceArrays` of requests
    ``start:stop`` (arrival order), so a large trace is never turned into arrays whole.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    arrivals_measured: bool
    has_hashes: bool
    rows: Callable[[int, int], TraceArrays]
    path: str = "trace"

    @property
    def requests(self) -> int:
        """Requests in the trace."""
        return int(self.arrival_s.shape[0])

    def busiest(self, size: int) -> tuple[int, int]:
        """The busiest window of ``size`` consecutive requests (:func:`busiest_window`)."""
        return busiest_window(self.arrival_s, size)

    def arrival_at(self, row: int) -> float:
        """Arrival time of request ``row``, s."""
        return float(self.arrival_s[row])

    def longest(self) -> tuple[int, int]:
        """The longest request (prompt + output) and the longest prompt, tokens."""
        total = self.input_tokens.astype(np.int64) + self.output_tokens.astype(np.int64)
        return int(total.max()), int(self.input_tokens.max())


@dataclass(frozen=True)
class RecommendInputs:
    """The model, catalogs and choices the verdicts are made for."""

    model: ModelSpec | None
    kv_dtype: str
    weight_dtype: str
    chunk_tokens: int
    instances: Mapping[str, InstanceSpec]
    storage: Mapping[str, StorageSpec]
    slo: SloTargets
    providers: tuple[str, ...] = ()
    reuse_bytes: float | None = None
    pinned: Mapping[Stage, str] = field(default_factory=dict)  # stage (or both) -> instance
    forced_storage: str | None = None  # --storage: the capacity tier is this option
    sample_requests: int = SEARCH_REQUESTS
    verify_requests: int = VERIFY_REQUESTS
    # GPUs, models and step-model coefficients (with the user's --catalog files): the bounds
    # and the replays compute step times from them, as `review` and `replay` do.
    perf: PerfCatalogs = field(default_factory=PerfCatalogs.packaged)
    gpu: str | None = None  # --gpu (catalog name): the search keeps instances with this GPU
    tp: int | None = None  # --tp: the search keeps this TP degree
    price_kind: str = "on_demand"  # --price-kind: the rates the primary verdict compares
    # A target is met only within (1 - headroom) x it; spare: one instance per stage more
    # than the fewest that meet the SLO (N+1). docs/advisor.md, "Margin and robustness".
    headroom: float = 0.0
    spare: bool = False
    # Where the search's providers and replays run (docs/scale.md): here, one after another,
    # or on a Dask cluster. The verdicts are the same either way.
    executor: Executor = SERIAL
    # The serving engine the deployment is replayed for: its KV page per model and GPU
    # (engines/data/<engine>.yaml ``page``); vLLM's, whose scheduler the replay models.
    engine: str = "vllm"


def busiest_window(arrival_s: np.ndarray, size: int) -> tuple[int, int]:
    """Rows [start, start + size) whose arrivals span the least time (the first such)."""
    n = int(arrival_s.shape[0])
    if size >= n:
        return 0, n
    spans = arrival_s[size - 1 :] - arrival_s[: n - size + 1]
    start = int(np.argmin(spans))
    return start, start + size


def check_window(n: int, size: int, busiest: tuple[int, int]) -> tuple[int, int]:
    """A second window of ``size`` rows: centred in the trace, else the first rows."""
    mid = max(0, min(n - size, n // 2 - size // 2))
    a, b = busiest
    if mid < b and mid + size > a:
        mid = 0 if a >= size else max(0, n - size)
    return mid, mid + size


def providers_in(instances: Mapping[str, InstanceSpec]) -> tuple[str, ...]:
    """The providers of the instance catalog, in the documented order (others after)."""
    present = list(dict.fromkeys(i.provider for i in instances.values()))
    return tuple(p for p in PROVIDERS if p in present) + tuple(
        p for p in present if p not in PROVIDERS
    )


def _providers(inputs: RecommendInputs) -> tuple[str, ...]:
    return inputs.providers or providers_in(inputs.instances)


def abstain_all(
    providers: Sequence[str], slo: SloTargets, reason: str, missing: tuple[str, ...]
) -> VerdictSet:
    """Every provider abstains for the same reason, naming what is missing."""
    return VerdictSet(
        slo=slo,
        verdicts=tuple(
            Verdict(p, VerdictStatus.ABSTAINED, reason, missing=missing) for p in providers
        ),
        primary=None,
        primary_why=reason,
        missing=missing,
    )


def _work(replayer: Replayer) -> Work:
    a = replayer.arrays
    hits = np.zeros(a.requests, np.int64)
    if a.has_hashes and a.requests:
        rows = np.arange(a.requests, dtype=np.int64)
        hits = replayer.ctx.hit_index(rows, np.zeros(a.requests, np.int64)).hit_tokens(None)
    span = float(a.arrival_s[-1] - a.arrival_s[0]) if a.requests > 1 else 1.0
    return Work(a.input_tokens, np.minimum(hits, a.input_tokens), a.output_tokens, max(span, 1.0))


def _grow(replayer: Replayer, outcome: Outcome, caps: frozenset[str]) -> Outcome | None:
    """The outcome with each stage grown in turn until the SLO is met.

    None when no count within :data:`MAX_INSTANCES` meets it, or growing stalls (latency,
    not capacity, misses the target: :func:`kvadvisor.advice.sizing.min_count`).
    """
    cand = outcome.plan
    order = [s.stage for s in cand.stages][::-1]  # decode before prefill: TPOT, then TTFT
    current = outcome
    for role in order:
        n0 = next(s.count for s in current.plan.stages if s.stage == role)
        base = current.plan
        best, tried = min_count(
            lambda n, base=base, role=role: replayer.outcome(base.with_count(role, n), caps),
            n0 + 1,
            n0 + 1,
            MAX_INSTANCES,
        )
        if best is not None:
            return best
        if tried:
            current = tried[-1]
    return None


def _error(sample: Outcome, check: Outcome) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in ERROR_FIGURES:
        metric, pct = key.split("_")[0], key.split("_")[1]
        a = (sample.ttft_s if metric == "ttft" else sample.tpot_s).get(pct)
        b = (check.ttft_s if metric == "ttft" else check.tpot_s).get(pct)
        if a is not None and b and math.isfinite(a) and math.isfinite(b):
            out[key] = (a - b) / b
    return out


def recommend(view: TraceView, inputs: RecommendInputs) -> VerdictSet:
    """One verdict per provider for the trace (pure: arrays and catalogs in, verdicts out)."""
    providers = _providers(inputs)
    slo = inputs.slo
    model = inputs.model
    refused = _refusal(view, model)
    if refused is not None:
        why, missing = refused
        return abstain_all(providers, slo, why, missing)
    assert model is not None
    n = view.requests
    size = min(n, max(1, inputs.sample_requests))
    start, stop = view.busiest(size)
    catalogs = PlanCatalogs(inputs.storage, inputs.instances, inputs.perf)
    sample_arrays = view.rows(start, stop)
    replayer = Replayer(sample_arrays, slo.targets, catalogs, headroom=inputs.headroom)
    work = _work(replayer)
    spec = _search_spec(view, inputs, model, sample_arrays)
    hits = None
    if spec.has_hashes:
        rows = np.arange(sample_arrays.requests, dtype=np.int64)
        hits = replayer.ctx.hit_index(rows, np.zeros(sample_arrays.requests, np.int64))
        spec = replace(spec, pooled_hits=hits, sample_inputs=sample_arrays.input_tokens)
    ex = inputs.executor
    replayer.executor = ex  # the search's replays run where the executor runs them

    def announce(i: int, p: str) -> None:
        phases.enter(phases.SEARCH, phases.of(i, len(providers), p))

    def one(p: str) -> ProviderSearch:
        return search_provider(p, spec, replayer, work, hits)

    found = dict(zip(providers, ex.fan_out(one, providers, announce), strict=True))
    phases.enter(phases.CHECK)

    whole = n <= inputs.verify_requests
    check_rows = (0, n) if whole else check_window(n, size, (start, stop))
    check_arrays = view.rows(*check_rows) if (whole and size < n) or not whole else sample_arrays
    final = Replayer(
        check_arrays,
        slo.targets,
        catalogs,
        drain_s=None,
        share=False,
        headroom=inputs.headroom,
        executor=ex,
    )
    # The final replays share the sample's exact LRU passes when they replay the same rows.
    if check_arrays is sample_arrays:
        final.ctx = replayer.ctx
    errors: dict[str, dict[str, float]] = {}
    picked: dict[str, Plan] = {}
    stressable: dict[str, Picked] = {}
    forced = inputs.forced_storage is not None
    margin = (inputs.headroom, inputs.spare)

    def check(p: str) -> Verdict:
        f = found[p]
        return _verdict(p, f, final, whole, errors, size < n, forced, picked, margin, stressable)

    # Each provider's pick checked (and grown) on the check set: at once on a cluster.
    verdicts = ex.fan_out(check, providers)
    sample = _sample(view, size, start, stop)
    primary, why = _primary(verdicts, inputs.providers, inputs.price_kind)
    if primary in picked:
        # What each tier of the chosen fleet is worth: the primary verdict's only (each tier
        # takes a re-sizing's replays on the sample).
        cand = picked[primary]
        bound = sizing_bound(found[primary].chosen_config, cand)
        # Only the primary verdict is stressed: each stress replays the check set again. The
        # two are independent: at once on a cluster, each tier value and stress as before.
        jobs: tuple[tuple[str, Callable[[], Any]], ...] = (
            (
                "what each KV tier is worth",
                lambda: tier_values(cand, replayer, spec, bound, forced),
            ),
            ("margin under stress", lambda: _robustness(final, stressable[primary], spec)),
        )
        values, robust = ex.fan_out(
            lambda job: job[1](), jobs, lambda _i, job: phases.enter(phases.CHECK, job[0])
        )
        verdicts = [
            _robust(with_tier_values(v, values), robust) if v.provider == primary else v
            for v in verdicts
        ]
    chosen_primary = any(v.chosen and v.provider == primary for v in verdicts)
    closest = None if chosen_primary else _closest_provider(verdicts, slo.targets)
    if primary is not None and primary in errors and size < n:
        sample = _checked_sample(sample, errors[primary], whole, size, check_rows)
    missing = () if view.has_hashes else ("block hashes",)
    notes = ()
    if not view.has_hashes:
        notes = (
            "the trace has no block hashes: prefix reuse is unknown, so fleets are sized with "
            "every prompt token prefilled and no KV tier is bought (consistent with CA03)",
        )
    return VerdictSet(
        slo=slo,
        verdicts=tuple(verdicts),
        primary=primary,
        primary_why=why,
        sample=sample,
        enumerated=sum(f.configs for f in found.values()),
        pruned=sum(len(f.bound_pruned) for f in found.values()),
        replayed=replayer.replays + final.replays,
        missing=missing,
        notes=notes,
        closest=closest,
    )


def _refusal(view: TraceView, model: ModelSpec | None) -> tuple[str, tuple[str, ...]] | None:
    """Why no verdict can be sized for this trace, and what it lacks (None: it can be)."""
    if view.requests == 0:
        return "the trace has no requests", ("requests",)
    if not view.arrivals_measured:
        return (
            "the trace has no arrival times (benchmark results without start times): the "
            "load is unknown, so no instance count, bandwidth or tier can be sized from it; "
            "give a trace with arrival times (a request log, or a benchmark run with "
            "--save-detailed start times)",
            ("arrival times",),
        )
    if model is None:
        return (
            "the model is not in the catalog: the replay needs its shape (give --model with a "
            "catalog name)",
            ("a catalog model",),
        )
    return None


def _search_spec(
    view: TraceView, inputs: RecommendInputs, model: ModelSpec, sample_arrays: TraceArrays
) -> SearchSpec:
    """The search space and targets every provider's search shares (before pooled hits)."""
    longest, longest_prompt = view.longest()
    return SearchSpec(
        model=model,
        kv_dtype=inputs.kv_dtype,
        weight_dtype=inputs.weight_dtype,
        instances=inputs.instances,
        storage=inputs.storage,
        targets=inputs.slo.targets,
        longest_tokens=longest,
        longest_prompt_tokens=longest_prompt,
        has_hashes=view.has_hashes and sample_arrays.has_hashes,
        reuse_bytes=inputs.reuse_bytes,
        pinned=inputs.pinned,
        forced_storage=inputs.forced_storage,
        perf=inputs.perf,
        gpu=inputs.gpu,
        tp=inputs.tp,
        chunk_tokens=inputs.chunk_tokens,
        engine=inputs.engine,
        # The last part of the path (of a directory or URI given with its trailing slash too).
        plan_name="kvadvisor-" + view.path.rstrip("/").rsplit("/", 1)[-1].split(".")[0],
        description=f"The deployment kvadvisor recommends for {view.path}",
    )


def _sample(view: TraceView, size: int, start: int, stop: int) -> Sample:
    """The rows the search replayed: the whole trace or its busiest window."""
    n = view.requests
    return Sample(
        requests=size,
        trace_requests=n,
        start_s=view.arrival_at(start) - view.arrival_at(0),
        span_s=view.arrival_at(stop - 1) - view.arrival_at(start),
        how=(
            "the whole trace"
            if size == n
            else f"the busiest window of {count(size)} consecutive requests (rows {count(start)} "
            f"to {count(stop - 1)}), starting from empty caches"
        ),
    )


def _checked_sample(
    sample: Sample,
    error: dict[str, float],
    whole: bool,
    size: int,
    check_rows: tuple[int, int],
) -> Sample:
    """The sample with the error of its figures against the check replay, and what that was."""
    return Sample(
        sample.requests,
        sample.trace_requests,
        sample.start_s,
        sample.span_s,
        sample.how,
        error,
        "the chosen deployment replayed on the whole trace"
        if whole
        else f"the chosen deployment replayed on another window of "
        f"{format_value(size, Unit.REQUESTS)} (rows {count(check_rows[0])} to "
        f"{count(check_rows[1] - 1)})",
    )


def _closest_provider(verdicts: Sequence[Verdict], targets: Mapping[str, float]) -> str | None:
    """The provider whose closest miss needs the least loosening, then the lowest $/h.

    Like with like, as the primary verdict: confirmed on-demand rates before unconfirmed ones,
    before other kinds of rate (calendar, capacity block), before unpriced.
    """
    misses = [v for v in verdicts if v.closest is not None and v.closest.loosest is not None]
    if not misses:
        return None

    def key(v: Verdict) -> tuple[float, int, float]:
        c = v.closest
        assert c is not None
        usd = c.usd_per_hour
        rank = (
            3
            if usd is None
            else (0 if c.price_kind == "on_demand" and not c.price_unconfirmed else 1)
            if c.price_kind == "on_demand"
            else 2
        )
        return (loosening(c, targets), rank, usd if usd is not None else float(c.gpus))

    return min(misses, key=key).provider


def _contenders(f: ProviderSearch, forced: bool = False) -> list[Outcome]:
    """Each configuration's cheapest outcome that met the SLO on the sample, best first.

    With ``--storage`` (``forced``) and a fleet that met the SLO with that tier, that fleet is
    the only contender: a cheaper one without the tier is not what the user asked for.
    """
    found = [t.best for t in f.tried if t.best is not None]
    if f.tier_outcome is not None and f.tier_outcome.best is not None:
        found = [f.tier_outcome.best] if forced else [*found, f.tier_outcome.best]
    seen: set[str] = set()
    out = []
    for o in sorted(found, key=outcome_key):
        key = repr(o.doc)
        if key not in seen:
            seen.add(key)
            out.append(o)
    return out


def _verdict(
    provider: str,
    f: ProviderSearch,
    final: Replayer,
    whole: bool,
    errors: dict[str, dict[str, float]],
    sampled: bool,
    forced: bool = False,
    picked: dict[str, Plan] | None = None,
    margin: tuple[float, bool] = (0.0, False),
    stressable: dict[str, Picked] | None = None,
) -> Verdict:
    """The provider's verdict; under ``--gpu``/``--tp`` its reason opens by saying so.

    ``margin`` is (headroom, spare): with spare, each stage gets one instance more than
    the fewest that meet the SLO (N+1), replayed as such. ``picked`` receives the chosen
    candidate, ``stressable`` what the robustness replays need of it (:func:`_robustness`).
    """
    stressable = {} if stressable is None else stressable
    v = _verdict_found(
        provider, f, final, whole, errors, sampled, forced, picked, margin, stressable
    )
    if not f.constraint:
        return v
    if v.chosen:
        return replace(v, reason=f"{v.reason}, within {f.constraint} as asked")
    return replace(v, reason=f"under {f.constraint}: {v.reason}")


def _verdict_found(
    provider: str,
    f: ProviderSearch,
    final: Replayer,
    whole: bool,
    errors: dict[str, dict[str, float]],
    sampled: bool,
    forced: bool,
    picked: dict[str, Plan] | None,
    margin: tuple[float, bool],
    stressable: dict[str, Picked],
) -> Verdict:
    """The search's pick verified on the check set (and grown, or N+1, when it must be).

    Its chosen candidate goes into ``picked`` (by provider).
    """
    if f.chosen is None:
        return _no_pick(f)
    # Verify the cheapest on the check set; when it had to grow, the next configuration may
    # now be cheaper: verify it too (VERIFY_CONFIGS at most) and keep the cheaper.
    checks = _check_contenders(f, final, whole, forced)
    verified, checked_misses, notes = checks.verified, checks.misses, checks.notes
    failed, failed_labels = checks.failed, checks.failed_labels
    if not verified:
        whole_misses = {failed_labels[doc]: why for doc, why in failed.items()}
        return no_verdict(
            f,
            unverified_reason(f.chosen.plan.label(), whole_misses),
            VerdictStatus.NO_DEPLOYMENT_MEETS_SLO,
            _closest(checked_misses, "the whole trace"),
        )
    final_outcome, sample_outcome = min(verified, key=lambda v: outcome_key(v[0]))
    if sampled:
        errors[provider] = _error(
            sample_outcome,
            final.outcome(sample_outcome.plan, capacity_tiers(sample_outcome.plan, forced)),
        )
    headroom, spare = margin
    caps_of = partial(capacity_tiers, forced=forced)
    if spare:
        cand = with_spare(final_outcome.plan)
        notes.append(
            f"N+1: one spare instance per stage beyond the fewest that meet the SLO "
            f"({final_outcome.plan.label()}), replayed as {cand.label()}"
        )
        final_outcome = final.outcome(cand, caps_of(cand))
    stressable[provider] = (final_outcome, f, caps_of, headroom, spare)
    assert final_outcome.run is not None
    if picked is not None:
        picked[provider] = final_outcome.plan
    result = summarize(final_outcome.run, final.targets)
    a = final_outcome.run.arrays
    span = float(a.arrival_s[-1] - a.arrival_s[0]) if a.requests > 1 else 0.0
    return verdict_of(
        f,
        final_outcome,
        result,
        final.replayed(final_outcome.plan),
        float(a.input_tokens.sum()),
        float(a.output_tokens.sum()),
        span,
        notes,
        failed,
    )


def _no_pick(f: ProviderSearch) -> Verdict:
    """Why the search picked nothing: constrained away, the SLO out of reach, or no fit."""
    if f.unconstrained:
        return no_verdict(
            f,
            f"no deployment: {f.unconstrained}; drop or change {f.constraint} to search them",
            VerdictStatus.ABSTAINED,
        )
    if not f.tried and f.floor:
        return no_verdict(
            f,
            "no deployment can meet the SLO: even alone on an idle replica, with every "
            f"prefix hit already in GPU memory, the best reaches {f.floor}",
            VerdictStatus.NO_DEPLOYMENT_MEETS_SLO,
            _closest([f.floor_outcome] if f.floor_outcome else [], SAMPLE_BASIS),
        )
    if not f.tried:
        return no_verdict(
            f,
            "the model fits no instance of this provider with room for the longest "
            "request, so there is no verdict for its GPUs",
            VerdictStatus.ABSTAINED,
        )
    return no_verdict(
        f,
        "no deployment replayed meets the SLO; the closest is priced with the targets it "
        "meets (or give more instance types)",
        VerdictStatus.NO_DEPLOYMENT_MEETS_SLO,
        _closest([o for t in f.tried for o in t.outcomes], SAMPLE_BASIS),
    )


@dataclass
class _Checks:
    """The contenders replayed on the check set, and what the verdict says of them.

    ``verified``: (as checked, as sampled) pairs; ``misses``, ``failed`` and ``failed_labels``:
    the contenders the whole trace failed, and why; ``notes``: for the verdict.
    """

    verified: list[tuple[Outcome, Outcome]] = field(default_factory=list)
    misses: list[Outcome] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    failed_labels: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _check_contenders(f: ProviderSearch, final: Replayer, whole: bool, forced: bool) -> _Checks:
    """Replay the cheapest contenders on the check set, growing any that miss the whole trace."""
    out = _Checks()
    verified, checked_misses, notes = out.verified, out.misses, out.notes
    failed, failed_labels = out.failed, out.failed_labels
    for o in _contenders(f, forced)[:VERIFY_CONFIGS]:
        if verified and outcome_key(o) >= outcome_key(
            min(verified, key=lambda v: outcome_key(v[0]))[0]
        ):
            break
        caps = capacity_tiers(o.plan, forced)
        checked = final.outcome(o.plan, caps)
        if whole and not checked.meets:
            checked_misses.append(checked)
            failed[repr(o.doc)] = checked.why_not()
            failed_labels[repr(o.doc)] = o.plan.label()
            grown = _grow(final, checked, caps)
            if grown is None:
                continue
            notes.append(
                f"sized on the sample as {o.plan.label()}; the whole trace needed "
                f"{grown.plan.label()} ({checked.why_not()} before)"
            )
            verified.append((grown, o))
        else:
            if not checked.meets:
                notes.append(
                    f"on another window of the trace {o.plan.label()} {checked.why_not()}: "
                    "the sample's error is stated with the verdict"
                )
            verified.append((checked, o))
        if len(verified) == 1 and checked.meets and checked.doc == o.doc:
            break  # met as sized: no other configuration can undercut it
    return out


def _robustness(final: Replayer, picked: Picked, spec: SearchSpec) -> Robustness:
    """The chosen deployment's margins and stresses, replayed (docs/advisor.md)."""
    outcome, f, caps_of, headroom, spare = picked
    configs = [t.config for t in f.tried] + f.bound_pruned + f.estimate_pruned + f.capped

    def size(config: Config, replayer: Replayer) -> Tried:
        return size_config(config, replayer, spec, f.provider)

    others = (configs, size)
    return robustness(final, outcome, others, caps_of, _grow, headroom, spare)


def _robust(v: Verdict, robust: Robustness) -> Verdict:
    """The verdict with its margins and stresses (:func:`_robustness`)."""
    return replace(v, robustness=robust, notes=v.notes + robust_notes(robust))


SAMPLE_BASIS = "the search's sample"


def _closest(outcomes: Sequence[Outcome], basis: str) -> ClosestMiss | None:
    """The nearest of ``outcomes`` to the SLO, priced, with the targets it meets (or None)."""
    near = nearest(outcomes)
    return None if near is None else closest_miss(near, basis)


def unverified_reason(chosen: str, misses: Mapping[str, str]) -> str:
    """Why no configuration that met the SLO on the sample is kept: each one's miss, once.

    ``misses`` maps each configuration verified on the whole trace (its label) to why it
    missed there. Configurations that missed alike share one clause, so a reason never
    repeats a "misses TTFT p99 ..." text without saying whose it is.
    """
    by_why: dict[str, list[str]] = {}
    for label, why in misses.items():
        by_why.setdefault(why, []).append(label)
    clauses = "; ".join(
        f"{' and '.join(labels)} {_agree(why, len(labels))}" for why, labels in by_why.items()
    )
    return (
        f"{chosen} meets the SLO on the sample, but on the whole trace no configuration "
        "verified does and more instances do not bring one within it (the whole trace's "
        f"longest prompts set the tail): {clauses}"
    )


def _agree(why: str, subjects: int) -> str:
    """``why`` ("misses ...") with its verb agreeing with ``subjects`` ("A and B miss ...")."""
    if subjects > 1 and why.startswith("misses "):
        return "miss " + why[len("misses ") :]
    return why


def _primary(
    verdicts: Sequence[Verdict], asked: Sequence[str], price_kind: str = "on_demand"
) -> tuple[str | None, str]:
    """The provider whose verdict is primary, and why.

    Like with like: with ``price_kind`` "on_demand" (the default) the cheapest verdict priced
    at confirmed on-demand rates, else at on-demand rates some of which are unconfirmed; other
    kinds (calendar, reservation, capacity-block rates) only when no verdict is on demand, and
    every verdict ranked apart is named. "any" compares every priced verdict's $/h.
    """
    chosen = [v for v in verdicts if v.chosen]
    if len(asked) == 1:
        v = chosen[0] if chosen else None
        return (
            asked[0],
            f"--provider {asked[0]}" + ("" if v else ": no deployment chosen there"),
        )
    if not chosen:
        return None, "no provider has a deployment that meets the SLO"
    priced = [v for v in chosen if v.usd_per_hour is not None]
    if priced and price_kind == "any":
        best = min(priced, key=lambda v: v.usd_per_hour or 0.0)  # stable: catalog order on ties
        return best.provider, (
            f"the lowest $/h among the priced verdicts ({price(best.usd_per_hour or 0.0, 'h')}), "
            "whatever the kind of rate (--price-kind any); unpriced verdicts are never called "
            "cheapest"
        )
    for group, words in (
        (
            [v for v in priced if v.price_kind == "on_demand" and not v.price_unconfirmed],
            "confirmed on-demand rates",
        ),
        ([v for v in priced if v.price_kind == "on_demand"], "on-demand rates, some unconfirmed"),
        (priced, "rates that are not all on demand (no verdict is priced on demand)"),
    ):
        if group:
            best = min(group, key=lambda v: v.usd_per_hour or 0.0)
            apart = [v for v in priced if v not in group]
            return best.provider, (
                f"the lowest $/h among the verdicts priced at {words} "
                f"({price(best.usd_per_hour or 0.0, 'h')}); unpriced verdicts are never called "
                "cheapest" + _ranked_apart(apart)
            )
    best = min(chosen, key=lambda v: sum(s.gpus for s in v.stages))
    return best.provider, "no verdict is priced: the one with the fewest GPUs"


def _ranked_apart(verdicts: Sequence[Verdict]) -> str:
    """The priced verdicts not compared with the primary, each with its kind of rate."""
    if not verdicts:
        return ""
    parts = [
        f"{v.provider} {price(v.usd_per_hour or 0.0, 'h')} at "
        + (kind_text(v.price_kind) if v.price_kind != "on_demand" else "on-demand")
        + " rates"
        + (", unconfirmed" if v.price_unconfirmed else "")
        for v in verdicts
    ]
    return "; ranked apart (not like with like, --price-kind any compares them): " + "; ".join(
        parts
    )
