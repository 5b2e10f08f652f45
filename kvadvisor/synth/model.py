"""The shape of a synthetic trace: every knob of `kvadvisor synth`, with defaults and checks."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from kvadvisor.errors import ConfigError
from kvadvisor.units import S_PER_DAY
from kvadvisor.units.format import count

# Bounds far above any real workload, low enough that every value within them generates:
# lengths and medians within the token bound the traces accept, rates and periods that keep
# arrival times finite, spreads that keep exp(sigma * z) finite.
MAX_REQUESTS = 1 << 40
MAX_TOKENS = 1 << 24
MAX_RATE_PER_S = 1e9
MAX_PERIOD_S = 1e9
MAX_SIGMA = 10.0
MAX_ZIPF = 100.0

# Option names of the shape's fields where they differ from the field name.
_OPTIONS = {
    "rate_per_s": "--rate",
    "burst_cv": "--burst-cv",
    "diurnal_amplitude": "--diurnal-amplitude",
    "diurnal_period_s": "--diurnal-period",
    "input_tokens_median": "--input-median",
    "input_tokens_sigma": "--input-sigma",
    "output_tokens_median": "--output-median",
    "output_tokens_sigma": "--output-sigma",
    "session_zipf": "--session-zipf",
    "mean_requests_per_session": "--requests-per-session",
    "system_prompt_zipf": "--system-prompt-zipf",
    "system_prompt_tokens_median": "--system-prompt-median",
    "system_prompt_tokens_sigma": "--system-prompt-sigma",
}


class ArrivalProcess(str, Enum):
    """How inter-arrival gaps are drawn (before the diurnal time change)."""

    POISSON = "poisson"  # exponential gaps, coefficient of variation 1
    BURSTY = "bursty"  # gamma gaps with coefficient of variation ``burst_cv`` > 1


@dataclass(frozen=True)
class SynthShape:
    """Parameters of a synthetic trace; the same shape and seed always give the same trace.

    Lengths are lognormal: ``median`` is exp(mu), ``sigma`` the standard deviation of the log.
    Sessions live in ``sessions`` slots with Zipf(``session_zipf``) popularity; after each
    request its session ends with probability 1/``mean_requests_per_session`` and the slot
    starts a new one. Each session keeps one system prompt, picked with Zipf(``system_prompt_zipf``)
    popularity among ``system_prompts`` prompts of lognormal length (whole blocks).
    The arrival rate follows ``rate_per_s`` × (1 + ``diurnal_amplitude`` × sin(2π t / period)).
    """

    requests: int = 100_000
    seed: int = 0
    block_tokens: int = 512
    rate_per_s: float = 10.0
    arrival: ArrivalProcess = ArrivalProcess.POISSON
    burst_cv: float = 3.0
    diurnal_amplitude: float = 0.0
    diurnal_period_s: float = S_PER_DAY
    input_tokens_median: float = 2048.0
    input_tokens_sigma: float = 1.0
    max_input_tokens: int = 131_072
    output_tokens_median: float = 256.0
    output_tokens_sigma: float = 1.0
    max_output_tokens: int = 16_384
    sessions: int = 10_000
    session_zipf: float = 1.0
    mean_requests_per_session: float = 8.0
    system_prompts: int = 100
    system_prompt_zipf: float = 1.2
    system_prompt_tokens_median: float = 1024.0
    system_prompt_tokens_sigma: float = 0.5

    def __post_init__(self) -> None:
        """Reject shapes that cannot be generated, naming the option to fix.

        Every number must be finite and within its range (all checked, in order, before any
        is used: a zero --block-tokens must not divide first).
        """
        try:
            object.__setattr__(self, "arrival", ArrivalProcess(self.arrival))
        except ValueError:
            choices = ", ".join(a.value for a in ArrivalProcess)
            raise ConfigError(f"synth: --arrival must be one of {choices}") from None
        for name, value in vars(self).items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"synth: {_OPTIONS.get(name, name)} must be a finite number")
        checks: list[tuple[Callable[[], bool], str]] = [
            (
                # 0 wrote a trace every other command refuses ("no requests in the file").
                lambda: 1 <= self.requests <= MAX_REQUESTS,
                f"--requests must be in [1, {MAX_REQUESTS}]",
            ),
            (lambda: 0 <= self.seed < 2**64, "--seed must be in [0, 2^64)"),
            (
                lambda: 1 <= self.block_tokens <= MAX_TOKENS,
                f"--block-tokens must be in [1, {MAX_TOKENS}]",
            ),
            (
                lambda: 0 < self.rate_per_s <= MAX_RATE_PER_S,
                f"--rate must be in (0, {count(MAX_RATE_PER_S)}] requests per second",
            ),
            (
                lambda: 1.0 <= self.burst_cv <= 1000.0,
                "--burst-cv must be in [1, 1000] (1 is Poisson)",
            ),
            (lambda: 0.0 <= self.diurnal_amplitude < 1.0, "--diurnal-amplitude must be in [0, 1)"),
            (
                lambda: 0 < self.diurnal_period_s <= MAX_PERIOD_S,
                f"--diurnal-period must be in (0, {count(MAX_PERIOD_S)}] seconds",
            ),
            (
                lambda: 1 <= self.input_tokens_median <= MAX_TOKENS,
                f"--input-median must be in [1, {MAX_TOKENS}] tokens",
            ),
            (
                lambda: 1 <= self.output_tokens_median <= MAX_TOKENS,
                f"--output-median must be in [1, {MAX_TOKENS}] tokens",
            ),
            (
                lambda: 0 <= self.input_tokens_sigma <= MAX_SIGMA,
                f"--input-sigma must be in [0, {count(MAX_SIGMA)}]",
            ),
            (
                lambda: 0 <= self.output_tokens_sigma <= MAX_SIGMA,
                f"--output-sigma must be in [0, {count(MAX_SIGMA)}]",
            ),
            (
                lambda: 1 <= self.max_input_tokens <= MAX_TOKENS,
                f"--max-input-tokens must be in [1, {MAX_TOKENS}]",
            ),
            (
                lambda: 1 <= self.max_output_tokens <= MAX_TOKENS,
                f"--max-output-tokens must be in [1, {MAX_TOKENS}]",
            ),
            (
                lambda: self.max_input_tokens // self.block_tokens < 2**20,
                "--max-input-tokens / --block-tokens must stay under 2^20 blocks",
            ),
            (lambda: 1 <= self.sessions <= 2**24, "--sessions must be in [1, 16777216]"),
            (
                lambda: 0 <= self.session_zipf <= MAX_ZIPF,
                f"--session-zipf must be in [0, {count(MAX_ZIPF)}] (0 is uniform)",
            ),
            (
                lambda: 1 <= self.mean_requests_per_session <= MAX_REQUESTS,
                "--requests-per-session must be >= 1",
            ),
            (lambda: 1 <= self.system_prompts <= 2**20, "--system-prompts must be in [1, 1048576]"),
            (
                lambda: 0 <= self.system_prompt_zipf <= MAX_ZIPF,
                f"--system-prompt-zipf must be in [0, {count(MAX_ZIPF)}]",
            ),
            (
                lambda: 0 <= self.system_prompt_tokens_median <= MAX_TOKENS,
                f"--system-prompt-median must be in [0, {MAX_TOKENS}]",
            ),
            (
                lambda: 0 <= self.system_prompt_tokens_sigma <= MAX_SIGMA,
                f"--system-prompt-sigma must be in [0, {count(MAX_SIGMA)}]",
            ),
        ]
        for ok, message in checks:
            if not ok():
                raise ConfigError(f"synth: {message}")
