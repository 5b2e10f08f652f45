"""Efficiency factors (achieved / peak) for the roofline stage model, with published sources."""

from __future__ import annotations

from dataclasses import dataclass, replace

# Model FLOPs utilisation per GPU from BLIS/inference-sim `hardware_config.json`
# (research/field.md section 0.8 and 4.2): mfuPrefill / mfuDecode.
BLIS_MFU: dict[str, tuple[float, float]] = {
    "h100-sxm": (0.45, 0.30),
    "h200": (0.45, 0.30),  # BLIS PR #1710 carries the H100 MFU over to H200
    "a100-80gb": (0.38, 0.18),
    "a100-40gb": (0.38, 0.18),
    "l40s": (0.32, 0.08),
}
# GPUs built from the same silicon as a BLIS entry take its MFU (same SMs and clocks).
SAME_SILICON: dict[str, str] = {"h800": "h100-sxm", "a800": "a100-80gb"}
# HBM bandwidth actually reached: AIConfigurator's system files multiply mem_bw by an
# empirical 0.8 (h200_sxm / h100_sxm, research/field.md section 4.2).
AIC_MEMORY_EFFICIENCY = 0.8
FALLBACK_GPU = "h100-sxm"


@dataclass(frozen=True)
class Efficiency:
    """Achieved fraction of peak, each in (0, 1].

    ``prefill_mfu``: of dense tensor FLOP/s in prefill; ``decode_mfu``: of dense FLOP/s in a
    decode step (binding only at large batches); ``memory``: of peak memory bandwidth.
    ``source`` says where the numbers come from (a citation, "calibrated", or "user").
    """

    prefill_mfu: float
    decode_mfu: float
    memory: float
    source: str

    def with_values(self, source: str, **values: float) -> Efficiency:
        """A copy with some factors replaced (calibration, user overrides)."""
        return replace(self, source=source, **values)


def default_efficiency(gpu_name: str) -> Efficiency:
    """Documented defaults for ``gpu_name``.

    BLIS MFU where it has the GPU (or the same silicon), else BLIS's H100 figures;
    AIConfigurator's 0.8 memory factor everywhere.
    """
    key = SAME_SILICON.get(gpu_name, gpu_name)
    if key in BLIS_MFU:
        prefill, decode = BLIS_MFU[key]
        where = f"BLIS hardware_config.json ({key})"
    else:
        prefill, decode = BLIS_MFU[FALLBACK_GPU]
        where = f"BLIS hardware_config.json (H100 figures; {gpu_name} not profiled there)"
    return Efficiency(
        prefill_mfu=prefill,
        decode_mfu=decode,
        memory=AIC_MEMORY_EFFICIENCY,
        source=f"MFU: {where}; memory: AIConfigurator empirical mem_bw factor 0.8",
    )
