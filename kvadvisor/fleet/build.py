"""Stages from a model and a GPU: the KV sizes, the GPU KV pool per replica, the step table.

The pool is what vLLM leaves for KV: ``gpu_memory_utilization`` (0.9 by default) of each GPU's
memory minus its share of the weights (``perfmodel.memory_fit``), in tokens of one rank's KV.
A model whose weights do not fit is refused with the numbers.

The step table of a replica is chosen by :func:`step_model_for` from what it is given besides
the deployment (:class:`StepModelInputs`): the catalogs (a user's GPUs, models and
coefficients layered on the packaged ones) and a calibration to the trace's measured requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.catalog.models import ModelSpec
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.errors import ConfigError
from kvadvisor.fleet.resolved import ResolvedKv
from kvadvisor.perfmodel import PerfModel, kv_size, memory_fit
from kvadvisor.perfmodel.calibrate import StepCalibration
from kvadvisor.perfmodel.memory import DEFAULT_MEMORY_UTILIZATION
from kvadvisor.perfmodel.silicon import silicon_step_table
from kvadvisor.perfmodel.step import StepTable, roofline_step_table
from kvadvisor.units import Unit, format_value


def kv_model(model: ModelSpec, kv_dtype: str = "bf16", tp: int = 1) -> ResolvedKv:
    """The KV sizes the replay needs (DESIGN.md's formulas, ``perfmodel.kv_size``)."""
    size = kv_size(model, kv_dtype, tp)
    return ResolvedKv(
        bytes_per_token=size.total_bytes_per_token,
        gpu_bytes_per_token=size.gpu_total_bytes_per_token,
        rank_full_bytes_per_token=size.rank_layout.full_bytes_per_token,
        rank_window_bytes_per_token=size.rank_layout.windowed_bytes_per_token,
        window_tokens=int(size.rank_layout.window_tokens or 0),
        layers=model.layers,
    )


def pool_tokens(
    pm: PerfModel, utilization: float = DEFAULT_MEMORY_UTILIZATION, where: str = "model"
) -> int:
    """Tokens of KV one replica's GPUs hold after the weights (ConfigError when none fit)."""
    fit = memory_fit(pm, 1.0, utilization)
    if not fit.weights_fit or fit.kv_capacity_tokens < 1:
        raise ConfigError(
            f"{where}: {pm.model.name} does not fit on {pm.tp} x {pm.gpu.name}: its weights "
            f"need {format_value(fit.weight_bytes_per_gpu, Unit.BYTES)} per GPU against "
            f"{format_value(fit.usable_bytes_per_gpu, Unit.BYTES)} usable "
            f"({format_value(utilization, Unit.RATIO)} of "
            f"{format_value(fit.memory_bytes_per_gpu, Unit.BYTES)}); "
            "give a larger tensor-parallel degree (gpus_per_replica) or a GPU with more memory"
        )
    return int(fit.kv_capacity_tokens)


@dataclass(frozen=True)
class StepModelInputs:
    """What a replica's step model is chosen from besides the deployment itself.

    ``catalogs``: the GPU, model and efficiency catalogs (the packaged ones by default; a
    user's files layered on). ``calibration``: the coefficients fitted to the trace's measured
    requests, used for a replica of the model and GPU they were measured on.
    """

    catalogs: PerfCatalogs = field(default_factory=PerfCatalogs.packaged)
    calibration: StepCalibration | None = None


def roofline_for(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    kv_dtype: str = "bf16",
    weight_dtype: str | None = None,
    inputs: StepModelInputs | None = None,
) -> tuple[PerfModel, StepTable]:
    """The performance model and its roofline step table for one replica.

    ``weight_dtype`` None: the checkpoint's published dtypes (FP8 DeepSeek-V3, MXFP4 experts).
    The GPU's coefficients come from ``inputs.catalogs``; no calibration, no silicon table.
    """
    catalogs = (inputs or StepModelInputs()).catalogs
    pm = PerfModel.build(
        model, gpu, tp=tp, kv_dtype=kv_dtype, weight_dtype=weight_dtype, catalogs=catalogs
    )
    return pm, roofline_step_table(pm)


# Step models already built, by what they are built from. The advisor's search resolves each
# candidate plan twice and the same few shapes hundreds of times (the model, the GPU, the TP),
# and a step table takes milliseconds (the silicon extra's import attempt alone, when it is
# not installed, looks through sys.path each time). Keyed by identity (the specs and catalogs
# hold mappings, so they do not hash); each entry holds what it was built from, so no id is
# reused while its entry lives. The tables are not written to (a stress scales a copy).
_STEP_MODELS: dict[tuple[object, ...], tuple[tuple[object, ...], tuple[PerfModel, StepTable]]] = {}
_STEP_MODELS_HELD = 256


def step_model_for(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    kv_dtype: str = "bf16",
    weight_dtype: str | None = None,
    inputs: StepModelInputs | None = None,
) -> tuple[PerfModel, StepTable]:
    """One replica's performance model and step table (built once per process, then shared).

    :func:`_built_step_model` says which model is chosen and why.
    """
    inputs = inputs or StepModelInputs()
    held = (model, gpu, inputs.catalogs, inputs.calibration)
    key = (*(id(x) for x in held), tp, kv_dtype, weight_dtype)
    got = _STEP_MODELS.get(key)
    if got is not None:
        return got[1]
    made = _built_step_model(model, gpu, tp, kv_dtype, weight_dtype, inputs)
    if len(_STEP_MODELS) >= _STEP_MODELS_HELD:
        _STEP_MODELS.clear()
    _STEP_MODELS[key] = (held, made)
    return made


def _built_step_model(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    kv_dtype: str,
    weight_dtype: str | None,
    inputs: StepModelInputs,
) -> tuple[PerfModel, StepTable]:
    """One replica's performance model and step table, and (in its ``source``) why that one.

    In this order: the roofline calibrated to the trace's measured requests when
    ``inputs.calibration`` was measured on this GPU with this model (at any TP: the fit scales
    the GPU's coefficients); else AIConfigurator's silicon table where the optional
    ``kvadvisor[silicon]`` extra covers the model and GPU; else the roofline with the GPU's
    coefficients from ``inputs.catalogs``. A calibration that does not apply (another GPU or
    model) is said so in the source. The table's ``source`` is the replay report's
    ``step_model``.
    """
    pm = PerfModel.build(
        model, gpu, tp=tp, kv_dtype=kv_dtype, weight_dtype=weight_dtype, catalogs=inputs.catalogs
    )
    cal = inputs.calibration
    why_not = None if cal is None else cal.mismatch(gpu.name, model.name)
    if cal is not None and why_not is None:
        calibrated = pm.with_efficiency(cal.efficiency)
        return calibrated, replace(calibrated.step_table, source=cal.label)
    choice = silicon_step_table(pm)
    table = choice.perf.step_table
    if why_not is not None:
        table = replace(table, source=f"{table.source}; {why_not}")
    return choice.perf, table
