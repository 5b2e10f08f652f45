"""Every user-facing error path: the message names what, where and how to fix it.

Each case goes through the public function the product calls (read_trace, open_trace_stream,
parse_column_map, the catalog loaders, load_plan, parse_memory_limit, ...) and, where a command
reaches it, through the CLI: exit 2, one ``error:`` line on stderr, no traceback.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from cli_checks import one_error_line
from typer.testing import CliRunner

from kvadvisor.cache.coarsen import coarsen_trace
from kvadvisor.catalog.gpus import load_gpus
from kvadvisor.catalog.instances import load_instances
from kvadvisor.catalog.loader import Field, check_entries
from kvadvisor.catalog.models import load_models, model_from_hf_config, read_hf_config
from kvadvisor.catalog.storage import load_storage
from kvadvisor.cli import app
from kvadvisor.errors import (
    CatalogError,
    ConfigError,
    KvAdvisorError,
    TraceFormatError,
    TraceSchemaError,
)
from kvadvisor.metrics.io import io_demand
from kvadvisor.pipeline.streaming import parse_memory_limit, physical_memory_bytes
from kvadvisor.plan import PlanCatalogs, PlanError, load_plan
from kvadvisor.trace import parse_column_map, read_trace
from kvadvisor.trace.model import META_BLOCK_TOKENS, META_NOTES
from kvadvisor.trace.stream import open_trace_stream

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "traces"
runner = CliRunner()


def _raises(error: type[KvAdvisorError], call, *needles: str) -> str:
    """``call()`` raises ``error`` whose one-line message holds every needle."""
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


# --- trace readers: compressed input ---------------------------------------------------------

# Mooncake lines whose text (~280 KB) is well past the 64 KiB head decompressed for detection,
# so damage near the end shows only while the whole file is parsed.
BIG_JSONL = b"".join(
    b'{"timestamp": %d, "input_length": 1024, "output_length": 8, "hash_ids": [%d, %d]}\n'
    % (i, 2 * i, 2 * i + 1)
    for i in range(3000)
)
BIG_CSV = b"arrival_s,input_tokens,output_tokens\n" + b"".join(
    b"%d.5,%d,%d\n" % (i, 100 + i, 7) for i in range(20000)
)


def _zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


COMPRESS = {"gzip": (gzip.compress, ".gz"), "zstd": (_zstd, ".zst")}


def _damaged(kind: str, data: bytes, how: str) -> bytes:
    """``data`` compressed, then cut short or with its body overwritten (magic kept)."""
    packed = COMPRESS[kind][0](data)
    if how == "truncated":
        return packed[: len(packed) * 4 // 5]
    # The header (magic, flags) survives; the first compressed block is garbage.
    return packed[:10] + b"\xff" * 64 + packed[74:]


@pytest.mark.parametrize("kind", sorted(COMPRESS))
@pytest.mark.parametrize("how", ["truncated", "corrupt-body"])
@pytest.mark.parametrize("name, data", [("t.jsonl", BIG_JSONL), ("t.csv", BIG_CSV)])
def test_damaged_compressed_trace(tmp_path, kind, how, name, data) -> None:
    """A cut-short or corrupt .gz/.zst is one TraceFormatError naming file and fix."""
    path = tmp_path / (name + COMPRESS[kind][1])
    path.write_bytes(_damaged(kind, data, how))
    _raises(
        TraceFormatError,
        lambda: read_trace(path),
        str(path),
        f"corrupt {kind} data",
        "damaged or incomplete",
        "fetch or compress it again",
    )


def test_damaged_compressed_trace_through_the_cli(tmp_path) -> None:
    """Damage past the detected head (the case that leaked an OSError) is exit 2, one line."""
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(_damaged("gzip", BIG_JSONL, "truncated"))
    one_error_line(runner.invoke(app, ["info", str(path)]), "t.jsonl.gz", "corrupt gzip data")
    tiny = tmp_path / "tiny.jsonl.zst"
    tiny.write_bytes(_zstd(BIG_JSONL)[:30])  # magic and frame header only
    one_error_line(runner.invoke(app, ["info", str(tiny)]), "tiny.jsonl.zst", "corrupt zstd")


# --- trace readers: JSON shapes --------------------------------------------------------------

GOOD_LINE = '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}'


@pytest.mark.parametrize(
    "bad, json_type", [("[1, 2]", "array"), ("42", "number"), ('"text"', "string")]
)
def test_jsonl_line_that_is_not_an_object(tmp_path, bad, json_type) -> None:
    """A JSONL line holding another JSON value names its row, line and type."""
    path = tmp_path / "t.jsonl"
    # A blank line is not a row: the value is on row 2, line 3.
    path.write_text(f"{GOOD_LINE}\n\n{bad}\n{GOOD_LINE}\n")
    _raises(
        TraceSchemaError,
        lambda: read_trace(path),
        str(path),
        "row 2, column '(record)': unparseable",
        f"is a JSON {json_type}, not an object",
        "line 3",
        "delete or fix it",
    )


def test_jsonl_first_line_not_an_object(tmp_path) -> None:
    """Detection cannot read a file starting with a bare value; a forced format names row 1."""
    path = tmp_path / "t.jsonl"
    path.write_text(f"42\n{GOOD_LINE}\n")
    _raises(TraceFormatError, lambda: read_trace(path), "not JSON objects", "--trace-format")
    _raises(
        TraceSchemaError,
        lambda: read_trace(path, "mooncake"),
        "row 1, column '(record)'",
        "is a JSON number",
    )
    one_error_line(
        runner.invoke(app, ["info", str(path), "--trace-format", "mooncake"]),
        "t.jsonl",
        "row 1",
        "is a JSON number",
    )


LLMPERF_ROW = {
    "number_input_tokens": 10,
    "number_output_tokens": 2,
    "ttft_s": 0.1,
    "end_to_end_latency_s": 0.5,
}


def test_llmperf_not_an_array(tmp_path) -> None:
    """LLMPerf results that are one object: say what the file must be and which file to give."""
    path = tmp_path / "r.json"
    path.write_text(json.dumps(LLMPERF_ROW))
    _raises(
        TraceFormatError,
        lambda: read_trace(path, "llmperf"),
        str(path),
        "must be a JSON array of per-request objects, got a JSON object",
        "*_individual_responses.json",
    )
    one_error_line(
        runner.invoke(app, ["info", str(path), "--trace-format", "llmperf"]),
        "r.json",
        "got a JSON object",
    )


def test_llmperf_array_of_non_objects(tmp_path) -> None:
    """An element that is not an object is named by its position (row)."""
    path = tmp_path / "r.json"
    path.write_text(json.dumps([LLMPERF_ROW, LLMPERF_ROW, 5]))
    _raises(
        TraceSchemaError,
        lambda: read_trace(path),
        str(path),
        "row 3, column '(record)': unparseable: 5 is a JSON number, not a per-request object",
    )
    flat = tmp_path / "flat.json"
    flat.write_text("[1, 2]")
    _raises(TraceSchemaError, lambda: read_trace(flat, "llmperf"), "row 1", "is a JSON number")
    one_error_line(runner.invoke(app, ["info", str(path)]), "r.json", "row 3")


def test_llmperf_syntax_error_line_counts_the_same_with_a_byte_order_mark(tmp_path) -> None:
    """The line of a JSON syntax error is counted in the text json parsed (BOM removed).

    Expected by hand: the stray ']' after a trailing comma is the first character of line 3.
    """
    body = b'[\n{"number_input_tokens": 5, "number_output_tokens": 3},\n]\n'
    for name, data in (("plain.json", body), ("bom.json", b"\xef\xbb\xbf" + body)):
        path = tmp_path / name
        path.write_bytes(data)
        _raises(
            TraceSchemaError,
            lambda p=path: read_trace(p, "llmperf"),
            name,
            "row 1, column 'number_output_tokens': unparseable",
            "not valid JSON at line 3, character 1 (Expecting value)",
        )


# --- trace readers: parquet ------------------------------------------------------------------

CANONICAL = pa.table(
    {
        "arrival_s": np.arange(2000, dtype=np.float64),
        "input_tokens": np.full(2000, 64),
        "output_tokens": np.full(2000, 4),
    }
)


def _parquet_bytes(table: pa.Table = CANONICAL) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy")
    return sink.getvalue().to_pybytes()


def test_garbage_named_parquet(tmp_path) -> None:
    """Bytes that are not parquet under a .parquet name: say so and offer --trace-format."""
    path = tmp_path / "g.parquet"
    path.write_bytes(bytes(range(256)) * 4)
    _raises(
        TraceFormatError,
        lambda: read_trace(path),
        str(path),
        "no PAR1 magic number",
        "--trace-format",
    )
    one_error_line(runner.invoke(app, ["info", str(path)]), "g.parquet", "no PAR1")


@pytest.mark.parametrize("damage", ["truncated", "corrupt-page"])
def test_unreadable_parquet(tmp_path, damage) -> None:
    """A cut-short file (footer gone) or a corrupt data page (footer fine): one clear error."""
    data = _parquet_bytes()
    path = tmp_path / "t.parquet"
    path.write_bytes(
        data[: len(data) // 2] if damage == "truncated" else data[:8] + b"\xff" * 2000 + data[2008:]
    )
    needles = (
        str(path),
        "not a readable parquet file",
        "damaged or incomplete",
        "kvadvisor convert",
    )
    _raises(TraceFormatError, lambda: read_trace(path), *needles)
    # The streaming reader (what `analyze` uses for parquet) fails the same way, whether the
    # footer or a data page is damaged.
    _raises(TraceFormatError, lambda: list(open_trace_stream(path)), *needles)
    one_error_line(
        runner.invoke(app, ["analyze", str(path)]), "t.parquet", "not a readable parquet file"
    )


@pytest.mark.parametrize(
    "key, value, why",
    [
        (META_BLOCK_TOKENS, b"sixteen", "invalid literal"),
        (META_BLOCK_TOKENS, b"0", "positive"),
        (META_NOTES, b"{not json", "Expecting property name"),
        (META_NOTES, b'{"a": 1}', "not a JSON list of text"),
        (b"kvadvisor.dropped", b'{"nan_value": "many"}', "not a JSON object of row counts"),
    ],
)
def test_damaged_kvadvisor_metadata(tmp_path, key, value, why) -> None:
    """kvadvisor.* schema metadata that does not parse: named, with the fix (both readers)."""
    path = tmp_path / "m.parquet"
    pq.write_table(CANONICAL.replace_schema_metadata({key: value}), path)
    needles = (str(path), f"schema metadata '{key.decode()}' is damaged", why, "kvadvisor convert")
    _raises(TraceFormatError, lambda: read_trace(path), *needles)
    _raises(TraceFormatError, lambda: open_trace_stream(path), *needles)


# --- streaming reader ------------------------------------------------------------------------


def _write(path: Path, **columns: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def test_stream_no_such_path_and_no_parquet_files(tmp_path) -> None:
    """A missing path, and a directory with nothing in it: what and how."""
    _raises(
        TraceFormatError,
        lambda: open_trace_stream(tmp_path / "nope"),
        "nope: no such file or directory",
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    _raises(
        TraceFormatError,
        lambda: open_trace_stream(empty),
        str(empty),
        "no parquet files found",
        "kvadvisor convert",
    )
    one_error_line(runner.invoke(app, ["analyze", str(empty)]), "no parquet files found")


def test_stream_directory_with_other_files(tmp_path) -> None:
    """A CSV among the parquet files, or a second file cut short: named, with the fix."""
    mixed = tmp_path / "mixed"
    _write(mixed / "a.parquet", arrival_s=[0.0], input_tokens=[1], output_tokens=[1])
    (mixed / "notes.csv").write_text("a,b\n1,2\n")
    needles = (
        "not a readable parquet file",
        "every file in a trace directory must be canonical parquet: move other files out",
    )
    _raises(TraceFormatError, lambda: open_trace_stream(mixed), "notes.csv", *needles)
    cut = tmp_path / "cut"
    _write(cut / "a.parquet", arrival_s=[0.0], input_tokens=[1], output_tokens=[1])
    data = _parquet_bytes()
    (cut / "b.parquet").write_bytes(data[: len(data) // 2])
    _raises(TraceFormatError, lambda: open_trace_stream(cut), "b.parquet", *needles)
    # The first file (whose schema the dataset reads) unreadable: the directory is named.
    first = tmp_path / "first"
    first.mkdir()
    (first / "a.parquet").write_bytes(data[: len(data) // 2])
    _raises(
        TraceFormatError,
        lambda: open_trace_stream(first),
        str(first),
        "not readable as parquet",
        "every file in a trace directory",
    )
    one_error_line(runner.invoke(app, ["analyze", str(mixed)]), "notes.csv", "move other files")


def test_stream_missing_required_columns(tmp_path) -> None:
    """Every missing required column is counted; the fix is `kvadvisor convert`."""
    path = _write(tmp_path / "m.parquet", arrival_s=[0.0], prompt=[1])
    message = _raises(
        TraceSchemaError,
        lambda: open_trace_stream(path),
        "column 'input_tokens': missing_column",
        "kvadvisor convert",
    )
    assert "(and 1 more problem)" in message  # output_tokens too


def test_stream_bad_cells(tmp_path) -> None:
    """Wrong type, empty and negative cells name file, row and column; values print plainly."""
    typ = _write(
        tmp_path / "t.parquet", arrival_s=[0.0, 1.0], input_tokens=["a", "b"], output_tokens=[1, 1]
    )
    _raises(
        TraceSchemaError,
        lambda: list(open_trace_stream(typ)),
        "t.parquet: column 'input_tokens': wrong_type: string is not int64",
        "kvadvisor convert",
    )
    neg = _write(
        tmp_path / "n.parquet", arrival_s=[0.0, 1.0], input_tokens=[1, -7], output_tokens=[1, None]
    )
    message = _raises(
        TraceSchemaError,
        lambda: list(open_trace_stream(neg)),
        "row 2, column 'input_tokens': negative_value: -7 (and 1 more",
    )
    assert "np." not in message  # numpy's repr (np.int64(-7)) is not for people


def test_stream_arrival_column_not_seconds(tmp_path) -> None:
    """Text arrival times, or none at all, cannot be ranged: one error each, not a traceback."""
    text = _write(
        tmp_path / "s.parquet",
        arrival_s=["2025-01-01 00:00:00"] * 2,
        input_tokens=[1, 1],
        output_tokens=[1, 1],
    )
    _raises(
        TraceSchemaError,
        lambda: open_trace_stream(text),
        "column 'arrival_s': wrong_type: string is not seconds",
        "kvadvisor convert",
    )
    empty = _write(
        tmp_path / "e.parquet",
        arrival_s=pa.array([None, None], pa.float64()),
        input_tokens=[1, 1],
        output_tokens=[1, 1],
    )
    _raises(
        TraceSchemaError, lambda: open_trace_stream(empty), "row 1, column 'arrival_s': null_value"
    )
    one_error_line(runner.invoke(app, ["analyze", str(text)]), "s.parquet", "arrival_s")


# --- --map -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "maps, needles",
    [
        (
            ["input_tokens=a", "input_tokens=b"],
            [
                "--map 'input_tokens=b'",
                "'input_tokens' is mapped twice (also from 'a')",
                "one --map per canonical column",
            ],
        ),
        (
            ["input_tokens=len", "output_tokens=len"],
            [
                "--map 'output_tokens=len'",
                "source column 'len' is already mapped to 'input_tokens'",
            ],
        ),
        (
            ["inptu_tokens=a"],
            ["'inptu_tokens' is not a canonical column", "did you mean 'input_tokens'?"],
        ),
        (["zzz=a"], ["--map 'zzz=a': 'zzz' is not a canonical column"]),
        (["input_tokens"], ["expected CANONICAL=SOURCE", "--map input_tokens=prompt_len"]),
        (["=prompt_len"], ["--map '=prompt_len': expected CANONICAL=SOURCE"]),
        (["input_tokens="], ["--map 'input_tokens=': expected CANONICAL=SOURCE"]),
        (["arrival_s=ts:min"], ["unknown time unit 'min'", "use one of s, ms, us, ns"]),
        (["arrival_s=ts:"], ["unknown time unit ''"]),
        (
            ["input_tokens=len:ms"],
            ["'input_tokens' is not a time, so it takes no unit", "--map arrival_s=ts:ms"],
        ),
    ],
)
def test_bad_column_map(maps, needles) -> None:
    """Each malformed --map names the item, what is wrong and how to write it."""
    _raises(ConfigError, lambda: parse_column_map(maps), *needles)


def test_bad_column_map_through_the_cli() -> None:
    """A map with a column mapped twice, and a map for a source format: exit 2, one line."""
    path = FIX / "tiny_mapped.csv"
    one_error_line(
        runner.invoke(
            app,
            [
                "info",
                str(path),
                "--map",
                "input_tokens=prompt_len",
                "--map",
                "output_tokens=prompt_len",
            ],
        ),
        "source column 'prompt_len' is already mapped to 'input_tokens'",
    )
    one_error_line(
        runner.invoke(
            app, ["info", str(FIX / "tiny_mooncake.jsonl"), "--map", "input_tokens=input_length"]
        ),
        "--map applies to canonical CSV/parquet, not to mooncake",
    )


# --- chunk size and I/O unit ----------------------------------------------------------------


@pytest.mark.parametrize("chunk", [0, -512])
def test_chunk_tokens_not_positive(chunk) -> None:
    """A chunk of zero or fewer tokens names the option and the fix."""
    trace = read_trace(FIX / "tiny_mooncake.jsonl")
    _raises(
        ConfigError,
        lambda: coarsen_trace(trace, chunk),
        f"--chunk-tokens {chunk}",
        "must be a positive number of tokens",
        "multiple of the trace's 512-token blocks",
    )


def test_chunk_tokens_finer_than_the_blocks_through_the_cli() -> None:
    """`analyze --chunk-tokens` below the trace's block size: exit 2, one line."""
    result = runner.invoke(
        app, ["analyze", str(FIX / "tiny_mooncake.jsonl"), "--chunk-tokens", "256"]
    )
    one_error_line(result, "--chunk-tokens 256", "cannot refine", "multiple of 512")


