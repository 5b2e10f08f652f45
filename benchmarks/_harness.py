"""Shared benchmark plumbing: run a child process, measure its wall time and its own peak RSS.

Peak memory is the child's ``ru_maxrss`` from ``os.wait4`` (that child and the descendants it
waited for), so two tools measured in the same run never share a number.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kvadvisor.units import BYTES_PER_KIB, BYTES_PER_MIB

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Measured:
    """One child run: command, wall seconds, peak resident set in bytes, exit status.

    ``cpu_s`` is the child's user + system time (``os.wait4``): on a shared machine the wall
    time includes waiting for a core, the CPU time does not.
    """

    label: str
    argv: tuple[str, ...]
    wall_s: float
    peak_rss_bytes: int
    returncode: int
    stderr_tail: str
    cpu_s: float = 0.0

    def line(self) -> str:
        """One human line with the figures."""
        return (
            f"{self.label:<34} wall {self.wall_s:8.2f} s   peak RSS "
            f"{self.peak_rss_bytes / BYTES_PER_MIB:9.1f} MiB   rc {self.returncode}"
        )


def run_measured(
    label: str, argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> Measured:
    """Run ``argv`` to completion; stdout is discarded, the stderr tail is kept."""
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = str(REPO) + os.pathsep + child_env.get("PYTHONPATH", "")
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=child_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    # Read stderr while waiting, so a chatty child cannot block on a full pipe.
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Measured(
        label,
        tuple(argv),
        wall,
        int(usage.ru_maxrss) * BYTES_PER_KIB,
        proc.returncode,
        err.decode(errors="replace")[-2000:],
        usage.ru_utime + usage.ru_stime,
    )


def best_of(label: str, argv: list[str], repeats: int, **kwargs: object) -> Measured:
    """The fastest of ``repeats`` runs (peak RSS of that run); fails loudly on a non-zero exit."""
    runs = [run_measured(label, argv, **kwargs) for _ in range(repeats)]  # type: ignore[arg-type]
    for r in runs:
        if r.returncode != 0:
            sys.exit(f"{label} failed (rc {r.returncode}):\n{r.stderr_tail}")
    return min(runs, key=lambda r: r.wall_s)


def spread(values: list[float]) -> str:
    """The median and the range: "11.20 (10.80 to 12.10)"."""
    return f"{statistics.median(values):.2f} ({min(values):.2f} to {max(values):.2f})"


def kvadvisor_argv(*args: str) -> list[str]:
    """``python -m kvadvisor ARGS`` with this interpreter (the checkout first on the path)."""
    return [sys.executable, "-m", "kvadvisor", *args]


def find_tool(name: str) -> str | None:
    """A console script beside this interpreter, or on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def write_mooncake_repeated(src: Path, dst: Path, repeats: int) -> tuple[int, int]:
    """The Mooncake JSONL repeated ``repeats`` times end to end, with disjoint hash ids.

    Copy k shifts every id by k × (max id + 1) and every timestamp by k × (span + gap), so no
    block is shared between copies and arrivals stay sorted. Returns (requests, block accesses).
    """
    rows = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines() if line]
    id_span = 1 + max(max(r["hash_ids"], default=0) for r in rows)
    ts = [r["timestamp"] for r in rows]
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False) if b > a]
    ts_span = max(ts) - min(ts) + (min(gaps) if gaps else 1)
    requests = accesses = 0
    with dst.open("w", encoding="utf-8") as out:
        for k in range(repeats):
            for r in rows:
                out.write(
                    json.dumps(
                        {
                            "timestamp": r["timestamp"] + k * ts_span,
                            "input_length": r["input_length"],
                            "output_length": r["output_length"],
                            "hash_ids": [h + k * id_span for h in r["hash_ids"]],
                        }
                    )
                    + "\n"
                )
                requests += 1
                accesses += len(r["hash_ids"])
    return requests, accesses


def mooncake_source() -> Path:
    """The shared Mooncake conversation trace beside the checkout (as tests/conftest.py does)."""
    path = REPO.parent / "shared" / "traces" / "conversation_trace.jsonl"
    if not path.exists():
        sys.exit(f"{path} not found: the benchmarks need the shared public traces beside the repo")
    return path
