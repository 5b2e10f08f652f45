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


# Every catalog entry: KV bytes per token at bf16 (all layers, within any window) computed by
# hand from the published config figures, and the published parameter counts, with the source.
# KV: GQA 2 x layers x kv_heads x head_dim x 2 bytes; MLA layers x (512 + 64) x 2 bytes.
PUBLISHED = {
    # name: (kv bytes/token, total params, active params, relative tolerance, source)
    "qwen2.5-7b": (2 * 28 * 4 * 128 * 2, 7.61e9, None, 0.01, "Qwen model card; config M1"),
    "qwen2.5-14b": (2 * 48 * 8 * 128 * 2, 14.7e9, None, 0.01, "Qwen model card; config M1"),
    "qwen2.5-32b": (2 * 64 * 8 * 128 * 2, 32.5e9, None, 0.01, "Qwen model card; config M1"),
    "qwen2.5-72b": (2 * 80 * 8 * 128 * 2, 72.7e9, None, 0.01, "config as cited (M7)"),
    "qwen3-8b": (2 * 36 * 8 * 128 * 2, 8.2e9, None, 0.01, "Qwen3 model card; config.json"),
    "qwen3-32b": (2 * 64 * 8 * 128 * 2, 32.8e9, None, 0.01, "Qwen3 model card; config.json"),
    "qwen3-235b-a22b": (2 * 94 * 4 * 128 * 2, 235e9, 22e9, 0.03, "model card: 235B, 22B active"),
    "llama-3.1-8b": (2 * 32 * 8 * 128 * 2, 8.03e9, None, 0.005, "HF model card 8.03B"),
    "llama-3.1-70b": (2 * 80 * 8 * 128 * 2, 70e9, None, 0.01, "llama-models sku_list: 70B"),
    "llama-3.3-70b": (2 * 80 * 8 * 128 * 2, 70e9, None, 0.01, "llama-models MODEL_CARD: 70B"),
    "llama-3.1-405b": (2 * 126 * 8 * 128 * 2, 405e9, None, 0.01, "llama-models sku_list"),
    "deepseek-v3": (61 * 576 * 2, 671e9, 37e9, 0.02, "DeepSeek-V3 README: 671B / 37B"),
    "deepseek-r1": (61 * 576 * 2, 671e9, 37e9, 0.02, "DeepSeek-R1 README: 671B / 37B"),
    "deepseek-v3.1": (61 * 576 * 2, 671e9, 37e9, 0.02, "DeepSeek-V3.1 README: 671B / 37B"),
    "kimi-k2": (61 * 576 * 2, 1.0e12, 32e9, 0.03, "Kimi K2 report: 1T total / 32B active"),
    "mistral-7b": (2 * 32 * 8 * 128 * 2, 7.3e9, None, 0.01, "research catalog (unconfirmed)"),
    "mixtral-8x7b": (2 * 32 * 8 * 128 * 2, 46.7e9, 12.9e9, 0.02, "Mixtral paper: 46.7B/12.9B"),
    "gpt-oss-120b": (2 * 36 * 8 * 64 * 2, 116.8e9, 5.1e9, 0.01, "gpt-oss model card: 116.8B/5.1B"),
    "gpt-oss-20b": (2 * 24 * 8 * 64 * 2, 20.9e9, 3.6e9, 0.01, "gpt-oss model card: 20.9B/3.6B"),
    "gemma-2-2b": (2 * 26 * 4 * 256 * 2, 2_614_636_800, None, 0.001, "Gemma 2 report Table 2"),
    "gemma-2-9b": (2 * 42 * 8 * 256 * 2, 9_242_164_736, None, 0.001, "Gemma 2 report Table 2"),
    "gemma-2-27b": (2 * 46 * 16 * 128 * 2, 27_227_718_144, None, 0.001, "Gemma 2 Table 2"),
    "gemma-3-1b": (2 * 26 * 1 * 256 * 2, 1.0e9, None, 0.002, "Gemma 3 report Table 1: 302M+698M"),
    "gemma-3-4b": (2 * 34 * 4 * 256 * 2, 3.884e9, None, 0.002, "Gemma 3 Table 1: 675M+3,209M"),
    "gemma-3-12b": (2 * 48 * 8 * 256 * 2, 11.771e9, None, 0.002, "Gemma 3 Table 1: 1,012M+10,759M"),
    "gemma-3-27b": (
        2 * 62 * 16 * 128 * 2,
        27.016e9,
        None,
        0.002,
        "Gemma 3 Table 1: 1,416M+25,600M",
    ),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_entry_kv_and_parameters_match_published(name: str) -> None:
    """KV bytes per token is the hand figure; counts from the widths match the published ones."""
    from kvadvisor.perfmodel.kv import kv_size

    kv, total, active, rel, source = PUBLISHED[name]
    spec = get_model(name)
    assert kv_size(spec, "bf16").total_bytes_per_token == kv, source
    params = spec.params
    assert params.from_shapes, name
    assert params.total == pytest.approx(total, rel=rel), source
    if active is not None:
        # Active = a token's matmuls (embedding lookup excluded) + the LM head.
        assert params.body_active + params.lm_head == pytest.approx(active, rel=0.02), source


def test_every_entry_is_in_the_published_table() -> None:
    """A new catalog entry needs its published figures in this test."""
    assert set(load_models()) == set(PUBLISHED)


# Gemma 2/3 as their Hugging Face config.json files are published: Gemma 2 has no `layer_types`
# and no `tie_word_embeddings` (Gemma2Config defaults: alternate local/global, tied); Gemma 3's
# multimodal checkpoints nest the LM in `text_config` without `vocab_size` (Gemma3TextConfig
# default 262208), some also without heads, `head_dim` and `sliding_window_pattern`.
GEMMA2_9B = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "head_dim": 256,
    "hidden_size": 3584,
    "intermediate_size": 14336,
    "num_attention_heads": 16,
    "num_hidden_layers": 42,
    "num_key_value_heads": 8,
    "sliding_window": 4096,
    "sliding_window_size": 4096,
    "vocab_size": 256000,
}
GEMMA3_27B = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "text_config": {
        "head_dim": 128,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "model_type": "gemma3_text",
        "num_attention_heads": 32,
        "num_hidden_layers": 62,
        "num_key_value_heads": 16,
        "query_pre_attn_scalar": 168,
        "sliding_window": 1024,
    },
    "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"},
}
GEMMA3_4B = {
    "model_type": "gemma3",
    "text_config": {
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "model_type": "gemma3_text",
        "num_hidden_layers": 34,
        "sliding_window": 1024,
    },
}
GEMMA3_1B = {
    "model_type": "gemma3_text",
    "head_dim": 256,
    "hidden_size": 1152,
    "intermediate_size": 6912,
    "num_attention_heads": 4,
    "num_hidden_layers": 26,
    "num_key_value_heads": 1,
    "sliding_window": 512,
    "sliding_window_pattern": 6,
    "vocab_size": 262144,
}


