"""Served-model shapes: the packaged model catalog, HF ids as aliases, and HF config.json."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvadvisor.catalog.loader import check_entries, load_catalog_file, lookup
from kvadvisor.checker import Field
from kvadvisor.errors import CatalogError
from kvadvisor.io.fileio import check_input
from kvadvisor.io.jsonio import MAX_CONFIG_BYTES, load_file
from kvadvisor.units.format import count

MODELS_YAML = Path(__file__).with_name("data") / "models.yaml"
PARAMS_PER_BILLION = 1e9
# Weight dtypes a checkpoint is published in (bytes per weight: perfmodel.kv.WEIGHT_DTYPE_BYTES).
WEIGHT_DTYPES = ("bf16", "fp16", "fp32", "fp8", "fp8-tensor", "int8", "int4", "fp4", "mxfp4")
# A gated MLP (SwiGLU / GeGLU) has three matrices of hidden x width: gate, up and down.
GATED_MLP_MATRICES = 3

# RoPE scalings an engine can switch on past a model's trained context (YaRN: Qwen's model
# cards; the others are already applied inside the published config.json).
ROPE_SCALINGS = ("yarn",)
CONTEXT_FIELDS: dict[str, Field] = {
    "max_tokens": Field(
        "int", required=True, minimum=1, help="config.json max_position_embeddings, tokens"
    ),
    "rope_scaling": Field(
        "str", choices=ROPE_SCALINGS, help="a RoPE scaling the model card offers beyond it"
    ),
    "rope_factor": Field("number", minimum=1.0, help="its factor"),
    "rope_original_tokens": Field(
        "int", minimum=1, help="its original_max_position_embeddings, tokens"
    ),
    "source": Field("list[str]", required=True, help="keys of `sources`"),
    "notes": Field("str"),
}

MODEL_FIELDS: dict[str, Field] = {
    "attention": Field("str", choices=("gqa", "mla"), help="gqa (also MHA) or mla"),
    "layers": Field("int", required=True, minimum=1),
    "q_heads": Field("int", required=True, minimum=1),
    "kv_heads": Field("int", required=True, minimum=1),
    "head_dim": Field("int", minimum=1, help="required for gqa"),
    "kv_lora_rank": Field("int", minimum=1, help="MLA latent width"),
    "qk_rope_head_dim": Field("int", minimum=1, help="MLA decoupled RoPE key width"),
    "qk_nope_head_dim": Field("int", minimum=1),
    "v_head_dim": Field("int", minimum=1),
    "total_params_billion": Field("number", required=True, minimum=0.001),
    "active_params_billion": Field("number", minimum=0.001, help="MoE; dense = total"),
    "experts": Field("int", minimum=1, help="routed experts per MoE layer"),
    "experts_per_token": Field("int", minimum=1),
    "sliding_window_tokens": Field("int", minimum=1),
    "sliding_window_layers": Field("int", minimum=0, help="layers that use the window"),
    "hidden_size": Field("int", minimum=1, help="model width (config.json hidden_size)"),
    "intermediate_size": Field("int", minimum=1, help="dense MLP width"),
    "moe_intermediate_size": Field("int", minimum=1, help="width of one routed expert"),
    "shared_expert_intermediate_size": Field(
        "int", minimum=0, help="summed width of the shared experts of one MoE layer"
    ),
    "dense_layers": Field("int", minimum=0, help="MoE models: layers with a dense MLP"),
    "q_lora_rank": Field("int", minimum=0, help="MLA query compression rank"),
    "vocab_size": Field("int", minimum=1),
    "tie_word_embeddings": Field("bool", help="the LM head shares the embedding matrix"),
    "weight_dtype": Field(
        "str", choices=WEIGHT_DTYPES, help="dtype of the published checkpoint's linear layers"
    ),
    "expert_weight_dtype": Field(
        "str", choices=WEIGHT_DTYPES, help="dtype of its routed experts (default weight_dtype)"
    ),
    "context": Field(
        "mapping", fields=CONTEXT_FIELDS, help="maximum context and RoPE scaling, with source"
    ),
}


@dataclass(frozen=True)
class RopeScaling:
    """A RoPE scaling an engine applies to serve past the trained context (YaRN).

    ``context_tokens`` is what it reaches: ``factor x original_tokens``.
    """

    kind: str  # "yarn"
    factor: float
    original_tokens: int
    source: tuple[str, ...] = ()

    @property
    def context_tokens(self) -> int:
        """The context the scaling serves, tokens."""
        return int(self.factor * self.original_tokens)

    def hf_rope_scaling(self) -> dict[str, Any]:
        """The ``rope_scaling`` block of config.json the model card gives (engines read it)."""
        return {
            "rope_type": self.kind,
            "factor": self.factor,
            "original_max_position_embeddings": self.original_tokens,
        }


@dataclass(frozen=True)
class ModelSpec:
    """A transformer's shape as far as KV size, FLOPs and weight bytes need it.

    Parameter counts are plain counts (not billions). ``origin`` says where the shape came from:
    "catalog" (packaged YAML) or "hf-config" (a Hugging Face config.json, counts estimated).
    The widths (``hidden_size``, ``intermediate_size``, ``vocab_size``, the MoE widths) are 0
    where unknown; :attr:`params` then falls back on the published counts.
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
    hidden_size: int = 0
    intermediate_size: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    dense_layers: int = 0
    q_lora_rank: int = 0
    vocab_size: int = 0
    tie_word_embeddings: bool = False
    weight_dtype: str = "bf16"
    expert_weight_dtype: str | None = None
    aliases: tuple[str, ...] = ()
    # Longest request (prompt + output) the model serves as published, tokens; None: unknown.
    max_context_tokens: int | None = None
    rope_scaling: RopeScaling | None = None  # how to serve longer, when the model card says
    context_source: tuple[str, ...] = ()

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

    @property
    def experts_dtype(self) -> str:
        """Weight dtype of the routed experts (gpt-oss publishes them in MXFP4, the rest bf16)."""
        return self.expert_weight_dtype or self.weight_dtype

    @property
    def params(self) -> ParamBreakdown:
        """Parameter counts by role (:func:`param_breakdown`)."""
        return param_breakdown(self)

    def splits_over(self, tp: int) -> bool:
        """Whether vLLM and SGLang shard the attention over ``tp`` GPUs.

        Both need the query heads to divide evenly over the ranks, and the KV heads either to
        divide too or to be replicated whole (TP a multiple of them); MLA has one latent.
        """
        if tp < 1 or self.q_heads % tp:
            return False
        return self.is_mla or self.kv_heads % tp == 0 or tp % self.kv_heads == 0

    def parallel_problem(self, tp: int, ep: int = 1) -> str | None:
        """Why the model cannot run at TP ``tp`` with experts over ``ep`` GPUs, or None.

        Neither engine pads attention heads, and neither splits the routed experts unevenly
        in a way the step-time model follows, so both are refused rather than modeled.
        """
        if not self.splits_over(tp):
            fits = [t for t in range(1, min(self.q_heads, 1024) + 1) if self.splits_over(t)]
            heads = f"{self.q_heads} attention heads"
            if not self.is_mla and self.q_heads % tp == 0:
                heads = f"{self.kv_heads} KV heads"
            return (
                f"TP {tp}: {self.name}'s {heads} do not split over {tp} GPUs (vLLM and SGLang "
                f"refuse it); give a TP of {', '.join(map(str, fits[:-1]))} or {fits[-1]}"
                if len(fits) > 1
                else f"TP {tp}: {self.name}'s {heads} do not split over {tp} GPUs; give TP 1"
            )
        if ep > 1 and self.experts and self.experts % ep:
            return (
                f"EP {ep}: {self.name}'s {self.experts} routed experts do not split evenly over "
                f"{ep} GPUs; give an EP that divides {self.experts}"
            )
        return None


