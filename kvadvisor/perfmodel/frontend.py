"""Per-request front-end work (HTTP, tokenization, block hashing) by serving engine, sourced.

The replay charges ``fixed + per_token x prompt tokens`` to the step that admits a request
(docs/replay.md, R13); a plan's stage ``frontend`` replaces either figure. The figures:

* tokenization: TensorRT-LLM PR #18389 (NVIDIA/TensorRT-LLM) profiled 43.7 ms of ``tokenize
  prompt`` per request on ~38k-token prompts with a Hugging Face fast tokenizer: 1.15 us per
  token. vLLM and SGLang tokenize with the same library (``transformers`` fast tokenizers);
* block hashing: vLLM hashes every full block with SHA-256 (the default since v0.10.2) at
  "about 100-200 ns per token (~6 ms for 50k tokens of context)" (vLLM
  docs/design/prefix_caching.md): 6 ms / 50,000 = 0.12 us per token. SGLang's radix tree
  matches token ids without hashing; HiCache hashes each page with SHA-256 only when a storage
  backend is on (``get_hash_str``, mem_cache/hicache_storage.py), counted at vLLM's rate;
* fixed (HTTP, request state): no engine publishes it. Estimate from the /tokenize endpoint of
  an OpenAI-compatible server derived from vLLM's (dphnAI/sonar PR #1359): 1,000 requests of
  ~69 tokens at 420.87 requests/s, 2.376 ms each, less 69 x 1.15 us of tokenization = 2.30 ms.
  SGLang's HTTP server (FastAPI, uvicorn, one Python process) has no published figure either:
  the same estimate.

Check (docs/replay.md, R13): vLLM PR #19334 served 100 concurrent cached prompts of ~10,000
tokens in 1.338 s, 13.4 ms each; these figures give 2.30 + 10,000 x 1.27e-3 = 15.0 ms.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvadvisor.engines import registry
from kvadvisor.units.format import duration, number

TOKENIZE_S_PER_TOKEN = 43.7e-3 / 38_000
SHA256_S_PER_TOKEN = 6e-3 / 50_000
SONAR_S_PER_REQUEST = 1.0 / 420.87
SONAR_TOKENS_PER_REQUEST = 69
HTTP_FIXED_S = SONAR_S_PER_REQUEST - SONAR_TOKENS_PER_REQUEST * TOKENIZE_S_PER_TOKEN


def frontend_engine(engines: Mapping[str, Mapping[str, Any]]) -> tuple[str, bool]:
    """The front end that serves a stage, and whether it hashes every block.

    The first configured engine that names its own (``Engine.front_end``: SGLang's, hashing
    only with a HiCache storage backend), else vLLM's, which hashes every full block: LMCache,
    Dynamo KVBM and Mooncake are KV connectors inside vLLM's engine, and Dynamo's Rust front end
    publishes no figure either, so vLLM's applies to it.
    """
    return registry.first(engines, "front_end") or ("vllm", True)


def frontend_defaults(engines: Mapping[str, Mapping[str, Any]]) -> tuple[float, float, str]:
    """The front-end cost per request (s) and per prompt token (s), and where they come from."""
    engine, hashes = frontend_engine(engines)
    per_token = TOKENIZE_S_PER_TOKEN + (SHA256_S_PER_TOKEN if hashes else 0.0)
    why = (
        f"{engine}: {duration(HTTP_FIXED_S)} per request (HTTP, estimated) + "
        f"{number(per_token * 1e6)} µs per prompt token (tokenization"
        + (" and SHA-256 block hashing" if hashes else "")
        + ")"
    )
    return HTTP_FIXED_S, per_token, why
