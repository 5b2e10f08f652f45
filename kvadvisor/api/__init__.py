"""The public Python API's modules; ``kvadvisor`` names every public name (docs/api.md).

``advisor``: the calls that read a trace (analyze, review, replay, verify), the Advisor that
holds rules and catalogs, and the results with their renderings; ``tracefiles``: convert,
describe, synthesize; ``references``: rules and catalogs. Import the names from ``kvadvisor``.
"""