@pytest.mark.parametrize("unit", [0, -4096])
def test_io_unit_below_one_byte(unit) -> None:
    """The device I/O unit must be at least a byte; the message says what to give."""
    _raises(
        ConfigError,
        lambda: io_demand(
            input_tokens=np.asarray([1]),
            hit_tokens=None,
            read_time_s=np.asarray([0.0]),
            write_time_s=np.asarray([0.0]),
            kv_bytes=lambda n: n * 2,
            io_unit_bytes=unit,
        ),
        f"I/O unit (--io-unit) must be at least 1 byte, got {unit}",
        "page or block size",
    )


# --- catalogs --------------------------------------------------------------------------------

MODEL = {
    "layers": 4,
    "q_heads": 8,
    "kv_heads": 2,
    "head_dim": 64,
    "total_params_billion": 1.0,
    "source": ["S"],
}


def _catalog(tmp_path: Path, kind: str, entry: dict | None = None, **top: Any) -> Path:
    doc: dict[str, Any] = {"kind": kind, "sources": {"S": "a datasheet"}, "entries": {"x": entry}}
    doc.update(top)
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "fields, needles",
    [
        (
            {"attention": "mla", "kv_lora_rank": 512},
            ["entries.x: mla needs kv_lora_rank and qk_rope_head_dim"],
        ),
        (
            {"attention": "mla", "qk_rope_head_dim": 64},
            ["entries.x: mla needs kv_lora_rank and qk_rope_head_dim"],
        ),
        ({"attention": "mha"}, ["entries.x.attention: must be one of gqa, mla, got 'mha'"]),
        (
            {"sliding_window_layers": 2},
            ["entries.x.sliding_window_tokens: is required with sliding_window_layers"],
        ),
        (
            {"sliding_window_layers": 5, "sliding_window_tokens": 4096},
            ["entries.x.sliding_window_layers: more than layers (4)"],
        ),
        ({"sliding_window_tokens": 0}, ["entries.x.sliding_window_tokens: must be >= 1, got 0"]),
        (
            {"active_params_billion": 2.0},
            ["entries.x.active_params_billion: above total_params_billion"],
        ),
        ({"layers": 4.5}, ["entries.x.layers: expected a whole number, got 4.5"]),
        ({"head_dim": "128 dims"}, ["entries.x.head_dim: expected a number, got '128 dims'"]),
        ({"total_params_billion": float("inf")}, ["'.inf' is not a finite number"]),
    ],
)
def test_bad_model_entries(tmp_path, fields, needles) -> None:
    """Model shapes: MLA fields, sliding windows and counts are checked with file and key."""
    path = _catalog(tmp_path, "models", {**MODEL, **fields})
    _raises(CatalogError, lambda: load_models(path), f"{path}:", *needles)


