"""Generate a synthetic canonical trace as a stream of bounded record batches (pure, seeded).

Every random stream has its own generator, drawn element by element, so the trace depends on the
shape and the seed only, never on the chunk size. Block ids follow DESIGN.md's prefix chaining:
block j of system prompt p is the same id wherever it appears (always at position j, after
block j-1 of p); block k of session g always sits right after its system prompt's P blocks, at
position P+k, after block k-1 of g. Ids are mixed by a bijection on [0, 2^63) so they look like
arbitrary 64-bit hashes (distinct raw ids stay distinct).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvadvisor.errors import ConfigError
from kvadvisor.synth.model import ArrivalProcess, SynthShape
from kvadvisor.trace.model import CANONICAL_COLUMNS

DEFAULT_CHUNK_ROWS = 1 << 20
MAX_CHUNK_ROWS = 1 << 22
_POSITION_BITS = 20  # raw id = (prompt or session number) << 20 | position within it
_MASK63 = np.uint64((1 << 63) - 1)
_MIX_MUL1 = np.uint64(0x3C79AC492BA7B653)  # odd: multiplication mod 2^63 is a bijection
_MIX_MUL2 = np.uint64(0x1C69B3F74AC4AE35)
_NEWTON_STEPS = 60

SYNTH_COLUMNS = ("arrival_s", "input_tokens", "output_tokens", "session_id", "block_hashes")


def synth_schema() -> pa.Schema:
    """Arrow schema of the generated batches (canonical names and types)."""
    return pa.schema([(name, CANONICAL_COLUMNS[name][0]) for name in SYNTH_COLUMNS])


def mix63(raw: np.ndarray) -> np.ndarray:
    """A bijection on [0, 2^63): odd multiplies and xor-shifts, all taken mod 2^63.

    Each step is invertible on 63-bit words, so distinct raw ids give distinct hashes.
    """
    x = raw.astype(np.uint64) & _MASK63
    with np.errstate(over="ignore"):
        x = (x * _MIX_MUL1) & _MASK63
        x ^= x >> np.uint64(29)
        x = (x * _MIX_MUL2) & _MASK63
        x ^= x >> np.uint64(32)
    return x.astype(np.int64)


def zipf_cdf(n: int, exponent: float) -> np.ndarray:
    """Cumulative probabilities of ranks 0..n-1 with P(rank k) ∝ (k+1)^-exponent."""
    weights = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def _zipf_draw(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1).astype(np.int64)


def _lognormal_tokens(z: np.ndarray, median: float, sigma: float, cap: int) -> np.ndarray:
    return np.clip(np.rint(median * np.exp(sigma * z)), 1, cap).astype(np.int64)


def diurnal_time(tau_s: np.ndarray, amplitude: float, period_s: float) -> np.ndarray:
    """Wall-clock times whose rate follows 1 + amplitude·sin(2πt/period) (time change).

    Solves t + (A/ω)(1 − cos ωt) = τ (the integrated intensity over the base rate) by Newton's
    method kept inside its bracket [τ − 2A/ω, τ]; the derivative 1 + A sin ωt ≥ 1 − A > 0.
    """
    if amplitude == 0.0 or len(tau_s) == 0:
        return tau_s
    omega = 2.0 * np.pi / period_s
    lo = tau_s - 2.0 * amplitude / omega
    t = tau_s.copy()
    # Each element stops at its own convergence, so its value never depends on its neighbours
    # (and so never on the chunking).
    active = np.arange(len(t))
    for _ in range(_NEWTON_STEPS):
        ta, ya = t[active], tau_s[active]
        step = (ta + (amplitude / omega) * (1.0 - np.cos(omega * ta)) - ya) / (
            1.0 + amplitude * np.sin(omega * ta)
        )
        t[active] = np.clip(ta - step, lo[active], ya)
        active = active[np.abs(step) >= 1e-9]
        if len(active) == 0:
            break
    return t


@dataclass
class _State:
    """What carries from one chunk to the next (small: one entry per session slot)."""

    tau_s: float = 0.0
    last_arrival_s: float = 0.0
    ends: int = 0
    slot_gid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class SynthGenerator:
    """Iterates record batches of at most ``chunk_rows`` requests of a synthetic trace."""

    def __init__(self, shape: SynthShape, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> None:
        """Prepare the random streams and the fixed system prompts of ``shape``."""
        if not 1 <= chunk_rows <= MAX_CHUNK_ROWS:
            raise ConfigError(f"synth: --chunk-rows must be in [1, {MAX_CHUNK_ROWS}]")
        self.shape = shape
        self.chunk_rows = chunk_rows
        seeds = np.random.SeedSequence(shape.seed).spawn(6)
        (self._gaps, self._input, self._output, self._slots, self._ends, prompts) = (
            np.random.default_rng(s) for s in seeds
        )
        z = prompts.standard_normal(shape.system_prompts)
        prompt_tokens = shape.system_prompt_tokens_median * np.exp(
            shape.system_prompt_tokens_sigma * z
        )
        self.prompt_blocks = np.minimum(
            np.floor(prompt_tokens / shape.block_tokens), (1 << _POSITION_BITS) - 1
        ).astype(np.int64)
        self._prompt_cdf = zipf_cdf(shape.system_prompts, shape.system_prompt_zipf)
        self._session_cdf = zipf_cdf(shape.sessions, shape.session_zipf)
        # A session's system prompt is a fixed function of its number, so no table grows.
        self._prompt_salt = np.int64(prompts.integers(0, 2**62))

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        """Yield the trace in arrival order, ``chunk_rows`` requests at a time."""
        state = _State(slot_gid=np.arange(self.shape.sessions, dtype=np.int64))
        done = 0
        while done < self.shape.requests:
            n = min(self.chunk_rows, self.shape.requests - done)
            yield self._chunk(n, state)
            done += n

    def _arrivals(self, n: int, state: _State) -> np.ndarray:
        shape = self.shape
        if shape.arrival is ArrivalProcess.POISSON:
            gaps = self._gaps.standard_exponential(n) / shape.rate_per_s
        else:
            k = 1.0 / shape.burst_cv**2  # gamma shape: CV = 1/sqrt(k), mean k·scale = 1/rate
            gaps = self._gaps.standard_gamma(k, n) / (k * shape.rate_per_s)
        # The first request arrives at 0 (DESIGN.md: seconds since the first request).
        # Summing on from the carried total keeps every float identical whatever the chunking.
        ends = np.cumsum(np.concatenate(([state.tau_s], gaps)))[1:]
        tau = np.concatenate(([state.tau_s], ends[:-1]))
        state.tau_s = float(ends[-1])
        t = diurnal_time(tau, shape.diurnal_amplitude, shape.diurnal_period_s)
        # Newton's tolerance could reorder two arrivals 1e-9 s apart; keep arrival order.
        t = np.maximum.accumulate(np.maximum(t, state.last_arrival_s))
        state.last_arrival_s = float(t[-1])
        return t

    def _sessions(self, n: int, state: _State) -> np.ndarray:
        """Session number of every request: slots by Zipf, each ending with prob 1/mean."""
        shape = self.shape
        slot = _zipf_draw(self._session_cdf, self._slots.random(n))
        ends = self._ends.random(n) < 1.0 / shape.mean_requests_per_session
        order = np.argsort(slot, kind="stable")
        s_sorted, e_sorted = slot[order], ends[order]
        pos = np.arange(n)
        is_start = np.ones(n, bool)
        is_start[1:] = s_sorted[1:] != s_sorted[:-1]
        group_start = np.maximum.accumulate(np.where(is_start, pos, 0))
        # The session a slot's request falls in was opened by the last end event before it.
        global_end = state.ends + np.cumsum(ends) - 1  # in arrival order
        new_gid_sorted = shape.sessions + global_end[order]
        last_end = np.maximum.accumulate(np.where(e_sorted, pos, -1))
        prev_end = np.concatenate(([-1], last_end[:-1]))
        opened_here = prev_end >= group_start
        gid_sorted = np.where(
            opened_here, new_gid_sorted[np.maximum(prev_end, 0)], state.slot_gid[s_sorted]
        )
        is_last = np.ones(n, bool)
        is_last[:-1] = s_sorted[1:] != s_sorted[:-1]
        closes = is_last & (last_end >= group_start)
        state.slot_gid[s_sorted[closes]] = new_gid_sorted[last_end[closes]]
        state.ends += int(ends.sum())
        gid = np.empty(n, np.int64)
        gid[order] = gid_sorted
        return gid

    def _chunk(self, n: int, state: _State) -> pa.RecordBatch:
        shape = self.shape
        arrival = self._arrivals(n, state)
        input_tokens = _lognormal_tokens(
            self._input.standard_normal(n),
            shape.input_tokens_median,
            shape.input_tokens_sigma,
            shape.max_input_tokens,
        )
        output_tokens = _lognormal_tokens(
            self._output.standard_normal(n),
            shape.output_tokens_median,
            shape.output_tokens_sigma,
            shape.max_output_tokens,
        )
        gid = self._sessions(n, state)
        u_prompt = mix63(gid ^ self._prompt_salt).astype(np.float64) / 2.0**63
        prompt = _zipf_draw(self._prompt_cdf, u_prompt)
        blocks = -(-input_tokens // shape.block_tokens)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(blocks, out=offsets[1:])
        total = int(offsets[-1])
        position = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1], blocks)
        p_blocks = np.repeat(self.prompt_blocks[prompt], blocks)
        in_prompt = position < p_blocks
        raw = np.where(
            in_prompt,
            (np.repeat(prompt, blocks) << _POSITION_BITS) + position,
            ((shape.system_prompts + np.repeat(gid, blocks)) << _POSITION_BITS)
            + (position - p_blocks),
        )
        hashes = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(mix63(raw)))
        return pa.RecordBatch.from_arrays(
            [
                pa.array(arrival, pa.float64()),
                pa.array(input_tokens, pa.int64()),
                pa.array(output_tokens, pa.int64()),
                pc.cast(pa.array(gid, pa.int64()), pa.string()),
                hashes,
            ],
            schema=synth_schema(),
        )


def generate(shape: SynthShape, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pa.RecordBatch]:
    """The synthetic trace of ``shape`` as record batches of at most ``chunk_rows`` rows."""
    return iter(SynthGenerator(shape, chunk_rows))
