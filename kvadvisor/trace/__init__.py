"""Trace readers and the canonical trace model.

The public names load on first use (``kvadvisor.lazy``): importing the package, e.g. for the
``TraceFormat`` of a command-line option, reads in neither pyarrow nor numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvadvisor.lazy import lazy_exports

if TYPE_CHECKING:
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
    from kvadvisor.trace.stream import read_trace_path
    from kvadvisor.trace.writers import write_parquet

_EXPORTS = {
    "TraceDescription": "kvadvisor.trace.describe",
    "capabilities": "kvadvisor.trace.describe",
    "describe_trace": "kvadvisor.trace.describe",
    "format_description": "kvadvisor.trace.describe",
    "FORMAT_TITLES": "kvadvisor.trace.detect",
    "TraceFormat": "kvadvisor.trace.detect",
    "ColumnSource": "kvadvisor.trace.formats",
    "parse_column_map": "kvadvisor.trace.formats",
    "CANONICAL_COLUMNS": "kvadvisor.trace.model",
    "Trace": "kvadvisor.trace.model",
    "detect_format": "kvadvisor.trace.readers",
    "read_trace": "kvadvisor.trace.readers",
    "read_trace_path": "kvadvisor.trace.stream",
    "write_parquet": "kvadvisor.trace.writers",
}

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
    "read_trace_path",
    "write_parquet",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
