"""Readers: every format on a small fixture and on the real traces, checked against stdlib parses.

Expected values are computed here with the json/csv modules and plain Python loops, never with
the reader under test.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from kvadvisor.errors import ConfigError, TraceSchemaError
from kvadvisor.trace import ColumnSource, read_trace

FIX = Path(__file__).resolve().parent / "fixtures" / "traces"


def _jsonl(path: Path) -> list[dict]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _col(trace, name):
    return trace.table[name].to_pylist()


def _wallclock_s(text: str) -> Decimal:
    """'2023-11-16 18:17:03.9799600' -> seconds since the day's midnight, exactly (Decimal)."""
    _, clock = text.split(" ")
    hours, minutes, seconds = clock.split(":")
    return Decimal(hours) * 3600 + Decimal(minutes) * 60 + Decimal(seconds)


def _close(a, b, tol=1e-9):
    return (a is None and b is None) or (a is not None and b is not None and abs(a - b) <= tol)


# --- small fixtures ---------------------------------------------------------------------------


def test_mooncake_fixture() -> None:
    """Millisecond timestamps become seconds; hashes and lengths pass through; 512-token blocks."""
    rows = _jsonl(FIX / "tiny_mooncake.jsonl")
    t = read_trace(FIX / "tiny_mooncake.jsonl")
    assert t.source_format == "mooncake" and t.block_tokens == 512
    assert _col(t, "arrival_s") == [r["timestamp"] / 1000 for r in rows]
    assert _col(t, "input_tokens") == [r["input_length"] for r in rows]
    assert _col(t, "output_tokens") == [r["output_length"] for r in rows]
    assert _col(t, "block_hashes") == [r["hash_ids"] for r in rows]
    assert t.duration_s == 4.25
    offsets, values = t.hash_arrays()
    assert list(offsets) == [0, 2, 4, 7, 8, 9]
    assert list(values) == [h for r in rows for h in r["hash_ids"]]
    assert t.has_hashes and t.arrivals_measured


def _reference_sessions(rows: list[dict]) -> list[str]:
    """Slow reference: walk each chain up while the parent is in the trace."""
    by_id = {r["chat_id"]: r for r in rows}
    out = []
    for r in rows:
        node = r
        while node["parent_chat_id"] in by_id:
            node = by_id[node["parent_chat_id"]]
        out.append(str(node["chat_id"]))
    return out


def test_bailian_fixture() -> None:
    """chat_id/parent_chat_id become ids; the session is the chain root; 16-token blocks."""
    rows = _jsonl(FIX / "tiny_bailian.jsonl")
    t = read_trace(FIX / "tiny_bailian.jsonl")
    assert t.source_format == "bailian" and t.block_tokens == 16
    start = min(r["timestamp"] for r in rows)
    assert _col(t, "arrival_s") == [r["timestamp"] - start for r in rows]
    assert _col(t, "request_id") == [str(r["chat_id"]) for r in rows]
    assert _col(t, "parent_id") == [
        None if r["parent_chat_id"] == -1 else str(r["parent_chat_id"]) for r in rows
    ]
    assert _col(t, "session_id") == _reference_sessions(rows)
    assert _col(t, "session_id") == ["10", "11", "10", "10", "14", "14"]
    assert _col(t, "block_hashes") == [r["hash_ids"] for r in rows]
    assert any("type, turn" in n for n in t.notes)


