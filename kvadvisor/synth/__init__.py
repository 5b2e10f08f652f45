"""Deterministic synthetic traces with a chosen shape, streamed in bounded batches."""

from kvadvisor.synth.generate import SynthGenerator, generate, synth_schema
from kvadvisor.synth.model import ArrivalProcess, SynthShape
from kvadvisor.synth.writer import SynthWriteResult, write_synth_parquet

__all__ = [
    "ArrivalProcess",
    "SynthGenerator",
    "SynthShape",
    "SynthWriteResult",
    "generate",
    "synth_schema",
    "write_synth_parquet",
]
