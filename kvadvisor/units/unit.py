"""The units kvadvisor's numbers come in: the vocabulary of facts, results and the formatter."""

from __future__ import annotations

from enum import Enum


class Unit(str, Enum):
    """The units kvadvisor's numbers come in; the formatter has one rendering for each.

    The values are the spellings facts and rule files use (``docs/facts.md``).
    """

    RATIO = "ratio"  # a share between 0 and 1, shown as a percentage
    MULTIPLE = "x"  # a dimensionless multiple, shown as "3.8×"
    BYTES = "bytes"  # a size, shown in binary units (KiB, MiB, GiB, TiB)
    GIB = "gib"  # a size given in GiB (2^30 bytes), shown as a size
    BYTES_PER_TOKEN = "bytes_per_token"  # a size per token
    BYTES_PER_S = "bytes_per_s"  # a bandwidth, shown in decimal units (MB/s, GB/s)
    GBPS = "gbps"  # a bandwidth given in GB/s (10^9 bytes per second), shown as a bandwidth
    TOKENS = "tokens"  # a token count
    REQUESTS = "requests"  # a request count
    COUNT = "count"  # a plain count or a mean of counts
    PER_S = "per_s"  # events per second
    IOPS = "iops"  # I/O operations per second
    SECONDS = "s"  # a duration or a time, shown in ms, s, min or h
    US = "us"  # microseconds
    TFLOPS = "tflops"  # tera floating-point operations per second
    DWPD = "dwpd"  # drive writes per day
    BOOL = "bool"  # yes or no
    USD = "usd"  # US dollars
    TEXT = "text"  # a name or a list of names (a tier, an engine's keys), shown as it is

    def __str__(self) -> str:
        """The spelling (``ratio``), as facts and rule files write it."""
        return str(self.value)
