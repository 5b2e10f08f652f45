"""Trace readers and the canonical trace model."""

from kvadvisor.trace.describe import (
    TraceDescription,
    capabilities,
    describe_trace,
    format_description,
)
from kvadvisor.trace.detect import FORMAT_TITLES, TraceFormat
from kvadvisor.trace.formats import ColumnSource, parse_column_map
from kvadvisor.trace.model import CANONICAL_COLUMNS, Trace
from kvadvisor.trace.readers import detect_format, read_trace
from kvadvisor.trace.writers import write_parquet

__all__ = [
    "CANONICAL_COLUMNS",
    "FORMAT_TITLES",
    "ColumnSource",
    "Trace",
    "TraceDescription",
    "TraceFormat",
    "capabilities",
    "describe_trace",
    "format_description",
    "detect_format",
    "parse_column_map",
    "read_trace",
    "write_parquet",
]
