"""The machine's memory, for the bounds a reader keeps by default (one place for every command)."""

from __future__ import annotations

import os

# Share of physical memory used when no --memory-limit is given: half leaves the rest of the
# machine (page cache for the parquet files, other processes) room to work.
DEFAULT_MEMORY_FRACTION = 0.5


def physical_memory_bytes() -> int:
    """The machine's physical memory in bytes."""
    return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))


def default_memory_limit_bytes() -> int:
    """:data:`DEFAULT_MEMORY_FRACTION` of the machine's physical memory."""
    return int(DEFAULT_MEMORY_FRACTION * physical_memory_bytes())