@dataclass(frozen=True)
class ParamBreakdown:
    """Parameter counts by role. Norms and biases are left out (under 0.05 % of any model here).

    ``attention`` and ``dense_mlp`` are per layer, ``expert`` one routed expert, ``shared`` and
    ``router`` per MoE layer; ``embedding`` is the input table and ``lm_head`` the output
    projection (with tied embeddings the same matrix: its FLOPs count, its bytes once).
    ``from_shapes`` is False when the widths are unknown and the split was derived from the
    published totals instead (no embedding or head split out then).
    """

    attention: float
    dense_mlp: float
    expert: float
    shared: float
    router: float
    embedding: float
    lm_head: float
    dense_layers: int
    moe_layers: int
    experts: int
    experts_per_token: int
    tied: bool
    from_shapes: bool

    @property
    def dense_body(self) -> float:
        """Every matmul weight a token passes through except the routed experts and the head."""
        layers = self.dense_layers + self.moe_layers
        return (
            layers * self.attention
            + self.dense_layers * self.dense_mlp
            + self.moe_layers * (self.shared + self.router)
        )

    @property
    def routed_total(self) -> float:
        """All routed-expert weights."""
        return self.moe_layers * self.experts * self.expert

    @property
    def routed_active(self) -> float:
        """Routed-expert weights one token passes through (top-k per MoE layer)."""
        return self.moe_layers * self.experts_per_token * self.expert

    @property
    def body_active(self) -> float:
        """Matmul parameters per token without the LM head: the FLOPs are twice this."""
        return self.dense_body + self.routed_active

    @property
    def total(self) -> float:
        """Stored parameters (a tied head counted once)."""
        head = 0.0 if self.tied else self.lm_head
        return self.dense_body + self.routed_total + self.embedding + head

    @property
    def non_embedding(self) -> float:
        """``total`` less the embedding table (the Gemma reports' non-embedding count)."""
        return self.total - self.embedding


