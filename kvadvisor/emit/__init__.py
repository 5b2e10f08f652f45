"""Engine configuration output: the recommended settings in each engine's own format."""

from kvadvisor.emit.writers import EMITTERS, emit_config

__all__ = ["EMITTERS", "emit_config"]
