"""Serving-benchmark result files in the tools' own formats, from per-request timings.

`vllm bench serve --save-result --save-detailed` writes one JSON object, and SGLang's
`bench_serving --output-details` one JSONL line per run; their keys are those of the tools'
sources at the commits in tests/fixtures/bench_keys/ (every key, not only those kvadvisor reads),
and their summary figures are computed from the per-request arrays as the tools compute them
(calculate_metrics): TPOT per request (latency - TTFT) / (output tokens - 1), inter-token
latencies flattened, percentiles by numpy, milliseconds for the *_ms keys.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

KEYS_DIR = Path(__file__).parent / "fixtures" / "bench_keys"
# What bench/vllm.sh asks for (kvadvisor/verifyjobs/bench.py).
VLLM_METRICS = ("ttft", "tpot", "itl", "e2el")
VLLM_PERCENTILES = (50.0, 99.0, 99.9)
SGLANG_PERCENTILES = (90, 95, 99)  # fixed in SGLang's BenchmarkMetrics
# vLLM's start_times are time.perf_counter() at send: seconds since an arbitrary origin.
PERF_COUNTER_ORIGIN_S = 81_234.5


def bench_keys(tool: str) -> dict[str, Any]:
    """The fixture of ``tool`` (vllm-bench-serve, sglang-bench-serving)."""
    return yaml.safe_load((KEYS_DIR / f"{tool}.yaml").read_text())


def vllm_metric_keys() -> list[str]:
    """The mean/median/std/percentile keys process_one_metric writes for bench/vllm.sh."""
    words = ["mean", "median", "std"] + [_p_word(p) for p in VLLM_PERCENTILES]
    return [f"{w}_{m}_ms" for m in VLLM_METRICS for w in words]


def _p_word(p: float) -> str:
    # vllm/benchmarks/serve.py: str(int(p)) if int(p) == p else str(p)
    return "p" + (str(int(p)) if int(p) == p else str(p))


@dataclass(frozen=True)
class Timings:
    """One run's requests: arrival offsets (s), tokens, TTFT (s) and one inter-token gap (s)."""

    arrivals: list[float]
    input_lens: list[int]
    output_lens: list[int]
    ttfts: list[float]
    itl_s: float
    failed: frozenset[int] = frozenset()

    def itls(self) -> list[list[float]]:
        """Each request's inter-token gaps (output tokens - 1 of them)."""
        return [[self.itl_s] * max(o - 1, 0) for o in self.output_lens]

    def latencies(self) -> list[float]:
        """Each request's end-to-end seconds: TTFT plus its gaps."""
        return [t + sum(i) for t, i in zip(self.ttfts, self.itls(), strict=True)]

    def ok(self) -> list[bool]:
        """Whether each request completed."""
        return [i not in self.failed for i in range(len(self.ttfts))]


def _stats(values: list[float], percentiles) -> dict[str, float]:
    v = np.asarray(values or [0.0], dtype=np.float64)
    out = {
        "mean": float(np.mean(v)) * 1000,
        "median": float(np.median(v)) * 1000,
        "std": float(np.std(v)) * 1000,
    }
    for p in percentiles:
        out[_p_word(p)] = float(np.percentile(v, p)) * 1000
    return out


def _per_metric(t: Timings) -> tuple[dict[str, list[float]], float, int, int]:
    ok = t.ok()
    lat = t.latencies()
    good = [i for i, k in enumerate(ok) if k]
    tpots = [(lat[i] - t.ttfts[i]) / (t.output_lens[i] - 1) for i in good if t.output_lens[i] > 1]
    values = {
        "ttft": [t.ttfts[i] for i in good],
        "tpot": tpots,
        "itl": [x for i in good for x in t.itls()[i]],
        "e2el": [lat[i] for i in good],
    }
    ends = [a + x for a, x in zip(t.arrivals, lat, strict=True)]
    duration = max(ends) - min(t.arrivals)
    return values, duration, len(good), len(ok) - len(good)


def _peaks(t: Timings) -> tuple[float, float]:
    """Peak output tokens in one second and peak requests in flight (the tools' timeline peaks)."""
    tokens: dict[int, int] = {}
    for a, ttft, o in zip(t.arrivals, t.ttfts, t.output_lens, strict=True):
        for k in range(o):
            at = a + ttft + k * t.itl_s
            tokens[math.floor(at)] = tokens.get(math.floor(at), 0) + 1
    spans = [(a, a + x) for a, x in zip(t.arrivals, t.latencies(), strict=True)]
    inflight = max(sum(1 for s, e in spans if s <= a < e) for a, _ in spans)
    return float(max(tokens.values())), float(inflight)


