"""Step-time tables: one engine step's time from what the step holds, sampled for the replay.

A continuous-batching engine runs steps; each step holds some prefill chunks (new prompt tokens
after a cached or earlier-chunked context) and some decode tokens (one per running sequence).
Its time is modelled as a sum of parts, the decomposition AIConfigurator and Vidur use (an op
is either token-proportional, attention over (query, key) pairs, or a KV read):

    step_s = tokens_s(T)                              # GEMMs, TP all-reduce, fixed overhead
           + pairs_s_per_pair(pairs) * pairs          # prefill attention, layer-weighted pairs
           + decode_kv_s_per_byte * decode_kv_bytes   # decode attention: KV read per rank

with ``T`` the tokens in the step (prefill chunk tokens plus one per decode sequence), ``pairs``
the layer-weighted (query, key) pairs of the prefill chunks (``attention_pairs``) and
``decode_kv_bytes`` the KV one rank reads for the decode sequences (``KvLayout.bytes_for`` of
each context). ``tokens_s`` is a table over ``T`` (interpolated linearly, extrapolated linearly
past the last point), so the replay's compiled loop never calls Python per step.

The table is built by a step model: the built-in roofline (``roofline_step_table``) or the
optional silicon-calibrated estimator; ``source`` names which, for the report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvadvisor.perfmodel.kv import window_prefix
from kvadvisor.perfmodel.perf import PerfModel

# Tokens-in-step grid for the roofline: 1 to 1M tokens, 8 points per doubling. Dense enough
# that linear interpolation of a roofline max() misses the knee by well under 1%.
ROOFLINE_GRID_TOKENS = np.unique(np.round(np.logspace(0, 20, 161, base=2.0)))


@dataclass(frozen=True)
class StepTable:
    """One deployment's step-time model as arrays (per model replica of ``tp`` GPUs).

    ``tokens_grid`` (ascending, from 1) and ``tokens_s`` give the token-proportional part;
    ``s_per_pair`` is the time per layer-weighted (query, key) prefill pair;
    ``decode_s_per_kv_byte`` the time per KV byte a rank reads in decode. The attention shape
    (``full_attention_layers``, ``sliding_window_layers``, ``window_tokens``) lets the replay
    count pairs without the model catalog. ``source`` says which step model produced it.
    """

    source: str
    tokens_grid: np.ndarray
    tokens_s: np.ndarray
    s_per_pair: float
    decode_s_per_kv_byte: float
    full_attention_layers: int
    sliding_window_layers: int = 0
    window_tokens: int = 0

    def tokens_time_s(self, tokens: np.ndarray | float) -> np.ndarray:
        """The token-proportional part for ``tokens`` tokens in a step (linear beyond the grid)."""
        t = np.asarray(tokens, dtype=np.float64)
        out = np.interp(t, self.tokens_grid, self.tokens_s)
        last, prev = self.tokens_grid[-1], self.tokens_grid[-2]
        slope = (self.tokens_s[-1] - self.tokens_s[-2]) / (last - prev)
        return np.where(t > last, self.tokens_s[-1] + slope * (t - last), out)

    def attention_pairs(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
        """Layer-weighted (query, key) pairs of prefilling ``new_tokens`` after ``cached_tokens``.

        Causal: the token at position ``t`` attends to ``t`` keys, ``min(t, W)`` on windowed
        layers, so a chunk of ``m`` after ``p`` has ``m p + m (m + 1) / 2`` pairs per full layer.
        """
        m = np.asarray(new_tokens, dtype=np.float64)
        p = np.asarray(cached_tokens, dtype=np.float64)
        pairs = self.full_attention_layers * (m * p + m * (m + 1) / 2.0)
        if self.sliding_window_layers and self.window_tokens:
            w = float(self.window_tokens)
            pairs = pairs + self.sliding_window_layers * (
                window_prefix(p + m, w) - window_prefix(p, w)
            )
        return pairs

    def step_s(
        self, tokens: np.ndarray | float, pairs: np.ndarray | float, decode_kv_bytes: np.ndarray
    ) -> np.ndarray:
        """Step time, s: the three parts summed (vectorised over steps)."""
        return (
            self.tokens_time_s(tokens)
            + self.s_per_pair * np.asarray(pairs, dtype=np.float64)
            + self.decode_s_per_kv_byte * np.asarray(decode_kv_bytes, dtype=np.float64)
        )


def roofline_step_table(perf: PerfModel) -> StepTable:
    """The built-in roofline as a step table (docs/stage-profiler.md has the formulas).

    Token part: ``max(2 P_active T / (tp peak mfu), weights touched by T / (tp bw eff))``;
    attention: pair FLOPs at the prefill MFU; decode KV: bytes per rank over the effective
    memory bandwidth of one rank.
    """
    grid = ROOFLINE_GRID_TOKENS
    compute = (
        perf.flops_per_token * grid / (perf.tp * perf.peak_flops * perf.efficiency.prefill_mfu)
    )
    bandwidth = perf.gpu.memory_bandwidth_bytes_per_s * perf.efficiency.memory
    weights = perf.weight_bytes_read(grid) / (perf.tp * bandwidth)
    m = perf.model
    return StepTable(
        source=f"roofline ({perf.efficiency.source})",
        tokens_grid=grid,
        tokens_s=np.maximum(compute, np.broadcast_to(weights, grid.shape)),
        s_per_pair=perf.attention_flops_per_pair
        / (perf.tp * perf.peak_flops * perf.efficiency.prefill_mfu),
        decode_s_per_kv_byte=1.0 / bandwidth,
        full_attention_layers=m.full_attention_layers,
        sliding_window_layers=m.sliding_window_layers,
        window_tokens=int(m.sliding_window_tokens or 0),
    )
