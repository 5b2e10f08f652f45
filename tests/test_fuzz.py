"""Fuzz: random traces in every format, random YAML, random option values (issue 18).

The property, for every generated input: the command exits 0 with sane output, or exits 2 with
one ``error:`` line (``warning:`` lines may precede it); never a traceback, never any other
exit code, never past a time bound, never a changed input or a temporary file left behind.

Hypothesis runs derandomized (a fixed sequence of examples, no example database), with
bounded example counts, so the suite is deterministic and stays well under a minute on two
cores. Each generated value mixes ordinary numbers with the edge values that broke kvadvisor
before (NaN, infinities, int64 limits and beyond, negative, empty, Unicode, control
characters).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvadvisor.cli import main
from kvadvisor.errors import KvAdvisorError
from kvadvisor.facts import FACTS
from kvadvisor.io.yamlio import load_yaml
from kvadvisor.plan import load_plan
from kvadvisor.rules.loader import parse_rule

REPO = Path(__file__).resolve().parents[1]
SMALL = REPO / "sample_traces" / "vllm_bench_old.json"
# A generous bound for one command on a tiny input on a busy two-core machine.
MAX_SECONDS = 60.0


def fuzz_settings(examples: int) -> settings:
    """Deterministic, bounded hypothesis settings for one fuzz test."""
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# --- values -----------------------------------------------------------------------------------

EDGE_INTS = [
    0,
    1,
    -1,
    2**31,
    2**40 - 1,
    2**40,
    2**53 + 1,
    2**63 - 1,
    2**63,
    -(2**63),
    2**64,
    10**30,
]
EDGE_FLOATS = [0.0, -0.0, 0.5, 1e-300, 1e308, -1e308, 1.7e9, 1e12, math.inf, -math.inf, math.nan]
EDGE_TEXT = ["", " ", "x", "ü漢字", "\x1b[2J", "a\tb", "a,b", 'a"b', "a\nb", "\u2028", "-", "NaN"]

ints = st.one_of(st.integers(0, 100_000), st.sampled_from(EDGE_INTS))
floats = st.one_of(
    st.floats(0, 1e5, allow_nan=False), st.sampled_from(EDGE_FLOATS), st.integers(-5, 5)
)
texts = st.one_of(st.sampled_from(EDGE_TEXT), st.text(max_size=8))
cells = st.one_of(ints, floats, texts, st.none(), st.booleans())


def numberish(kind: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly the right kind of value, sometimes any cell at all."""
    return st.one_of(kind, kind, kind, cells)


# Valid values, edges included (0, the largest token count accepted, tiny and large times):
# a clean trace must get through every command.
clean_ints = st.one_of(st.integers(0, 100_000), st.sampled_from([0, 1, 2**31, 2**40 - 1]))
clean_floats = st.one_of(
    st.floats(0, 1e6, allow_nan=False), st.sampled_from([0.0, 1e-300, 0.5, 1e6])
)
clean_texts = st.one_of(st.sampled_from(["", "x", "ü漢字", "a b", "a,b"]), st.text(max_size=4))


# --- the property ----------------------------------------------------------------------------


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file()
    }


class Result:
    """What one in-process run of the console entry point gave."""

    def __init__(self, code: int, stdout: str, stderr: str, exception: BaseException | None):
        self.exit_code, self.stdout, self.stderr, self.exception = code, stdout, stderr, exception


def run_main(args: list[str]) -> Result:
    """``kvadvisor ARGS`` through the real entry point (parser errors included), in-process."""
    out, err = io.StringIO(), io.StringIO()
    code, exception = 0, None
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        mock.patch("sys.argv", ["kvadvisor", *args]),
    ):
        try:
            main()
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except BaseException as exc:  # the property under test: nothing else may escape
            code, exception = -1, exc
    return Result(code, out.getvalue(), err.getvalue(), exception)


def check_run(args: list[str], folder: Path, outputs: tuple[str, ...] = ()) -> int:
    """Run the CLI and check the property; the exit code."""
    before = _snapshot(folder)
    start = time.monotonic()
    result = run_main(args)
    elapsed = time.monotonic() - start
    assert elapsed < MAX_SECONDS, (args, elapsed)
    assert result.exception is None, (args, repr(result.exception), result.stderr[-2000:])
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-2000:]
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    if result.exit_code == 2:
        errors = [line for line in lines if line.startswith("error: ")]
        others = [line for line in lines if not line.startswith(("error: ", "warning: "))]
        assert len(errors) == 1 and not others, (args, lines)
        assert errors[0] == lines[-1], lines
    else:
        assert not any(line.startswith("error: ") for line in lines), lines
    after = _snapshot(folder)
    # Inputs unchanged; nothing new but the named outputs (no temporary file left).
    assert {k: v for k, v in after.items() if k not in outputs} == before, (args, before, after)
    return result.exit_code


