"""Regenerate the small example traces in this folder (deterministic; stdlib + pyarrow only).

Usage: python sample_traces/make_examples.py PATH/TO/shared/traces

Real excerpts: the first rows of the Mooncake conversation trace and of the Azure code trace
(see README.md for licenses). Synthetic examples: the benchmark-result formats (vLLM, SGLang,
LLMPerf), BurstGPT and Qwen-Bailian, whose real files are not bundled; their token counts
come from the Azure excerpt, their timings from a fixed-seed toy model. They exercise the
readers; they are not measurements.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
import sys
from pathlib import Path

import pyarrow as pa

HERE = Path(__file__).resolve().parent
HEAD_ROWS = 400
SEED = 20250221


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    print(f"{path.name}: {len(data):,} bytes")


def _zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


def _azure_rows(traces: Path) -> list[dict[str, str]]:
    with open(traces / "AzureLLMInferenceTrace_code.csv", newline="") as fh:
        return list(csv.DictReader(fh))[:HEAD_ROWS]


def _timings(rng: random.Random, tokens_in: int, tokens_out: int) -> tuple[float, list[float]]:
    """Toy timings: TTFT grows with the prompt, ~20 ms per later token with jitter."""
    ttft = 0.05 + tokens_in * 4e-5 * rng.uniform(0.8, 1.3)
    itls = [round(0.02 * rng.uniform(0.7, 1.6), 6) for _ in range(max(tokens_out - 1, 0))]
    return round(ttft, 6), itls


def real_excerpts(traces: Path) -> None:
    """Mooncake (gzip) and Azure (zstd) excerpts, byte for byte as published."""
    with open(traces / "conversation_trace.jsonl", "rb") as fh:
        lines = [fh.readline() for _ in range(HEAD_ROWS)]
    _write(HERE / "mooncake_conversation_head.jsonl.gz", gzip.compress(b"".join(lines), mtime=0))
    with open(traces / "AzureLLMInferenceTrace_code.csv", "rb") as fh:
        lines = [fh.readline() for _ in range(HEAD_ROWS + 1)]
    _write(HERE / "azure_code_head.csv.zst", _zstd(b"".join(lines)))
    # The whole Azure code trace too (62 KB compressed): the tests check the reader, the stage
    # split and the rules on all 8,819 requests from a plain clone.
    _write(
        HERE / "azure_code.csv.zst",
        _zstd((traces / "AzureLLMInferenceTrace_code.csv").read_bytes()),
    )


def bench_results(traces: Path) -> None:
    """Benchmark results: vLLM (new keys, 2 runs appended; old keys, indented), SGLang, LLMPerf."""
    rng = random.Random(SEED)
    rows = _azure_rows(traces)[:60]
    runs = []
    for run in range(2):
        part = rows[run * 30 : (run + 1) * 30]
        start, t = 1000.0 + run * 500, 0.0
        obj: dict[str, object] = {
            "date": f"20250301-12000{run}",
            "backend": "vllm",
            "model_id": "example/model-8b",
            "tokenizer_id": "example/model-8b",
            "num_prompts": len(part),
            "request_rate": 4.0,
            "duration": None,
            "completed": 0,
            "failed": 0,
            "input_lens": [],
            "output_lens": [],
            "ttfts": [],
            "itls": [],
            "start_times": [],
            "generated_texts": [],
            "errors": [],
        }
        for i, r in enumerate(part):
            n_in, n_out = int(r["ContextTokens"]), min(int(r["GeneratedTokens"]), 64)
            failed = run == 1 and i == 7
            ttft, itls = _timings(rng, n_in, n_out)
            t += rng.expovariate(4.0)
            obj["input_lens"].append(n_in)
            obj["output_lens"].append(0 if failed else n_out)
            obj["ttfts"].append(0.0 if failed else ttft)
            obj["itls"].append([] if failed else itls)
            obj["start_times"].append(round(start + t, 6))
            obj["generated_texts"].append("" if failed else "x" * n_out)
            obj["errors"].append("Bad Request: prompt too long" if failed else "")
        obj["completed"] = sum(1 for e in obj["errors"] if not e)
        obj["failed"] = len(part) - obj["completed"]
        obj["duration"] = round(t + 2.0, 6)
        runs.append(obj)
    _write(HERE / "vllm_bench_appended.json", "".join(json.dumps(r) + "\n" for r in runs).encode())
    old = {
        k: v
        for k, v in runs[0].items()
        if k not in ("start_times", "model_id", "tokenizer_id", "failed")
    }
    old["mean_e2el_ms"] = 1234.5
    _write(HERE / "vllm_bench_old.json", (json.dumps(old, indent=2) + "\n").encode())

    sg = {
        "backend": "sglang",
        "dataset_name": "random",
        "request_rate": 8.0,
        "duration": 12.5,
        "completed": 24,
        "total_output_tokens_retokenized": 0,
        "mean_e2e_latency_ms": 812.0,
        "details": {
            "input_lens": [],
            "output_lens": [],
            "ttfts": [],
            "itls": [],
            "generated_texts": [],
            "errors": [],
        },
    }
    d = sg["details"]
    for r in rows[:24]:
        n_in, n_out = int(r["ContextTokens"]), min(int(r["GeneratedTokens"]), 48)
        ttft, itls = _timings(rng, n_in, n_out)
        d["input_lens"].append(n_in)
        d["output_lens"].append(n_out)
        d["ttfts"].append(ttft)
        d["itls"].append(itls)
        d["generated_texts"].append("y" * n_out)
        d["errors"].append("")
    sg["total_output_tokens_retokenized"] = sum(d["output_lens"])
    _write(HERE / "sglang_bench_details.jsonl", (json.dumps(sg) + "\n").encode())

    records = []
    for i, r in enumerate(rows[:25]):
        n_in, n_out = int(r["ContextTokens"]), min(int(r["GeneratedTokens"]), 40)
        ttft, itls = _timings(rng, n_in, n_out)
        failed = i == 11
        e2e = ttft + sum(itls)
        records.append(
            {
                "error_code": 429 if failed else None,
                "error_msg": "Too Many Requests" if failed else "",
                "inter_token_latency_s": 0 if failed else round(sum(itls) / max(n_out, 1), 6),
                "ttft_s": 0 if failed else ttft,
                "end_to_end_latency_s": 0 if failed else round(e2e, 6),
                "request_output_throughput_token_per_s": 0 if failed else round(n_out / e2e, 3),
                "number_total_tokens": n_in + (0 if failed else n_out),
                "number_output_tokens": 0 if failed else n_out,
                "number_input_tokens": n_in,
            }
        )
    _write(
        HERE / "llmperf_individual_responses.json", (json.dumps(records, indent=4) + "\n").encode()
    )


def burstgpt(traces: Path) -> None:
    """BurstGPT layout with Response tokens = 0 for a few failed requests."""
    rng = random.Random(SEED + 1)
    rows = _azure_rows(traces)[:200]
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(
        ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"]
    )
    t = 5.0
    for i, r in enumerate(rows):
        t += rng.expovariate(0.5)
        n_in = int(r["ContextTokens"])
        n_out = 0 if i % 37 == 5 else int(r["GeneratedTokens"])
        model = "ChatGPT" if i % 3 else "GPT-4"
        log = "Conversation log" if i % 4 else "API log"
        w.writerow([round(t), model, n_in, n_out, n_in + n_out, log])
    _write(HERE / "burstgpt_example.csv", out.getvalue().encode())


def bailian() -> None:
    """Qwen-Bailian layout: multi-turn chats whose prompts extend the previous turn's."""
    rng = random.Random(SEED + 2)
    lines, chat_id, next_hash, t = [], 1000, 0, 0.0
    for _session in range(40):
        parent, prefix = -1, []
        for turn in range(1, rng.randint(1, 5) + 1):
            t += rng.expovariate(2.0)
            added = rng.randint(20, 600)
            n_in = len(prefix) * 16 + added
            blocks = list(prefix)
            while len(blocks) * 16 < n_in:
                blocks.append(next_hash)
                next_hash += 1
            lines.append(
                json.dumps(
                    {
                        "chat_id": chat_id,
                        "parent_chat_id": parent,
                        "timestamp": round(t, 3),
                        "input_length": n_in,
                        "output_length": rng.randint(5, 400),
                        "type": rng.choice(["text", "search", "file"]),
                        "turn": turn,
                        "hash_ids": blocks,
                    }
                )
            )
            parent, chat_id = chat_id, chat_id + rng.randint(1, 3)
            # The next turn's prompt holds every full block of this one.
            prefix = blocks[: n_in // 16]
    _write(HERE / "bailian_example.jsonl", ("\n".join(lines) + "\n").encode())


def main() -> None:
    """Write every example; the argument is the folder holding the published traces."""
    traces = Path(sys.argv[1])
    real_excerpts(traces)
    bench_results(traces)
    burstgpt(traces)
    bailian()


if __name__ == "__main__":
    main()
