"""The traces the advisor's round trips run on, and the SLO each is held to.

Every trace in ``sample_traces/`` and, when the checkout sits beside them, the shared real
traces that are not already there: ``conversation_trace.jsonl`` and
``AzureLLMInferenceTrace_code.csv`` are, byte for byte, the published files that
``mooncake_conversation.parquet`` and ``azure_code.csv.zst`` hold (tests/test_sample_traces.py
checks the samples against the published checksums), so a shared copy with that checksum would
repeat its sample's whole-trace analysis on the same requests (about 40 s of a worker's time).
Long-context conversation traffic cannot meet MLPerf's 2 s TTFT at p99 (its longest
prompts take longer than that alone on any GPU), so it is held to a target it can meet; the
rest keep the MLPerf default.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from test_sample_traces import AZURE_CODE_SHA256, MOONCAKE_SHA256

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
CONVERSATION_SLO = "ttft_p99=10s,tpot_p99=100ms"
# The review's capacity, bandwidth and SLO checks a recommended deployment may not fail (RV01
# tier hits, RV02/RV03 bandwidth, RV04 underuse, RV07 TTFT, RV08 IOPS, RV10 SLO and overload),
# nor the seed's three causes of underused storage (RV11 sized for the peak, RV12 one storage
# spec for both stages, RV13 GPU paging carried to storage).
CAPACITY_BANDWIDTH_SLO = (
    "RV01",
    "RV02",
    "RV03",
    "RV04",
    "RV07",
    "RV08",
    "RV10",
    "RV11",
    "RV12",
    "RV13",
)


# The published files a sample holds whole (sample_traces/README.md).
IN_SAMPLES = {MOONCAKE_SHA256, AZURE_CODE_SHA256}


def new_to_samples(paths: list[Path]) -> list[Path]:
    """The shared traces among ``paths`` whose bytes no sample already holds."""
    return [p for p in paths if hashlib.sha256(p.read_bytes()).hexdigest() not in IN_SAMPLES]


def shared_traces() -> list[Path]:
    """The shared real traces present beside the checkout that no sample already holds."""
    if not SHARED.is_dir():
        return []
    return new_to_samples(sorted(p for p in SHARED.glob("*") if p.suffix in (".jsonl", ".csv")))


def traces() -> list[Path]:
    """Sample traces, then the shared ones present that no sample already holds."""
    samples = sorted(
        p for p in (ROOT / "sample_traces").iterdir() if p.suffix not in (".py", ".md")
    )
    return samples + shared_traces()


def slo_for(path: Path) -> str | None:
    """The --slo a trace is analysed with (None: the MLPerf default for the model)."""
    return CONVERSATION_SLO if "conversation" in path.name else None
