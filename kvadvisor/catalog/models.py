"""Served-model shapes: the packaged model catalog, HF ids as aliases, and HF config.json."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvadvisor.catalog.loader import FieldSpec, load_catalog_file, lookup
from kvadvisor.errors import CatalogError
from kvadvisor.fileio import check_input
from kvadvisor.jsonio import MAX_CONFIG_BYTES, load_file

MODELS_YAML = Path(__file__).with_name("data") / "models.yaml"
PARAMS_PER_BILLION = 1e9

MODEL_FIELDS: dict[str, FieldSpec] = {
    "attention": FieldSpec("str", choices=("gqa", "mla"), help="gqa (also MHA) or mla"),
    "layers": FieldSpec("int", required=True, minimum=1),
    "q_heads": FieldSpec("int", required=True, minimum=1),
    "kv_heads": FieldSpec("int", required=True, minimum=1),
    "head_dim": FieldSpec("int", minimum=1, help="required for gqa"),
    "kv_lora_rank": FieldSpec("int", minimum=1, help="MLA latent width"),
    "qk_rope_head_dim": FieldSpec("int", minimum=1, help="MLA decoupled RoPE key width"),
    "qk_nope_head_dim": FieldSpec("int", minimum=1),
    "v_head_dim": FieldSpec("int", minimum=1),
    "total_params_billion": FieldSpec("number", required=True, minimum=0.001),
    "active_params_billion": FieldSpec("number", minimum=0.001, help="MoE; dense = total"),
    "experts": FieldSpec("int", minimum=1, help="routed experts per MoE layer"),
    "experts_per_token": FieldSpec("int", minimum=1),
    "sliding_window_tokens": FieldSpec("int", minimum=1),
    "sliding_window_layers": FieldSpec("int", minimum=0, help="layers that use the window"),
}


@dataclass(frozen=True)
class ModelSpec:
    """A transformer's shape as far as KV size and FLOPs need it.

    Parameter counts are plain counts (not billions). ``origin`` says where the shape came from:
    "catalog" (packaged YAML) or "hf-config" (a Hugging Face config.json, counts estimated).
    """

    name: str
    display_name: str
    attention: str  # "gqa" | "mla"
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    total_params: float
    active_params: float
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    experts: int = 0
    experts_per_token: int = 0
    sliding_window_tokens: int | None = None
    sliding_window_layers: int = 0
    source: tuple[str, ...] = ()
    notes: str = ""
    origin: str = "catalog"

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3): one compressed KV latent per layer."""
        return self.attention == "mla"

    @property
    def is_moe(self) -> bool:
        """Mixture of experts (active parameters below total)."""
        return self.experts > 0 and self.active_params < self.total_params

    @property
    def qk_dim(self) -> int:
        """Width of one query-key dot product per head (MLA: nope + rope part)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def v_dim(self) -> int:
        """Width of one value vector per head."""
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def full_attention_layers(self) -> int:
        """Layers whose KV grows with the whole context (no sliding window)."""
        return self.layers - self.sliding_window_layers


def _spec_from_entry(name: str, e: Mapping[str, Any], where: str) -> ModelSpec:
    attention = e.get("attention", "gqa")
    if attention == "gqa" and not e.get("head_dim"):
        raise CatalogError(f"{where}.head_dim: is required for gqa attention")
    if attention == "mla" and not (e.get("kv_lora_rank") and e.get("qk_rope_head_dim")):
        raise CatalogError(f"{where}: mla needs kv_lora_rank and qk_rope_head_dim")
    if e.get("sliding_window_layers") and not e.get("sliding_window_tokens"):
        raise CatalogError(f"{where}.sliding_window_tokens: is required with sliding_window_layers")
    if e.get("sliding_window_layers", 0) > e["layers"]:
        raise CatalogError(f"{where}.sliding_window_layers: more than layers ({e['layers']})")
    total = float(e["total_params_billion"]) * PARAMS_PER_BILLION
    active = float(e.get("active_params_billion") or e["total_params_billion"]) * PARAMS_PER_BILLION
    if active > total:
        raise CatalogError(f"{where}.active_params_billion: above total_params_billion")
    head_dim = int(e.get("head_dim") or 0)
    return ModelSpec(
        name=name,
        display_name=e.get("display_name", name),
        attention=attention,
        layers=int(e["layers"]),
        q_heads=int(e["q_heads"]),
        kv_heads=int(e["kv_heads"]),
        head_dim=head_dim or int(e.get("v_head_dim") or 0),
        total_params=total,
        active_params=active,
        kv_lora_rank=int(e.get("kv_lora_rank") or 0),
        qk_rope_head_dim=int(e.get("qk_rope_head_dim") or 0),
        qk_nope_head_dim=int(e.get("qk_nope_head_dim") or 0),
        v_head_dim=int(e.get("v_head_dim") or 0),
        experts=int(e.get("experts") or 0),
        experts_per_token=int(e.get("experts_per_token") or 0),
        sliding_window_tokens=e.get("sliding_window_tokens"),
        sliding_window_layers=int(e.get("sliding_window_layers") or 0),
        source=tuple(e.get("source_text") or e.get("source") or ()),
        notes=e.get("notes", ""),
        origin="catalog",
    )


def check_model_entries(
    entries: Mapping[str, Mapping[str, Any]], path: str
) -> dict[str, ModelSpec]:
    """Turn checked catalog entries into ModelSpecs (cross-field checks included)."""
    return {
        name: _spec_from_entry(name, e, f"{path}: entries.{name}") for name, e in entries.items()
    }


@lru_cache(maxsize=4)
def _load(path: str) -> tuple[dict[str, dict[str, Any]], dict[str, ModelSpec]]:
    entries = load_catalog_file(path, "models", MODEL_FIELDS)
    return entries, check_model_entries(entries, path)


def load_models(path: str | Path | None = None) -> dict[str, ModelSpec]:
    """All models of a catalog file (the packaged one by default), by name."""
    return dict(_load(str(path or MODELS_YAML))[1])


def get_model(name: str, path: str | Path | None = None) -> ModelSpec:
    """A catalog model by name or alias (HF id), case-insensitive; unknown names get suggestions."""
    entries, specs = _load(str(path or MODELS_YAML))
    key, _ = lookup(entries, name, "model")
    return specs[key]


def resolve_model(name_or_path: str, catalog_path: str | Path | None = None) -> ModelSpec:
    """``--model``: a catalog name (qwen3-32b), an HF id (Qwen/Qwen3-32B) or a config.json path."""
    candidate = Path(name_or_path)
    if name_or_path.endswith(".json") or candidate.is_file() or candidate.is_dir():
        if candidate.is_dir():
            candidate = candidate / "config.json"
        return read_hf_config(candidate)
    return get_model(name_or_path, catalog_path)


def read_hf_config(path: str | Path) -> ModelSpec:
    """Read a Hugging Face config.json (the only file this module reads besides the catalog).

    The file is bounded before it is parsed (size, nesting), NaN and Infinity are refused,
    and every number the KV size and FLOPs use is range-checked (:func:`model_from_hf_config`).
    """
    path = check_input(path, CatalogError, what="model config file (config.json)")
    cfg = load_file(path, CatalogError, max_bytes=MAX_CONFIG_BYTES, allow_nan=False)
    if not isinstance(cfg, dict):
        raise CatalogError(f"{path}: expected a JSON object (a Hugging Face config.json)")
    name = str(cfg.get("_name_or_path") or path.parent.name or path.stem)
    return model_from_hf_config(cfg, name=name, where=str(path))


# The largest value any config.json field the model shape uses may hold: far above every
# published model (DeepSeek-V3: 61 layers, 7168 hidden, 256 experts; vocabularies ~ 256k),
# low enough that products of them stay exact in float64 and int64.
MAX_CONFIG_DIM = 1 << 24  # widths, heads, layers, experts, windows
MAX_CONFIG_VOCAB = 1 << 26
# KV elements per token (layers x KV heads x head width): 2^28 is 1 GiB per token in bf16
# K and V, some 2,000 times DeepSeek-V3's or Llama-3.1-405B's.
MAX_KV_WIDTH = 1 << 28


def _int(cfg: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise CatalogError(f"{where}: '{key}' is missing; it is needed for the KV size")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CatalogError(f"{where}: '{key}' must be a whole number, got {value!r:.40}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise CatalogError(f"{where}: '{key}' must be a whole number, got {value!r}")
    cap = MAX_CONFIG_VOCAB if key == "vocab_size" else MAX_CONFIG_DIM
    if not 0 <= value <= cap:
        raise CatalogError(f"{where}: '{key}' must be in [0, {cap:,}], got {value:.6g}")
    return int(value)


def _opt_int(cfg: Mapping[str, Any], key: str, where: str) -> int:
    """An optional whole-number field: 0 when absent or null, else checked like ``_int``."""
    return 0 if cfg.get(key) is None else _int(cfg, key, where)


def _at_most(cfg: Mapping[str, Any], key: str, layers: int, where: str) -> int:
    """An optional layer count that cannot exceed the model's layers."""
    value = _opt_int(cfg, key, where)
    if value > layers:
        raise CatalogError(f"{where}: '{key}' ({value}) is more than num_hidden_layers ({layers})")
    return value