def param_breakdown(m: ModelSpec) -> ParamBreakdown:
    """Parameter counts by role from a model's widths (or its published totals, without them).

    Attention per layer, GQA: ``h (h_q d) + 2 h (h_kv d) + (h_q d) h`` (q, k, v, o); MLA:
    ``h r_q + r_q h_q (d_nope + d_rope)`` (``h h_q (d_nope + d_rope)`` without a query rank)
    ``+ h (r_kv + d_rope) + r_kv h_q (d_nope + d_v) + h_q d_v h``. Gated MLP ``3 h w``; one
    expert ``3 h w_e``; router ``h E``; embedding and head ``V h`` each.
    """
    moe = 0 < m.experts_per_token < m.experts and (
        m.hidden_size > 0 or m.active_params < m.total_params
    )
    moe_layers = (m.layers - m.dense_layers) if moe else 0
    dense_layers = m.layers - moe_layers
    k = m.experts_per_token if moe else 0
    e = m.experts if moe else 0
    if not m.hidden_size:
        # Widths unknown: split the published counts. Routed weights R satisfy
        # P_total - P_active = R (1 - k/E); the rest is shared by every token.
        if moe:
            frac = k / e
            routed = (m.total_params - m.active_params) / (1.0 - frac)
            dense_body = max(m.active_params - routed * frac, 0.0)
            expert = routed / (moe_layers * e)
        else:
            dense_body, expert = m.total_params, 0.0
        return ParamBreakdown(
            attention=dense_body / m.layers,
            dense_mlp=0.0,
            expert=expert,
            shared=0.0,
            router=0.0,
            embedding=0.0,
            lm_head=0.0,
            dense_layers=dense_layers,
            moe_layers=moe_layers,
            experts=e,
            experts_per_token=k,
            tied=False,
            from_shapes=False,
        )
    h = m.hidden_size
    if m.is_mla:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q_out = m.q_heads * qk
        q = h * m.q_lora_rank + m.q_lora_rank * q_out if m.q_lora_rank else h * q_out
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * m.q_heads * (
            m.qk_nope_head_dim + m.v_head_dim
        )
        attention = q + kv + m.q_heads * m.v_head_dim * h
    else:
        attention = 2 * h * m.q_heads * m.head_dim + 2 * h * m.kv_heads * m.head_dim
    width = m.moe_intermediate_size or m.intermediate_size
    return ParamBreakdown(
        attention=float(attention),
        dense_mlp=float(GATED_MLP_MATRICES * h * m.intermediate_size),
        expert=float(GATED_MLP_MATRICES * h * width) if moe else 0.0,
        shared=float(GATED_MLP_MATRICES * h * m.shared_expert_intermediate_size) if moe else 0.0,
        router=float(h * e),
        embedding=float(m.vocab_size * h),
        lm_head=float(m.vocab_size * h),
        dense_layers=dense_layers,
        moe_layers=moe_layers,
        experts=e,
        experts_per_token=k,
        tied=m.tie_word_embeddings,
        from_shapes=True,
    )


