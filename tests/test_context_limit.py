"""Requests longer than the model's context: counted, and refused, rope-scaled or excluded.

A held-out-style case: a real sample trace (Mooncake conversation head, 400 requests) served by
Qwen2.5-32B, whose Instruct config.json says 32,768 tokens and whose model card offers YaRN
factor 4 to 131,072. The counts are computed here from the raw JSONL, not through kvadvisor.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner

import kvadvisor.cli as cli
from kvadvisor.catalog.models import load_models, model_from_hf_config
from kvadvisor.emit import emit_all, emit_targets
from kvadvisor.engines.router import is_router_file
from kvadvisor.errors import ConfigError
from kvadvisor.pipeline import AnalyzeOptions
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.pipeline.review import review_plans
from kvadvisor.pipeline.streaming import analyze_stream, plan_for_stream
from kvadvisor.plan import engine_settings_table, load_plan
from kvadvisor.plan.engine_files import read_engine_file
from kvadvisor.sections.context import check_context
from kvadvisor.trace import read_trace
from kvadvisor.trace.stream import stream_trace

TRACE = (
    Path(__file__).resolve().parents[1] / "sample_traces" / "mooncake_conversation_head.jsonl.gz"
)
MODELS = load_models()
QWEN = MODELS["qwen2.5-32b"]
CONTEXT = 32_768  # Qwen2.5-32B-Instruct config.json max_position_embeddings
SCALED = 4 * 32_768  # YaRN factor 4.0 over original_max_position_embeddings 32,768
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32_768}


def _lengths() -> list[int]:
    """Prompt + output tokens of each request, from the raw file."""
    with gzip.open(TRACE, "rt") as f:
        return [r["input_length"] + r["output_length"] for r in map(json.loads, f)]


LENGTHS = _lengths()
OVER = sum(n > CONTEXT for n in LENGTHS)


def test_every_catalog_model_states_its_context_with_a_source() -> None:
    """Each model has a maximum context and where it comes from; Qwen's YaRN reaches 131,072."""
    for m in MODELS.values():
        assert m.max_context_tokens and m.context_source, m.name
    assert QWEN.max_context_tokens == CONTEXT
    assert QWEN.rope_scaling is not None
    assert QWEN.rope_scaling.context_tokens == SCALED
    assert QWEN.rope_scaling.hf_rope_scaling() == YARN
    assert MODELS["llama-3.1-70b"].max_context_tokens == 131_072
    assert MODELS["llama-3.1-70b"].rope_scaling is None  # its llama3 scaling is in the config


def test_a_config_json_gives_its_max_position_embeddings() -> None:
    """A config.json's max_position_embeddings is the context (its own rope_scaling applied)."""
    cfg = {
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "hidden_size": 256,
        "max_position_embeddings": 163_840,
    }
    assert model_from_hf_config(cfg, name="x").max_context_tokens == 163_840
    del cfg["max_position_embeddings"]
    trace = read_trace(TRACE)
    _, check = check_context(trace, model_from_hf_config(cfg, name="x"))
    assert check.decision == "unknown" and "not known" in check.statement


def test_the_sample_has_requests_over_the_context() -> None:
    """The case is real: some requests exceed 32,768 tokens, none exceeds the YaRN context."""
    assert 0 < OVER < len(LENGTHS)
    assert max(LENGTHS) <= SCALED


def test_exclude_leaves_them_out_counted() -> None:
    """--over-context exclude: the rest is analysed; the count is in dropped rows and notes."""
    trace = read_trace(TRACE)
    kept, check = check_context(trace, QWEN, "exclude")
    assert (check.over_context, check.excluded, check.decision) == (OVER, OVER, "exclude")
    assert kept.requests == len(LENGTHS) - OVER
    assert kept.dropped["over_context"] == OVER
    assert f"{OVER:,} of {len(LENGTHS):,} requests" in check.statement
    assert check.statement in kept.notes
    assert kept.table["arrival_s"][0].as_py() == 0.0
    assert check.served_context_tokens == CONTEXT and check.rope_scaling is None


def test_auto_proposes_the_rope_scaled_context_when_it_holds_them_all() -> None:
    """auto: YaRN holds every request here, so nothing is excluded and the scaling is proposed."""
    trace = read_trace(TRACE)
    kept, check = check_context(trace, QWEN)
    assert check.decision == "rope" and check.excluded == 0
    assert kept.requests == len(LENGTHS)
    assert (check.served_context_tokens, check.rope_scaling) == (SCALED, YARN)


def test_without_a_scaling_auto_excludes_and_rope_is_refused() -> None:
    """Mixtral (32,768, no scaling in its card): auto excludes; asking rope is a user error."""
    trace = read_trace(TRACE)
    mixtral = MODELS["mixtral-8x7b"]
    _, check = check_context(trace, mixtral)
    assert (check.decision, check.excluded) == ("exclude", OVER)
    assert "no RoPE scaling" in check.statement
    with pytest.raises(ConfigError, match="no RoPE scaling"):
        check_context(trace, mixtral, "rope")