# --- traces in every format --------------------------------------------------------------------

CANONICAL = ["arrival_s", "input_tokens", "output_tokens", "request_id", "ttft_s", "e2e_s", "ok"]


def _csv(header: list[str], rows: list[list[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(["" if v is None else v for v in row] for row in rows)
    return out.getvalue()


def _json(value: Any) -> str:
    return json.dumps(value, allow_nan=True, ensure_ascii=False)


@st.composite
def traces(draw: st.DrawFn) -> tuple[str, str | bytes]:
    """(file name, content) of a random trace in a random format."""
    n = draw(st.integers(1, 6))
    clean = draw(st.booleans())
    int_values = clean_ints if clean else numberish(ints)
    float_values = clean_floats if clean else numberish(floats)
    text_values = clean_texts if clean else texts
    fmt = draw(
        st.sampled_from(
            [
                "csv",
                "mooncake",
                "bailian",
                "azure",
                "burstgpt",
                "vllm",
                "sglang",
                "llmperf",
                "parquet",
            ]
        )
    )
    arrival = draw(st.lists(float_values, min_size=n, max_size=n))
    tokens_in = draw(st.lists(int_values, min_size=n, max_size=n))
    tokens_out = draw(st.lists(int_values, min_size=n, max_size=n))
    latency = draw(st.lists(float_values, min_size=n, max_size=n))
    names = draw(st.lists(text_values, min_size=n, max_size=n))
    hashes = draw(st.lists(st.lists(int_values, max_size=4), min_size=n, max_size=n))
    if fmt == "csv":
        header = draw(st.permutations(CANONICAL))
        columns = {
            "arrival_s": arrival,
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "request_id": names,
            "ttft_s": latency,
            "e2e_s": latency,
            "ok": draw(st.lists(st.booleans() if clean else cells, min_size=n, max_size=n)),
        }
        rows = [[columns[h][i] for h in header] for i in range(n)]
        return "t.csv", _csv(list(header), rows)
    if fmt in ("mooncake", "bailian"):
        lines = []
        for i in range(n):
            record = {
                "timestamp": arrival[i],
                "input_length": tokens_in[i],
                "output_length": tokens_out[i],
                "hash_ids": hashes[i],
            }
            if fmt == "bailian":
                record.update(chat_id=tokens_in[i], parent_chat_id=-1, type=names[i], turn=1)
            lines.append(_json(record))
        return "t.jsonl", "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n{"]))
    if fmt == "azure":
        stamps = [f"2023-11-16 18:{i % 60:02d}:0{i % 10}.0000000" for i in range(n)]
        stamps[0] = draw(st.sampled_from([stamps[0], "", "not a time", "9999-99-99"]))
        rows = [[stamps[i], tokens_in[i], tokens_out[i]] for i in range(n)]
        return "t.csv", _csv(["TIMESTAMP", "ContextTokens", "GeneratedTokens"], rows)
    if fmt == "burstgpt":
        rows = [[arrival[i], names[i], tokens_in[i], tokens_out[i], 0, "log"] for i in range(n)]
        header = [
            "Timestamp",
            "Model",
            "Request tokens",
            "Response tokens",
            "Total tokens",
            "Log Type",
        ]
        return "t.csv", _csv(header, rows)
    if fmt in ("vllm", "sglang"):
        arrays = {
            "input_lens": tokens_in,
            "output_lens": tokens_out,
            "ttfts": latency,
            "start_times": arrival,
            "errors": ["" if not isinstance(x, str) else x for x in names],
        }
        if fmt == "vllm":
            return "v.json", _json({"model_id": "m", **arrays})
        return "s.jsonl", _json({"mean_e2e_latency_ms": 1.0, "details": arrays}) + "\n"
    if fmt == "llmperf":
        records = [
            {
                "number_input_tokens": tokens_in[i],
                "number_output_tokens": tokens_out[i],
                "ttft_s": latency[i],
                "end_to_end_latency_s": latency[i],
                "error_code": None,
                "error_msg": names[i] if isinstance(names[i], str) else "",
            }
            for i in range(n)
        ]
        return "r.json", _json(records)

    # Canonical parquet: arrow types chosen by the values (mixed kinds become strings).
    def column(values: list[Any]) -> pa.Array:
        try:
            return pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            return pa.array([None if v is None else str(v) for v in values])

    table = pa.table(
        {
            "arrival_s": column(arrival),
            "input_tokens": column(tokens_in),
            "output_tokens": column(tokens_out),
            "request_id": column(names),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return "t.parquet", sink.getvalue().to_pybytes()


def _write(folder: Path, name: str, content: str | bytes) -> Path:
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
    return path


@fuzz_settings(80)
@given(traces())
def test_fuzz_info_on_random_traces(trace: tuple[str, str | bytes]) -> None:
    """`info` reads any generated trace: a description, or one error line."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _write(folder, *trace)
        code = check_run(["info", str(path)], folder)
        assert code in (0, 2)


PLAN = REPO / "examples" / "plans" / "good-p5e-prefill-p5-decode.yaml"


@fuzz_settings(12)
@given(traces(), st.sampled_from(["analyze", "review", "convert"]))
def test_fuzz_commands_on_random_traces(trace: tuple[str, str | bytes], command: str) -> None:
    """analyze, review and convert on any generated trace: their output whole, or one error."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _write(folder, *trace)
        out = {"analyze": "report.json", "review": "review.md", "convert": "out.parquet"}[command]
        args = {
            "analyze": ["analyze", str(path), "-q", "-o", str(folder / out)],
            "review": ["review", str(path), "--plan", str(PLAN), "-o", str(folder / out)],
            "convert": ["convert", str(path), "-o", str(folder / out)],
        }[command]
        code = check_run(args, folder, (out,))
        if code == 2:
            assert not (folder / out).exists()
        elif command == "analyze":
            assert json.loads((folder / out).read_text())["trace"]["requests"] >= 1
        elif command == "convert":
            assert pq.read_metadata(folder / out).num_rows >= 1
        else:
            assert (folder / out).read_text().startswith("## kvadvisor review")


# --- YAML: plans, rules, catalogs --------------------------------------------------------------

HOSTILE_YAML = [
    "1e400",
    "1.0e+400",
    ".inf",
    "-.inf",
    ".nan",
    "123456789012345678901234567890",
    "-1",
    "0",
    "0.0",
    "''",
    '""',
    "null",
    "[]",
    "{}",
    "[1, [2, [3]]]",
    '"\\e[2J"',
    '"\\x00"',
    "!!binary aGk=",
    "!!python/object/apply:os.system ['true']",
    "&a 1",
    "*a",
    "2 TB",
    "0 GB/s",
    "1e400 GB",
    "-5 s",
    "yes",
    "2026-13-01",
    "|\n  multi",
    "ü漢字",
    "{a: 1, a: 2}",
    "x" * 300,
]


def _mutate(text: str, draw: st.DrawFn) -> str:
    """A document with some lines' values replaced, duplicated or removed."""
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        candidates = [
            i for i, line in enumerate(lines) if ":" in line and not line.lstrip().startswith("#")
        ]
        if not candidates:
            break
        i = draw(st.sampled_from(candidates))
        action = draw(st.sampled_from(["value", "value", "duplicate", "delete"]))
        if action == "value":
            key = lines[i].split(":", 1)[0]
            lines[i] = f"{key}: {draw(st.sampled_from(HOSTILE_YAML))}"
        elif action == "duplicate":
            lines.insert(i + 1, lines[i])
        else:
            del lines[i]
    return "\n".join(lines) + "\n"


PLAN_TEXT = (REPO / "examples" / "plans" / "good-p5e-prefill-p5-decode.yaml").read_text()
RULE_TEXT = (REPO / "rules" / "cache" / "CA01-read-less-first.yaml").read_text()
CATALOG_TEXT = """kind: storage
sources:
  S1: "a source"
entries:
  fuzz-disk:
    category: local_nvme
    provider: generic
    read_mbps: 3000
    write_mbps: 1500
    read_iops: 500000
    write_iops: 100000
    read_latency_us: 80
    io_unit_bytes: 4096
    capacity_max_gib: 7000
    as_of: 2026-01-01
    source: [S1]
"""


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, str]:
    """(kind, text): a plan, a rule or a catalog with random hostile mutations."""
    kind = draw(st.sampled_from(["plan", "rule", "catalog"]))
    base = {"plan": PLAN_TEXT, "rule": RULE_TEXT, "catalog": CATALOG_TEXT}[kind]
    return kind, _mutate(base, draw)


@fuzz_settings(120)
@given(documents())
def test_fuzz_yaml_loaders(document: tuple[str, str]) -> None:
    """Every loader answers a mutated document with its data or one KvAdvisorError line."""
    from kvadvisor.catalog.storage import load_storage

    kind, text = document
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{kind}.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            if kind == "plan":
                load_plan(path)
            elif kind == "rule":
                parse_rule(load_yaml(path, KvAdvisorError), str(path), FACTS)
            else:
                load_storage([path])
        except KvAdvisorError as exc:
            assert "\n" not in str(exc), str(exc)


@fuzz_settings(8)
@given(documents())
def test_fuzz_yaml_through_the_cli(document: tuple[str, str]) -> None:
    """The same documents through review, rules check and catalog list: the CLI property."""
    kind, text = document
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trace = _write(folder, "v.json", SMALL.read_bytes())
        if kind == "plan":
            plan = _write(folder, "plan.yaml", text)
            check_run(["review", str(trace), "--plan", str(plan)], folder)
        elif kind == "rule":
            rules = folder / "rules"
            rules.mkdir()
            _write(
                rules,
                "XX01.yaml",
                text.replace("code: CA01", "code: XX01").replace(
                    "name: cache.read_less_first", "name: fuzz.rule"
                ),
            )
            check_run(["rules", "check", str(rules)], folder)
        else:
            catalog = _write(folder, "c.yaml", text)
            check_run(["catalog", "list", "--catalog", str(catalog)], folder)


# --- option values -----------------------------------------------------------------------------

OPTION_VALUES = st.one_of(
    st.sampled_from(
        [
            "0",
            "-1",
            "1",
            "3",
            "0.001",
            "1e-300",
            "1e308",
            "inf",
            "-inf",
            "nan",
            "2147483648",
            str(2**63),
            str(2**70),
            "",
            " ",
            "abc",
            "\x1b[2J",
            "ü",
            "1e400",
            "0x10",
            "1_000",
        ]
    ),
    st.integers(-10, 10_000).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
ANALYZE_OPTIONS = [
    "--window",
    "--instances",
    "--tp",
    "--cache-instances",
    "--chunk-tokens",
    "--block-tokens",
    "--warmup-fraction",
    "--cache-sample-rate",
    "--io-unit",
    "--drive-capacity",
    "--model",
    "--gpu",
    "--storage",
    "--instance",
    "--cache-tier",
    "--memory-limit",
    "--map",
    "--select",
]
SYNTH_OPTIONS = [
    "--seed",
    "--rate",
    "--burst-cv",
    "--diurnal-amplitude",
    "--diurnal-period",
    "--input-median",
    "--input-sigma",
    "--output-median",
    "--output-sigma",
    "--sessions",
    "--session-zipf",
    "--requests-per-session",
    "--system-prompts",
    "--system-prompt-zipf",
    "--system-prompt-median",
    "--block-tokens",
    "--chunk-rows",
]


@fuzz_settings(20)
@given(st.lists(st.tuples(st.sampled_from(ANALYZE_OPTIONS), OPTION_VALUES), min_size=1, max_size=3))
def test_fuzz_analyze_options(options: list[tuple[str, str]]) -> None:
    """Random values for analyze's options: a report or one error line, never a hang."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trace = _write(folder, "v.json", SMALL.read_bytes())
        args = ["analyze", str(trace), "-q", "--format", "json"]
        for option, value in options:
            args += [option, value]
        check_run(args, folder)


@fuzz_settings(20)
@given(st.lists(st.tuples(st.sampled_from(SYNTH_OPTIONS), OPTION_VALUES), min_size=1, max_size=3))
def test_fuzz_synth_options(options: list[tuple[str, str]]) -> None:
    """Random values for synth's options (200 requests): a parquet file, or one error line."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        args = ["synth", "-o", str(folder / "s.parquet"), "--requests", "200"]
        for option, value in options:
            args += [option, value]
        if check_run(args, folder, ("s.parquet",)) == 0:
            assert pq.read_metadata(folder / "s.parquet").num_rows == 200
