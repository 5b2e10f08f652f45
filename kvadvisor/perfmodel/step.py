"""Step-time tables: one engine step's time from what the step holds, sampled for the replay.

A continuous-batching engine runs steps; each step holds some prefill chunks (new prompt tokens
after a cached or earlier-chunked context) and some decode tokens (one per running sequence).
Its time is modelled as a sum of parts, the decomposition AIConfigurator and Vidur use (an op
is token-proportional, attention over (query, key) pairs, a KV read, or the LM head):

    step_s = tokens_s(T)                              # GEMMs, experts, norms, TP all-reduces,
                                                      #   per-token attention cost, fixed overhead
           + logits_s(L)                              # LM head for the sequences given logits
           + s_per_pair * pairs                       # prefill attention, layer-weighted pairs
           + decode_s_per_kv_byte * decode_kv_bytes   # decode attention: KV read per rank
           + prefill_attention_fixed_s [if pairs > 0]  # attention kernels' per-step floors
           + decode_attention_fixed_s [if decode_kv_bytes > 0]

with ``T`` the tokens in the step (prefill chunk tokens plus one per decode sequence), ``L``
the sequences whose logits the step computes (vLLM v1 computes the last position's logits of
every scheduled request, a partial prefill chunk's included, and drops those it does not
sample: so ``L`` is the number of sequences in the step), ``pairs`` the layer-weighted (query,
key) pairs of the prefill chunks (``attention_pairs``) and ``decode_kv_bytes`` the KV one rank
reads for the decode sequences (``KvLayout.bytes_for`` of each context). ``tokens_s`` and
``logits_s`` are tables over ``T`` and ``L`` (interpolated linearly, extrapolated linearly past
the last point), so the replay's compiled loop never calls Python per step.

The table is built by a step model: the built-in calibrated roofline
(``PerfModel.step_table``) or the optional silicon database (``perfmodel.silicon``);
``source`` names which, for the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from kvadvisor.perfmodel.kv import window_prefix
from kvadvisor.units import Unit, format_value

if TYPE_CHECKING:
    from kvadvisor.perfmodel.perf import PerfModel

NO_HEAD_GRID = np.array([0.0, 1.0])
NO_HEAD_S = np.array([0.0, 0.0])


def interp_linear(x: np.ndarray | float, grid: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` at ``x``: linear between grid points, extended along the last segment."""
    t = np.asarray(x, dtype=np.float64)
    out = np.interp(t, grid, values)
    last, prev = grid[-1], grid[-2]
    slope = (values[-1] - values[-2]) / (last - prev)
    return np.where(t > last, values[-1] + slope * (t - last), out)


@dataclass(frozen=True)
class StepTable:
    """One deployment's step-time model as arrays (per model replica of ``tp`` GPUs).

    ``tokens_grid`` (ascending, from 1) and ``tokens_s`` give the token-proportional part
    with the fixed per-step overhead; ``logits_grid`` (ascending, from 0) and ``logits_s`` the
    LM head by sequences given logits (a table without them charges no head);
    ``s_per_pair`` is the time per layer-weighted (query, key) prefill pair;
    ``decode_s_per_kv_byte`` the time per KV byte a rank reads in decode;
    ``prefill_attention_fixed_s`` / ``decode_attention_fixed_s`` the attention kernels' floor
    in a step that holds prefill chunks / decode tokens. The attention shape
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
    logits_grid: np.ndarray = field(default_factory=lambda: NO_HEAD_GRID)
    logits_s: np.ndarray = field(default_factory=lambda: NO_HEAD_S)
    prefill_attention_fixed_s: float = 0.0
    decode_attention_fixed_s: float = 0.0

    def tokens_time_s(self, tokens: np.ndarray | float) -> np.ndarray:
        """The token-proportional part for ``tokens`` tokens in a step (linear beyond the grid)."""
        return interp_linear(tokens, self.tokens_grid, self.tokens_s)

    def logits_time_s(self, logit_tokens: np.ndarray | float) -> np.ndarray:
        """The LM head for ``logit_tokens`` sequences given logits (linear beyond the grid)."""
        return interp_linear(logit_tokens, self.logits_grid, self.logits_s)

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

    def scaled(self, factor: float) -> StepTable:
        """The same table with every step ``factor`` times as long (every part is linear in it)."""
        return replace(
            self,
            source=f"{self.source} x {format_value(factor, Unit.MULTIPLE)}",
            tokens_s=self.tokens_s * factor,
            s_per_pair=self.s_per_pair * factor,
            decode_s_per_kv_byte=self.decode_s_per_kv_byte * factor,
            logits_s=self.logits_s * factor,
            prefill_attention_fixed_s=self.prefill_attention_fixed_s * factor,
            decode_attention_fixed_s=self.decode_attention_fixed_s * factor,
        )

    def step_s(
        self,
        tokens: np.ndarray | float,
        pairs: np.ndarray | float,
        decode_kv_bytes: np.ndarray | float,
        logit_tokens: np.ndarray | float,
    ) -> np.ndarray:
        """Step time, s: the parts summed (vectorised over steps).

        ``logit_tokens``: the sequences in the step (each computes its last position's logits).
        """
        p = np.asarray(pairs, dtype=np.float64)
        kv = np.asarray(decode_kv_bytes, dtype=np.float64)
        return (
            self.tokens_time_s(tokens)
            + self.logits_time_s(logit_tokens)
            + self.s_per_pair * p
            + self.decode_s_per_kv_byte * kv
            + np.where(p > 0, self.prefill_attention_fixed_s, 0.0)
            + np.where(kv > 0, self.decode_attention_fixed_s, 0.0)
        )


def roofline_step_table(perf: PerfModel) -> StepTable:
    """The built-in calibrated roofline as a step table (``PerfModel.step_table``)."""
    return perf.step_table