STORAGE = {
    "category": "local_nvme",
    "provider": "generic",
    "read_mbps": 7000,
    "source": ["S"],
    "as_of": "2026-12-01",
}


@pytest.mark.parametrize(
    "fields, needles",
    [
        ({"per_gib": {"mbps": 5}}, ["entries.x.per_gib.mbps: expected {base, per_gib, max, min}"]),
        ({"per_gib": {"mbps": {"base": 120}}}, ["with per_gib given"]),
        (
            {"per_gib": {"iops": {"per_gib": -50}}},
            ["per_gib.iops.per_gib: expected a plain non-negative number, got -50 (IOPS)"],
        ),
        ({"per_gib": 5}, ["entries.x.per_gib: expected a mapping, got 5"]),
        (
            {"capacity_min_gib": 100, "capacity_max_gib": 20},
            ["entries.x: capacity_min_gib is above capacity_max_gib"],
        ),
        ({"unconfirmed": ["read_mbs"]}, ["entries.x.unconfirmed: 'read_mbs' is not a field"]),
        ({"unconfirmed": "read_mbps, write_mbps"}, ["'read_mbps, write_mbps' is not a field"]),
        ({"shared": "yes"}, ["entries.x.shared: expected true or false, got 'yes'"]),
        ({"aliases": [1, 2]}, ["entries.x.aliases: expected a list of text"]),
        ({"io_unit_bytes": 0}, ["entries.x.io_unit_bytes: must be >= 1, got 0"]),
        ({"category": "tape"}, ["entries.x.category: must be one of memory"]),
    ],
)
def test_bad_storage_entries(tmp_path, fields, needles) -> None:
    """Storage entries: per-GiB formulas, capacities, flags and names, with file and key path."""
    path = _catalog(tmp_path, "storage", {**STORAGE, **fields})
    _raises(CatalogError, lambda: load_storage([path]), f"{path}:", *needles)