def test_gemma2_windows_every_other_layer_and_ties() -> None:
    """Gemma-2-9B: 21 of 42 layers slide; tied; 8,324,201,984 non-embedding (report Table 2)."""
    spec = model_from_hf_config(GEMMA2_9B, name="g2")
    assert (spec.sliding_window_layers, spec.sliding_window_tokens) == (21, 4096)
    assert spec.tie_word_embeddings
    # Norms (4 per layer + 1 of 3584) are the only weights the shapes leave out.
    assert spec.params.non_embedding + (4 * 42 + 1) * 3584 == 8_324_201_984
    # Untied it would be 917.5M larger (+10 %): the error the issue reports.
    assert spec.total_params == pytest.approx(8_324_201_984 + 256_000 * 3584, rel=1e-4)


def test_gemma2_kv_at_32k_tokens() -> None:
    """21 full layers hold all 32,768 tokens, 21 windowed layers 4,096: by hand."""
    from kvadvisor.perfmodel.kv import kv_size

    per_layer = 2 * 8 * 256 * 2
    expected = 21 * per_layer * 32_768 + 21 * per_layer * 4_096
    layout = kv_size(model_from_hf_config(GEMMA2_9B, name="g2"), "bf16").layout
    assert float(layout.bytes_for(32_768)) == expected


