"""Trace format names and detection rules: from the file name and the first bytes or keys (pure)."""

from __future__ import annotations

from enum import Enum

from kvadvisor.errors import TraceFormatError


class TraceFormat(str, Enum):
    """Every source format kvadvisor reads (the values of ``--trace-format``)."""

    PARQUET = "parquet"
    CSV = "csv"
    MOONCAKE = "mooncake"
    BAILIAN = "bailian"
    AZURE = "azure"
    BURSTGPT = "burstgpt"
    VLLM = "vllm"
    SGLANG = "sglang"
    LLMPERF = "llmperf"


FORMAT_TITLES: dict[TraceFormat, str] = {
    TraceFormat.PARQUET: "canonical parquet",
    TraceFormat.CSV: "canonical CSV",
    TraceFormat.MOONCAKE: "Mooncake JSONL",
    TraceFormat.BAILIAN: "Qwen-Bailian JSONL",
    TraceFormat.AZURE: "Azure LLM inference CSV",
    TraceFormat.BURSTGPT: "BurstGPT CSV",
    TraceFormat.VLLM: "vLLM bench serve result JSON",
    TraceFormat.SGLANG: "SGLang bench_serving JSONL",
    TraceFormat.LLMPERF: "LLMPerf per-request JSON",
}

# Magic numbers (first bytes): parquet "PAR1"; gzip 1f 8b (RFC 1952); zstd 28 b5 2f fd (RFC 8878).
PARQUET_MAGIC = b"PAR1"
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

COMPRESSION_SUFFIXES = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd"}
CSV_SUFFIXES = {".csv"}
JSON_SUFFIXES = {".json", ".jsonl", ".ndjson"}
PARQUET_SUFFIXES = {".parquet", ".pq"}

# CSV headers of the known sources (a subset of the header is enough).
AZURE_HEADER = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}
BURSTGPT_HEADER = {"Timestamp", "Request tokens", "Response tokens"}

# Key sets of the JSON sources. Mooncake and Bailian are one request per line; the benchmark
# results are one run per object, with per-request arrays.
MOONCAKE_KEYS = {"timestamp", "input_length", "output_length"}
BAILIAN_KEYS = {"chat_id", "parent_chat_id", "input_length", "output_length"}
BENCH_KEYS = {"input_lens", "output_lens"}
# Keys only one of the two benchmark tools writes. vLLM: `vllm bench serve` / benchmark_serving.py
# (`model_id`, `tokenizer_id` from --save-result, `*_e2el_ms`, `start_times`); SGLang:
# bench_serving.py (`*_e2e_latency_ms`, `total_output_tokens_retokenized`, `details`).
VLLM_MARKERS = {"model_id", "tokenizer_id", "mean_e2el_ms", "median_e2el_ms", "start_times"}
SGLANG_MARKERS = {
    "details",
    "mean_e2e_latency_ms",
    "median_e2e_latency_ms",
    "total_output_tokens_retokenized",
    "sharegpt_output_len",
}
LLMPERF_KEYS = {"number_input_tokens", "number_output_tokens"}

HINT = "give --trace-format ({})".format("|".join(f.value for f in TraceFormat))


def parse_format(name: str | TraceFormat | None) -> TraceFormat | None:
    """A format name (or None) as a TraceFormat; unknown names are a user error."""
    if name is None or isinstance(name, TraceFormat):
        return name
    try:
        return TraceFormat(name.lower())
    except ValueError:
        raise TraceFormatError(f"unknown trace format '{name}'; {HINT}") from None