def _context(e: Mapping[str, Any], where: str) -> tuple[int | None, RopeScaling | None, tuple]:
    """A catalog entry's context block: its maximum, its RoPE scaling, and their sources."""
    ctx = e.get("context")
    if not ctx:
        return None, None, ()
    source = tuple(ctx.get("source_text") or ctx.get("source") or ())
    rope = None
    if ctx.get("rope_scaling"):
        if not (ctx.get("rope_factor") and ctx.get("rope_original_tokens")):
            raise CatalogError(
                f"{where}.context: rope_scaling needs rope_factor and rope_original_tokens"
            )
        rope = RopeScaling(
            ctx["rope_scaling"], float(ctx["rope_factor"]), int(ctx["rope_original_tokens"]), source
        )
        if rope.context_tokens <= ctx["max_tokens"]:
            raise CatalogError(
                f"{where}.context: rope_factor x rope_original_tokens ({rope.context_tokens}) "
                f"does not exceed max_tokens ({ctx['max_tokens']})"
            )
    return int(ctx["max_tokens"]), rope, source


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
    if e.get("dense_layers", 0) > e["layers"]:
        raise CatalogError(f"{where}.dense_layers: more than layers ({e['layers']})")
    if e.get("hidden_size") and not (e.get("intermediate_size") and e.get("vocab_size")):
        raise CatalogError(f"{where}: hidden_size needs intermediate_size and vocab_size too")
    total = float(e["total_params_billion"]) * PARAMS_PER_BILLION
    active = float(e.get("active_params_billion") or e["total_params_billion"]) * PARAMS_PER_BILLION
    if active > total:
        raise CatalogError(f"{where}.active_params_billion: above total_params_billion")
    head_dim = int(e.get("head_dim") or 0)
    max_context, rope, context_source = _context(e, where)
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
        hidden_size=int(e.get("hidden_size") or 0),
        intermediate_size=int(e.get("intermediate_size") or 0),
        moe_intermediate_size=int(e.get("moe_intermediate_size") or 0),
        shared_expert_intermediate_size=int(e.get("shared_expert_intermediate_size") or 0),
        dense_layers=int(e.get("dense_layers") or 0),
        q_lora_rank=int(e.get("q_lora_rank") or 0),
        vocab_size=int(e.get("vocab_size") or 0),
        tie_word_embeddings=bool(e.get("tie_word_embeddings", False)),
        weight_dtype=e.get("weight_dtype", "bf16"),
        expert_weight_dtype=e.get("expert_weight_dtype"),
        aliases=tuple(e.get("aliases") or ()),
        max_context_tokens=max_context,
        rope_scaling=rope,
        context_source=context_source,
    )


