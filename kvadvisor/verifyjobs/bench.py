"""Serving-benchmark datasets and commands that replay the trace's requests on a real engine.

* **vLLM** ``vllm bench serve --dataset-name timed_trace --self-timed`` reads JSONL rows of
  ``timestamp``, ``input_length``, ``output_length`` and ``hash_ids`` (the argument names
  ``--timed-trace-chunk-hash-size``, default 16, and ``--timed-trace-sec-multiplier``, default 1,
  as vLLM's ``bench serve`` parser prints them) and sends each request at its own timestamp;
  each hash id stands for ``chunk-hash-size`` prompt tokens, so the ids must cover the input.
  Saved with ``--save-result --save-detailed``: per-request ``input_lens``, ``ttfts``, ``itls``
  and ``start_times``, which kvadvisor reads (``--trace-format vllm``).
* **SGLang** ``python3 -m sglang.bench_serving --dataset-name mooncake --use-trace-timestamps``
  reads Mooncake JSONL (``timestamp`` in ms) and builds each prompt from 128 words per hash id
  (``python/sglang/benchmark/datasets/mooncake.py``), so the ids are re-cut to 128-token blocks;
  ``--output-file`` with ``--output-details`` keeps per-request lengths and latencies
  (``--trace-format sglang``).

Prefix sharing is kept: a re-cut id is a function of the trace's prefix-chained block hash
covering it and its position, so two requests share a re-cut id exactly when they share that
prefix. A trace without hashes gets fresh ids per request (lengths honoured, no sharing
invented). Arrivals are the trace's, divided by the plan's traffic scale and multiplied by the
number of instances whose share one benchmarked endpoint takes.
"""

from __future__ import annotations

import json
import math

import numpy as np

from kvadvisor.quoting import comment
from kvadvisor.trace.model import Trace
from kvadvisor.units import S_PER_MIN, plural
from kvadvisor.units.format import duration
from kvadvisor.verifyjobs.model import BenchRun

SGLANG_TOKENS_PER_ID = 128  # words per hash id in SGLang's mooncake prompt builder
DEFAULT_BLOCK_TOKENS = 512  # fresh ids for a trace without hashes: Mooncake's block size
ID_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constant (golden ratio): a bijective mix
ID_MASK = np.uint64((1 << 62) - 1)  # keep ids positive and exact in JSON readers