def test_gemma3_text_config_window_pattern_and_vocab_default() -> None:
    """Gemma-3-27B: text_config read, vocab 262208 by default, 52 of 62 layers slide (5:1)."""
    spec = model_from_hf_config(GEMMA3_27B, name="g3")
    assert (spec.layers, spec.q_heads, spec.kv_heads, spec.head_dim) == (62, 32, 16, 128)
    assert spec.vocab_size == 262_208 and spec.tie_word_embeddings
    assert (spec.sliding_window_layers, spec.sliding_window_tokens) == (52, 1024)
    # Non-embedding parameters: Gemma 3 report Table 1 says 25,600M.
    assert spec.params.non_embedding == pytest.approx(25_600e6, rel=1e-3)


def test_gemma3_text_config_with_defaults_only() -> None:
    """Gemma-3-4B's text_config leaves heads, head_dim and the pattern to Gemma3TextConfig."""
    spec = model_from_hf_config(GEMMA3_4B, name="g3-4b")
    assert (spec.q_heads, spec.kv_heads, spec.head_dim) == (8, 4, 256)
    assert spec.sliding_window_layers == 34 - 34 // 6 == 29
    assert spec.params.non_embedding == pytest.approx(3_209e6, rel=1e-3)


def test_gemma3_1b_explicit_pattern() -> None:
    """Gemma-3-1B (text only): 22 of 26 layers slide at 512; 698M non-embedding parameters."""
    spec = model_from_hf_config(GEMMA3_1B, name="g3-1b")
    assert (spec.sliding_window_layers, spec.sliding_window_tokens) == (22, 512)
    assert spec.params.non_embedding == pytest.approx(698e6, rel=1e-3)
    assert spec.total_params == pytest.approx(1.0e9, rel=2e-3)


def test_catalog_gemma_matches_its_config() -> None:
    """The catalog entries and the parsed published configs agree on the KV layout."""
    for config, name in ((GEMMA2_9B, "gemma-2-9b"), (GEMMA3_27B, "gemma-3-27b")):
        parsed, entry = model_from_hf_config(config, name="x"), get_model(name)
        for field in ("layers", "kv_heads", "head_dim", "sliding_window_layers", "vocab_size"):
            assert getattr(parsed, field) == getattr(entry, field), (name, field)


def test_tie_default_is_per_family() -> None:
    """A missing tie flag is untied for Llama-style configs, tied for Gemma."""
    llama = {k: v for k, v in LLAMA_31_8B.items() if k != "tie_word_embeddings"}
    assert not model_from_hf_config(llama, name="l").tie_word_embeddings
    assert model_from_hf_config({**GEMMA2_9B}, name="g").tie_word_embeddings
    assert not model_from_hf_config(
        {**GEMMA2_9B, "tie_word_embeddings": False}, name="g"
    ).tie_word_embeddings


def test_published_weight_dtype() -> None:
    """DeepSeek-V3/R1 and Kimi-K2 ship FP8; gpt-oss MXFP4 experts; others bf16."""
    assert get_model("deepseek-v3").weight_dtype == "fp8"
    assert get_model("deepseek-r1").weight_dtype == "fp8"
    assert get_model("kimi-k2").weight_dtype == "fp8"
    oss = get_model("gpt-oss-120b")
    assert (oss.weight_dtype, oss.experts_dtype) == ("bf16", "mxfp4")
    assert get_model("qwen3-32b").weight_dtype == "bf16"
    # DeepSeek-V3's own config.json: block-scaled FP8; without a block size, per-tensor.
    block = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    fp8_cfg = {**DEEPSEEK_V3, "quantization_config": block}
    assert model_from_hf_config(fp8_cfg, name="d").weight_dtype == "fp8"
    tensor_cfg = {**DEEPSEEK_V3, "quantization_config": {"quant_method": "fp8"}}
    assert model_from_hf_config(tensor_cfg, name="d").weight_dtype == "fp8-tensor"
    assert model_from_hf_config(DEEPSEEK_V3, name="d").weight_dtype == "bf16"
