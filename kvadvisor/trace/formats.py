"""Source formats onto the canonical columns: pure, vectorised functions from a raw arrow table.

Each ``from_<format>`` takes the table as the source's own reader parsed it and returns a
:class:`Converted` (canonical column names and units, block_tokens, notes). Validation of the
values (types, signs, duplicates) is left to :func:`kvadvisor.trace.schema.build_trace`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvadvisor.checker import did_you_mean, with_hint
from kvadvisor.errors import (
    ConfigError,
    Problem,
    TraceFormatError,
    TraceProblem,
    TraceSchemaError,
)
from kvadvisor.trace.model import CANONICAL_COLUMNS, REQUIRED_COLUMNS, has_values
from kvadvisor.trace.schema import missing_columns, missing_required
from kvadvisor.units import MS_PER_S, US_PER_S

# Tokens per hash block, as each source documents it.
MOONCAKE_BLOCK_TOKENS = 512  # Mooncake FAST25-release/README.md: "The block size is 512 tokens"
BAILIAN_BLOCK_TOKENS = 16  # qwen-bailian-usagetraces-anon README: hash_ids of 16-token blocks

NS_PER_S = 1_000_000_000.0
# Time units accepted in `--map column=source:unit` for the seconds columns.
TIME_UNITS_PER_S = {"s": 1.0, "ms": MS_PER_S, "us": US_PER_S, "ns": NS_PER_S}
TIME_COLUMNS = ("arrival_s", "ttft_s", "e2e_s", "queue_s", "tpot_s")


@dataclass(frozen=True)
class Converted:
    """A source table mapped onto canonical columns, plus what the mapping knows and did."""

    table: pa.Table
    block_tokens: int | None = None
    notes: tuple[str, ...] = ()
    arrivals_measured: bool = True


@dataclass(frozen=True)
class ColumnSource:
    """Where a canonical column comes from in a CSV/parquet: a source column and its time unit."""

    column: str
    unit: str = "s"


# A column map as the readers take it: canonical name -> source, or `--map` strings.
ColumnMap = Mapping[str, ColumnSource] | Sequence[str] | None


def parse_column_map(items: Sequence[str] | None) -> dict[str, ColumnSource]:
    """Parse ``--map canonical=source[:unit]`` items (unit: s, ms, us, ns for time columns)."""
    mapping: dict[str, ColumnSource] = {}
    for item in items or ():
        canonical, sep, source = item.partition("=")
        canonical, source = canonical.strip(), source.strip()
        if not sep or not canonical or not source:
            raise ConfigError(
                f"--map {item!r}: expected CANONICAL=SOURCE, e.g. --map input_tokens=prompt_len"
            )
        if canonical not in CANONICAL_COLUMNS:
            hint = did_you_mean(canonical, CANONICAL_COLUMNS)
            raise ConfigError(
                with_hint(f"--map {item!r}: '{canonical}' is not a canonical column", hint)
            )
        unit = "s"
        column = source
        if canonical in TIME_COLUMNS and ":" in source:
            column, _, unit = source.rpartition(":")
            if unit not in TIME_UNITS_PER_S:
                raise ConfigError(
                    f"--map {item!r}: unknown time unit '{unit}'; use one of "
                    + ", ".join(TIME_UNITS_PER_S)
                )
        elif source.rpartition(":")[2] in TIME_UNITS_PER_S and ":" in source:
            # A column name may hold a colon, but one ending in a time unit on a column that
            # is not a time is far likelier a misplaced unit than a real name.
            raise ConfigError(
                f"--map {item!r}: '{canonical}' is not a time, so it takes no unit; a unit "
                f"applies to {', '.join(TIME_COLUMNS)} (e.g. --map arrival_s=ts:ms)"
            )
        if canonical in mapping:
            raise ConfigError(
                f"--map {item!r}: '{canonical}' is mapped twice (also from "
                f"'{mapping[canonical].column}'); give one --map per canonical column"
            )
        taken = next((c for c, src in mapping.items() if src.column == column), None)
        if taken is not None:
            raise ConfigError(
                f"--map {item!r}: source column '{column}' is already mapped to '{taken}'; "
                "each source column feeds one canonical column"
            )
        mapping[canonical] = ColumnSource(column, unit)
    return mapping


def _missing(path: str, raw: pa.Table, needed: Sequence[str], what: str) -> None:
    """Raise MISSING_COLUMN when a source column is absent (or null in every row)."""
    present = [
        name
        for name, column in zip(raw.column_names, raw.columns, strict=True)
        if column.null_count < raw.num_rows
    ]
    have = set(present)
    absent = [c for c in needed if c not in have]
    if absent:
        found = ", ".join(present) or "none"
        raise missing_columns(
            path,
            absent,
            f"required {what} field missing (fields found: {found}); "
            "if this is another format, give --trace-format",
        )


def _seconds(col: pa.ChunkedArray | pa.Array, per_s: float) -> pa.Array:
    return pc.divide(pc.cast(col, pa.float64()), per_s)


def _unused(raw: pa.Table, used: set[str]) -> tuple[str, ...]:
    unused = [c for c in raw.column_names if c not in used]
    return (f"source columns not used: {', '.join(unused)}",) if unused else ()


def from_mooncake(raw: pa.Table, path: str) -> Converted:
    """Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids (512-token blocks)."""
    _missing(path, raw, ("timestamp", "input_length", "output_length"), "Mooncake")
    cols: dict[str, pa.ChunkedArray | pa.Array] = {
        "arrival_s": _seconds(raw["timestamp"], MS_PER_S),
        "input_tokens": raw["input_length"],
        "output_tokens": raw["output_length"],
    }
    used = {"timestamp", "input_length", "output_length", "hash_ids"}
    if has_values(raw, "hash_ids"):
        cols["block_hashes"] = raw["hash_ids"]
    return Converted(pa.table(cols), MOONCAKE_BLOCK_TOKENS, _unused(raw, used))


def session_roots(ids: np.ndarray, parents: np.ndarray) -> np.ndarray:
    """Index of each row's chain root (follow parent links while the parent is in the trace).

    Pointer doubling: after k passes every row points 2**k steps up, so a chain of depth d
    takes about log2(d) vectorised passes instead of d.
    """
    n = len(ids)
    order = np.argsort(ids, kind="stable")
    pos = np.searchsorted(ids, parents, sorter=order)
    pos = np.clip(pos, 0, max(n - 1, 0))
    up = order[pos] if n else np.zeros(0, dtype=np.int64)
    found = (ids[up] == parents) if n else np.zeros(0, dtype=bool)
    anc = np.where(found, up, np.arange(n))
    for _ in range(64):
        nxt = anc[anc]
        if np.array_equal(nxt, anc):
            break
        anc = nxt
    return anc


def from_bailian(raw: pa.Table, path: str) -> Converted:
    """Qwen-Bailian JSONL: chat_id, parent_chat_id (-1 for a first turn), timestamp (s), ...

    ``session_id`` is the chat_id at the root of each request's parent chain (the first
    ancestor whose parent is -1 or absent from the trace).
    """
    _missing(path, raw, ("chat_id", "timestamp", "input_length", "output_length"), "Bailian")
    chat = raw["chat_id"]
    cols: dict[str, pa.ChunkedArray | pa.Array] = {
        "arrival_s": pc.cast(raw["timestamp"], pa.float64()),
        "input_tokens": raw["input_length"],
        "output_tokens": raw["output_length"],
        "request_id": pc.cast(chat, pa.string()),
    }
    used = {"chat_id", "parent_chat_id", "timestamp", "input_length", "output_length", "hash_ids"}
    notes: list[str] = []
    if "parent_chat_id" in raw.column_names and pa.types.is_integer(chat.type):
        parent = raw["parent_chat_id"].fill_null(-1)
        if pa.types.is_integer(parent.type):
            has_parent = pc.greater_equal(parent, 0)
            cols["parent_id"] = pc.if_else(
                has_parent, pc.cast(parent, pa.string()), pa.scalar(None, pa.string())
            )
            ids = chat.to_numpy()
            roots = session_roots(ids, parent.to_numpy())
            cols["session_id"] = pc.cast(pa.array(ids[roots]), pa.string())
            notes.append(
                "session_id = chat_id at the root of each parent_chat_id chain "
                "(the first ancestor whose parent is -1 or not in the trace)"
            )
    if has_values(raw, "hash_ids"):
        cols["block_hashes"] = raw["hash_ids"]
    return Converted(pa.table(cols), BAILIAN_BLOCK_TOKENS, tuple(notes) + _unused(raw, used))


def timestamps_to_seconds(col: pa.ChunkedArray) -> tuple[pa.Array, object]:
    """Wall-clock timestamps to float seconds since the earliest one; returns (seconds, start)."""
    ns = pc.cast(pc.cast(col, pa.timestamp("ns")), pa.int64())
    start = pc.min(ns).as_py()
    if start is None:  # no rows, or every timestamp empty: build_trace names the empty cells
        return pc.cast(ns, pa.float64()), None
    start_ts = pc.cast(pa.scalar(start, pa.int64()), pa.timestamp("ns")).as_py()
    # Empty cells stay null (build_trace reports them by row); whole nanoseconds are
    # subtracted exactly, in floats only where the difference would overflow int64.
    # The casts to float are unchecked: a difference over 2^53 ns (104 days, a 1970 stamp
    # beside 2023) is not exact in a float and pyarrow's checked cast refuses it; build_trace
    # judges the span.
    try:
        since = pc.cast(pc.subtract_checked(ns, start), pa.float64(), safe=False)
    except pa.ArrowInvalid:
        since = pc.subtract(pc.cast(ns, pa.float64(), safe=False), float(start))
    return pc.divide(since, NS_PER_S), start_ts


def from_azure(raw: pa.Table, path: str) -> Converted:
    """Azure LLM inference CSV: TIMESTAMP (wall clock, 7 fractional digits), token counts."""
    _missing(path, raw, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), "Azure")
    arrival, start = timestamps_to_seconds(raw["TIMESTAMP"])
    cols = {
        "arrival_s": arrival,
        "input_tokens": raw["ContextTokens"],
        "output_tokens": raw["GeneratedTokens"],
    }
    notes = (f"TIMESTAMP (wall clock) converted to seconds since the first request ({start})",)
    return Converted(
        pa.table(cols),
        None,
        notes + _unused(raw, {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}),
    )


def from_burstgpt(raw: pa.Table, path: str) -> Converted:
    """BurstGPT CSV: Timestamp (s), Model, Request tokens, Response tokens, Log Type.

    A failed request is one with ``Response tokens`` = 0 (BurstGPT README: the files "with
    some failure that Response tokens are 0s") or a ``Log Type`` that names a failure; failed
    requests are kept with ok = false.
    """
    _missing(path, raw, ("Timestamp", "Request tokens", "Response tokens"), "BurstGPT")
    response = raw["Response tokens"]
    failed = pc.fill_null(pc.equal(response, 0), False)
    if "Log Type" in raw.column_names:
        log_failed = pc.match_substring(pc.utf8_lower(raw["Log Type"]), "fail")
        failed = pc.or_(failed, pc.fill_null(log_failed, False))
    cols: dict[str, pa.ChunkedArray | pa.Array] = {
        "arrival_s": pc.cast(raw["Timestamp"], pa.float64()),
        "input_tokens": raw["Request tokens"],
        "output_tokens": response,
        "ok": pc.invert(failed),
    }
    if "Model" in raw.column_names:
        cols["model"] = pc.cast(raw["Model"], pa.string())
    used = {"Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"}
    return Converted(pa.table(cols), None, _unused(raw, used))


# Per-request arrays of the benchmark results, by canonical meaning; the first key present wins.
BENCH_ARRAYS: dict[str, tuple[str, ...]] = {
    "input": ("input_lens",),
    "output": ("output_lens",),
    "ttft": ("ttfts",),
    "itl": ("itls",),
    "start": ("start_times",),
    "e2e": ("latencies", "e2els", "e2e_latencies"),
    "queue": ("queue_times",),
    "error": ("errors",),
}


def _lift_details(raw: pa.Table) -> pa.Table:
    """SGLang's newer layout keeps the arrays under ``details``: lift them to the top level."""
    if "details" not in raw.column_names or not pa.types.is_struct(raw["details"].type):
        return raw
    details = raw["details"].combine_chunks()
    table = raw.drop_columns(["details"])
    for i in range(details.type.num_fields):
        name = details.type.field(i).name
        if name not in table.column_names:
            table = table.append_column(name, details.field(i))
    return table


def _first_key(raw: pa.Table, meaning: str) -> str | None:
    for key in BENCH_ARRAYS[meaning]:
        if has_values(raw, key):
            return key
    return None


def from_bench(raw: pa.Table, path: str, tool: str) -> Converted:
    """Benchmark results (vLLM bench serve, SGLang bench_serving): arrays per request, per run.

    ttfts, itls, start_times and latencies are seconds. Per request: e2e = latencies when the
    file has them, else ttft + Σ itls (vLLM's own definition: latency = last token time −
    start); tpot = (e2e − ttft) / (output − 1) (vLLM's TPOT, excluding the first token). A
    non-empty ``errors`` entry makes ok = false, and its times null. Several runs (one object
    per line, as ``--append-result`` writes) follow one another on the time axis.
    """
    raw = _lift_details(raw)
    _missing(path, raw, ("input_lens", "output_lens"), tool)
    keys = {m: _first_key(raw, m) for m in BENCH_ARRAYS}
    lengths = pc.list_value_length(raw[keys["input"]]).to_numpy(zero_copy_only=False)
    problems = []
    for meaning, key in keys.items():
        if key is None or meaning == "input":
            continue
        other = pc.list_value_length(raw[key]).to_numpy(zero_copy_only=False)
        for run in np.flatnonzero(other != lengths)[:10]:
            problems.append(
                Problem(
                    int(run) + 1,
                    key,
                    TraceProblem.LENGTH_MISMATCH,
                    f"{int(other[run])} entries for {int(lengths[run])} input_lens "
                    "(row = run object)",
                )
            )
    if problems:
        raise TraceSchemaError(path, problems)
    n = int(lengths.sum())
    if n == 0:
        # Empty per-request lists have no element type (pyarrow's null), which no kernel takes.
        raise TraceFormatError(
            f"{path}: no requests in the file (every run's input_lens is empty); give the "
            "results of a run that completed requests"
        )
    run_of = np.repeat(np.arange(raw.num_rows), lengths)
    run_start = np.concatenate([[0], np.cumsum(lengths)])[:-1]

    def flat(meaning: str) -> pa.Array | None:
        key = keys[meaning]
        return None if key is None else pc.list_flatten(raw[key].combine_chunks())

    out_tokens = flat("output")
    cols: dict[str, pa.Array] = {"input_tokens": flat("input"), "output_tokens": out_tokens}
    notes: list[str] = []
    ok = np.ones(n, dtype=bool)
    if keys["error"] is not None:
        err = flat("error")
        ok = pc.fill_null(pc.equal(pc.cast(err, pa.string()), ""), True).to_numpy(
            zero_copy_only=False
        )
        cols["ok"] = pa.array(ok)
    ttft = None if keys["ttft"] is None else _np_float(flat("ttft"))
    e2e = None if keys["e2e"] is None else _np_float(flat("e2e"))
    if e2e is None and ttft is not None and keys["itl"] is not None:
        itl_lists = flat("itl")
        values = _np_float(pc.list_flatten(itl_lists))
        parents = pc.list_parent_indices(itl_lists).to_numpy(zero_copy_only=False)
        itl_sum = np.bincount(parents, weights=np.nan_to_num(values), minlength=n)
        e2e = ttft + itl_sum
        notes.append("e2e_s = ttft + sum of inter-token latencies (the file has no latencies)")
    latency, latency_notes = _latency_columns(ttft, e2e, out_tokens, ~ok)
    cols.update(latency)
    notes += latency_notes
    if keys["queue"] is not None:
        cols["queue_s"] = pa.array(_np_float(flat("queue")), pa.float64())
    arrival, measured = _bench_arrivals(raw, keys, lengths, run_of, run_start, e2e)
    cols = {"arrival_s": pa.array(arrival, pa.float64()), **cols}
    if "model_id" in raw.column_names:
        model = pc.cast(raw["model_id"].combine_chunks(), pa.string())
        cols["model"] = model.take(pa.array(run_of, pa.int64()))
    if not measured:
        notes.append(
            "no start_times: arrival times unknown, every request of a run set to the run's "
            "start; arrival rate and burstiness cannot be measured"
        )
    if raw.num_rows > 1:
        notes.append(
            f"{raw.num_rows} benchmark runs (one object per line, as --append-result writes) "
            "placed one after another on the time axis"
        )
    return Converted(pa.table(cols), None, tuple(notes), measured)


def _bench_arrivals(
    raw: pa.Table,
    keys: Mapping[str, str | None],
    lengths: np.ndarray,
    run_of: np.ndarray,
    run_start: np.ndarray,
    e2e: np.ndarray | None,
) -> tuple[np.ndarray, bool]:
    """Arrival seconds of every request; runs placed back to back (each after the last ends)."""
    with np.errstate(invalid="ignore", over="ignore"):
        # inf - inf in a broken result file: the NaN it gives is build_trace's to report.
        return _bench_arrivals_of(raw, keys, lengths, run_of, run_start, e2e)


def _bench_arrivals_of(
    raw: pa.Table,
    keys: Mapping[str, str | None],
    lengths: np.ndarray,
    run_of: np.ndarray,
    run_start: np.ndarray,
    e2e: np.ndarray | None,
) -> tuple[np.ndarray, bool]:
    n = len(run_of)
    runs = raw.num_rows
    measured = keys["start"] is not None
    rel = np.zeros(n)
    if measured:
        start = _np_float(pc.list_flatten(raw[keys["start"]].combine_chunks()))
        nonempty = lengths > 0
        first = np.zeros(runs)
        first[nonempty] = np.minimum.reduceat(start, run_start[nonempty])
        rel = start - first[run_of]
    finish = rel + (np.nan_to_num(e2e) if e2e is not None else 0.0)
    span = np.zeros(runs)
    if n:
        np.maximum.at(span, run_of, finish)
    if "duration" in raw.column_names:
        duration = _np_float(pc.cast(raw["duration"], pa.float64()))
        span = np.fmax(span, np.nan_to_num(duration))
    offset = np.concatenate([[0.0], np.cumsum(span)])[:-1]
    return rel + offset[run_of], measured


def _np_float(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)


def _masked(values: np.ndarray, mask: np.ndarray) -> pa.Array:
    return pa.array(values, pa.float64(), mask=mask | np.isnan(values))


def _latency_columns(
    ttft: np.ndarray | None,
    e2e: np.ndarray | None,
    output_tokens: pa.Array | pa.ChunkedArray,
    failed: np.ndarray,
) -> tuple[dict[str, pa.Array], list[str]]:
    """ttft_s, e2e_s and tpot_s (those the source gives), null for failed requests; notes.

    tpot = (e2e − ttft) / (output − 1): vLLM's TPOT, excluding the first token; null where a
    request has one output token or fewer. A NaN the tool wrote for a successful request
    (json.dumps writes NaN) is read as missing and counted in a note, never silently.
    """
    cols: dict[str, pa.Array] = {}
    notes: list[str] = []
    for name, values in (("ttft_s", ttft), ("e2e_s", e2e)):
        if values is None:
            continue
        cols[name] = _masked(values, failed)
        nan = np.flatnonzero(np.isnan(values) & ~failed)
        if nan.size:
            notes.append(
                f"{name}: {nan.size} NaN value(s) for successful requests (first: request "
                f"{int(nan[0]) + 1}) read as missing; measured stage times leave them out"
            )
    if ttft is not None and e2e is not None:
        out = _np_float(output_tokens)
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot = (e2e - ttft) / (out - 1)
        cols["tpot_s"] = _masked(tpot, failed | ~(out > 1))
    return cols, notes


def from_llmperf(raw: pa.Table, path: str) -> Converted:
    """LLMPerf per-request JSON array: number_input_tokens, ttft_s, end_to_end_latency_s, ...

    A request with an ``error_code`` (or a non-empty ``error_msg``) has ok = false. The file
    holds no request start times, so arrivals are unknown (all 0). tpot = (e2e − ttft) /
    (output − 1), as for vLLM; LLMPerf's own ``inter_token_latency_s`` divides by all output
    tokens instead, so it is not used.
    """
    _missing(path, raw, ("number_input_tokens", "number_output_tokens"), "LLMPerf")
    n = raw.num_rows
    ok = np.ones(n, dtype=bool)
    if "error_code" in raw.column_names:
        ok &= raw["error_code"].is_null().to_numpy(zero_copy_only=False)
    if "error_msg" in raw.column_names:
        msg = pc.cast(raw["error_msg"], pa.string())
        ok &= pc.fill_null(pc.equal(msg, ""), True).to_numpy(zero_copy_only=False)
    cols: dict[str, pa.Array | pa.ChunkedArray] = {
        "arrival_s": pa.array(np.zeros(n), pa.float64()),
        "input_tokens": raw["number_input_tokens"],
        "output_tokens": raw["number_output_tokens"],
        "ok": pa.array(ok),
    }
    ttft = _np_float(raw["ttft_s"]) if "ttft_s" in raw.column_names else None
    e2e = (
        _np_float(raw["end_to_end_latency_s"])
        if "end_to_end_latency_s" in raw.column_names
        else None
    )
    latency, latency_notes = _latency_columns(ttft, e2e, raw["number_output_tokens"], ~ok)
    cols.update(latency)
    notes = [
        "no request start times in LLMPerf results: arrival times unknown (all set to 0); "
        "arrival rate and burstiness cannot be measured",
        *latency_notes,
    ]
    used = {
        "number_input_tokens",
        "number_output_tokens",
        "ttft_s",
        "end_to_end_latency_s",
        "error_code",
        "error_msg",
    }
    return Converted(pa.table(cols), None, tuple(notes) + _unused(raw, used), False)


def from_canonical(
    raw: pa.Table, path: str, column_map: Mapping[str, ColumnSource] | None = None
) -> Converted:
    """Canonical CSV/parquet, optionally renamed with ``--map canonical=source[:unit]``.

    A wall-clock ``arrival_s`` (timestamp type) becomes seconds since the first request;
    ``block_hashes`` given as text ("[1, 2, 3]" or "1 2 3") becomes a list of int64.
    """
    column_map = dict(column_map or {})
    for canonical, source in column_map.items():
        if source.column not in raw.column_names:
            found = ", ".join(raw.column_names) or "none"
            raise ConfigError(
                f"{path}: --map {canonical}={source.column}: no column '{source.column}' "
                f"(columns found: {found})"
            )
    mapped_sources = {s.column for s in column_map.values()}
    absent = [
        c
        for c in REQUIRED_COLUMNS
        if c not in column_map and (c not in raw.column_names or c in mapped_sources)
    ]
    if absent:
        raise missing_required(path, absent, raw.column_names)
    cols: dict[str, pa.ChunkedArray | pa.Array] = {}
    notes: list[str] = []
    for name in CANONICAL_COLUMNS:
        source = column_map.get(name)
        if source is None:
            if name not in raw.column_names or name in mapped_sources:
                continue
            source = ColumnSource(name)
        col = raw[source.column]
        if name == "arrival_s" and pa.types.is_timestamp(col.type):
            col, start = timestamps_to_seconds(col)
            notes.append(f"arrival_s (wall clock) converted to seconds since {start}")
        elif name == "arrival_s" and (pa.types.is_string(col.type) or pa.types.is_date(col.type)):
            try:
                col, start = timestamps_to_seconds(col)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass  # not timestamps either: build_trace reports the cell that fails
            else:
                notes.append(f"arrival_s (wall clock) converted to seconds since {start}")
        elif name in TIME_COLUMNS and source.unit != "s":
            col = _seconds(col, TIME_UNITS_PER_S[source.unit])
            notes.append(f"{name} converted from {source.unit} ({source.column}) to seconds")
        elif name == "block_hashes" and (
            pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
        ):
            col = _parse_hash_text(col)
        cols[name] = col
    used = {s.column for s in column_map.values()} | set(cols)
    return Converted(
        pa.table(cols) if cols else pa.table({}), None, tuple(notes) + _unused(raw, used)
    )


def _parse_hash_text(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """'[1, 2, 3]' / '1 2 3' / '' -> list<string>; build_trace casts it (and reports bad cells)."""
    text = pc.utf8_trim(pc.replace_substring_regex(col, r"[\[\]]", ""), " ")
    parts = pc.split_pattern_regex(text, r"[,;\s]+")
    # An empty string splits into [""]: make it an empty list.
    parts = pc.if_else(pc.equal(text, ""), pa.scalar([], pa.list_(pa.string())), parts)
    return parts