def test_bad_storage_entry_through_the_cli(tmp_path) -> None:
    """`catalog list --catalog FILE` with capacity min above max: exit 2, one line."""
    path = _catalog(
        tmp_path, "storage", {**STORAGE, "capacity_min_gib": 100, "capacity_max_gib": 20}
    )
    one_error_line(
        runner.invoke(app, ["catalog", "list", "storage", "--catalog", str(path)]),
        "storage.yaml:2: entries.x: capacity_min_gib is above capacity_max_gib",
    )


INSTANCE = {
    "provider": "aws",
    "family": "p5",
    "gpu": "h100-sxm",
    "gpu_count": 8,
    "gpu_memory_gib": 80,
    "source": ["S"],
    "as_of": "2026-12-01",
}


@pytest.mark.parametrize(
    "fields, needles",
    [
        ({"unconfirmed": ["vcpu"]}, ["entries.x.unconfirmed: 'vcpu' is not a field"]),
        ({"local_nvme_count": 8}, ["entries.x: give local_nvme_count and local_nvme_each_gb"]),
        ({"gpu_count": 0}, ["entries.x.gpu_count: must be >= 1, got 0"]),
    ],
)
def test_bad_instance_entries(tmp_path, fields, needles) -> None:
    """Instance entries: unconfirmed names, NVMe pairs, counts."""
    path = _catalog(tmp_path, "instances", {**INSTANCE, **fields})
    _raises(CatalogError, lambda: load_instances([path]), f"{path}:", *needles)


