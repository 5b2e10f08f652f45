"""Engine configuration output: the recommended deployment in each engine's own format."""

from typing import Any

from kvadvisor.emit import writers
from kvadvisor.emit.writers import emit_all, emit_config, emit_targets, emitters, targets

__all__ = ["EMITTERS", "TARGETS", "emit_all", "emit_config", "emit_targets", "emitters", "targets"]


def __getattr__(name: str) -> Any:
    """EMITTERS and TARGETS from the engine registry, as :mod:`kvadvisor.emit.writers` has them."""
    return getattr(writers, name)
