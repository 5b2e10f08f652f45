"""Units: named conversion constants, the Unit vocabulary, Quantity and its one formatter.

Every conversion goes through a named constant (``BYTES_PER_GIB``), every displayed number
through :func:`format_value` (or ``str(Quantity(...))``), every quantity a user writes
("2 TB", "5 GB/s") through :func:`parse_quantity`.
"""

from kvadvisor.units.constants import (
    BITS_PER_BYTE,
    BYTES_PER_BF16,
    BYTES_PER_FP8,
    BYTES_PER_FP16,
    BYTES_PER_FP32,
    BYTES_PER_GB,
    BYTES_PER_GIB,
    BYTES_PER_KB,
    BYTES_PER_KIB,
    BYTES_PER_MB,
    BYTES_PER_MIB,
    BYTES_PER_TB,
    BYTES_PER_TIB,
    FLOPS_PER_TFLOPS,
    MS_PER_S,
    S_PER_DAY,
    S_PER_HOUR,
    S_PER_MIN,
    US_PER_S,
)
from kvadvisor.units.format import NOT_MEASURED, format_value, plural
from kvadvisor.units.parse import QuantityError, parse_quantity
from kvadvisor.units.quantity import Quantity
from kvadvisor.units.unit import Unit
from kvadvisor.units.written import (
    rate_as_written,
    size_as_written,
    time_as_written,
    written_rate,
    written_size,
    written_time,
)

__all__ = [
    "BITS_PER_BYTE",
    "BYTES_PER_BF16",
    "BYTES_PER_FP16",
    "BYTES_PER_FP32",
    "BYTES_PER_FP8",
    "BYTES_PER_GB",
    "BYTES_PER_GIB",
    "BYTES_PER_KB",
    "BYTES_PER_KIB",
    "BYTES_PER_MB",
    "BYTES_PER_MIB",
    "BYTES_PER_TB",
    "BYTES_PER_TIB",
    "FLOPS_PER_TFLOPS",
    "MS_PER_S",
    "NOT_MEASURED",
    "S_PER_DAY",
    "S_PER_HOUR",
    "S_PER_MIN",
    "US_PER_S",
    "Quantity",
    "QuantityError",
    "Unit",
    "format_value",
    "plural",
    "parse_quantity",
    "rate_as_written",
    "size_as_written",
    "time_as_written",
    "written_rate",
    "written_size",
    "written_time",
]