@pytest.mark.parametrize(
    "text, needles",
    [
        ("- kind: storage\n", ["expected a mapping with 'kind', 'sources' and 'entries'"]),
        ("sources: {S: s}\nentries: {x: {}}\n", ["no 'kind'; start the file with 'kind: storage'"]),
        (
            "kind: storage\nextra: 1\nmore: 2\nsources: {S: s}\nentries: {x: {}}\n",
            ["c.yaml:2: extra: unknown field; known fields: kind,", "more problems"],
        ),
        (
            "kind: gpus\nsources: {S: s}\nentries: {x: {}}\n",
            ["kind is 'gpus', expected 'storage'", "starts with 'kind: storage'"],
        ),
        (
            "kind: storage\nsources: [S]\nentries: {x: {}}\n",
            ["'sources' must map a key to a citation text"],
        ),
        (
            "kind: storage\nsources: {S: s}\nentries: {}\n",
            ["'entries' must be a non-empty mapping of name to fields"],
        ),
        (
            "kind: storage\nsources: {S: s}\nentries: {x: [1, 2]}\n",
            ["entries.x: expected a mapping of fields"],
        ),
    ],
)
def test_catalog_file_shapes(tmp_path, text, needles) -> None:
    """A catalog file's top level, through the storage loader (--catalog FILE)."""
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    _raises(CatalogError, lambda: load_storage([path]), f"{path}:", *needles)


@pytest.mark.parametrize("text", ["- kind: storage\n", "sources: {S: s}\n", "kind: [storage]\n"])
def test_catalog_file_without_a_kind(tmp_path, text) -> None:
    """--catalog files are routed by their kind: without one, say how the file must start."""
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    _raises(
        CatalogError,
        lambda: PlanCatalogs.packaged((str(path),)),
        f"{path}: ",
        "a catalog file starts with 'kind: storage' or 'kind: instances'",
    )
    one_error_line(
        runner.invoke(app, ["catalog", "list", "--catalog", str(path)]),
        "c.yaml",
        "starts with 'kind: storage'",
    )


@pytest.mark.parametrize(
    ("option", "value", "listing"),
    [
        ("--model", "no-such-model", "`kvadvisor catalog list models`"),
        ("--gpu", "h2000", "`kvadvisor catalog list gpus`"),
        ("--storage", "no-such-disk", "`kvadvisor catalog list storage`"),
        ("--instance", "no-such-box", "`kvadvisor catalog list instances`"),
    ],
)
def test_an_unknown_or_empty_catalog_name_points_to_its_own_listing(option, value, listing) -> None:
    """The hint names the `catalog list` kind that lists what the option takes.

    `catalog list` alone lists storage, so a model, GPU or instance hint must name its kind
    (the empty names: tests/test_reliability_cli.py).
    """
    trace = REPO / "sample_traces" / "mooncake_conversation_head.jsonl.gz"
    result = runner.invoke(app, ["analyze", str(trace), option, value, "-q"])
    one_error_line(result, listing)


def test_catalog_without_kind_in_the_models_loader(tmp_path) -> None:
    """The generic checker says which kind to write when 'kind' is absent."""
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"sources": {"S": "s"}, "entries": {"x": MODEL}}))
    _raises(
        CatalogError, lambda: load_models(path), "no 'kind'", "start the file with 'kind: models'"
    )
    gpu = tmp_path / "g.yaml"
    gpu.write_text(
        yaml.safe_dump(
            {
                "kind": "gpus",
                "sources": {"S": "s"},
                "entries": {
                    "x": {
                        "bf16_dense_tflops": 100,
                        "memory_gb": 80,
                        "memory_bandwidth_gbps": 3350,
                        "pcie_gbps": "64 GB/s",
                        "source": ["S"],
                    }
                },
            }
        )
    )
    _raises(
        CatalogError,
        lambda: load_gpus(gpu),
        "entries.x.pcie_gbps: expected a number",
        "a plain number in GB/s",
    )


def test_list_of_numbers_field() -> None:
    """The checker's list[number] kind refuses text and booleans in the list."""
    schema = {"points": Field("list[number]")}
    doc = {
        "kind": "k",
        "sources": {"S": "s"},
        "entries": {"x": {"points": [1, "2"], "source": ["S"]}},
    }
    _raises(
        CatalogError,
        lambda: check_entries("f.yaml", "k", doc, schema),
        "f.yaml: entries.x.points: expected a list of numbers from 0 to 1,000,000,000,000, "
        "got [1, '2']",
    )


HF = {
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "hidden_size": 512,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
}