def vllm_result(t: Timings, model_id: str) -> dict[str, Any]:
    """The object `vllm bench serve --save-result --save-detailed` writes for these timings."""
    values, duration, completed, failed = _per_metric(t)
    ok = t.ok()
    total_in = sum(n for n, k in zip(t.input_lens, ok, strict=True) if k)
    total_out = sum(n for n, k in zip(t.output_lens, ok, strict=True) if k)
    peak_tokens, peak_inflight = _peaks(t)
    doc: dict[str, Any] = {
        "date": "20261202-063000",
        "endpoint_type": "vllm",
        "backend": "vllm",
        "label": None,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": len(t.ttfts),
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": duration,
        "completed": completed,
        "failed": failed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": completed / duration,
        "request_goodput": None,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
        "input_lens": list(t.input_lens),
        # calculate_metrics counts a failed request's output as 0 tokens
        "output_lens": [o if k else 0 for o, k in zip(t.output_lens, ok, strict=True)],
        "ttfts": [x if k else 0.0 for x, k in zip(t.ttfts, ok, strict=True)],
        "itls": [i if k else [] for i, k in zip(t.itls(), ok, strict=True)],
        "latencies": [x if k else 0.0 for x, k in zip(t.latencies(), ok, strict=True)],
        "start_times": [PERF_COUNTER_ORIGIN_S + a for a in t.arrivals],
        "queue_times": [0.0] * len(t.ttfts),
        "generated_texts": ["x" * o if k else "" for o, k in zip(t.output_lens, ok, strict=True)],
        "errors": ["" if k else "Bad Request" for k in ok],
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_inflight,
        "rtfx": 0.0,
    }
    for metric in VLLM_METRICS:
        for word, value in _stats(values[metric], VLLM_PERCENTILES).items():
            doc[f"{word}_{metric}_ms"] = value
    return doc


def sglang_result(t: Timings) -> dict[str, Any]:
    """The line `sglang.bench_serving --output-details` appends for these timings."""
    values, duration, completed, _ = _per_metric(t)
    ok = t.ok()
    total_in = sum(n for n, k in zip(t.input_lens, ok, strict=True) if k)
    total_out = sum(n for n, k in zip(t.output_lens, ok, strict=True) if k)
    peak_tokens, peak_inflight = _peaks(t)
    doc: dict[str, Any] = {
        "tag": None,
        "backend": "sglang",
        "dataset_name": "mooncake",
        "request_rate": "trace",  # --use-trace-timestamps
        "max_concurrency": None,
        # the dataset arguments of other datasets, at bench_serving's defaults (not read)
        "sharegpt_output_len": None,
        "random_input_len": 1024,
        "random_output_len": 1024,
        "random_range_ratio": 0.0,
        "server_info": None,  # what it writes when /server_info does not answer 200
        "duration": duration,
        "completed": completed,
        "total_input_tokens": total_in,
        "total_input_text_tokens": total_in,
        "total_input_vision_tokens": 0,
        "total_output_tokens": total_out,
        "total_output_tokens_retokenized": total_out,
        "request_throughput": completed / duration,
        "input_throughput": total_in / duration,
        "output_throughput": total_out / duration,
        "total_throughput": (total_in + total_out) / duration,
    }
    names = {"e2el": "e2e_latency", "ttft": "ttft", "tpot": "tpot", "itl": "itl"}
    for metric in ("e2el", "ttft", "tpot", "itl"):
        for word, value in _stats(values[metric], SGLANG_PERCENTILES).items():
            doc[f"{word}_{names[metric]}_ms"] = value
    doc |= {
        "concurrency": sum(values["e2el"]) / duration,
        "accept_length": None,  # no speculative decoding
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_inflight,
        "input_lens": list(t.input_lens),
        "output_lens": [o if k else 0 for o, k in zip(t.output_lens, ok, strict=True)],
        "ttfts": [x if k else 0.0 for x, k in zip(t.ttfts, ok, strict=True)],
        "itls": [i if k else [] for i, k in zip(t.itls(), ok, strict=True)],
        "generated_texts": ["x" * o if k else "" for o, k in zip(t.output_lens, ok, strict=True)],
        "errors": ["" if k else "Bad Request" for k in ok],
    }
    return doc


def write_vllm(path: Path, t: Timings, model_id: str) -> dict[str, Any]:
    """results/vllm-bench.json as the tool writes it (json.dump, one object)."""
    doc = vllm_result(t, model_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return doc


def write_sglang(path: Path, t: Timings) -> dict[str, Any]:
    """results/sglang-bench.jsonl as the tool writes it (one json.dumps line, appended)."""
    doc = sglang_result(t)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(doc) + "\n")
    return doc
