"""kvadvisor: measure LLM-serving traffic, then advise KV-cache storage per stage."""

__version__ = "0.1.0"

__all__ = ["__version__"]
