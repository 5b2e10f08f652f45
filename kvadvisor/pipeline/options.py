"""The analysis options: every knob of `kvadvisor analyze`, with defaults, and their record."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kvadvisor.advice.inputs import AdvisorInputs
from kvadvisor.advice.robust import DEFAULT_HEADROOM
from kvadvisor.cache.tiers import CacheTierSpec
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.execute import SERIAL, Executor
from kvadvisor.plan.model import Plan
from kvadvisor.sections.profile import ProfileOptions


@dataclass(frozen=True)
class AnalyzeOptions(ProfileOptions):
    """Every analysis knob, with defaults; the CLI fills it from options and config.

    The stage profiler's knobs (model, GPU, dtypes, TP, window, chunk size, ...) are inherited
    from ProfileOptions (docs/stage-profiler.md), so they are declared once.
    """

    warmup_fraction: float = 0.5
    # Prefix cache (docs/cache.md): inclusive tiers fastest first, routing comparison over this
    # many instances (<= 1: off), engine chunk size to coarsen hashes to, SHARDS rate (None:
    # exact unless the trace is huge).
    cache_tiers: tuple[CacheTierSpec, ...] = ()
    cache_instances: int = 8
    cache_routing_seed: int = 0
    cache_chunk_tokens: int | None = None
    cache_save_unfull_chunk: bool = False
    cache_sample_rate: float | None = None
    # Advisor: one storage spec for both stages, instances ("NAME" or "prefill=NAME"), and the
    # loaded rules and catalogs (None: the built-in ones).
    storage: str | None = None
    instance: tuple[str, ...] = ()
    advisor_inputs: AdvisorInputs | None = None
    # The deployment search (docs/advisor.md): providers to give a verdict for (() = all in
    # the catalog) and the SLO ("ttft_p99=2s,tpot_p99=200ms"; None = MLPerf's for the model).
    providers: tuple[str, ...] = ()
    slo: str | None = None
    # Margin (docs/advisor.md, "Margin and robustness"): a target is met only within
    # (1 - headroom) x it; spare adds one instance per stage to the fewest that meet it (N+1).
    headroom: float = DEFAULT_HEADROOM
    spare: bool = False
    # The rates the primary verdict compares: "on_demand" (like with like) or "any".
    price_kind: str = "on_demand"
    # Requests longer than the model's context (sections/context.py): auto, refuse, rope or
    # exclude; every decision is stated.
    over_context: str = "auto"
    # The serving engine the deployment search replays for (None: vLLM's), whose KV page per
    # model and GPU the verdicts run with; `analyze --emit ENGINE` replays for its first engine.
    engine: str | None = None
    # Deployment plans to review against the trace (docs/review.md).
    plans: tuple[Plan, ...] = ()
    # Replay the recommended deployment closed loop (docs/replay.md) when the trace has at most
    # this many requests; its stage split then becomes the report's.
    replay: bool = True
    replay_max_requests: int = 200_000
    # The deployment search, the checks of its picks and the replay of the verdict
    # (docs/advisor.md); False leaves them out (`--no-search`): no verdict, the rest as always.
    search: bool = True
    # Where the deployment search runs (--workers, --scheduler; docs/scale.md). Not an
    # analysis choice: the report is the same wherever it ran, so it is not recorded.
    executor: Executor = SERIAL

    @property
    def perf_catalogs(self) -> PerfCatalogs:
        """The GPU, model and efficiency catalogs of this analysis (``--catalog`` files too)."""
        inputs = self.advisor_inputs
        return inputs.perf if inputs is not None else PerfCatalogs.packaged()

    def profile_options(self) -> ProfileOptions:
        """The stage profiler's slice of the options."""
        return ProfileOptions(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(ProfileOptions)}
        )


def options_record(options: AnalyzeOptions) -> dict[str, Any]:
    """The options as plain values for the report's inputs.

    Loaded rule and catalog objects are left out: their versions are recorded separately.
    """
    record: dict[str, Any] = {}
    for f in dataclasses.fields(options):
        if f.name in ("advisor_inputs", "executor"):
            continue
        value = getattr(options, f.name)
        if f.name == "plans":
            # A plan is echoed by its file; its review is its own section.
            value = tuple(p.path for p in value)
        elif isinstance(value, tuple):
            value = tuple(
                dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for v in value
            )
        record[f.name] = value
    return record