def test_azure_fixture() -> None:
    """Wall-clock TIMESTAMP with 7 fractional digits becomes exact seconds since the first."""
    with open(FIX / "tiny_azure.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    t = read_trace(FIX / "tiny_azure.csv")
    assert t.source_format == "azure" and t.block_tokens is None
    start = _wallclock_s(rows[0]["TIMESTAMP"])
    expected = [float(_wallclock_s(r["TIMESTAMP"]) - start) for r in rows]
    # Nanosecond timestamps: the 7th digit (100 ns) survives.
    assert all(abs(a - e) < 1e-9 for a, e in zip(_col(t, "arrival_s"), expected, strict=True))
    assert _col(t, "arrival_s")[3] == pytest.approx(56.0200401, abs=1e-9)
    assert _col(t, "input_tokens") == [int(r["ContextTokens"]) for r in rows]
    assert _col(t, "output_tokens") == [int(r["GeneratedTokens"]) for r in rows]
    assert not t.has_hashes


def test_burstgpt_fixture() -> None:
    """Response tokens = 0 marks a failure: kept, ok = false, counted and noted."""
    with open(FIX / "tiny_burstgpt.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    t = read_trace(FIX / "tiny_burstgpt.csv")
    start = min(float(r["Timestamp"]) for r in rows)
    assert _col(t, "arrival_s") == [float(r["Timestamp"]) - start for r in rows]
    assert _col(t, "input_tokens") == [int(r["Request tokens"]) for r in rows]
    assert _col(t, "output_tokens") == [int(r["Response tokens"]) for r in rows]
    assert _col(t, "ok") == [r["Response tokens"] != "0" for r in rows]
    assert _col(t, "model") == [r["Model"] for r in rows]
    assert t.requests == 5 and t.failed_requests == 1
    assert any("1 failed request (ok = false)" in n for n in t.notes)


def _reference_bench(runs: list[dict]) -> dict[str, list]:
    """Slow reference for vLLM/SGLang results (see formats.from_bench for the definitions)."""
    out = {k: [] for k in ("arrival", "input", "output", "ok", "ttft", "e2e", "tpot")}
    offset = 0.0
    for run in runs:
        arrays = run.get("details", run)
        starts = arrays.get("start_times")
        first = min(starts) if starts else 0.0
        span = run.get("duration", 0.0) or 0.0
        for i, n_in in enumerate(arrays["input_lens"]):
            ok = arrays.get("errors", [""] * (i + 1))[i] in ("", None)
            ttft = arrays["ttfts"][i]
            e2e = ttft + sum(arrays["itls"][i])
            n_out = arrays["output_lens"][i]
            rel = (starts[i] - first) if starts else 0.0
            span = max(span, rel + e2e)
            out["arrival"].append(offset + rel)
            out["input"].append(n_in)
            out["output"].append(n_out)
            out["ok"].append(ok)
            out["ttft"].append(ttft if ok else None)
            out["e2e"].append(e2e if ok else None)
            out["tpot"].append((e2e - ttft) / (n_out - 1) if ok and n_out > 1 else None)
        offset += span
    return out


def _check_bench(t, runs: list[dict]) -> None:
    ref = _reference_bench(runs)
    order = sorted(range(len(ref["arrival"])), key=lambda i: ref["arrival"][i])
    start = min(ref["arrival"])
    got = {
        "arrival": _col(t, "arrival_s"),
        "input": _col(t, "input_tokens"),
        "output": _col(t, "output_tokens"),
        "ok": _col(t, "ok"),
        "ttft": _col(t, "ttft_s"),
        "e2e": _col(t, "e2e_s"),
        "tpot": _col(t, "tpot_s"),
    }
    for key, values in ref.items():
        want = [values[i] - start if key == "arrival" else values[i] for i in order]
        if key in ("input", "output", "ok"):
            assert got[key] == want, key
        else:
            pairs = zip(got[key], want, strict=True)
            assert all(_close(a, b) for a, b in pairs), (key, got[key], want)


def test_vllm_appended_runs() -> None:
    """Two runs, new key set: start_times order the requests; errors give ok = false."""
    runs = _jsonl(FIX / "tiny_vllm_appended.json")
    t = read_trace(FIX / "tiny_vllm_appended.json")
    assert t.source_format == "vllm" and t.arrivals_measured
    _check_bench(t, runs)
    # Run 2 starts after run 1's duration (3.0 s); its second request started first.
    assert _col(t, "arrival_s") == [0.0, 0.5, 1.0, 3.0, 3.25]
    assert _col(t, "model") == ["m-8b"] * 5
    assert t.failed_requests == 1
    assert any("sorted" in n for n in t.notes)


def test_vllm_old_keys_pretty_printed() -> None:
    """Old key set (no start_times), indented JSON: arrivals unknown, times still measured."""
    run = json.loads((FIX / "tiny_vllm_old.json").read_text())
    t = read_trace(FIX / "tiny_vllm_old.json")
    assert t.source_format == "vllm" and not t.arrivals_measured
    assert t.arrival_rate_per_s is None
    _check_bench(t, [run])
    # Two output tokens: one gap of 0.05 s; four tokens: three gaps of 0.02 s.
    assert _col(t, "tpot_s") == pytest.approx([0.05, 0.02])


def test_sglang_top_level_and_details() -> None:
    """SGLang arrays at the top level and under `details` read the same way."""
    for name in ("tiny_sglang_top.jsonl", "tiny_sglang_details.jsonl"):
        runs = _jsonl(FIX / name)
        t = read_trace(FIX / name)
        assert t.source_format == "sglang"
        _check_bench(t, runs)
    assert t.failed_requests == 1


def test_llmperf_fixture() -> None:
    """error_code marks failures; tpot from e2e and TTFT; no arrival times."""
    records = json.loads((FIX / "tiny_llmperf.json").read_text())
    t = read_trace(FIX / "tiny_llmperf.json")
    assert t.source_format == "llmperf" and not t.arrivals_measured
    assert _col(t, "input_tokens") == [r["number_input_tokens"] for r in records]
    assert _col(t, "output_tokens") == [r["number_output_tokens"] for r in records]
    assert _col(t, "ok") == [r["error_code"] is None for r in records]
    assert _col(t, "ttft_s") == [0.5, None, 0.3]
    assert _col(t, "e2e_s") == [0.7, None, 0.3]
    tpot = _col(t, "tpot_s")
    assert tpot[0] == pytest.approx((0.7 - 0.5) / 9) and tpot[1] is None and tpot[2] is None


def test_canonical_csv_sorts_and_parses_hash_text() -> None:
    """Unsorted arrivals are sorted (noted); '[1, 2, 3]' hash text becomes a list."""
    t = read_trace(FIX / "tiny_canonical.csv", block_tokens=16)
    assert t.source_format == "csv" and t.block_tokens == 16
    assert _col(t, "request_id") == ["a", "c", "b"]
    assert _col(t, "arrival_s") == [0.0, 1.0, 2.5]
    assert _col(t, "block_hashes") == [[1, 2, 3], None, [1]]  # an empty cell: no hashes
    assert _col(t, "ok") == [True, False, True]
    assert _col(t, "ttft_s") == [0.1, None, 0.05]
    assert any("sorted" in n for n in t.notes)
    assert any("not used: extra" in n for n in t.notes)


def test_column_map_with_units() -> None:
    """--map renames source columns and converts ms to seconds."""
    maps = [
        "arrival_s=ts_ms:ms",
        "input_tokens=prompt_len",
        "output_tokens=gen_len",
        "e2e_s=latency_ms:ms",
    ]
    t = read_trace(FIX / "tiny_mapped.csv", column_map=maps)
    assert _col(t, "arrival_s") == [0.0, 0.5, 3.0]
    assert _col(t, "input_tokens") == [100, 200, 300]
    assert _col(t, "e2e_s") == [0.25, 0.5, 0.75]
    same = read_trace(
        FIX / "tiny_mapped.csv",
        column_map={
            "arrival_s": ColumnSource("ts_ms", "ms"),
            "input_tokens": ColumnSource("prompt_len"),
            "output_tokens": ColumnSource("gen_len"),
            "e2e_s": ColumnSource("latency_ms", "ms"),
        },
    )
    assert same.table.equals(t.table)


@pytest.mark.parametrize(
    "maps, message",
    [
        (["input_tokens"], "expected CANONICAL=SOURCE"),
        (["input_tokenz=prompt_len"], "did you mean 'input_tokens'"),
        (["arrival_s=ts_ms:hours"], "unknown time unit"),
        (["input_tokens=nope", "arrival_s=ts_ms", "output_tokens=gen_len"], "no column 'nope'"),
    ],
)
def test_bad_column_map(maps, message) -> None:
    """A bad --map is a ConfigError that says what is wrong."""
    with pytest.raises(ConfigError, match=message):
        read_trace(FIX / "tiny_mapped.csv", column_map=maps)


def test_map_refused_for_source_formats() -> None:
    """--map is for canonical CSV/parquet only."""
    with pytest.raises(ConfigError, match="canonical CSV/parquet"):
        read_trace(FIX / "tiny_mooncake.jsonl", column_map=["input_tokens=input_length"])


def test_gzip_and_zstd_read_transparently(tmp_path) -> None:
    """Compressed copies (any name) read to the same table as the plain file."""
    plain = read_trace(FIX / "tiny_mooncake.jsonl")
    data = (FIX / "tiny_mooncake.jsonl").read_bytes()
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(data))
    zst = tmp_path / "t.jsonl.zst"
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        out.write(data)
    zst.write_bytes(sink.getvalue().to_pybytes())
    for path in (gz, zst):
        assert read_trace(path).table.equals(plain.table)
    csv_gz = tmp_path / "azure.csv.gz"
    csv_gz.write_bytes(gzip.compress((FIX / "tiny_azure.csv").read_bytes()))
    assert read_trace(csv_gz).table.equals(read_trace(FIX / "tiny_azure.csv").table)


def test_block_tokens_override_is_noted() -> None:
    """--block-tokens overrides a format's default and says so."""
    t = read_trace(FIX / "tiny_mooncake.jsonl", block_tokens=256)
    assert t.block_tokens == 256
    assert any("default is 512" in n for n in t.notes)


# --- the real traces --------------------------------------------------------------------------


def _mooncake_reference(rows: list[dict]) -> dict:
    ts = [r["timestamp"] for r in rows]
    return {
        "rows": rows,
        "requests": len(rows),
        "input": sum(r["input_length"] for r in rows),
        "output": sum(r["output_length"] for r in rows),
        "blocks": sum(len(r["hash_ids"]) for r in rows),
        "unique": len({h for r in rows for h in r["hash_ids"]}),
        "duration_s": (max(ts) - min(ts)) / 1000,
    }


@pytest.fixture(scope="module")
def mooncake_ref(mooncake_rows) -> dict:
    """The whole Mooncake trace's published rows (read with pyarrow) and their sums."""
    return _mooncake_reference(mooncake_rows)


def test_real_mooncake_jsonl(mooncake_jsonl_path) -> None:
    """The published Mooncake JSONL (its first 400 lines): counts, sums and span as the stdlib says.

    The figures were also counted with jq over the decompressed lines (``length``,
    ``map(.input_length) | add``, ``[.[].hash_ids[]] | unique | length``, the last timestamp).
    """
    ref = _mooncake_reference(_jsonl(mooncake_jsonl_path))
    t = read_trace(mooncake_jsonl_path)
    offsets, values = t.hash_arrays()
    assert t.source_format == "mooncake" and t.block_tokens == 512
    assert t.requests == ref["requests"] == 400
    assert sum(_col(t, "input_tokens")) == ref["input"] == 5_710_530
    assert sum(_col(t, "output_tokens")) == ref["output"] == 146_073
    assert int(offsets[-1]) == ref["blocks"] == 11_349
    assert len(set(values.tolist())) == ref["unique"] == 9_821
    assert t.duration_s == pytest.approx(ref["duration_s"], abs=1e-9)
    assert t.duration_s == 141.0
    assert _col(t, "block_hashes") == [r["hash_ids"] for r in ref["rows"]]
    # Every row has ceil(input/512) hashes, so no mismatch note.
    assert not any("hash count" in n for n in t.notes)


def test_real_mooncake(mooncake_path, mooncake_ref) -> None:
    """The whole Mooncake conversation trace: counts, sums and span as its README publishes."""
    t = read_trace(mooncake_path)
    offsets, values = t.hash_arrays()
    assert t.requests == mooncake_ref["requests"] == 12_031
    assert sum(_col(t, "input_tokens")) == mooncake_ref["input"]
    assert sum(_col(t, "output_tokens")) == mooncake_ref["output"]
    assert int(offsets[-1]) == mooncake_ref["blocks"] == 288_500
    assert len(set(values.tolist())) == mooncake_ref["unique"] == 182_790
    assert t.duration_s == pytest.approx(mooncake_ref["duration_s"], abs=1e-9)
    assert round(t.duration_s, 1) == 3537.0
    # README: mean input 12,035.1, mean output 342.6.
    assert mooncake_ref["input"] / 12_031 == pytest.approx(12_035.1, abs=0.05)
    assert mooncake_ref["output"] / 12_031 == pytest.approx(342.6, abs=0.05)
    assert not any("hash count" in n for n in t.notes)


def _azure_reference(path: Path) -> dict:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    clock = [_wallclock_s(r["TIMESTAMP"]) for r in rows]
    assert len({r["TIMESTAMP"].split(" ")[0] for r in rows}) == 1  # one day: clock is enough
    start = min(clock)
    return {
        "requests": len(rows),
        "input": sum(int(r["ContextTokens"]) for r in rows),
        "output": sum(int(r["GeneratedTokens"]) for r in rows),
        "duration_s": float(max(clock) - start),
        "arrival_s": [float(c - start) for c in clock],
    }


def test_real_azure(azure_code_path, azure_code_csv_path) -> None:
    """The Azure code trace (zstd): counts, sums and span (exact decimal seconds) as README says."""
    ref = _azure_reference(azure_code_csv_path)
    t = read_trace(azure_code_path)
    assert t.source_format == "azure"
    assert t.requests == ref["requests"] == 8_819
    assert sum(_col(t, "input_tokens")) == ref["input"]
    assert sum(_col(t, "output_tokens")) == ref["output"]
    assert ref["input"] / 8_819 == pytest.approx(2_047.8, abs=0.05)
    assert t.duration_s == pytest.approx(ref["duration_s"], abs=1e-6)
    assert round(t.duration_s, 1) == 3435.9
    got = _col(t, "arrival_s")
    assert max(abs(a - b) for a, b in zip(got, ref["arrival_s"], strict=True)) < 1e-6


# Every reader on real data: the Mooncake trace re-expressed in each source format with the
# stdlib, then read back; counts and sums must match the stdlib reference.


def _as_bailian(rows, path):
    with open(path, "w") as fh:
        for i, r in enumerate(rows):
            fh.write(
                json.dumps(
                    {
                        "chat_id": i,
                        "parent_chat_id": -1,
                        "timestamp": r["timestamp"] / 1000,
                        "input_length": r["input_length"],
                        "output_length": r["output_length"],
                        "type": "text",
                        "turn": 1,
                        "hash_ids": r["hash_ids"],
                    }
                )
                + "\n"
            )


def _as_canonical_csv(rows, path):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["arrival_s", "input_tokens", "output_tokens", "block_hashes"])
        for r in rows:
            w.writerow(
                [
                    r["timestamp"] / 1000,
                    r["input_length"],
                    r["output_length"],
                    " ".join(map(str, r["hash_ids"])),
                ]
            )