def model_from_hf_config(cfg: Mapping[str, Any], *, name: str, where: str = "config") -> ModelSpec:
    """Build a ModelSpec from a parsed HF config.json (pure).

    Handles GQA (``num_key_value_heads``), an explicit ``head_dim`` (Qwen3, gpt-oss), MLA
    (``kv_lora_rank``, ``qk_rope_head_dim``), sliding windows (``layer_types``, or
    ``sliding_window`` with ``use_sliding_window``/``max_window_layers`` as Mistral and Qwen2 use
    them) and MoE (``num_local_experts``/``num_experts``/``n_routed_experts``). Parameter counts
    are estimated from the matrix shapes (norms and biases ignored), since config.json does not
    state them.
    """
    if isinstance(cfg.get("text_config"), Mapping):  # multimodal wrappers keep the LM inside
        cfg = {**cfg, **cfg["text_config"]}
    layers = _int(cfg, "num_hidden_layers", where)
    heads = _int(cfg, "num_attention_heads", where)
    hidden = _int(cfg, "hidden_size", where)
    kv_heads = _int(cfg, "num_key_value_heads", where, default=heads)
    vocab = _int(cfg, "vocab_size", where, default=0)
    if layers == 0 or heads == 0 or hidden == 0:
        raise CatalogError(f"{where}: layers, heads and hidden_size must be positive")
    if kv_heads == 0:
        raise CatalogError(
            f"{where}: 'num_key_value_heads' must be at least 1 (no KV heads means no KV "
            "cache); drop the key for multi-head attention"
        )
    is_mla = bool(cfg.get("kv_lora_rank"))
    head_dim = _opt_int(cfg, "head_dim", where) or hidden // heads
    if head_dim == 0:
        raise CatalogError(
            f"{where}: hidden_size / num_attention_heads is below 1; give 'head_dim' or fix them"
        )
    if layers * kv_heads * head_dim > MAX_KV_WIDTH:
        raise CatalogError(
            f"{where}: num_hidden_layers x num_key_value_heads x head_dim = "
            f"{layers * kv_heads * head_dim:,} is beyond any real model (at most "
            f"{MAX_KV_WIDTH:,}); check those fields"
        )

    # Attention weights per layer.
    if is_mla:
        rank = _int(cfg, "kv_lora_rank", where)
        rope = _int(cfg, "qk_rope_head_dim", where)
        nope = _int(cfg, "qk_nope_head_dim", where, default=head_dim)
        v_dim = _int(cfg, "v_head_dim", where, default=head_dim)
        q_lora = _opt_int(cfg, "q_lora_rank", where)
        q_out = heads * (nope + rope)
        q_params = hidden * q_lora + q_lora * q_out if q_lora else hidden * q_out
        kv_params = hidden * (rank + rope) + rank * heads * (nope + v_dim)
        attn = q_params + kv_params + heads * v_dim * hidden
    else:
        rank = rope = nope = v_dim = 0
        attn = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim

    # Feed-forward weights: gated MLPs have three matrices (gate, up, down).
    inter = _int(cfg, "intermediate_size", where, default=4 * hidden)
    experts = (
        _opt_int(cfg, "num_local_experts", where)
        or _opt_int(cfg, "num_experts", where)
        or _opt_int(cfg, "n_routed_experts", where)
    )
    top_k = _opt_int(cfg, "num_experts_per_tok", where) or _opt_int(cfg, "experts_per_token", where)
    dense_mlp = 3 * hidden * inter
    if experts and top_k:
        moe_inter = _opt_int(cfg, "moe_intermediate_size", where) or inter
        expert = 3 * hidden * moe_inter
        shared = _opt_int(cfg, "n_shared_experts", where) * expert
        shared += 3 * hidden * _opt_int(cfg, "shared_expert_intermediate_size", where)
        moe_layers = layers - _at_most(cfg, "first_k_dense_replace", layers, where)
        if top_k > experts:
            raise CatalogError(
                f"{where}: 'num_experts_per_tok' ({top_k}) is more than the experts ({experts})"
            )
        dense_part = (layers - moe_layers) * dense_mlp
        router = hidden * experts
        mlp_total = dense_part + moe_layers * (experts * expert + shared + router)
        mlp_active = dense_part + moe_layers * (top_k * expert + shared + router)
    else:
        experts = top_k = 0
        mlp_total = mlp_active = layers * dense_mlp
    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    total = float(embed + layers * attn + mlp_total)
    # Active = parameters in a token's matmuls: the input embedding is a lookup, not a
    # matmul (gpt-oss's published 5.1B active counts it out the same way).
    active = float(vocab * hidden + layers * attn + mlp_active)

    # Sliding windows.
    window = _opt_int(cfg, "sliding_window", where) or None
    window_layers = 0
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        window_layers = sum(1 for t in layer_types if t == "sliding_attention")
    elif window and cfg.get("use_sliding_window", True):
        window_layers = layers - _at_most(cfg, "max_window_layers", layers, where)
    if not window or window_layers == 0:
        window, window_layers = None, 0
    if window is not None and (not isinstance(window, int) or window <= 0):
        raise CatalogError(f"{where}: 'sliding_window' must be a positive whole number")
    return ModelSpec(
        name=name,
        display_name=name,
        attention="mla" if is_mla else "gqa",
        layers=layers,
        q_heads=heads,
        kv_heads=heads if is_mla else kv_heads,
        head_dim=v_dim if is_mla else head_dim,
        total_params=total,
        active_params=active,
        kv_lora_rank=rank,
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
        v_head_dim=v_dim,
        experts=experts,
        experts_per_token=top_k,
        sliding_window_tokens=window,
        sliding_window_layers=min(window_layers, layers),
        source=(where,),
        notes="parameter counts estimated from config.json matrix shapes",
        origin="hf-config",
    )
