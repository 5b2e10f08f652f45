"""Shared inputs for the verify tests: a small bursty trace with prefix reuse, and plans."""

from __future__ import annotations

import json
import random
from pathlib import Path

# A disk tier small enough that any CI disk holds its rates (tens of MB/s): 256 B of KV per
# token, 256-token chunks (64 KiB I/Os), one instance.
DISK_PLAN = """\
name: tiny-disk
model: {kv_bytes_per_token: 256, tp: 1}
slo: {ttft_p99: 2 s}
stages:
  prefill:
    count: 1
    chunk_tokens: 256
    tiers:
      - name: disk
        storage: {kind: ssd, read_bandwidth: 200 MB/s, write_bandwidth: 200 MB/s, latency: 100 us}
        capacity: 1 GB
"""

# A catalog model on a catalog GPU, for the serving-benchmark checks and the calibration.
MODEL_PLAN = """\
name: llama8b-h200
model: {name: llama-3.1-8b, tp: 1}
slo: {ttft_p99: 2 s, tpot_p99: 50 ms}
stages:
  prefill:
    gpu: h200
    count: 1
    engines: {lmcache: {chunk_size: 256}}
    tiers:
      - name: nvme
        storage: nvme-gen4-x4
        capacity: 1 TB
"""


def write_bursty_trace(path: Path, requests: int = 240, seed: int = 7) -> Path:
    """Mooncake JSONL: arrivals dense for 2 s of every 6 s, 20 sessions sharing prefixes."""
    rng = random.Random(seed)
    t = 0.0
    sessions: dict[int, list[int]] = {}
    lines = []
    for i in range(requests):
        t += rng.expovariate(30.0 if t % 6.0 < 2.0 else 4.0)
        n = rng.randint(1024, 4096)
        s = rng.randint(0, 20)
        blocks = (n + 511) // 512
        prefix = sessions.get(s, [])[:blocks]
        ids = prefix + [10_000 + 20 * i + k for k in range(blocks - len(prefix))]
        sessions[s] = ids
        row = {"timestamp": int(t * 1000), "input_length": n, "output_length": 64, "hash_ids": ids}
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path


# The same on one aggregated serving instance: a plan the fleet replay runs (closed loop).
SERVING_PLAN = """\
name: llama8b-serving
model: {name: llama-3.1-8b, tp: 1}
slo: {ttft_p99: 2 s, tpot_p99: 50 ms}
stages:
  serving:
    gpu: h200
    count: 1
    gpu_kv_pool: 2 GB
    engines: {lmcache: {chunk_size: 256}}
    tiers:
      - name: nvme
        storage: nvme-gen4-x4
        capacity: 1 TB
"""