def _as_burstgpt(rows, path):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"]
        )
        for r in rows:
            w.writerow(
                [
                    r["timestamp"] / 1000,
                    "ChatGPT",
                    r["input_length"],
                    r["output_length"],
                    r["input_length"] + r["output_length"],
                    "Conversation log",
                ]
            )


def _as_azure(rows, path):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for r in rows:
            ms = r["timestamp"]
            s, frac = divmod(ms, 1000)
            h, rem = divmod(s, 3600)
            m, sec = divmod(rem, 60)
            w.writerow(
                [
                    f"2024-05-10 {h:02d}:{m:02d}:{sec:02d}.{frac:03d}0000",
                    r["input_length"],
                    r["output_length"],
                ]
            )


def _as_vllm(rows, path):
    run = {
        "model_id": "x",
        "duration": 1.0,
        "input_lens": [r["input_length"] for r in rows],
        "output_lens": [r["output_length"] for r in rows],
        "ttfts": [0.1] * len(rows),
        "itls": [[0.01]] * len(rows),
        "start_times": [r["timestamp"] / 1000 + 7.0 for r in rows],
        "errors": [""] * len(rows),
    }
    Path(path).write_text(json.dumps(run) + "\n")


def _as_sglang(rows, path):
    run = {
        "mean_e2e_latency_ms": 1.0,
        "details": {
            "input_lens": [r["input_length"] for r in rows],
            "output_lens": [r["output_length"] for r in rows],
            "ttfts": [0.1] * len(rows),
            "itls": [[0.01]] * len(rows),
        },
    }
    Path(path).write_text(json.dumps(run) + "\n")


