"""Trace readers and the canonical trace model."""

from kvadvisor.trace.model import CANONICAL_COLUMNS, Trace
from kvadvisor.trace.readers import read_trace

__all__ = ["CANONICAL_COLUMNS", "Trace", "read_trace"]
