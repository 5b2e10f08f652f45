"""Format detection: extension and content rules, and the errors for what cannot be told."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kvadvisor.errors import TraceFormatError
from kvadvisor.trace import TraceFormat, detect_format
from kvadvisor.trace.detect import (
    base_suffix,
    compression_of,
    parse_format,
    sniff_csv_header,
    sniff_head,
    sniff_keys,
)

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "traces"
SAMPLES = REPO / "sample_traces"

EXPECTED = {
    FIX / "tiny_mooncake.jsonl": TraceFormat.MOONCAKE,
    FIX / "tiny_bailian.jsonl": TraceFormat.BAILIAN,
    FIX / "tiny_azure.csv": TraceFormat.AZURE,
    FIX / "tiny_burstgpt.csv": TraceFormat.BURSTGPT,
    FIX / "tiny_vllm_appended.json": TraceFormat.VLLM,
    FIX / "tiny_vllm_old.json": TraceFormat.VLLM,
    FIX / "tiny_sglang_top.jsonl": TraceFormat.SGLANG,
    FIX / "tiny_sglang_details.jsonl": TraceFormat.SGLANG,
    FIX / "tiny_llmperf.json": TraceFormat.LLMPERF,
    FIX / "tiny_canonical.csv": TraceFormat.CSV,
    SAMPLES / "mooncake_conversation.parquet": TraceFormat.PARQUET,
    SAMPLES / "mooncake_conversation_head.jsonl.gz": TraceFormat.MOONCAKE,
    SAMPLES / "azure_code_head.csv.zst": TraceFormat.AZURE,
    SAMPLES / "bailian_example.jsonl": TraceFormat.BAILIAN,
    SAMPLES / "burstgpt_example.csv": TraceFormat.BURSTGPT,
    SAMPLES / "vllm_bench_appended.json": TraceFormat.VLLM,
    SAMPLES / "vllm_bench_old.json": TraceFormat.VLLM,
    SAMPLES / "sglang_bench_details.jsonl": TraceFormat.SGLANG,
    SAMPLES / "llmperf_individual_responses.json": TraceFormat.LLMPERF,
}


@pytest.mark.parametrize("path", sorted(EXPECTED), ids=lambda p: p.name)
def test_detects_every_fixture_and_sample(path) -> None:
    """Every bundled file is detected as the format it was written in."""
    assert detect_format(path) is EXPECTED[path]


def test_content_wins_over_a_missing_or_wrong_extension(tmp_path) -> None:
    """No extension, or .txt: the content decides; gzip is found by its magic number."""
    data = (FIX / "tiny_mooncake.jsonl").read_bytes()
    (tmp_path / "trace").write_bytes(data)
    (tmp_path / "trace.txt").write_bytes(gzip.compress(data))
    (tmp_path / "azure").write_bytes((FIX / "tiny_azure.csv").read_bytes())
    assert detect_format(tmp_path / "trace") is TraceFormat.MOONCAKE
    assert detect_format(tmp_path / "trace.txt") is TraceFormat.MOONCAKE
    assert detect_format(tmp_path / "azure") is TraceFormat.AZURE


def test_sniff_rules() -> None:
    """The documented rules, one by one."""
    assert sniff_head("x.parquet", b"PAR1\x00\x00") is TraceFormat.PARQUET
    assert sniff_head("x", b'[{"number_input_tokens": 1, "number_output_tokens": 2}]') is (
        TraceFormat.LLMPERF
    )
    assert sniff_head("x.json", b'{"a": 1}') == "json-object"
    assert sniff_csv_header("TIMESTAMP,ContextTokens,GeneratedTokens") is TraceFormat.AZURE
    assert (
        sniff_csv_header("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type")
        is TraceFormat.BURSTGPT
    )
    assert sniff_csv_header("arrival_s,input_tokens,output_tokens") is TraceFormat.CSV
    assert sniff_keys("x", {"timestamp", "input_length", "output_length", "hash_ids"}) is (
        TraceFormat.MOONCAKE
    )
    assert (
        sniff_keys("x", {"chat_id", "parent_chat_id", "timestamp", "input_length", "output_length"})
        is TraceFormat.BAILIAN
    )
    assert sniff_keys("x", {"input_lens", "output_lens", "model_id"}) is TraceFormat.VLLM
    assert sniff_keys("x", {"backend", "details"}, {"input_lens", "output_lens"}) is (
        TraceFormat.SGLANG
    )
    assert compression_of(b"\x1f\x8b\x08") == "gzip"
    assert compression_of(b"\x28\xb5\x2f\xfd") == "zstd"
    assert compression_of(b"{") is None
    assert base_suffix("a/b.trace.jsonl.zst") == ".jsonl"
    assert base_suffix("a.b/trace") == ""


@pytest.mark.parametrize(
    "name, head, message",
    [
        ("e.jsonl", b"  \n", "empty file"),
        ("b.bin", bytes(range(256)), "binary file"),
        ("x.parquet", b"not parquet", "not a parquet file"),
        ("x.json", b"hello", "not JSON"),
        ("x", b"just words\nmore words\n", "unknown trace format"),
        ("x.json", b'[{"a": 1}]', "not LLMPerf"),
    ],
)
def test_sniff_errors_suggest_trace_format(name, head, message) -> None:
    """Empty, binary and unknown content: a TraceFormatError naming the file."""
    with pytest.raises(TraceFormatError, match=message) as info:
        sniff_head(name, head)
    assert name in str(info.value)


def test_ambiguous_and_unknown_json_objects() -> None:
    """Bench arrays without tool markers are ambiguous; unknown keys are listed."""
    with pytest.raises(TraceFormatError, match="--trace-format vllm or --trace-format sglang"):
        detect_format(FIX / "ambiguous_bench.json")
    with pytest.raises(TraceFormatError, match=r"keys found: bar, foo.*--trace-format"):
        detect_format(FIX / "unknown.json")


def test_summaries_without_per_request_data_say_what_to_rerun() -> None:
    """A vLLM result saved without --save-detailed, an LLMPerf summary: say what to do."""
    with pytest.raises(TraceFormatError, match="--save-detailed"):
        sniff_keys("r.json", {"model_id", "duration", "mean_ttft_ms", "request_throughput"})
    with pytest.raises(TraceFormatError, match="individual_responses"):
        sniff_keys("s.json", {"model", "results_ttft_s_mean", "results_num_requests_started"})


def test_parse_format_names() -> None:
    """Format names are case-insensitive; unknown names list the choices."""
    assert parse_format("VLLM") is TraceFormat.VLLM
    assert parse_format(None) is None
    with pytest.raises(TraceFormatError, match="mooncake"):
        parse_format("moonkake")
