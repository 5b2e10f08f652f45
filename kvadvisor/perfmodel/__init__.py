"""Performance model: KV size, step times (calibrated roofline or silicon), memory, calibration."""

from kvadvisor.perfmodel.calibrate import Calibration, CalibrationRows, FitError, calibrate
from kvadvisor.perfmodel.efficiency import Efficiency, default_efficiency
from kvadvisor.perfmodel.kv import KvLayout, KvSize, kv_size
from kvadvisor.perfmodel.memory import MemoryFit, auto_tp, memory_fit
from kvadvisor.perfmodel.perf import PerfModel
from kvadvisor.perfmodel.silicon import SiliconChoice, silicon_step_table
from kvadvisor.perfmodel.step import StepTable
from kvadvisor.perfmodel.transfer import (
    KvSource,
    break_even_bandwidth_bytes_per_s,
    break_even_tokens,
    load_s,
    recompute_s,
    reference_tiers,
    share_below,
)

__all__ = [
    "Calibration",
    "CalibrationRows",
    "Efficiency",
    "FitError",
    "KvLayout",
    "KvSize",
    "MemoryFit",
    "PerfModel",
    "SiliconChoice",
    "StepTable",
    "KvSource",
    "auto_tp",
    "break_even_bandwidth_bytes_per_s",
    "break_even_tokens",
    "calibrate",
    "default_efficiency",
    "kv_size",
    "load_s",
    "memory_fit",
    "recompute_s",
    "reference_tiers",
    "share_below",
    "silicon_step_table",
]