def check_model_entries(
    entries: Mapping[str, Mapping[str, Any]], path: str
) -> dict[str, ModelSpec]:
    """Turn checked catalog entries into ModelSpecs (cross-field checks included)."""
    return {
        name: _spec_from_entry(name, e, f"{path}: entries.{name}") for name, e in entries.items()
    }


def parse_models(
    data: Any, path: str, lines: Mapping[str, int] | None = None
) -> dict[str, ModelSpec]:
    """Check a parsed model catalog document and build its specs."""
    return check_model_entries(check_entries(path, "models", data, MODEL_FIELDS, lines=lines), path)


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
    key, _ = lookup(entries, name, "model", "models")
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
        raise CatalogError(f"{where}: '{key}' must be in [0, {count(cap)}], got {value!r}")
    return int(value)


def _opt_int(cfg: Mapping[str, Any], key: str, where: str) -> int:
    """An optional whole-number field: 0 when absent or null, else checked like ``_int``."""
    return 0 if cfg.get(key) is None else _int(cfg, key, where)


# What Hugging Face's config classes fill in when a published config.json leaves a key out, for
# the families whose configs rely on it (transformers configuration_gemma2.py and
# configuration_gemma3.py ``Gemma3TextConfig``). Gemma ties its embeddings; the families that do
# not (Llama, Mistral, Qwen, DeepSeek, gpt-oss) declare ``tie_word_embeddings: false``, and their
# config classes default to untied as well.
HF_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": {"tie_word_embeddings": True, "head_dim": 256, "vocab_size": 256000},
    "gemma2": {
        "tie_word_embeddings": True,
        "head_dim": 256,
        "vocab_size": 256000,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "sliding_window": 4096,
    },
    "gemma3_text": {
        "tie_word_embeddings": True,
        "head_dim": 256,
        "vocab_size": 262208,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
    },
}
# Gemma 2 alternates sliding and global layers starting with a sliding one (transformers
# modeling_gemma2.py: layer i slides when (i + 1) % 2 != 0).
GEMMA2_WINDOW_EVERY = 2


def _text_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's config: a multimodal wrapper keeps it under ``text_config``."""
    out = dict(cfg)
    inner = cfg.get("text_config")
    if isinstance(inner, Mapping):
        out.update(inner)
        if "model_type" not in inner and cfg.get("model_type") == "gemma3":
            out["model_type"] = "gemma3_text"
    family = HF_FAMILY_DEFAULTS.get(str(out.get("model_type", "")), {})
    return {**family, **{k: v for k, v in out.items() if v is not None or k not in family}}


def _window_layers(cfg: Mapping[str, Any], layers: int, where: str) -> int:
    """How many layers use the sliding window, by the rules the engines apply.

    ``layer_types`` when given; else ``sliding_window_pattern`` N (Gemma 3: every N-th layer is
    global, the others slide); else Gemma 2's alternation; else Mistral/Qwen2's
    ``use_sliding_window`` with ``max_window_layers`` (the layers from that index on slide).
    """
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        return sum(1 for t in layer_types if t == "sliding_attention")
    pattern = cfg.get("sliding_window_pattern")
    if pattern is not None:
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise CatalogError(f"{where}: 'sliding_window_pattern' must be a positive whole number")
        return layers - layers // pattern
    if cfg.get("model_type") == "gemma2":
        return layers - layers // GEMMA2_WINDOW_EVERY
    if cfg.get("use_sliding_window", True):
        return layers - _at_most(cfg, "max_window_layers", layers, where)
    return 0


def _at_most(cfg: Mapping[str, Any], key: str, layers: int, where: str) -> int:
    """An optional layer count that cannot exceed the model's layers."""
    value = _opt_int(cfg, key, where)
    if value > layers:
        raise CatalogError(f"{where}: '{key}' ({value}) is more than num_hidden_layers ({layers})")
    return value


