"""Engine configuration output: the recommended deployment in each engine's own format."""

from kvadvisor.emit.writers import EMITTERS, TARGETS, emit_all, emit_config

__all__ = ["EMITTERS", "TARGETS", "emit_all", "emit_config"]
