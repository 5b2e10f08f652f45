"""The latency targets a recommended fleet must meet: ``--slo``, else MLPerf's server limits.

MLPerf Inference's server scenario holds LLM benchmarks to a time to first token and a time
per output token at the 99th percentile (``*.Server.target_latency_percentile = 99``); the
limits per benchmark are in LoadGen's configuration (mlcommons/inference ``loadgen/mlperf.conf``
at commit 001712e9daf80386e0dda43f97b8f36981d792c4). A catalog model is held to the limits of
the MLPerf benchmark it is, or of the one nearest its size and kind, and the report says which.

Those limits were set on the benchmarks' own prompts, and TTFT grows with the prompt: the
2 s benchmarks cut their prompts short (1,024 tokens for llama2-70b and mixtral-8x7b, 3,136 for
deepseek-r1; :data:`PROMPT_LIMITS` gives each source). When the trace's p99 prompt is longer
than the prompts its benchmark measured, the TTFT limit is that of MLPerf's long-context
server benchmark, llama3_1-405b (6 s), the one MLPerf LLM limit set for long prompts; TPOT,
a per-token figure, keeps the model's benchmark limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from kvadvisor.catalog.models import ModelSpec
from kvadvisor.errors import ConfigError
from kvadvisor.fleet import parse_slo
from kvadvisor.results.verdict import SloTargets
from kvadvisor.units.constants import MS_PER_S
from kvadvisor.units.format import as_written, count

PARAMS_PER_BILLION = 1e9

MLPERF_COMMIT = "001712e9daf80386e0dda43f97b8f36981d792c4"
# Where each benchmark's prompt cut was read (mlcommons/inference, language/<benchmark>/).
DATASET_COMMIT = "b66003e10e2db4b8c36a448b0545ec90fcc6e9e9"
MLPERF_SOURCE = (
    "MLPerf Inference server scenario, mlcommons/inference loadgen/mlperf.conf "
    f"(commit {MLPERF_COMMIT}): {{bench}}.Server.ttft_latency = "
    "{ttft_ms:g} ms, tpot_latency = {tpot_ms:g} ms, at the 99th percentile "
    "(*.Server.target_latency_percentile = 99)"
)


@dataclass(frozen=True)
class MlperfLimit:
    """One MLPerf LLM benchmark's server-scenario limits (milliseconds, at the 99th percentile).

    ``prompt_limit_tokens`` is the longest prompt its dataset holds (None: the benchmark is
    the long-context one, held to no such cut), and ``prompt_source`` where that is stated.
    """

    benchmark: str
    ttft_ms: float
    tpot_ms: float
    prompt_limit_tokens: int | None = None
    prompt_source: str = ""


LLAMA2_70B = MlperfLimit(
    "llama2-70b",
    2000,
    200,
    1024,
    "language/llama2-70b/processorca.py --seqlen_limit, default 1024",
)
LLAMA31_8B = MlperfLimit(
    "llama3_1-8b",
    2000,
    100,
    1024,
    "language/llama3.1-8b/dataset.py, inputs padded to max_len 1024",
)
LLAMA31_405B = MlperfLimit("llama3_1-405b", 6000, 175)
MIXTRAL_8X7B = MlperfLimit(
    "mixtral-8x7b",
    2000,
    200,
    1024,
    "language/mixtral-8x7b/dataset.py max_length = 1024",
)
DEEPSEEK_R1 = MlperfLimit(
    "deepseek-r1",
    2000,
    80,
    3136,
    "language/deepseek-r1/utils/backend_registry.py MAX_ISL = 3136",
)
# MLPerf's one LLM server benchmark on long prompts: its TTFT limit holds for long traffic.
LONG_CONTEXT = LLAMA31_405B

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


def _source(limit: MlperfLimit) -> str:
    return MLPERF_SOURCE.format(bench=limit.benchmark, ttft_ms=limit.ttft_ms, tpot_ms=limit.tpot_ms)


def default_targets(
    model: ModelSpec | None, prompt_p99_tokens: float | None
) -> tuple[dict[str, float], str, str]:
    """MLPerf's limits for ``model``, with the long-context TTFT when the prompts outgrow them.

    ``prompt_p99_tokens`` is the trace's 99th-percentile prompt length (None: unknown, the
    model's benchmark limits hold). Returns the targets (seconds), the sentence that says which
    default applied and why with its sources, and that rule in a few words.
    """
    limit, why = (
        mlperf_limit(model)
        if model is not None
        else (LLAMA2_70B, "no model known: MLPerf's llama2-70b limits")
    )
    targets = {"ttft_p99_s": limit.ttft_ms / 1000.0, "tpot_p99_s": limit.tpot_ms / 1000.0}
    cut = limit.prompt_limit_tokens
    if cut is None or prompt_p99_tokens is None or prompt_p99_tokens <= cut:
        return targets, f"default: {why}; {_source(limit)}", f"MLPerf {limit.benchmark} limits"
    if LONG_CONTEXT.ttft_ms > limit.ttft_ms:
        targets["ttft_p99_s"] = LONG_CONTEXT.ttft_ms / 1000.0
    return (
        targets,
        f"default for long prompts: the trace's p99 prompt, {count(prompt_p99_tokens)} tokens, "
        f"is longer than the {count(cut)} tokens {limit.benchmark}'s limits were set on, so "
        f"TTFT p99 is MLPerf's long-context limit ({LONG_CONTEXT.benchmark}, "
        f"{count(LONG_CONTEXT.ttft_ms / 1000.0)} s) and TPOT p99 {limit.benchmark}'s "
        f"({count(limit.tpot_ms)} ms; {why}); {_source(LONG_CONTEXT)}; {_source(limit)}; "
        f"prompt cut: mlcommons/inference {limit.prompt_source} (commit {DATASET_COMMIT})",
        f"MLPerf long-context TTFT: p99 prompt {count(prompt_p99_tokens)} > {count(cut)} tokens",
    )


def slo_targets(
    text: str | None, model: ModelSpec | None, prompt_p99_tokens: float | None = None
) -> SloTargets:
    """The targets from ``--slo`` text, else the default for ``model`` and the prompts."""
    if text:
        targets = parse_slo(text)
        if not targets:
            raise ConfigError("--slo: give at least one target, e.g. ttft_p99=2s,tpot_p99=200ms")
        return SloTargets(targets, f"--slo {text}")
    targets, source, rule = default_targets(model, prompt_p99_tokens)
    return SloTargets(targets, source, rule)


# Looser targets are offered at this many significant digits, rounded up: "2.4s" for 2.32 s.
OFFER_DIGITS = 2


def round_up(seconds: float, digits: int = OFFER_DIGITS) -> float:
    """``seconds`` rounded up to ``digits`` significant digits (2.32 -> 2.4, 0.157 -> 0.16)."""
    if seconds <= 0 or not math.isfinite(seconds):
        return seconds
    step = 10.0 ** (math.floor(math.log10(seconds)) - digits + 1)
    # A figure already on the grid stays (2.4 -> 2.4), despite float noise in the division.
    units = math.ceil(seconds / step - 1e-9)
    return round(units * step, max(0, digits - 1 - math.floor(math.log10(seconds))) + 1)


def loosened(targets: Mapping[str, float], reached: Mapping[str, float]) -> dict[str, float] | None:
    """The loosest targets a deployment meets: each raised to what it reached, rounded up.

    None when a target has no figure or an unbounded one (requests left unfinished): no
    target of that percentile is met, however loose.
    """
    out: dict[str, float] = {}
    for key, target in targets.items():
        got = reached.get(key)
        if got is None or not math.isfinite(got):
            return None
        out[key] = target if got <= target else max(target, round_up(got))
    return out


def slo_text(targets: Mapping[str, float]) -> str:
    """Targets as ``--slo`` takes them: ``ttft_p99=2.4s,tpot_p99=200ms``."""
    parts = []
    for key, seconds in targets.items():
        name = key.removesuffix("_s")
        if seconds < 1:
            parts.append(f"{name}={as_written(round(seconds * MS_PER_S, 6))}ms")
        else:
            parts.append(f"{name}={as_written(round(seconds, 6))}s")
    return ",".join(parts)