@dataclass(frozen=True)
class _Attention:
    """A config's attention shape: layers, heads, widths; MLA's ranks (0 for GQA)."""

    layers: int
    heads: int
    hidden: int
    kv_heads: int
    head_dim: int
    is_mla: bool
    rank: int = 0
    rope: int = 0
    nope: int = 0
    v_dim: int = 0


def _attention(cfg: Mapping[str, Any], where: str) -> _Attention:
    """GQA (``num_key_value_heads``, an explicit ``head_dim``) or MLA (``kv_lora_rank``)."""
    layers = _int(cfg, "num_hidden_layers", where)
    heads = _int(cfg, "num_attention_heads", where)
    hidden = _int(cfg, "hidden_size", where)
    kv_heads = _int(cfg, "num_key_value_heads", where, default=heads)
    if layers == 0 or heads == 0 or hidden == 0:
        raise CatalogError(f"{where}: layers, heads and hidden_size must be positive")
    if kv_heads == 0:
        raise CatalogError(
            f"{where}: 'num_key_value_heads' must be at least 1 (no KV heads means no KV "
            "cache); drop the key for multi-head attention"
        )
    head_dim = _opt_int(cfg, "head_dim", where) or hidden // heads
    if head_dim == 0:
        raise CatalogError(
            f"{where}: hidden_size / num_attention_heads is below 1; give 'head_dim' or fix them"
        )
    if layers * kv_heads * head_dim > MAX_KV_WIDTH:
        raise CatalogError(
            f"{where}: num_hidden_layers x num_key_value_heads x head_dim = "
            f"{count(layers * kv_heads * head_dim)} is beyond any real model (at most "
            f"{count(MAX_KV_WIDTH)}); check those fields"
        )
    shape = _Attention(layers, heads, hidden, kv_heads, head_dim, bool(cfg.get("kv_lora_rank")))
    if not shape.is_mla:
        return shape
    return replace(
        shape,
        rank=_int(cfg, "kv_lora_rank", where),
        rope=_int(cfg, "qk_rope_head_dim", where),
        nope=_int(cfg, "qk_nope_head_dim", where, default=head_dim),
        v_dim=_int(cfg, "v_head_dim", where, default=head_dim),
    )


def _experts(cfg: Mapping[str, Any], where: str, inter: int) -> tuple[int, int, int, int]:
    """MoE: (experts, experts per token, expert FFN width, shared-expert width); 0s if dense."""
    experts = (
        _opt_int(cfg, "num_local_experts", where)
        or _opt_int(cfg, "num_experts", where)
        or _opt_int(cfg, "n_routed_experts", where)
    )
    top_k = _opt_int(cfg, "num_experts_per_tok", where) or _opt_int(cfg, "experts_per_token", where)
    if experts and top_k > experts:
        raise CatalogError(
            f"{where}: 'num_experts_per_tok' ({top_k}) is more than the experts ({experts})"
        )
    if not (experts and top_k):
        return 0, 0, 0, 0
    moe_inter = _opt_int(cfg, "moe_intermediate_size", where)
    shared = _opt_int(cfg, "n_shared_experts", where) * (moe_inter or inter)
    shared += _opt_int(cfg, "shared_expert_intermediate_size", where)
    return experts, top_k, moe_inter, shared


def _checkpoint_dtypes(cfg: Mapping[str, Any]) -> tuple[str, str | None]:
    """(weight dtype, expert weight dtype) of the checkpoint, from ``quantization_config``."""
    quant = cfg.get("quantization_config")
    method = str(quant.get("quant_method", "")).lower() if isinstance(quant, Mapping) else ""
    # FP8 checkpoints with a weight_block_size are block-scaled ("fp8"), others per-tensor.
    weight_dtype = "bf16"
    if method == "fp8":
        assert isinstance(quant, Mapping)
        weight_dtype = "fp8" if quant.get("weight_block_size") else "fp8-tensor"
    return weight_dtype, "mxfp4" if method == "mxfp4" else None