@pytest.mark.parametrize(
    "fields, needles",
    [
        ({"num_hidden_layers": 0}, ["layers, heads and hidden_size must be positive"]),
        ({"num_key_value_heads": -2}, ["'num_key_value_heads' must be in [0, 16,777,216], got -2"]),
        ({"hidden_size": None}, ["'hidden_size' is missing; it is needed for the KV size"]),
        ({"sliding_window": 4096.5}, ["'sliding_window' must be a whole number, got 4096.5"]),
        ({"head_dim": "sixty-four"}, ["'head_dim' must be a whole number, got 'sixty"]),
        (
            {"num_local_experts": [8], "num_experts_per_tok": 2},
            ["'num_local_experts' must be a whole number, got [8]"],
        ),
        ({"kv_lora_rank": 512}, ["'qk_rope_head_dim' is missing"]),
    ],
)
def test_bad_hf_config(tmp_path, fields, needles) -> None:
    """A config.json given as --model: each bad field named (no ValueError or TypeError)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**HF, **fields}))
    _raises(CatalogError, lambda: read_hf_config(path), str(path), *needles)


def test_hf_config_null_optional_fields_are_absent() -> None:
    """A null optional field (as many configs write head_dim) means absent, not an error."""
    spec = model_from_hf_config({**HF, "head_dim": None, "q_lora_rank": None}, name="m")
    assert spec.head_dim == 512 // 8


# --- plan files: top-level shape -------------------------------------------------------------

PLAN = {"model": {"kv_bytes_per_token": 1024}, "stages": {"prefill": {"count": 1}}}


@pytest.mark.parametrize(
    "text, needles",
    [
        (
            "- model\n- stages\n",
            [
                "expected a mapping with keys name, description, model",
                "got a list",
                "kvadvisor docs review#the-plan-file",
            ],
        ),
        ("42\n", ["got a number"]),
        ("", ["got an empty file"]),
        (yaml.safe_dump({**PLAN, "modle": {}}), ["modle: unknown field; did you mean 'model'?"]),
        (yaml.safe_dump({**PLAN, "zzz": 1}), ["zzz: unknown field; known fields: name,"]),
        (yaml.safe_dump({**PLAN, "name": 5}), ["name: expected text, got 5"]),
        (
            yaml.safe_dump({**PLAN, "description": ["a", "b"]}),
            ["description: expected text, got ['a', 'b']"],
        ),
        (
            yaml.safe_dump({**PLAN, "model": "llama-3.1-70b"}),
            ["model: expected a mapping with keys name, kv_bytes_per_token"],
        ),
        (yaml.safe_dump({"stages": PLAN["stages"]}), ["model: is required"]),
        (yaml.safe_dump({**PLAN, "slo": ["2 s"]}), ["slo: expected a mapping with keys ttft_p99"]),
        (yaml.safe_dump({**PLAN, "traffic": 3}), ["traffic: expected a mapping with keys scale"]),
        (
            yaml.safe_dump({**PLAN, "stages": ["prefill"]}),
            ["stages: expected a mapping with keys prefill, decode"],
        ),
        (
            yaml.safe_dump({"model": PLAN["model"]}),
            ["stages: is required (prefill and/or decode, or one serving block"],
        ),
        (
            yaml.safe_dump({**PLAN, "stages": {}}),
            ["stages: give prefill and/or decode, or one serving block"],
        ),
        (
            yaml.safe_dump({**PLAN, "stages": {"prefill": {"tiers": {"name": "a"}}}}),
            ["stages.prefill.tiers: expected a list, got a mapping (tiers, fastest first)"],
        ),
        (
            yaml.safe_dump({**PLAN, "stages": {"prefill": {"engines": ["lmcache"]}}}),
            ["stages.prefill.engines: expected a mapping, got a list (engine name: its settings)"],
        ),
        (
            yaml.safe_dump({**PLAN, "stages": {"decode": "big"}}),
            ["stages.decode: expected a mapping with keys instance"],
        ),
    ],
)
def test_plan_top_level_shape(tmp_path, text, needles) -> None:
    """Plan files: a list, a scalar, unknown keys, wrong section types: file, key, fix."""
    path = tmp_path / "plan.yaml"
    path.write_text(text, encoding="utf-8")
    _raises(PlanError, lambda: load_plan(path), f"{path}:", *needles)


def test_plan_shape_through_the_cli(tmp_path) -> None:
    """`review --plan` with a wrong-typed section: exit 2, one line naming file and key."""
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({**PLAN, "traffic": [3]}), encoding="utf-8")
    one_error_line(
        runner.invoke(app, ["review", str(FIX / "tiny_mooncake.jsonl"), "--plan", str(path)]),
        "plan.yaml:6: traffic: expected a mapping",
        "kvadvisor docs errors#plan",
    )


# --- --memory-limit --------------------------------------------------------------------------

# One distinct message per kind of mistake; the needle is what tells them apart.
MEMORY_LIMIT_ERRORS = {
    "nothing given": ("  ", "no size given"),
    "no number": ("GiB", "no number before the unit"),
    "no number (a word)": ("lots", "no number before the unit"),
    "unknown unit": ("8 parsecs", "unknown unit 'parsecs'; use one of B, KB, MB"),
    "unknown unit (XB)": ("8XB", "unknown unit 'XB'"),
    "zero": ("0GiB", "the limit must be more than 0 bytes"),
    "negative": ("-2GiB", "the limit must be more than 0 bytes"),
    "rounds to zero bytes": ("0.0001", "the limit must be more than 0 bytes"),
    "percentage not a number": ("half%", "'half' is not a number; give a percentage"),
    "percentage out of range": ("150%", "must be more than 0 and at most 100"),
    "percentage zero": ("0%", "must be more than 0 and at most 100"),
    "larger than the machine": ("1e30", "more than this machine's memory"),
    "overflows a float": ("1e400", "more than this machine's memory"),
}


@pytest.mark.parametrize("case", sorted(MEMORY_LIMIT_ERRORS))
def test_memory_limit_errors(case) -> None:
    """Each malformed --memory-limit gets its own message, quoting the value given."""
    text, needle = MEMORY_LIMIT_ERRORS[case]
    _raises(ConfigError, lambda: parse_memory_limit(text), f"--memory-limit {text!r}: ", needle)


def test_memory_limit_messages_are_told_apart() -> None:
    """The distinct failures have distinct messages (with the value quoted part removed)."""
    kinds = {}
    for text, _ in MEMORY_LIMIT_ERRORS.values():
        with pytest.raises(ConfigError) as info:
            parse_memory_limit(text)
        kinds[str(info.value).split(": ", 1)[1]] = text
    # nothing, no number, unit 'parsecs', unit 'XB', <= 0, 'half' not a number, out of range,
    # above the machine.
    assert len(kinds) == 8, kinds


def test_memory_limit_machine_size_is_the_ceiling() -> None:
    """The whole machine is accepted; a byte more is refused with the size to give instead."""
    machine = physical_memory_bytes()
    assert parse_memory_limit(str(machine)) == machine
    assert parse_memory_limit("100%") == machine
    message = _raises(
        ConfigError, lambda: parse_memory_limit(str(machine + 1)), "more than this machine's memory"
    )
    most = float(message.split("give at most ")[1].split("GiB")[0])
    assert parse_memory_limit(f"{most}GiB") <= machine  # the size suggested is accepted


def test_memory_limit_through_the_cli(tmp_path) -> None:
    """A bad --memory-limit is exit 2 whether the trace streams (parquet) or not (JSONL)."""
    parquet = tmp_path / "t.parquet"
    pq.write_table(CANONICAL, parquet)
    for trace in (parquet, FIX / "tiny_mooncake.jsonl"):
        one_error_line(
            runner.invoke(app, ["analyze", str(trace), "--memory-limit", "8XB"]),
            "--memory-limit '8XB': unknown unit 'XB'",
        )


# --- further raise sites found by grepping `raise` against the tests -------------------------


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs here")
def test_trace_that_is_not_a_regular_file(tmp_path) -> None:
    """A FIFO (or device) is refused before anything reads from it (which could block)."""
    import os

    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    _raises(
        TraceFormatError,
        lambda: read_trace(fifo),
        "pipe.jsonl: is a named pipe (FIFO), not a regular file",
        "save the data to a file first",
    )


def test_jsonl_key_with_changing_types(tmp_path) -> None:
    """Lines that each parse, but a key changes JSON type: pyarrow's reason plus the rule."""
    path = tmp_path / "t.jsonl"
    extra = GOOD_LINE[:-1] + ', "tag": %s}\n'
    path.write_text(extra % "1" + extra % '"a"')
    _raises(
        TraceFormatError,
        lambda: read_trace(path),
        str(path),
        "not valid JSONL",
        "Column(/tag) changed from number to string",
        "each key holding the same JSON type on every line",
    )