def _as_llmperf(rows, path):
    Path(path).write_text(
        json.dumps(
            [
                {
                    "number_input_tokens": r["input_length"],
                    "number_output_tokens": r["output_length"],
                    "ttft_s": 0.1,
                    "end_to_end_latency_s": 0.2,
                    "error_code": None,
                    "error_msg": "",
                }
                for r in rows
            ]
        )
    )


REAL_AS = {
    "bailian": (_as_bailian, "m.jsonl", True, True),
    "csv": (_as_canonical_csv, "m.csv", True, True),
    "burstgpt": (_as_burstgpt, "m.csv", False, True),
    "azure": (_as_azure, "m.csv", False, True),
    "vllm": (_as_vllm, "m.json", False, True),
    "sglang": (_as_sglang, "m.jsonl", False, False),
    "llmperf": (_as_llmperf, "m.json", False, False),
}


@pytest.mark.parametrize("fmt", sorted(REAL_AS))
def test_every_reader_on_real_mooncake(fmt, mooncake_ref, tmp_path) -> None:
    """Each reader, on the real trace's 12,031 requests re-expressed in its format."""
    write, name, hashes, timed = REAL_AS[fmt]
    path = tmp_path / name
    write(mooncake_ref["rows"], path)
    t = read_trace(path, block_tokens=512 if fmt == "csv" else None)
    assert t.source_format == fmt
    assert t.requests == mooncake_ref["requests"]
    assert sum(_col(t, "input_tokens")) == mooncake_ref["input"]
    assert sum(_col(t, "output_tokens")) == mooncake_ref["output"]
    if hashes:
        assert int(t.hash_arrays()[0][-1]) == mooncake_ref["blocks"]
    if timed:
        assert t.duration_s == pytest.approx(mooncake_ref["duration_s"], abs=1e-6)
    else:
        assert not t.arrivals_measured and t.duration_s == 0.0
    assert math.isfinite(t.duration_s)