def _sliding_window(cfg: Mapping[str, Any], layers: int, where: str) -> tuple[int | None, int]:
    """(window tokens, layers that slide), or (None, 0) when no layer slides."""
    window = _opt_int(cfg, "sliding_window", where) or None
    window_layers = _window_layers(cfg, layers, where) if window else 0
    if not window or window_layers == 0:
        return None, 0
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise CatalogError(f"{where}: 'sliding_window' must be a positive whole number")
    return window, min(window_layers, layers)


def model_from_hf_config(cfg: Mapping[str, Any], *, name: str, where: str = "config") -> ModelSpec:
    """Build a ModelSpec from a parsed HF config.json (pure).

    Reads a multimodal wrapper's ``text_config``, and fills what a config leaves out as the
    model family's Hugging Face config class does (:data:`HF_FAMILY_DEFAULTS`: Gemma ties its
    embeddings, Gemma 3's ``text_config`` has no ``vocab_size``). Handles GQA
    (``num_key_value_heads``), an explicit ``head_dim`` (Qwen3, gpt-oss, Gemma), MLA
    (``kv_lora_rank``, ``qk_rope_head_dim``), sliding windows (:func:`_window_layers`) and MoE
    (``num_local_experts``/``num_experts``/``n_routed_experts``). Parameter counts come from
    the matrix shapes (:func:`param_breakdown`); config.json does not state them. The weight
    dtype is the checkpoint's: FP8 when ``quantization_config`` says so, MXFP4 experts for
    gpt-oss, else bf16.
    """
    cfg = _text_config(cfg)
    att = _attention(cfg, where)
    layers, heads, is_mla = att.layers, att.heads, att.is_mla
    inter = _int(cfg, "intermediate_size", where, default=4 * att.hidden)
    experts, top_k, moe_inter, shared = _experts(cfg, where, inter)
    weight_dtype, expert_dtype = _checkpoint_dtypes(cfg)
    window, window_layers = _sliding_window(cfg, layers, where)
    shape = ModelSpec(
        name=name,
        display_name=name,
        attention="mla" if is_mla else "gqa",
        layers=layers,
        q_heads=heads,
        kv_heads=heads if is_mla else att.kv_heads,
        head_dim=att.v_dim if is_mla else att.head_dim,
        total_params=1.0,
        active_params=1.0,
        kv_lora_rank=att.rank,
        qk_rope_head_dim=att.rope,
        qk_nope_head_dim=att.nope,
        v_head_dim=att.v_dim,
        experts=experts,
        experts_per_token=top_k,
        sliding_window_tokens=window,
        sliding_window_layers=window_layers,
        source=(where,),
        notes="parameter counts estimated from config.json matrix shapes",
        origin="hf-config",
        hidden_size=att.hidden,
        intermediate_size=inter,
        moe_intermediate_size=moe_inter,
        shared_expert_intermediate_size=shared,
        dense_layers=_at_most(cfg, "first_k_dense_replace", layers, where) if experts else 0,
        q_lora_rank=_opt_int(cfg, "q_lora_rank", where) if is_mla else 0,
        vocab_size=_int(cfg, "vocab_size", where, default=0),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        weight_dtype=weight_dtype,
        expert_weight_dtype=expert_dtype,
        # A rope_scaling the config already holds is applied: max_position_embeddings is then
        # the scaled context (DeepSeek-V3's 163,840), so no further scaling is proposed.
        max_context_tokens=_opt_int(cfg, "max_position_embeddings", where) or None,
        context_source=(f"{where}: max_position_embeddings",),
    )
    p = shape.params
    # Active = parameters in a token's matmuls: the input embedding is a lookup, not a
    # matmul (gpt-oss's published 5.1B active counts it out the same way).
    return replace(shape, total_params=p.total, active_params=p.body_active + p.lm_head)