def test_refuse_is_one_line_with_the_count(tmp_path: Path) -> None:
    """--over-context refuse: exit 2, one line naming the count and the ways on, no traceback."""
    result = CliRunner().invoke(
        cli.app,
        ["analyze", str(TRACE), "--model", "qwen2.5-32b", "--over-context", "refuse", "--quiet"],
    )
    one_error_line(
        result, f"{OVER:,} of {len(LENGTHS):,} requests", "--over-context rope", "exclude"
    )


@pytest.fixture(scope="module")
def scaled_report():
    """The whole analysis with the default policy (auto: rope here), AWS only."""
    options = AnalyzeOptions(
        model="qwen2.5-32b", providers=("aws",), slo="ttft_p99=10s,tpot_p99=200ms"
    )
    return analyze(read_trace(TRACE), options, version="test", generated_at="2026-01-01T00:00:00")


def test_the_verdict_states_the_decision(scaled_report) -> None:
    """The report carries the check; every verdict's first note states it."""
    check = scaled_report.context
    assert (check.over_context, check.decision) == (OVER, "rope")
    for v in scaled_report.recommendation.verdict.verdicts:
        assert v.notes[0] == f"context: {check.statement}"
    # The AWS instance's network says EFA, and the verdict stage carries its transport.
    v = scaled_report.recommendation.verdict.primary_verdict
    assert {s.transport.fabric for s in v.stages} == {"efa"}


def test_emitted_launch_files_carry_the_context_and_scaling(scaled_report, tmp_path) -> None:
    """The launch files carry the served context and the YaRN override; their plans lint clean.

    vLLM: --max-model-len and --hf-overrides; SGLang: --context-length and
    --json-model-override-args.
    """
    files = emit_all(scaled_report, ["vllm", "plan"], "kvadvisor analyze t")
    files = {("plan-vllm.yaml" if n == "plan.yaml" else n): t for n, t in files.items()}
    # SGLang runs 64-token pages: the deployment it runs is the one replayed for it
    options = AnalyzeOptions(
        model="qwen2.5-32b",
        providers=("aws",),
        slo="ttft_p99=10s,tpot_p99=200ms",
        engine="sglang-hicache",
    )
    sglang_report = analyze(
        read_trace(TRACE), options, version="test", generated_at="2026-01-01T00:00:00"
    )
    sglang, refused = emit_targets(
        sglang_report, ["sglang-hicache", "vllm", "plan"], "kvadvisor analyze t"
    )
    assert list(refused) == ["vllm"]
    files.update(sglang)
    table = engine_settings_table()
    seen = set()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        if is_router_file(name):  # the router's flags are not an engine's (test_emit_router.py)
            continue
        if name.startswith("vllm-") and name.endswith(".sh"):
            s = read_engine_file(name, text, table)["vllm"]
            assert s["max-model-len"] == SCALED
            assert s["hf-overrides"] == {"rope_scaling": YARN}
            seen.add("vllm")
        if name.startswith("sglang-") and name.endswith(".sh"):
            s = read_engine_file(name, text, table)["sglang-hicache"]
            assert s["context-length"] == SCALED
            assert s["json-model-override-args"] == {"rope_scaling": YARN}
            seen.add("sglang")
        if name.endswith(".sh"):
            assert f"context: {scaled_report.context.statement}"[:60] in text
    assert seen == {"vllm", "sglang"}
    plans = sorted(tmp_path.glob("plan-*.yaml"))
    assert [p.name for p in plans] == ["plan-sglang-hicache.yaml", "plan-vllm.yaml"]
    for plan in plans:
        loaded = load_plan(plan)
        assert all(stage.engines for stage in loaded.stages)  # the files were read back
        review = review_plans(read_trace(TRACE), [loaded])[0]
        lint = [c for c in review.checks if c.code.startswith("EL")]
        assert lint
        errors = [c for c in lint if c.status == "fail" and c.severity == "error"]
        assert not errors, (plan.name, [(c.code, c.message) for c in errors])


def _streamed(model: str, policy: str = "auto"):
    """The streaming pass over the sample, in batches of 64 rows."""
    stream = stream_trace(read_trace(TRACE), batch_rows=64)
    options = AnalyzeOptions(model=model, over_context=policy, cache_instances=1, replay=False)
    plan = plan_for_stream(stream, 1 << 30)
    return analyze_stream(
        stream, options, plan=plan, version="test", generated_at="2026-01-01T00:00:00"
    )


def test_a_streamed_trace_is_checked_and_never_left_short_silently() -> None:
    """Streamed: the same count and YaRN proposal; excluding would need the trace whole."""
    check = _streamed("qwen2.5-32b").context
    assert (check.over_context, check.decision, check.served_context_tokens) == (
        OVER,
        "rope",
        SCALED,
    )
    with pytest.raises(ConfigError, match="a streamed trace cannot leave requests out"):
        _streamed("mixtral-8x7b")
    with pytest.raises(ConfigError, match=f"{OVER:,} of {len(LENGTHS):,} requests"):
        _streamed("qwen2.5-32b", "refuse")