@pytest.mark.parametrize(
    "name, content, needle",
    [
        (
            "bench_type.json",
            {"model_id": "m", "input_lens": [1, "two"], "output_lens": [1, 2], "ttfts": [0, 0]},
            "row 1, column 'input_lens[1]': wrong_type: 'two' is not an integer",
        ),
        (
            # Parses (a list of text), then fails the kind check made after parsing.
            "bench_kind.json",
            {"model_id": "m", "input_lens": [1, 2], "output_lens": [1, 2], "ttfts": ["a", "b"]},
            "row 1, column 'ttfts[0]': wrong_type: 'a' is not a number (row = run object)",
        ),
        (
            "bench_scalar.json",
            {"model_id": "m", "input_lens": 5, "output_lens": [1], "ttfts": [0]},
            "row 1, column 'input_lens': wrong_type: 5 is not a list",
        ),
        (
            "bench_len.json",
            {"model_id": "m", "input_lens": [1, 2], "output_lens": [1, 2], "ttfts": [0.1]},
            "row 1, column 'ttfts': length_mismatch: 1 entries for 2 input_lens",
        ),
        (
            "perf.json",
            [{"number_input_tokens": 5, "number_output_tokens": "x"}],
            "row 1, column 'number_output_tokens': wrong_type: 'x' is not an integer",
        ),
        (
            "bail.jsonl",
            {
                "chat_id": "a",
                "parent_chat_id": -1,
                "timestamp": 1,
                "input_length": 1,
                "output_length": 1,
            },
            "row 1, column 'chat_id': wrong_type: 'a' is not an integer",
        ),
    ],
)
def test_source_format_cells_are_named(name, content, needle, tmp_path) -> None:
    """Bad cells in benchmark and Bailian files name the run/row and the key."""
    path = tmp_path / name
    path.write_text(json.dumps(content) + "\n")
    with pytest.raises(TraceSchemaError) as info:
        read_trace(path)
    assert needle in str(info.value)


def test_row_numbers_skip_blank_lines_consistently(tmp_path) -> None:
    """A blank line is not a row, whether pyarrow or the error-path scan finds the problem."""
    header = "arrival_s,input_tokens,output_tokens\n0,1,1\n\n1,2,2\n"
    for last, needle in (
        ("2,x,3\n", "row 3, column 'input_tokens': wrong_type"),
        ("2,-3,3\n", "row 3, column 'input_tokens': negative_value"),
    ):
        path = tmp_path / "t.csv"
        path.write_text(header + last)
        with pytest.raises(TraceSchemaError, match=needle):
            read_trace(path)
