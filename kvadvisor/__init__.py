"""kvadvisor: measure LLM-serving traffic, then advise KV-cache storage per stage."""

from kvadvisor.jitcache import ensure_cache_dir

__version__ = "0.1.0"

# Before any compiled kernel is defined: numba needs a writable cache directory for them.
ensure_cache_dir()

__all__ = ["__version__"]
