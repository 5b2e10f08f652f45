"""Stage profile of a trace: model and GPU, stage times, split, KV I/O demand, load vs recompute.

Resolves the deployment, measures or models (and calibrates) the stage times, and returns the
report sections.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial

import numpy as np

from kvadvisor.catalog.models import ModelSpec
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.errors import CatalogError, ConfigError
from kvadvisor.fleet.calibrate import ReplayCalibration, calibrate_through_replay
from kvadvisor.fleet.hits import TraceArrays
from kvadvisor.metrics import (
    DECODE_DOMINATED_SHARE,
    PREFILL_DOMINATED_SHARE,
    Distribution,
    IoProfile,
    MeasuredStages,
    SplitSummary,
    StageIo,
    StageTimes,
    concurrency_series,
    measured_stages,
    profile_io,
    stage_times,
    summarize_split,
)
from kvadvisor.perfmodel import (
    Calibration,
    CalibrationRows,
    FitError,
    PerfModel,
    auto_tp,
    break_even_tokens,
    calibrate,
    memory_fit,
    reference_tiers,
    share_below,
)
from kvadvisor.perfmodel.calibrate import StepCalibration
from kvadvisor.perfmodel.silicon import silicon_step_table
from kvadvisor.results.common import IoRate
from kvadvisor.results.report import (
    CalibrationSummary,
    FitErrorSummary,
    IoDemand,
    IoPattern,
    LoadVsRecompute,
    MemorySummary,
    ModelDeployment,
    ModelSummary,
    StageSplit,
)
from kvadvisor.results.series import Series, SeriesKey, SeriesKind
from kvadvisor.sections.workload import trace_models
from kvadvisor.trace.arrays import RequestArrays
from kvadvisor.trace.model import Trace
from kvadvisor.units import BYTES_PER_GIB, Unit, format_value, plural
from kvadvisor.vocab import SplitSource

# Defaults when --model / --gpu are not given (stated in the report as assumed): Llama-3.1-70B,
# whose 320 KiB of KV per token is the figure most often quoted (Mooncake paper), on an H200,
# AIConfigurator's reference system (research/field.md 4.2).
DEFAULT_MODEL = "llama-3.1-70b"
DEFAULT_GPU = "h200"
MAX_SERIES_POINTS = 1000
# The advisor's break-even fact uses the slowest reference tier (one local Gen4 NVMe drive),
# the conservative case for "is loading worth it".
BREAKEVEN_FACT_TIER = "nvme-gen4-x4"


@dataclass(frozen=True)
class ProfileOptions:
    """The stage profiler's knobs (AnalyzeOptions inherits them).

    ``model``/``gpu`` None mean the documented defaults, reported as assumed; ``instances`` is
    how many model instances the trace's load is spread over.
    """

    model: str | None = None
    gpu: str | None = None
    kv_dtype: str = "bf16"
    weight_dtype: str | None = None  # None: the checkpoint's published dtype(s)
    tp: int | None = None
    ep: int = 1  # MoE: GPUs the routed experts are spread over (expert parallelism)
    window_s: float = 1.0
    chunk_tokens: int = 256  # LMCache's default chunk_size: KV I/Os are counted per chunk
    io_unit_bytes: int = 4096
    drive_capacity_bytes: float | None = None
    iterations: int = 3
    instances: int = 1


@dataclass(frozen=True)
class StageProfile:
    """The three report sections the profiler fills, and the calibration it fitted.

    ``calibration``: the step-model coefficients fitted to the trace's measured requests and
    the deployment they were measured on (None when nothing was calibrated); the replays of
    the analysis use them on that GPU (``fleet.build.step_model_for``).
    """

    model: ModelSummary
    stage_split: StageSplit
    io: IoDemand
    facts: dict[str, float | None]  # extra facts for the advisor (names in advise/facts.py)
    calibration: StepCalibration | None = None


@dataclass(frozen=True, eq=False)
class ProfileInputs:
    """What the stage profiler reads of a trace, taken from it once (:meth:`of`).

    ``arrays``: the request arrays; ``measured``: the stage times the trace measured (None: it
    measured none); ``models``: the distinct served-model names, as the trace summary lists
    them; ``arrivals_measured``: whether arrival times are measurements (else the replay cannot
    calibrate); ``queue_measured``: whether the trace has queue times (else measured prefill
    includes queueing).
    """

    arrays: RequestArrays
    measured: MeasuredStages | None
    models: tuple[str, ...]
    arrivals_measured: bool = True
    queue_measured: bool = False

    @classmethod
    def of(
        cls,
        trace: Trace,
        arrays: RequestArrays | None = None,
        models: tuple[str, ...] | None = None,
    ) -> ProfileInputs:
        """The inputs of ``trace``; ``arrays`` and ``models`` when the caller already has them."""
        return cls(
            arrays or RequestArrays.of(trace),
            measured_stages(trace),
            trace_models(trace) if models is None else models,
            trace.arrivals_measured,
            trace.has("queue_s"),
        )


def trace_model_name(models: tuple[str, ...], catalogs: PerfCatalogs | None = None) -> str | None:
    """The catalog model the trace's ``model`` column names throughout, else None.

    ``models``: the column's distinct names (the trace summary's list).
    """
    if len(models) != 1:
        return None
    try:
        return (catalogs or PerfCatalogs.packaged()).model(models[0]).name
    except CatalogError:
        return None


def build_perf_model(
    options: ProfileOptions,
    trace_model: str | None = None,
    catalogs: PerfCatalogs | None = None,
) -> tuple[PerfModel, ModelSpec, list[str], bool]:
    """Resolve --model/--gpu/--tp into a PerfModel, with notes and whether the model is assumed.

    Without --model, a model the trace's ``model`` column names is used, else the documented
    default. Models, GPUs and coefficients come from ``catalogs`` (the packaged ones by default).
    """
    catalogs = catalogs or PerfCatalogs.packaged()
    notes: list[str] = []
    name = options.model or trace_model or DEFAULT_MODEL
    spec = catalogs.resolve_model(name)
    assumed = options.model is None and trace_model is None
    if assumed:
        notes.append(f"model not given (--model): assumed {spec.display_name}")
    elif options.model is None:
        notes.append(f"model from the trace's model column: {spec.display_name}")
    gpu = catalogs.gpu(options.gpu or DEFAULT_GPU)
    if options.gpu is None:
        notes.append(f"GPU not given (--gpu): assumed {gpu.display_name}")
    tp = options.tp or auto_tp(spec, gpu, options.weight_dtype)
    if options.tp is None:
        notes.append(
            f"tensor parallelism not given (--tp): {tp}, the smallest with "
            "TP x GPU memory > 1.5 x weights (AIConfigurator's rule)"
        )
    ep = options.ep if spec.is_moe else 1
    # An --ep that does not divide --tp is PerfModel.build's to say; past it, the heads.
    problem = spec.parallel_problem(tp, ep) if ep >= 1 and tp % ep == 0 else None
    if problem is not None:
        raise ConfigError(f"{'--ep' if problem.startswith('EP') else '--tp'}: {problem}")
    pm = PerfModel.build(
        spec,
        gpu,
        tp=tp,
        ep=ep,
        kv_dtype=options.kv_dtype,
        weight_dtype=options.weight_dtype,
        catalogs=catalogs,
    )
    if options.weight_dtype is None:
        dtypes = pm.weight_dtype
        if pm.expert_dtype != pm.weight_dtype and spec.is_moe:
            dtypes += f", experts {pm.expert_dtype}"
        notes.append(f"weights in the checkpoint's published dtype ({dtypes}; --weight-dtype)")
    choice = silicon_step_table(pm)
    reason = choice.reason
    if choice.step_model == "roofline":
        # Which coefficients the roofline runs on: the GPU's own fit, or a borrowed one.
        reason += f"; coefficients: {pm.efficiency_note}"
    notes.append(f"step times: {reason}")
    return choice.perf, spec, notes, assumed


def kv_bytes_per_token_for(
    options: ProfileOptions,
    trace_model: str | None = None,
    catalogs: PerfCatalogs | None = None,
) -> int:
    """Distinct KV bytes per token of the model the profile would use.

    For callers that need only the KV size, such as the streamed prefix-cache section.
    """
    pm, _, _, _ = build_perf_model(options, trace_model, catalogs)
    return int(round(pm.kv.total_bytes_per_token))


def _calibration_rows(measured: MeasuredStages | None, times: StageTimes) -> CalibrationRows | None:
    if measured is None:
        return None
    rows = measured.rows
    n = times.input_tokens[rows]
    h = times.hit_tokens[rows]
    new = np.where(n > 0, np.maximum(n - h, 1.0), 0.0)
    steps = np.maximum(times.output_tokens[rows] - 1.0, 0.0)
    step_s = np.where(steps > 0, measured.decode_s[rows] / np.where(steps > 0, steps, 1.0), np.nan)
    return CalibrationRows(
        new_tokens=new,
        cached_tokens=n - new,
        measured_prefill_s=measured.prefill_s[rows],
        measured_step_s=step_s,
        mean_batch=times.mean_batch[rows],
        mean_batch_kv_rank_bytes=times.mean_batch_kv_rank_bytes[rows],
    )


def _fit_error(e: FitError) -> FitErrorSummary:
    return FitErrorSummary(e.rows, e.mape, e.median_ape)


def _replay_summary(c: ReplayCalibration) -> CalibrationSummary:
    return CalibrationSummary(
        fit_rows=c.fit_rows,
        heldout_rows=c.heldout_rows,
        efficiency=c.efficiency.as_dict(),
        prior_efficiency=c.prior.as_dict(),
        prefill_heldout=_fit_error(c.ttft_heldout),
        decode_step_heldout=_fit_error(c.tpot_heldout),
        prefill_heldout_prior=_fit_error(c.ttft_heldout_prior),
        decode_step_heldout_prior=_fit_error(c.tpot_heldout_prior),
        converged=c.converged,
        method="replay",
        replayed_requests=c.replayed_requests,
    )


def _calibrate_through_replay(
    inputs: ProfileInputs, measured: MeasuredStages, pm: PerfModel
) -> tuple[ReplayCalibration | None, str]:
    """The closed-loop calibration, or None and why it could not run."""
    arrays = inputs.arrays
    if not inputs.arrivals_measured:
        return None, "arrival times unknown: calibrated open loop (queueing read as prefill)"
    ttft = measured.prefill_s + measured.queue_s
    steps = arrays.output_tokens - 1.0
    tpot = np.where(steps > 0, measured.decode_s / np.where(steps > 0, steps, 1.0), np.nan)
    replay_arrays = TraceArrays.of(arrays.arrival_s, arrays.input_tokens, arrays.output_tokens)
    try:
        cal = calibrate_through_replay(replay_arrays, ttft, tpot, pm)
    except ConfigError as exc:
        return None, f"not calibrated through the replay ({exc}); calibrated open loop"
    if cal is None:
        return None, "too few measured requests to calibrate through the replay"
    return cal, (
        f"calibrated through the replay: the first {plural(cal.replayed_requests, 'request')} "
        "replayed closed loop on one replica (vLLM's scheduler, the GPU KV pool), measured "
        "TTFT (queueing included) and time per output token fitted"
    )


def _calibration_summary(c: Calibration) -> CalibrationSummary:
    return CalibrationSummary(
        fit_rows=c.fit_rows,
        heldout_rows=c.heldout_rows,
        efficiency=c.efficiency.as_dict(),
        prior_efficiency=c.prior.as_dict(),
        prefill_heldout=_fit_error(c.prefill_heldout),
        decode_step_heldout=_fit_error(c.decode_heldout),
        prefill_heldout_prior=_fit_error(c.prefill_heldout_prior),
        decode_step_heldout_prior=_fit_error(c.decode_heldout_prior),
        converged=c.converged,
    )


def _downsample(x: np.ndarray, y: np.ndarray, how: str) -> tuple[tuple, tuple, tuple]:
    """At most MAX_SERIES_POINTS points: consecutive windows merged by mean or max.

    Returns (x, y, y_max): merged by mean, ``y_max`` holds each point's largest window, so
    the p99 and the peak over the windows stay visible; it is empty when nothing was merged
    or the merge already keeps the maximum.
    """
    if len(x) <= MAX_SERIES_POINTS:
        return tuple(map(float, x)), tuple(map(float, y)), ()
    k = int(np.ceil(len(x) / MAX_SERIES_POINTS))
    starts = np.arange(0, len(x), k)
    peak = np.maximum.reduceat(y, starts)
    if how == "max":
        return tuple(map(float, x[starts])), tuple(map(float, peak)), ()
    mean = np.add.reduceat(y, starts) / np.diff(np.r_[starts, len(x)])
    return tuple(map(float, x[starts])), tuple(map(float, mean)), tuple(map(float, peak))


def _series(key: SeriesKey, y_unit: str, x: np.ndarray, y: np.ndarray, how: str) -> Series:
    xs, ys, peaks = _downsample(x, y, how)
    return Series("s", y_unit, xs, ys, SeriesKind.STEP, peaks, key=key)


def _scaled(d: Distribution, factor: float) -> dict[str, float]:
    return {k: v * factor for k, v in asdict(d).items()}


def _split_section(
    s: SplitSummary,
    source: SplitSource,
    hits_source: str | None,
    calibration: CalibrationSummary | None,
    counts: np.ndarray,
    notes: list[str],
    tp: int,
) -> StageSplit:
    """The stage_split section; GPU times in GPU-seconds (an instance's seconds x tp).

    ``counts``: requests per tenth of their own GPU-time prefill share (:func:`share_counts`).
    """
    edges = np.linspace(0.0, 1.0, 11)
    hist = Series(
        "fraction",
        "count",
        tuple(map(float, edges[:-1])),
        tuple(map(float, counts)),
        SeriesKind.BAR,
        key=SeriesKey.PREFILL_SHARE,
    )
    return StageSplit(
        source=source,
        prefill_s=s.prefill_gpu_s * tp,
        decode_s=s.decode_gpu_s * tp,
        prefill_share=s.prefill_share,
        classification=s.classification,
        thresholds={
            "prefill_dominated_at_or_above": PREFILL_DOMINATED_SHARE,
            "decode_dominated_at_or_below": DECODE_DOMINATED_SHARE,
        },
        latency_prefill_s=s.latency_prefill_s,
        latency_decode_s=s.latency_decode_s,
        latency_prefill_share=s.latency_prefill_share,
        latency_classification=s.latency_classification,
        hits_source=hits_source,
        no_reuse_prefill_s=s.prefill_gpu_no_reuse_s * tp,
        no_reuse_prefill_share=s.prefill_share_no_reuse,
        prefill_s_saved_by_reuse=s.prefill_gpu_saved_by_reuse_s * tp,
        request_classes=dict(s.request_classes),
        per_request={
            "prefill_gpu_s": _scaled(s.prefill_gpu_per_request_s, tp),
            "decode_gpu_s": _scaled(s.decode_gpu_per_request_s, tp),
            "prefill_share": asdict(s.prefill_share_per_request),
            "ttft_s": asdict(s.ttft_s),
            "decode_latency_s": asdict(s.decode_latency_s),
        },
        mean_decode_batch=s.mean_decode_batch,
        measured_requests=s.measured_requests,
        instances=s.instances,
        gpu_busy_fraction=s.gpu_busy_fraction,
        calibration=calibration,
        series=(hist,),
        notes=tuple(notes),
    )


def share_counts(times: StageTimes) -> np.ndarray:
    """Requests per tenth of their own GPU-time prefill share (the split's histogram)."""
    per_share = np.divide(
        times.prefill_gpu_s,
        times.prefill_gpu_s + times.decode_gpu_s,
        out=np.zeros_like(times.prefill_gpu_s),
        where=(times.prefill_gpu_s + times.decode_gpu_s) > 0,
    )
    return np.histogram(per_share, bins=10, range=(0.0, 1.0))[0]


def _rate(stage: StageIo) -> IoRate:
    if not stage.known or stage.bandwidth is None:
        return IoRate(None, None, None, None, None, None)
    b = stage.bandwidth
    return IoRate(
        b.mean_per_s, b.p99_per_s, b.peak_per_s, b.p50_per_s, b.peak_to_mean, stage.bytes_total
    )


def _pattern(stage: StageIo) -> IoPattern | None:
    if not stage.known or stage.chunks is None or stage.iops is None:
        return None
    c, r = stage.chunks, stage.iops
    return IoPattern(
        c.ios,
        r.mean_per_s,
        r.p99_per_s,
        r.peak_per_s,
        c.full_chunk_ios,
        c.partial_chunk_ios,
        c.mean_io_bytes,
        c.full_chunk_bytes,
        c.device_bytes,
        c.write_amplification,
    )


def _io_section(
    io: IoProfile,
    hit_share_below: Callable[[float | None], float | None],
    pm: PerfModel,
    hits_known: bool,
    concurrency: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> IoDemand:
    """The io section; ``hit_share_below(tokens)``: share of hit tokens in shorter hits."""
    starts, inflight, peak_batch = concurrency
    series = [
        _series(
            SeriesKey.WRITE_DEMAND,
            "bytes/s",
            starts,
            io.write.rate_series,
            "mean",
        ),
        _series(
            SeriesKey.REQUESTS_IN_FLIGHT,
            "count",
            starts,
            inflight,
            "mean",
        ),
        _series(
            SeriesKey.PEAK_DECODE_BATCH,
            "count",
            starts,
            peak_batch,
            "max",
        ),
    ]
    if io.read.known:
        series.insert(
            1,
            _series(
                SeriesKey.READ_DEMAND,
                "bytes/s",
                starts,
                io.read.rate_series,
                "mean",
            ),
        )
    tiers = []
    for tier in reference_tiers(pm.gpu):
        be = break_even_tokens(pm, tier)
        tiers.append(
            LoadVsRecompute(
                tier=tier.name,
                bandwidth_bytes_per_s=tier.bandwidth_bytes_per_s,
                latency_s=tier.latency_s,
                break_even_tokens=be,
                hit_token_share_below=hit_share_below(be) if hits_known else None,
                source=tier.source,
            )
        )
    return IoDemand(
        write=_rate(io.write),
        read=_rate(io.read),
        window_s=io.window_s,
        read_known=io.read.known,
        chunk_tokens=io.chunk_tokens,
        io_unit_bytes=io.io_unit_bytes,
        write_io=_pattern(io.write),
        read_io=_pattern(io.read),
        write_bytes_per_day=io.write_bytes_per_day,
        drive_capacity_bytes=io.drive_capacity_bytes,
        drive_writes_per_day=io.drive_writes_per_day,
        load_vs_recompute=tuple(tiers),
        series=tuple(series),
        notes=io.notes,
    )


def _model_section(
    pm: PerfModel,
    spec: ModelSpec,
    options: ProfileOptions,
    context: tuple[float, float],
    notes: list[str],
    assumed: bool,
) -> ModelSummary:
    """The model section; ``context``: (mean context tokens, peak decode KV per rank)."""
    mean_context, peak_kv = context
    fit = memory_fit(pm, mean_context)
    memory = MemorySummary(
        memory_bytes_per_gpu=fit.memory_bytes_per_gpu,
        usable_bytes_per_gpu=fit.usable_bytes_per_gpu,
        weight_bytes_per_gpu=fit.weight_bytes_per_gpu,
        kv_budget_bytes_per_gpu=fit.kv_budget_bytes_per_gpu,
        weights_fit=fit.weights_fit,
        kv_capacity_tokens=fit.kv_capacity_tokens,
        max_concurrent_requests=fit.max_concurrent_requests,
        mean_context_tokens=fit.mean_context_tokens,
        kv_working_set_peak_bytes_per_gpu=peak_kv,
        kv_working_set_fits=peak_kv <= fit.kv_budget_bytes_per_gpu,
    )
    model_notes = list(notes)
    if spec.notes:
        model_notes.append(spec.notes)
    if not fit.weights_fit:
        model_notes.append(
            f"weights ({format_value(fit.weight_bytes_per_gpu, Unit.BYTES)} per GPU) do not "
            f"fit in {format_value(fit.utilization, Unit.RATIO)} of {pm.gpu.display_name} "
            "memory at "
            f"TP {pm.tp}; times are modelled as if they did"
        )
    if not memory.kv_working_set_fits:
        model_notes.append(
            "the decode KV working set at peak exceeds the GPU memory left for "
            "KV: an engine would queue or preempt requests (not modelled)"
        )
    deployment = ModelDeployment(
        gpu=pm.gpu.name,
        gpu_display_name=pm.gpu.display_name,
        gpu_assumed=options.gpu is None,
        tp=pm.tp,
        tp_assumed=options.tp is None,
        kv_dtype=pm.kv_dtype,
        weight_dtype=pm.weight_dtype,
        efficiency=pm.efficiency.as_dict(),
        step_model="silicon" if pm.step_table.source.startswith("silicon") else "roofline",
        step_model_reason=next(
            (
                n.removeprefix("step times: ")
                for n in reversed(notes)
                if n.startswith("step times: ")
            ),
            pm.step_table.source,
        ),
    )
    return ModelSummary(
        name=spec.name,
        kv_bytes_per_token=int(round(pm.kv.total_bytes_per_token)),
        display_name=spec.display_name,
        assumed=assumed,
        origin=spec.origin,
        attention=spec.attention,
        kv_bytes_per_token_per_gpu=int(round(pm.kv.per_rank_bytes_per_token)),
        kv_bytes_per_token_all_gpus=int(round(pm.kv.gpu_total_bytes_per_token)),
        sliding_window_tokens=spec.sliding_window_tokens,
        sliding_window_layers=spec.sliding_window_layers,
        total_params=spec.total_params,
        active_params=spec.active_params,
        deployment=deployment,
        memory=memory,
        sources=spec.source,
        notes=tuple(model_notes),
    )


def profile_workload(
    source: Trace | ProfileInputs,
    options: ProfileOptions,
    *,
    hit_tokens: np.ndarray | None = None,
    hits_source: str | None = None,
    catalogs: PerfCatalogs | None = None,
) -> StageProfile:
    """Measure or model the stage times of a trace, calibrating where both exist.

    ``source``: what the profiler reads of the trace (:class:`ProfileInputs`, which the
    pipeline takes once and shares), or the trace itself, read here. ``hit_tokens`` (per
    request) come from the prefix-cache simulation or the engine's ``cached_tokens``; None
    means hits are unknown, taken as 0 for compute and reported so. The measured stage times
    serve the profile, its calibration and the calibrated profile. ``catalogs``: the GPU,
    model and efficiency catalogs with the user's files (the packaged ones by default).
    """
    inputs = source if isinstance(source, ProfileInputs) else ProfileInputs.of(source)
    pm, spec, notes, model_assumed = build_perf_model(
        options, trace_model_name(inputs.models, catalogs), catalogs
    )
    arrays, measured = inputs.arrays, inputs.measured
    hits_known = hit_tokens is not None
    context = arrays.input_tokens + arrays.output_tokens
    max_batch = memory_fit(
        pm, float(np.mean(context)) if len(context) else 1.0
    ).max_concurrent_requests
    run = {
        "hit_tokens": hit_tokens,
        "iterations": options.iterations,
        "instances": options.instances,
        "max_batch": max(max_batch, 1.0),
    }
    columns = (arrays.arrival_s, arrays.input_tokens, arrays.output_tokens)
    times = stage_times(*columns, pm, measured=measured, **run)
    fit = _fit(
        inputs,
        pm,
        spec.name,
        times,
        lambda pm: stage_times(*columns, pm, measured=measured, **run),
    )
    pm, times = fit.pm, fit.times
    notes += fit.notes
    measured_rows = (int(times.measured.sum()), len(times.measured))
    source, source_notes = split_source(measured_rows, fit.calibrated)
    split_notes = [*fit.split_notes, *source_notes]
    summary = summarize_split(times)
    split_notes += split_caveats(times.iterations, times.instances, summary, source, hits_known)
    io = profile_io(
        times,
        pm.kv_bytes,
        hits_known=hits_known,
        window_s=options.window_s,
        chunk_tokens=options.chunk_tokens,
        io_unit_bytes=options.io_unit_bytes,
        drive_capacity_bytes=options.drive_capacity_bytes,
    )
    concurrency = concurrency_series(times, io.window_s, io.windows)
    io_section = _io_section(
        io, partial(share_below, times.hit_tokens), pm, hits_known, concurrency
    )
    context = times.input_tokens + times.output_tokens
    mean_context = float(np.mean(context)) if len(context) else 0.0
    peak_kv = float(times.decode_kv_rank_cells.max(initial=0.0))
    mean_kv = float(np.mean(pm.kv_bytes(context))) if len(context) else 0.0
    return StageProfile(
        model=_model_section(pm, spec, options, (mean_context, peak_kv), notes, model_assumed),
        stage_split=_split_section(
            summary, source, hits_source, fit.summary, share_counts(times), split_notes, pm.tp
        ),
        io=io_section,
        facts=_facts(pm, times.instances, mean_kv, io_section, concurrency[1]),
        calibration=fit.step,
    )


@dataclass(frozen=True)
class _Fit:
    """The stage times after calibrating to the trace's measured requests, and the fit."""

    pm: PerfModel
    times: StageTimes
    calibrated: bool
    step: StepCalibration | None = None
    summary: CalibrationSummary | None = None
    notes: tuple[str, ...] = ()  # for the model section
    split_notes: tuple[str, ...] = ()  # for the stage split


def _fit(
    inputs: ProfileInputs,
    pm: PerfModel,
    model_name: str,
    times: StageTimes,
    times_with: Callable[[PerfModel], StageTimes],
) -> _Fit:
    """Calibrate through the replay, or open loop when it cannot run; the times modelled again.

    Nothing to fit (no measured request) leaves ``pm`` and ``times`` as they are.
    """
    measured = inputs.measured
    if not times.measured.any():
        return _Fit(pm, times, False)
    calibration: Calibration | ReplayCalibration | None = None
    summary_of_calibration: CalibrationSummary | None = None
    step_calibration: StepCalibration | None = None
    notes: list[str] = []
    split_notes: list[str] = []
    closed, why = (None, "")
    if measured is not None:
        closed, why = _calibrate_through_replay(inputs, measured, pm)
        split_notes.append(why)
    if closed is not None:
        calibration = closed
        summary_of_calibration = _replay_summary(closed)
    else:
        rows = _calibration_rows(measured, times)
        calibration = calibrate(pm, rows) if rows is not None else None
        if calibration is not None:
            summary_of_calibration = _calibration_summary(calibration)
    if calibration is not None:
        step_calibration = StepCalibration(
            calibration.efficiency,
            pm.gpu.name,
            model_name,
            "replay" if closed is not None else "open_loop",
        )
        pm = pm.with_efficiency(calibration.efficiency)
        notes.append("step times: the roofline calibrated to the trace's measured requests")
        times = times_with(pm)
    if not inputs.queue_measured:
        split_notes.append(
            "the trace has no queue_s: measured prefill is TTFT including any queueing"
        )
    return _Fit(
        pm,
        times,
        calibration is not None,
        step_calibration,
        summary_of_calibration,
        tuple(notes),
        tuple(split_notes),
    )


def split_source(measured: tuple[int, int], calibrated: bool) -> tuple[SplitSource, list[str]]:
    """Whether the split is measured, calibrated or modelled, and what that rests on.

    ``measured``: (requests with measured stage times, requests).
    """
    done, rows = measured
    if done and done == rows:
        return SplitSource.MEASURED, []
    if done and calibrated:
        return SplitSource.CALIBRATED, [
            f"{plural(done, 'request')} measured, the rest modelled "
            "with efficiency factors fitted to them"
        ]
    if done:
        return SplitSource.MODELED, [
            f"only {plural(done, 'measured request')}: too few to "
            "calibrate; all requests modelled with default efficiency "
            "factors"
        ]
    return SplitSource.MODELED, []


def split_caveats(
    iterations: int, instances: int, summary: SplitSummary, source: SplitSource, hits_known: bool
) -> list[str]:
    """What the split assumes: hits, the decode batch, and GPU time past the trace's span."""
    split_notes: list[str] = []
    if not hits_known:
        split_notes.append(
            "prefix hits unknown: every prompt token is prefilled; the split "
            "with and without reuse is the same"
        )
    split_notes.append(
        f"decode batch from in-flight requests over time ({iterations} "
        "rounds of the latency/concurrency fixed point)"
    )
    busy = summary.gpu_busy_fraction or 0.0
    if busy > 1 and source is SplitSource.MEASURED:
        split_notes.append(
            f"the GPU time is {format_value(busy, Unit.MULTIPLE)} the time from first arrival "
            "to last completion: the "
            "measured prefills and decodes overlapped (mixed batches) and each stage is charged "
            "its own share of the time it ran"
        )
    elif busy > 1:
        split_notes.append(
            f"the GPU time is {format_value(busy, Unit.MULTIPLE)} the time from first arrival "
            "to last completion: "
            f"{plural(instances, 'instance')} of this deployment cannot carry the load "
            "(about "
            f"{int(np.ceil(busy * instances))} would); queueing is not modelled, and "
            "spread over more instances each decode batch is smaller, so decode's share would "
            "grow (give the real count with --instances)"
        )
    return split_notes


def _facts(
    pm: PerfModel, instances: int, mean_kv: float, io: IoDemand, inflight: np.ndarray
) -> dict[str, float | None]:
    """Facts the advisor reads besides the report sections (advise/facts.py names them).

    In flight per instance: the per-window time-mean of requests from arrival to completion,
    over ``instances``; its KV: that count x the mean of kv(n + o) over requests.
    """
    tier = next(t for t in io.load_vs_recompute if t.tier == BREAKEVEN_FACT_TIER)
    per_instance = inflight / instances
    p99 = float(np.percentile(per_instance, 99)) if len(per_instance) else None
    return {
        "model_weights_gib": pm.weight_bytes / BYTES_PER_GIB,
        "split_gpu_bf16_tflops": pm.gpu.bf16_dense_tflops,
        "split_gpu_memory_bandwidth_gbps": pm.gpu.memory_bandwidth_gbps,
        "breakeven_prefix_tokens": tier.break_even_tokens,
        "hit_tokens_below_breakeven_share": tier.hit_token_share_below,
        "inflight_requests_p99": p99,
        "kv_inflight_gib_p99": None if p99 is None else p99 * mean_kv / BYTES_PER_GIB,
    }
