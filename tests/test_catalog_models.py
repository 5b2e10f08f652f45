"""Model catalog: every entry loads with sources; names, HF ids and config.json resolve."""

from __future__ import annotations

import json

import pytest

from kvadvisor.catalog.loader import check_entries
from kvadvisor.catalog.models import (
    MODEL_FIELDS,
    check_model_entries,
    get_model,
    load_models,
    model_from_hf_config,
    resolve_model,
)
from kvadvisor.errors import CatalogError

REQUIRED = {
    "qwen2.5-7b",
    "qwen2.5-14b",
    "qwen2.5-32b",
    "qwen2.5-72b",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-235b-a22b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "deepseek-v3",
    "deepseek-r1",
    "mistral-7b",
    "mixtral-8x7b",
    "gpt-oss-120b",
}

# Hugging Face config.json excerpts (values as published on the model pages).
LLAMA_31_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}
QWEN3_32B = {
    "hidden_size": 5120,
    "head_dim": 128,
    "intermediate_size": 25600,
    "num_attention_heads": 64,
    "num_hidden_layers": 64,
    "num_key_value_heads": 8,
    "vocab_size": 151936,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 64,
}
DEEPSEEK_V3 = {
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_attention_heads": 128,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "vocab_size": 129280,
}
GPT_OSS_120B = {
    "hidden_size": 2880,
    "head_dim": 64,
    "intermediate_size": 2880,
    "num_attention_heads": 64,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "num_local_experts": 128,
    "experts_per_token": 4,
    "sliding_window": 128,
    "vocab_size": 201088,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
}
MISTRAL_7B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "sliding_window": 4096,
    "vocab_size": 32000,
}


def test_catalog_has_every_requested_model_with_sources() -> None:
    """All models the issue names are there, each citing a source text."""
    models = load_models()
    assert REQUIRED <= set(models)
    for spec in models.values():
        assert spec.source and all(len(s) > 10 for s in spec.source), spec.name
        assert spec.active_params <= spec.total_params


def test_unconfirmed_figures_are_marked() -> None:
    """The research catalog's unconfirmed parameter counts say so in notes."""
    assert "unconfirmed" in get_model("qwen2.5-72b").notes
    assert "unconfirmed" in get_model("mistral-7b").notes


def test_hf_id_alias_and_case() -> None:
    """A Hugging Face id resolves to its catalog entry, case-insensitively."""
    assert get_model("Qwen/Qwen3-32B").name == "qwen3-32b"
    assert get_model("QWEN3-32B").name == "qwen3-32b"
    assert resolve_model("deepseek-ai/DeepSeek-R1").name == "deepseek-r1"


def test_unknown_model_suggests() -> None:
    """A typo gets one line with close names."""
    with pytest.raises(CatalogError, match="did you mean.*qwen3-32b"):
        get_model("qwen3-23b")


def test_catalog_shapes_from_research() -> None:
    """Shapes the KV formulas need, as in research/catalog.md section 4."""
    ds = get_model("deepseek-v3")
    assert (ds.attention, ds.layers, ds.kv_lora_rank, ds.qk_rope_head_dim) == ("mla", 61, 512, 64)
    oss = get_model("gpt-oss-120b")
    assert (oss.sliding_window_tokens, oss.sliding_window_layers, oss.head_dim) == (128, 18, 64)
    q = get_model("qwen3-235b-a22b")
    assert (q.kv_heads, q.head_dim, q.experts, q.experts_per_token) == (4, 128, 128, 8)
    assert q.active_params == pytest.approx(22e9)


def test_gqa_entry_without_head_dim_is_rejected() -> None:
    """Cross-field check: GQA needs head_dim; the message names the entry."""
    doc = {
        "kind": "models",
        "sources": {"X": "a source"},
        "entries": {
            "m": {
                "layers": 2,
                "q_heads": 4,
                "kv_heads": 2,
                "total_params_billion": 1,
                "source": ["X"],
            }
        },
    }
    entries = check_entries("f.yaml", "models", doc, MODEL_FIELDS)
    with pytest.raises(CatalogError, match=r"f.yaml: entries.m.head_dim"):
        check_model_entries(entries, "f.yaml")


def test_hf_config_llama_parameter_estimate() -> None:
    """Parameter count from shapes: Llama-3.1-8B has 8.03B parameters (HF model card)."""
    spec = model_from_hf_config(LLAMA_31_8B, name="llama")
    assert spec.total_params == pytest.approx(8.03e9, rel=0.005)
    assert (spec.kv_heads, spec.head_dim, spec.attention) == (8, 128, "gqa")


def test_hf_config_explicit_head_dim_and_no_window() -> None:
    """Qwen3 sets head_dim explicitly (not 5120/64) and disables sliding windows."""
    spec = model_from_hf_config(QWEN3_32B, name="q")
    assert spec.head_dim == 128
    assert spec.sliding_window_layers == 0
    assert spec.total_params == pytest.approx(32.8e9, rel=0.02)


def test_hf_config_mla_and_moe() -> None:
    """DeepSeek-V3: MLA fields read, 671B total / 37B active within 2 %."""
    spec = model_from_hf_config(DEEPSEEK_V3, name="ds")
    assert spec.is_mla and spec.kv_lora_rank == 512 and spec.qk_rope_head_dim == 64
    assert spec.total_params == pytest.approx(671e9, rel=0.02)
    assert spec.active_params == pytest.approx(37e9, rel=0.02)


def test_hf_config_layer_types_and_mistral_window() -> None:
    """gpt-oss: 18 sliding layers of 128 tokens; Mistral: the window on every layer."""
    oss = model_from_hf_config(GPT_OSS_120B, name="oss")
    assert (oss.sliding_window_tokens, oss.sliding_window_layers) == (128, 18)
    assert oss.total_params == pytest.approx(117e9, rel=0.03)
    assert oss.active_params == pytest.approx(5.1e9, rel=0.05)
    mistral = model_from_hf_config(MISTRAL_7B, name="m")
    assert (mistral.sliding_window_tokens, mistral.sliding_window_layers) == (4096, 32)


def test_config_json_path(tmp_path) -> None:
    """--model accepts a path to config.json (or its directory)."""
    path = tmp_path / "my-model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(QWEN3_32B))
    assert resolve_model(str(path)).head_dim == 128
    assert resolve_model(str(path.parent)).origin == "hf-config"


def test_bad_config_json(tmp_path) -> None:
    """Broken or incomplete configs are user errors naming the file and key."""
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(CatalogError, match="not valid JSON at line 1, column 2"):
        resolve_model(str(bad))
    bad.write_text(json.dumps({"hidden_size": 10}))
    with pytest.raises(CatalogError, match="num_hidden_layers"):
        resolve_model(str(bad))
    with pytest.raises(CatalogError, match="missing.json: no such file"):
        resolve_model(str(tmp_path / "missing.json"))
