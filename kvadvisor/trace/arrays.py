"""The per-request arrays every analysis reads, taken from a trace once and passed down."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvadvisor.trace.model import Trace


@dataclass(frozen=True, eq=False)
class RequestArrays:
    """Arrival times (s) and prompt and output lengths (tokens), one value per request.

    The pipeline derives them from the trace once and hands the same arrays to the trace
    summary, the stage profiler and the plan review, instead of each reading the table again.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray

    @classmethod
    def of(cls, trace: Trace) -> RequestArrays:
        """The trace's columns as numpy arrays, in row (arrival) order."""
        return cls(
            trace.column_np("arrival_s"),
            trace.column_np("input_tokens"),
            trace.column_np("output_tokens"),
        )