BENCH_RUN = {"model_id": "m", "input_lens": [1, 2], "output_lens": [3, 4], "ttfts": [0.1, 0.2]}


def test_benchmark_run_that_is_not_an_object(tmp_path) -> None:
    """A results file with a non-object run names the run (row) and the fix."""
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(BENCH_RUN) + "\n[1, 2]\n")
    _raises(
        TraceSchemaError,
        lambda: read_trace(path),
        str(path),
        "row 2, column '(record)': unparseable: [1, 2] is a JSON array, not a benchmark run",
        "regenerate the result file",
    )
    mixed = tmp_path / "m.jsonl"
    mixed.write_text(json.dumps(BENCH_RUN) + "\n" + json.dumps({**BENCH_RUN, "model_id": 5}))
    _raises(
        TraceFormatError,
        lambda: read_trace(mixed),
        "not a readable benchmark result",
        "Column(/model_id) changed",
        "regenerate the result file",
    )


def test_hf_config_that_is_not_an_object(tmp_path) -> None:
    """--model path/config.json holding a JSON array."""
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    _raises(
        CatalogError,
        lambda: read_hf_config(path),
        str(path),
        "expected a JSON object (a Hugging Face config.json)",
    )


def _tiered(**tier: Any) -> dict:
    return {**PLAN, "stages": {"prefill": {"tiers": [tier]}}}


@pytest.mark.parametrize(
    "doc, needles",
    [
        (
            _tiered(name="t", capacity="1 TB"),
            ["stages.prefill.tiers[0].storage: is required (a storage catalog name or an inline"],
        ),
        (
            _tiered(storage={"read_bandwidth": "5 GB/s"}),
            ["stages.prefill.tiers[0].storage.kind: is required (dram | cxl | ssd"],
        ),
        (
            _tiered(storage="nvme-gen5-x4", shared="no"),
            ["stages.prefill.tiers[0].shared: expected true or false, got 'no'"],
        ),
        (
            _tiered(storage="nvme-gen5-x4", devices=2.5),
            ["stages.prefill.tiers[0].devices: expected a whole number, got 2.5"],
        ),
        (
            _tiered(storage={"kind": "ssd", "read_iops": "1M"}),
            ["tiers[0].storage.read_iops: expected a number, got '1M'"],
        ),
        (
            _tiered(storage={"kind": "ssd", "latency": ["80 us"]}),
            ["tiers[0].storage.latency: expected a time such as '250 ms', got ['80 us']"],
        ),
        (
            {
                **PLAN,
                "stages": {
                    "prefill": {"tiers": [{"storage": "nvme-gen5-x4"}, {"storage": "nvme-gen5-x4"}]}
                },
            },
            [
                "stages.prefill.tiers: tier names must be unique,"
                " got ['nvme-gen5-x4', 'nvme-gen5-x4']"
            ],
        ),
        (
            {**PLAN, "stages": {"prefill": {"engines": {"lmcache": {"local_cpu": "yes"}}}}},
            ["stages.prefill.engines.lmcache.local_cpu: expected true or false, got 'yes'"],
        ),
        (
            {**PLAN, "stages": {"prefill": {"engines": {"lmcache": {"l2-adapter": "disk"}}}}},
            ["engines.lmcache.l2-adapter: expected a mapping, got 'disk'"],
        ),
        (
            {**PLAN, "stages": {"prefill": {"engines": {"lmcache": {"chunk_size": 0}}}}},
            ["stages.prefill.engines.lmcache.chunk_size: must be >= 1, got 0"],
        ),
        (
            {**PLAN, "stages": {"prefill": {"engines": {"sglang-hicache": {"page-size": 0}}}}},
            ["engines.sglang-hicache.page-size: must be >= 1, got 0"],
        ),
        (
            {**PLAN, "stages": {"prefill": {"engines": {"lmcache": {"min_retrieve_tokens": -1}}}}},
            ["engines.lmcache.min_retrieve_tokens: must be >= 0, got -1"],
        ),
        (
            {**PLAN, "stages": {"prefill": {"gpu": "h300"}}},
            ["stages.prefill.gpu: unknown GPU 'h300'; did you mean"],
        ),
    ],
)
def test_plan_stage_and_tier_shapes(tmp_path, doc, needles) -> None:
    """Below the top level: tiers, inline storage, engine settings, catalog names."""
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    _raises(PlanError, lambda: load_plan(path), f"{path}:", *needles)


