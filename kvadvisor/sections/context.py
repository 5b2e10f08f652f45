"""Requests longer than the model's context: counted, then served rope-scaled, excluded or refused.

An engine refuses a request whose prompt plus output exceed its maximum model length (vLLM's
``max_model_len`` bounds both; SGLang's ``context_length`` the same), so a verdict replayed on
such requests would promise service the deployment cannot give. ``--over-context`` chooses:

- ``refuse``: stop with one line that counts them;
- ``rope``: serve them at the model's RoPE-scaled context (YaRN, as its model card gives it),
  the emitted launch files carry the scaling; requests longer even than that are excluded;
- ``exclude``: leave them out of the analysis, counted in the trace's dropped rows;
- ``auto`` (default): ``rope`` when the scaled context holds every request, else ``exclude``.

Every decision is stated in the report, the verdict notes and the emitted files' headers.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvadvisor.catalog.models import ModelSpec
from kvadvisor.errors import ConfigError
from kvadvisor.results.report import ContextCheck
from kvadvisor.trace.model import Trace
from kvadvisor.units import Unit, format_value

POLICIES = ("auto", "refuse", "rope", "exclude")
DROPPED_REASON = "over_context"  # the trace's dropped-rows key for excluded requests


def request_tokens(trace: Trace) -> np.ndarray:
    """Prompt plus output tokens of each request: what the engine's maximum length bounds."""
    return trace.column_np("input_tokens").astype(np.int64) + trace.column_np(
        "output_tokens"
    ).astype(np.int64)


def _tokens(n: float) -> str:
    return format_value(n, Unit.TOKENS)


def _count(n: int) -> str:
    return format_value(n, Unit.COUNT)


def _over_text(over: int, total: int, model: str, limit: int, longest: int) -> str:
    share = format_value(over / total, Unit.RATIO) if total else "0%"
    return (
        f"{_count(over)} of {_count(total)} requests ({share}) are longer than {model}'s "
        f"context of {_tokens(limit)} (prompt + output; the longest {_tokens(longest)})"
    )


def decide_context(
    spec: ModelSpec, policy: str, values: np.ndarray, counts: np.ndarray
) -> ContextCheck:
    """The check over a length distribution: distinct prompt + output lengths and their counts.

    Pure; a ConfigError when refused. ``spec.max_context_tokens`` None (a config.json without
    max_position_embeddings) is reported as "unknown". The requests to leave out are those
    longer than ``served_context_tokens`` (:func:`check_context` drops them).
    """
    if policy not in POLICIES:
        raise ConfigError(f"--over-context must be one of {', '.join(POLICIES)}, got {policy!r}")
    total = int(counts.sum())
    longest = int(values.max()) if values.size else 0
    limit = spec.max_context_tokens
    rope = spec.rope_scaling

    def longer(than: int) -> int:
        return int(counts[values > than].sum())

    def result(decision: str, served: int | None, excluded: int, statement: str, over: int):
        return ContextCheck(
            model=spec.name,
            max_context_tokens=limit,
            requests=total,
            over_context=over,
            longest_tokens=longest,
            policy=policy,
            decision=decision,
            served_context_tokens=served,
            excluded=excluded,
            statement=statement,
            rope_scaling=rope.hf_rope_scaling() if decision == "rope" and rope else None,
            source="; ".join(spec.context_source),
        )

    if limit is None:
        return result(
            "unknown",
            None,
            0,
            f"{spec.name}'s maximum context is not known (no max_position_embeddings): "
            "request lengths were not checked against it",
            0,
        )
    over = longer(limit)
    if over == 0:
        return result(
            "fits",
            limit,
            0,
            f"every request fits {spec.name}'s context of {_tokens(limit)} (the longest "
            f"{_tokens(longest)})",
            0,
        )
    told = _over_text(over, total, spec.name, limit, longest)
    scaled = rope.context_tokens if rope else None
    covers = scaled is not None and longest <= scaled
    if policy == "refuse":
        offer = f"--over-context rope ({rope.kind} to {_tokens(scaled)})" if rope else ""
        raise ConfigError(
            f"{told}; the engines refuse them. Give "
            + (f"{offer} or " if offer else "")
            + "--over-context exclude to analyse the rest"
        )
    if policy == "rope" and rope is None:
        raise ConfigError(
            f"{told}, and the model catalog gives {spec.name} no RoPE scaling; give "
            "--over-context exclude or refuse"
        )
    if policy == "rope" or (policy == "auto" and covers):
        assert rope is not None and scaled is not None
        excluded = longer(scaled)
        statement = (
            f"{told}: served with {rope.kind} RoPE scaling (factor "
            f"{format_value(rope.factor, Unit.MULTIPLE)} over {_tokens(rope.original_tokens)}) "
            f"at {_tokens(scaled)}, as the model card gives it"
        )
        if excluded:
            statement += (
                f"; {_count(excluded)} longer still than {_tokens(scaled)} are excluded from "
                "the analysis"
            )
        return result("rope", scaled, excluded, statement, over)
    why = (
        f" ({spec.name}'s {rope.kind} scaling reaches only {_tokens(scaled)})"
        if rope and not covers
        else f" ({spec.name} has no RoPE scaling in the model catalog)"
        if policy == "auto"
        else ""
    )
    statement = (
        f"{told}: {_count(over)} excluded from the analysis{why}; the verdict holds for the rest"
    )
    return result("exclude", limit, over, statement, over)


def check_context(
    trace: Trace, spec: ModelSpec, policy: str = "auto", lengths: np.ndarray | None = None
) -> tuple[Trace, ContextCheck]:
    """The trace as it is analysed (longer requests left out, counted), and the check.

    ``lengths``: each request's prompt + output tokens when the caller has read them already
    (the table's columns are then not read again).
    """
    if lengths is None:
        lengths = request_tokens(trace)
    values, counts = np.unique(lengths, return_counts=True)
    check = decide_context(spec, policy, values, counts)
    if check.decision not in ("rope", "exclude"):
        return trace, check
    assert check.served_context_tokens is not None
    return _without(trace, lengths <= check.served_context_tokens, check.statement), check


def _without(trace: Trace, keep: np.ndarray, statement: str) -> Trace:
    """The trace without the requests ``keep`` is False for, counted and noted, arrivals from 0."""
    dropped = int((~keep).sum())
    if dropped == 0:
        return replace(trace, notes=(*trace.notes, statement))
    if not keep.any():
        raise ConfigError(f"{statement}: no request is left to analyse")
    table = trace.table.filter(pa.array(keep))
    first = pc.min(table["arrival_s"]).as_py()
    if first:
        idx = table.schema.get_field_index("arrival_s")
        table = table.set_column(idx, "arrival_s", pc.subtract(table["arrival_s"], first))
    counts = dict(trace.dropped)
    counts[DROPPED_REASON] = counts.get(DROPPED_REASON, 0) + dropped
    return Trace(
        table=table,
        block_tokens=trace.block_tokens,
        source_format=trace.source_format,
        source_path=trace.source_path,
        dropped=counts,
        notes=(*trace.notes, statement),
        arrivals_measured=trace.arrivals_measured,
    )
