"""The shape of a synthetic trace: every knob of `kvadvisor synth`, with defaults and checks."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kvadvisor.errors import ConfigError
from kvadvisor.units import S_PER_DAY


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
        """Reject shapes that cannot be generated, naming the option to fix."""
        try:
            object.__setattr__(self, "arrival", ArrivalProcess(self.arrival))
        except ValueError:
            choices = ", ".join(a.value for a in ArrivalProcess)
            raise ConfigError(f"synth: --arrival must be one of {choices}") from None
        checks = [
            (self.requests >= 0, "--requests must be >= 0"),
            (self.block_tokens >= 1, "--block-tokens must be >= 1"),
            (self.rate_per_s > 0, "--rate must be > 0 requests per second"),
            (self.burst_cv >= 1.0, "--burst-cv must be >= 1 (1 is Poisson)"),
            (0.0 <= self.diurnal_amplitude < 1.0, "--diurnal-amplitude must be in [0, 1)"),
            (self.diurnal_period_s > 0, "--diurnal-period must be > 0 seconds"),
            (self.input_tokens_median >= 1, "--input-median must be >= 1 token"),
            (self.output_tokens_median >= 1, "--output-median must be >= 1 token"),
            (self.input_tokens_sigma >= 0, "--input-sigma must be >= 0"),
            (self.output_tokens_sigma >= 0, "--output-sigma must be >= 0"),
            (self.max_input_tokens >= 1, "--max-input-tokens must be >= 1"),
            (self.max_output_tokens >= 1, "--max-output-tokens must be >= 1"),
            (
                self.max_input_tokens // self.block_tokens < 2**20,
                "--max-input-tokens / --block-tokens must stay under 2^20 blocks",
            ),
            (1 <= self.sessions <= 2**24, "--sessions must be in [1, 16777216]"),
            (self.session_zipf >= 0, "--session-zipf must be >= 0 (0 is uniform)"),
            (self.mean_requests_per_session >= 1, "--requests-per-session must be >= 1"),
            (1 <= self.system_prompts <= 2**20, "--system-prompts must be in [1, 1048576]"),
            (self.system_prompt_zipf >= 0, "--system-prompt-zipf must be >= 0"),
            (self.system_prompt_tokens_median >= 0, "--system-prompt-median must be >= 0"),
            (self.system_prompt_tokens_sigma >= 0, "--system-prompt-sigma must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"synth: {message}")