def _hash_lists(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(flat block hashes, per-row offsets, block tokens) of the given trace rows."""
    if not trace.has_hashes or trace.block_tokens is None:
        return None
    offsets, values = trace.hash_arrays()
    starts, counts = offsets[rows], offsets[rows + 1] - offsets[rows]
    out = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    picked = np.repeat(starts - out[:-1], counts) + np.arange(int(out[-1]), dtype=np.int64)
    return values[picked], out, int(trace.block_tokens)


def recut_ids(
    hashes: np.ndarray, offsets: np.ndarray, block_tokens: int, inputs: np.ndarray, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Ids of ``size``-token blocks derived from prefix-chained hashes of ``block_tokens``.

    Sub-block j of a request covers tokens ``[size j, size (j+1))``; its id mixes the hash of
    the original block holding its last token with j. Returns (flat ids, per-row offsets).
    """
    counts = np.maximum(np.ceil(inputs / size).astype(np.int64), 0)
    row = np.repeat(np.arange(inputs.size), counts)
    starts = np.concatenate([[0], np.cumsum(counts)])
    j = np.arange(int(starts[-1]), dtype=np.int64) - starts[row]
    last_token = np.minimum((j + 1) * size, inputs[row]) - 1
    have = offsets[1:] - offsets[:-1]
    block = np.minimum(last_token // block_tokens, np.maximum(have[row] - 1, 0))
    has_block = have[row] > 0
    src = np.where(has_block, offsets[row] + block, 0)
    base = np.where(has_block, hashes[src] if hashes.size else 0, -1 - row)
    mixed = (base.astype(np.uint64) * ID_MIX + j.astype(np.uint64)) & ID_MASK
    return mixed.astype(np.int64), starts


def fresh_ids(inputs: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Ids that no two requests share: ``ceil(input / size)`` per request."""
    counts = np.maximum(np.ceil(inputs / size).astype(np.int64), 0)
    starts = np.concatenate([[0], np.cumsum(counts)])
    return np.arange(int(starts[-1]), dtype=np.int64), starts


def _lines(
    times: np.ndarray,
    inputs: np.ndarray,
    outputs: np.ndarray,
    ids: np.ndarray,
    starts: np.ndarray,
) -> str:
    text = []
    for i in range(inputs.size):
        text.append(
            json.dumps(
                {
                    "timestamp": times[i].item(),
                    "input_length": int(inputs[i]),
                    "output_length": int(outputs[i]),
                    "hash_ids": ids[starts[i] : starts[i + 1]].tolist(),
                },
                separators=(",", ":"),
            )
        )
    return "\n".join(text) + "\n"


def bench_datasets(
    trace: Trace, time_factor: float, requests: int | None, rows: np.ndarray | None = None
) -> tuple[dict[str, str], int, int, dict[str, int | float]]:
    """The vLLM and SGLang datasets (relative path → text), and what they hold.

    ``rows`` are the trace rows to replay, in arrival order (None: every row; a node's routed
    share otherwise), of which the first ``requests`` are kept. ``time_factor`` multiplies
    seconds since the first kept arrival. Returns the files, the rows written, the vLLM chunk
    hash size, and totals for the manifest.
    """
    rows = np.arange(trace.requests, dtype=np.int64) if rows is None else np.asarray(rows)
    rows = rows[:requests] if requests is not None else rows
    n = int(rows.size)
    arrival = trace.column_np("arrival_s").astype(np.float64)[rows]
    t = (arrival - (arrival[0] if n else 0.0)) * time_factor
    inputs = trace.column_np("input_tokens").astype(np.int64)[rows]
    # An engine generates at least one token; a failed request of the trace asked for one.
    outputs = np.maximum(trace.column_np("output_tokens").astype(np.int64)[rows], 1)
    lists = _hash_lists(trace, rows)
    if lists is None:
        block = DEFAULT_BLOCK_TOKENS
        v_ids, v_starts = fresh_ids(inputs, block)
        s_ids, s_starts = fresh_ids(inputs, SGLANG_TOKENS_PER_ID)
    else:
        hashes, offsets, block = lists
        # vLLM expands every id to `block` tokens and stops when ids run out: they must cover
        # the prompt, so each request gets ceil(input / block) ids cut from its own hashes.
        v_ids, v_starts = recut_ids(hashes, offsets, block, inputs, block)
        s_ids, s_starts = recut_ids(hashes, offsets, block, inputs, SGLANG_TOKENS_PER_ID)
    vllm = _lines(np.round(t, 6), inputs, outputs, v_ids, v_starts)
    sglang = _lines(np.round(t * 1000.0, 3), inputs, outputs, s_ids, s_starts)
    totals = {
        "requests": int(n),
        "input_tokens_total": int(inputs.sum()),
        "output_tokens_total": int(outputs.sum()),
        "replay_s": float(t[-1]) if n else 0.0,
    }
    files = {"bench/trace.timed.jsonl": vllm, "bench/trace.mooncake.jsonl": sglang}
    return files, n, block, totals


def _script(title: list[str], command: list[str]) -> str:
    body = " \\\n  ".join(command)
    # The trace's file name is in the title: each line stays one comment line.
    head = "\n".join(comment(line) for line in title)
    return (
        "#!/usr/bin/env bash\n"
        f"{head}\n"
        "set -euo pipefail\n"
        'cd "$(dirname "$0")/.."\n'
        ': "${MODEL:?set MODEL to the served model name (as the server knows it)}"\n'
        ': "${HOST:=127.0.0.1}"\n'
        f': "${{PORT:={"8000" if "vllm" in command[0] else "30000"}}}"\n'
        "mkdir -p results\n"
        f"{body}\n"
    )


def bench_runs(
    totals: dict[str, int | float], block_tokens: int, trace_name: str, which: str = ""
) -> tuple[tuple[BenchRun, ...], dict[str, str]]:
    """The two benchmark scripts (relative path → text) and their runs.

    ``which`` says which requests and timing the dataset holds (one title line; none if empty).
    """
    n = int(totals["requests"])
    about = duration(S_PER_MIN * math.ceil(float(totals["replay_s"]) / S_PER_MIN))
    title = [
        f"Replays {plural(n, 'request')} of {trace_name} at their arrival times (about {about}),",
        "against the engine at $HOST:$PORT serving $MODEL; per-request results go to results/.",
        *([which] if which else []),
    ]
    vllm_cmd = [
        "vllm bench serve",
        '--backend vllm --host "$HOST" --port "$PORT" --model "$MODEL"',
        "--dataset-name timed_trace --dataset-path bench/trace.timed.jsonl",
        f"--timed-trace-chunk-hash-size {block_tokens} --timed-trace-sec-multiplier 1",
        f"--self-timed --num-prompts {n} --disable-shuffle --ignore-eos",
        "--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99,99.9",
        "--save-result --save-detailed --result-dir results --result-filename vllm-bench.json",
    ]
    sglang_cmd = [
        "python3 -m sglang.bench_serving",
        '--backend sglang --host "$HOST" --port "$PORT" --model "$MODEL"',
        "--dataset-name mooncake --dataset-path bench/trace.mooncake.jsonl",
        "--mooncake-num-rounds 1 --mooncake-slowdown-factor 1 --use-trace-timestamps",
        f"--num-prompts {n}",
        "--output-file results/sglang-bench.jsonl --output-details",
    ]
    scripts = {
        "bench/vllm.sh": _script(["vLLM bench serve (timed_trace dataset).", *title], vllm_cmd),
        "bench/sglang.sh": _script(
            ["SGLang bench_serving (mooncake dataset, trace timestamps).", *title], sglang_cmd
        ),
    }
    common = dict(
        requests=n,
        input_tokens_total=int(totals["input_tokens_total"]),
        output_tokens_total=int(totals["output_tokens_total"]),
        replay_s=float(totals["replay_s"]),
    )
    runs = (
        BenchRun(
            "vllm", "bench/vllm.sh", "bench/trace.timed.jsonl", "results/vllm-bench.json", **common
        ),
        BenchRun(
            "sglang",
            "bench/sglang.sh",
            "bench/trace.mooncake.jsonl",
            "results/sglang-bench.jsonl",
            **common,
        ),
    )
    return runs, scripts
