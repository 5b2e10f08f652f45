"""The latency targets a recommended fleet must meet: ``--slo``, else MLPerf's server limits.

MLPerf Inference's server scenario holds LLM benchmarks to a time to first token and a time
per output token at the 99th percentile (``*.Server.target_latency_percentile = 99``); the
limits per benchmark are in LoadGen's configuration (mlcommons/inference ``loadgen/mlperf.conf``
at commit 001712e9daf80386e0dda43f97b8f36981d792c4). A catalog model is held to the limits of
the MLPerf benchmark it is, or of the one nearest its size and kind, and the report says which.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvadvisor.catalog.models import ModelSpec
from kvadvisor.errors import ConfigError
from kvadvisor.fleet import parse_slo
from kvadvisor.results.verdict import SloTargets
from kvadvisor.units.format import count

PARAMS_PER_BILLION = 1e9

MLPERF_SOURCE = (
    "MLPerf Inference server scenario, mlcommons/inference loadgen/mlperf.conf "
    "(commit 001712e9daf80386e0dda43f97b8f36981d792c4): {bench}.Server.ttft_latency = "
    "{ttft_ms:g} ms, tpot_latency = {tpot_ms:g} ms, at the 99th percentile "
    "(*.Server.target_latency_percentile = 99)"
)


@dataclass(frozen=True)
class MlperfLimit:
    """One MLPerf LLM benchmark's server-scenario limits (milliseconds, at the 99th percentile)."""

    benchmark: str
    ttft_ms: float
    tpot_ms: float


LLAMA2_70B = MlperfLimit("llama2-70b", 2000, 200)
LLAMA31_8B = MlperfLimit("llama3_1-8b", 2000, 100)
LLAMA31_405B = MlperfLimit("llama3_1-405b", 6000, 175)
MIXTRAL_8X7B = MlperfLimit("mixtral-8x7b", 2000, 200)
DEEPSEEK_R1 = MlperfLimit("deepseek-r1", 2000, 80)

# Catalog models that are (or are the successor of) an MLPerf benchmark model.
BENCHMARK_OF = {
    "llama-3.1-8b": LLAMA31_8B,
    "llama-3.1-70b": LLAMA2_70B,
    "llama-3.1-405b": LLAMA31_405B,
    "mixtral-8x7b": MIXTRAL_8X7B,
    "deepseek-r1": DEEPSEEK_R1,
    "deepseek-v3": DEEPSEEK_R1,
}
# Nearest benchmark by size for the rest: up to this many parameters the 8B benchmark, ...
SMALL_PARAMS = 20e9
LARGE_PARAMS = 300e9


def mlperf_limit(model: ModelSpec) -> tuple[MlperfLimit, str]:
    """The MLPerf benchmark whose limits hold for ``model``, and why that one."""
    if model.name in BENCHMARK_OF:
        return BENCHMARK_OF[model.name], f"{model.display_name} is MLPerf's benchmark model"
    if model.total_params <= SMALL_PARAMS:
        limit = LLAMA31_8B
    elif model.total_params >= LARGE_PARAMS:
        limit = DEEPSEEK_R1 if model.is_moe else LLAMA31_405B
    else:
        limit = MIXTRAL_8X7B if model.is_moe else LLAMA2_70B
    size = f"{count(model.total_params / PARAMS_PER_BILLION)}B {'MoE' if model.is_moe else 'dense'}"
    return limit, f"the MLPerf benchmark nearest a {size} model"


def slo_targets(text: str | None, model: ModelSpec | None) -> SloTargets:
    """The targets from ``--slo`` text, else the MLPerf default for ``model`` (ConfigError)."""
    if text:
        targets = parse_slo(text)
        if not targets:
            raise ConfigError("--slo: give at least one target, e.g. ttft_p99=2s,tpot_p99=200ms")
        return SloTargets(targets, f"--slo {text}")
    limit, why = (
        mlperf_limit(model)
        if model is not None
        else (LLAMA2_70B, "no model known: MLPerf's llama2-70b limits")
    )
    source = MLPERF_SOURCE.format(
        bench=limit.benchmark, ttft_ms=limit.ttft_ms, tpot_ms=limit.tpot_ms
    )
    return SloTargets(
        {"ttft_p99_s": limit.ttft_ms / 1000.0, "tpot_p99_s": limit.tpot_ms / 1000.0},
        f"default: {why}; {source}",
    )
