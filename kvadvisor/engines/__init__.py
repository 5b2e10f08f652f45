"""The serving engines kvadvisor configures and reads, one module each, in one registry.

Each engine module defines everything kvadvisor knows of its engine (its settings schema, its
emit writer, its facts, how a plan's stage uses it) and registers it with
:func:`kvadvisor.engines.registry.register`; the plan schema's engine list, the ``--emit``
targets and the review's engine facts are read from the registry (docs/architecture.md).
"""