def test_cli_output_targets(tmp_path) -> None:
    """-o naming a directory or a path under a file, convert to a name of no format: one line."""
    trace = str(FIX / "tiny_mooncake.jsonl")
    one_error_line(
        runner.invoke(app, ["rules", "facts", "-o", str(tmp_path)]),
        "is a directory; give an output file name",
    )
    one_error_line(
        runner.invoke(app, ["convert", trace, "-o", str(tmp_path / "t.txt")]),
        "name it *.parquet, *.csv or *.jsonl, or give --to parquet|csv|mooncake",
    )
    # A parent that is a file: the temporary file cannot be made (was a raw FileExistsError).
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    one_error_line(
        runner.invoke(app, ["rules", "facts", "-o", str(blocker / "facts.md")]),
        "file.txt/facts.md: cannot be written",
        "choose another output path",
    )
    # convert checks its -o before it reads the trace (issue 31): the parent is named.
    one_error_line(
        runner.invoke(app, ["convert", trace, "-o", str(blocker / "t.parquet")]),
        "file.txt is not a directory",
        "choose another -o",
    )
    one_error_line(
        runner.invoke(app, ["synth", "--requests", "10", "-o", str(blocker / "s.parquet")]),
        "file.txt/s.parquet: cannot be written",
        "choose another -o",
    )
    assert blocker.read_text() == "x"


def test_plan_on_a_trace_too_large_to_replay(tmp_path) -> None:
    """With --plan, a parquet trace sampled within --memory-limit: say to use review."""
    from kvadvisor.pipeline.streaming import BASELINE_BYTES, SAMPLED_BYTES_PER_REQUEST
    from kvadvisor.synth import SynthShape, write_synth_parquet

    path = tmp_path / "t.parquet"
    write_synth_parquet(SynthShape(requests=500, block_tokens=64, sessions=50, seed=3), path)
    stream = open_trace_stream(path)
    # Room for a quarter of the block accesses sampled: the per-request replay does not fit.
    limit = (
        BASELINE_BYTES
        + SAMPLED_BYTES_PER_REQUEST * stream.requests
        + 120 * stream.block_accesses // 4
    )
    plan = REPO / "examples" / "plans" / "good-p5e-prefill-p5-decode.yaml"
    result = runner.invoke(
        app,
        [
            "analyze",
            str(path),
            "--memory-limit",
            str(limit),
            "--plan",
            str(plan),
            "--format",
            "json",
            "-o",
            str(tmp_path / "r.json"),
        ],
    )
    one_error_line(
        result,
        "t.parquet: too large to replay per request within the memory limit",
        "use `kvadvisor review` on a sample",
    )


@pytest.mark.parametrize("value", [["2 TB"], {"size": 2}, None])
def test_quantity_that_is_not_text(tmp_path, value) -> None:
    """A capacity given as a list, mapping or null-like value says how to write one."""
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({**PLAN, "stages": {"prefill": {"host_memory": value or 0}}}))
    expected = (
        "needs a unit, e.g. '2 TB' (got the bare number 0)"
        if value is None
        else f"expected a size such as '2 TB', got {value!r}"
    )
    _raises(PlanError, lambda: load_plan(path), "stages.prefill.host_memory: ", expected)


def test_broken_json_points_at_the_line_that_breaks(tmp_path) -> None:
    """A syntax error names the line and character where parsing stops, and the key there."""
    pretty = tmp_path / "p.json"
    pretty.write_text('{\n  "model_id": "m",\n  "input_lens": [1, 2\n  "x": 1}\n')
    _raises(
        TraceSchemaError,
        lambda: read_trace(pretty),
        "row 1, column 'input_lens'",
        "not valid JSON at line 4, character 3",
        "complete or delete it",
    )
    first = tmp_path / "f.jsonl"
    first.write_text('{"timestamp": 0, "input_length": 5x}\n' + GOOD_LINE + "\n")
    _raises(
        TraceSchemaError,
        lambda: read_trace(first),
        "row 1, column 'input_length'",
        "not valid JSON at line 1, character 35",
    )
    perf = tmp_path / "r.json"
    perf.write_text(
        '[{"number_input_tokens": 1, "number_output_tokens": 2},\n'
        ' {"number_input_tokens": 3, "number_output_tokens": }]\n'
    )
    _raises(
        TraceSchemaError,
        lambda: read_trace(perf),
        "row 2, column 'number_output_tokens'",
        "not valid JSON at line 2, character 53",
    )


def test_forced_format_without_its_fields(tmp_path) -> None:
    """--trace-format naming a format whose fields are absent: the fields found are listed."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n')
    _raises(
        TraceSchemaError,
        lambda: read_trace(path, "bailian"),
        "column 'chat_id': missing_column: required Bailian field missing",
        "fields found: timestamp, input_length, output_length",
        "give --trace-format",
    )