def compression_of(head: bytes) -> str | None:
    """'gzip', 'zstd' or None, from the magic number (never from the name, which can lie)."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def base_suffix(name: str) -> str:
    """The format suffix of a file name, with any compression suffix removed ('.jsonl')."""
    lowered = name.lower()
    for comp in COMPRESSION_SUFFIXES:
        if lowered.endswith(comp):
            lowered = lowered[: -len(comp)]
            break
    dot = lowered.rfind(".")
    slash = max(lowered.rfind("/"), lowered.rfind("\\"))
    return lowered[dot:] if dot > slash else ""


UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def text_problem(head: bytes) -> str | None:
    """Why a file head is not UTF-8 text (UTF-16, another encoding, binary), or None.

    The words say what to do: text in another encoding is converted, not a binary file.
    """
    if head.startswith(UTF16_BOMS):
        return (
            "UTF-16 text, not UTF-8; save it as UTF-8 (e.g. iconv -f UTF-16 -t UTF-8 "
            "in.csv > out.csv)"
        )
    if b"\x00" in head:
        return (
            "a binary file that is not parquet, gzip or zstd; not a trace (give a parquet, "
            "JSON or CSV trace, optionally gzip- or zstd-compressed)"
        )
    try:
        # The head may end inside a multi-byte character: ignore the last 3 bytes' validity.
        head[:-3].decode("utf-8") if len(head) > 3 else head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return (
            f"not UTF-8 text (byte 0x{head[exc.start]:02x} at offset {exc.start}); save it as "
            "UTF-8 (e.g. iconv -f latin1 -t utf-8 in.csv > out.csv)"
        )
    return None


def sniff_head(name: str, head: bytes) -> TraceFormat | str:
    """Classify a (decompressed) file head.

    Returns a TraceFormat when the head decides it, or ``"json-object"`` when the file holds
    JSON objects whose keys must be looked at (:func:`sniff_keys`). Raises TraceFormatError for
    an empty, binary or unknown file.
    """
    suffix = base_suffix(name)
    if head.startswith(PARQUET_MAGIC):
        return TraceFormat.PARQUET
    if suffix in PARQUET_SUFFIXES:
        raise TraceFormatError(
            f"{name}: not a parquet file (no PAR1 magic number): damaged, or another format "
            f"named .parquet; {HINT}"
        )
    if not head.strip():
        raise TraceFormatError(f"{name}: empty file; give a trace with at least one request")
    problem = text_problem(head)
    if problem is not None:
        raise TraceFormatError(f"{name}: {problem}")
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if text.startswith("["):
        if all(f'"{k}"' in text for k in LLMPERF_KEYS):
            return TraceFormat.LLMPERF
        raise TraceFormatError(
            f"{name}: a JSON array, but not LLMPerf per-request results "
            f"(no {', '.join(sorted(LLMPERF_KEYS))}); {HINT}"
        )
    if text.startswith("{"):
        return "json-object"
    if suffix in JSON_SUFFIXES:
        raise TraceFormatError(
            f"{name}: not JSON objects (it starts with neither '{{' nor '['); {HINT}"
        )
    first_line = text.split("\n", 1)[0].rstrip("\r")
    if suffix in CSV_SUFFIXES or "," in first_line:
        return sniff_csv_header(first_line)
    raise TraceFormatError(f"{name}: unknown trace format (neither parquet, JSON nor CSV); {HINT}")


def sniff_csv_header(header_line: str) -> TraceFormat:
    """Azure, BurstGPT or canonical CSV, from the header line."""
    columns = {c.strip().strip('"') for c in header_line.split(",")}
    if AZURE_HEADER <= columns:
        return TraceFormat.AZURE
    if BURSTGPT_HEADER <= columns:
        return TraceFormat.BURSTGPT
    return TraceFormat.CSV


def sniff_keys(name: str, keys: set[str], nested: set[str] = frozenset()) -> TraceFormat:
    """Classify a JSON object by its top-level ``keys`` (``nested``: keys under ``details``)."""
    if BAILIAN_KEYS <= keys:
        return TraceFormat.BAILIAN
    if MOONCAKE_KEYS <= keys:
        return TraceFormat.MOONCAKE
    if BENCH_KEYS <= keys | nested:
        vllm = bool(keys & VLLM_MARKERS)
        sglang = bool(keys & SGLANG_MARKERS) or bool(nested & BENCH_KEYS)
        if vllm and not sglang:
            return TraceFormat.VLLM
        if sglang and not vllm:
            return TraceFormat.SGLANG
        raise TraceFormatError(
            f"{name}: a benchmark result with per-request arrays, but its keys do not tell "
            "vLLM from SGLang; give --trace-format vllm or --trace-format sglang"
        )
    if keys & (VLLM_MARKERS | SGLANG_MARKERS) or {"mean_ttft_ms", "request_throughput"} & keys:
        raise TraceFormatError(
            f"{name}: a benchmark summary without per-request arrays (input_lens, "
            "output_lens); rerun vLLM with --save-detailed or SGLang with --output-details"
        )
    if any(k.startswith("results_") for k in keys):
        raise TraceFormatError(
            f"{name}: an LLMPerf summary; give the *_individual_responses.json file instead"
        )
    shown = ", ".join(sorted(keys)[:12]) or "none"
    raise TraceFormatError(f"{name}: unknown JSON trace (keys found: {shown}); {HINT}")
