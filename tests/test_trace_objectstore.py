"""Object-store input: a hive-partitioned trace in a real S3 API (moto's server) reads as local.

The server runs on localhost for the session (moto's server mode: the S3 REST API over HTTP,
which pyarrow's S3 filesystem talks to as to AWS); credentials reach it only through the
environment, as they would in production. The dataset is the Mooncake sample trace cut into
six 10-minute hive partitions of two overlapping shards each (even and odd seconds), in row
groups of 500, so the stream must merge shards by arrival and may skip row groups. Requests
that arrive at the same time (10,851 of the trace's 12,031 share a timestamp with the one
before) stay in one shard, so the merge can give back the trace's own order.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from cli_checks import one_error_line
from conftest import MOONCAKE_TRACE, REPO, SAMPLES
from typer.testing import CliRunner

from kvadvisor.cli import app
from kvadvisor.errors import ConfigError, TraceNotFoundError
from kvadvisor.pipeline.streaming import plan_analysis, plan_for_stream
from kvadvisor.trace.location import locate, redacted
from kvadvisor.trace.stream import open_trace_stream

BUCKET = "kvadvisor-traces"
PARTITION_S = 600.0
ROW_GROUP_ROWS = 500
# A cheap analysis: one cache, no closed-loop replay, one provider's search.
LEAN = ["--cache-instances", "1", "--no-replay", "--provider", "onprem", "-q"]
SINCE_S, UNTIL_S = 900.0, 2100.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _skip_or_fail(why: str) -> None:
    if os.environ.get("CI") == "true":  # .ci/run installs the test extra: there it must run
        pytest.fail(f"the local S3 server did not start: {why}")
    pytest.skip(
        f"needs a local S3 API: {why} (pip install 'moto[server]', part of the test extra; "
        "with CI=true this fails instead)"
    )


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory):
    """The S3 server (moto) on a free localhost port; the AWS environment points clients at it."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        _skip_or_fail(f"moto's server mode cannot be imported ({exc})")
    port = _free_port()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    try:
        server.start()
    except Exception as exc:  # whatever stops it, the test says so
        _skip_or_fail(f"moto's server did not start on port {port} ({exc})")
    empty = tmp_path_factory.mktemp("aws") / "none"
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        # The user's own profiles and the instance-metadata lookup stay out of the test.
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("AWS_PROFILE", raising=False)
        mp.delenv("AWS_SESSION_TOKEN", raising=False)
        for key, value in env.items():
            mp.setenv(key, value)
        yield env["AWS_ENDPOINT_URL"]
    server.stop()


@pytest.fixture(scope="module")
def sample() -> pa.Table:
    """The Mooncake sample trace as stored (arrival_s from 0, 12,031 requests)."""
    return pq.read_table(MOONCAKE_TRACE)


@pytest.fixture(scope="module")
def hive(sample, tmp_path_factory) -> Path:
    """Six hive partitions (window=0..5) of two overlapping shards each, row groups of 500."""
    root = tmp_path_factory.mktemp("hive") / "traces"
    arrival = sample["arrival_s"].to_numpy()
    window = np.floor(arrival / PARTITION_S).astype(int)
    second = np.floor(arrival).astype(int)
    for w in np.unique(window):
        folder = root / f"window={w}"
        folder.mkdir(parents=True)
        for shard in (0, 1):
            rows = np.flatnonzero((window == w) & (second % 2 == shard))
            part = sample.take(pa.array(rows))
            pq.write_table(part, folder / f"part-{shard}.parquet", row_group_size=ROW_GROUP_ROWS)
    return root


@pytest.fixture(scope="module")
def bucket(s3_endpoint, hive) -> str:
    """The hive dataset uploaded through pyarrow's S3 filesystem: s3://BUCKET/traces/."""
    import boto3
    from pyarrow import fs

    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=BUCKET)
    s3, _ = fs.FileSystem.from_uri(f"s3://{BUCKET}/")
    fs.copy_files(str(hive), f"{BUCKET}/traces", destination_filesystem=s3)
    return f"s3://{BUCKET}/traces/"


def _analyze(tmp_path: Path, name: str, *args: str) -> dict:
    out = tmp_path / f"{name}.json"
    res = CliRunner().invoke(app, ["analyze", *args, *LEAN, "-o", str(out)])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def _figures(report: dict) -> dict:
    """The report less what names the source (its path, hash, notes) and the clock."""
    trace = report["trace"]
    body = {k: v for k, v in report.items() if k not in ("generated_at", "trace")}
    # The recommended plan's description names the trace it was made for.
    text = json.dumps(body).replace(trace["path"].rstrip("/") + "/", "TRACE")
    text = text.replace(trace["path"].rstrip("/"), "TRACE")
    figures = {k: v for k, v in trace.items() if k not in ("path", "sha256", "notes")}
    return {"trace": figures, **json.loads(text)}


def test_the_dataset_has_many_partitions_and_overlapping_shards(hive, sample) -> None:
    """The fixture is what the tests claim: 6 partitions, 12 files, shards overlapping in time."""
    files = sorted(hive.glob("window=*/*.parquet"))
    assert len(files) == 12
    assert sum(pq.read_metadata(f).num_rows for f in files) == sample.num_rows == 12031
    even, odd = (pq.read_table(hive / "window=0" / f"part-{s}.parquet") for s in (0, 1))
    assert pc.max(even["arrival_s"]).as_py() > pc.min(odd["arrival_s"]).as_py()


def test_s3_stream_is_the_local_stream(bucket, hive, sample) -> None:
    """Batches streamed from S3 (shards merged by arrival) equal the local directory's."""
    remote = open_trace_stream(bucket, batch_rows=300)
    local = open_trace_stream(hive, batch_rows=300)
    assert remote.requests == local.requests == 12031
    assert remote.files == tuple(
        f"s3://{BUCKET}/traces/{Path(f).relative_to(hive)}" for f in local.files
    )
    assert len(remote._clusters) < len(remote.files)  # overlapping shards: merged
    got = pa.Table.from_batches(list(remote))
    want = pa.Table.from_batches(list(local))
    assert got.equals(want)
    assert got.equals(sample.select(list(remote.columns)).replace_schema_metadata(None))
    # One object, not a prefix: read as the local file is.
    one = open_trace_stream(f"s3://{BUCKET}/traces/window=2/part-1.parquet")
    assert one.requests == pq.read_metadata(hive / "window=2" / "part-1.parquet").num_rows
    assert one.read_all().table.equals(
        open_trace_stream(hive / "window=2" / "part-1.parquet").read_all().table
    )


def test_info_reads_a_uri_as_the_local_directory(bucket, hive) -> None:
    """`kvadvisor info s3://...` describes the trace as `info DIR` does, but for its name."""
    remote = CliRunner().invoke(app, ["info", bucket])
    local = CliRunner().invoke(app, ["info", str(hive)])
    assert remote.exit_code == 0 and local.exit_code == 0, remote.output + local.output
    assert "12,031" in remote.stdout and bucket in remote.stdout
    assert remote.stdout.replace(bucket, "TRACE") == local.stdout.replace(str(hive), "TRACE")


def test_review_reads_a_uri_as_the_local_directory(bucket, hive, tmp_path) -> None:
    """`kvadvisor review s3://... --plan P` gives the local directory's review, word for word."""
    plan = str(REPO / "examples" / "plans" / "good-p5e-prefill-p5-decode.yaml")
    outs = []
    for name, trace in (("s3", bucket), ("local", str(hive))):
        out = tmp_path / f"{name}.md"
        res = CliRunner().invoke(app, ["review", trace, "--plan", plan, "-o", str(out)])
        assert res.exit_code in (0, 1), res.output  # 1: findings, as the plan may have
        outs.append(out.read_text().replace(trace, "TRACE"))
    assert outs[0] == outs[1]
    assert "12,031" in outs[0]


def test_analyze_s3_equals_the_local_directory(bucket, hive, tmp_path) -> None:
    """`analyze s3://bucket/traces/ --workers 2` equals the local directory's report.

    Figure for figure: the shards read from S3 and merged by arrival here, the search's replays
    on a local Dask cluster of 2 processes, against the local directory in one process.
    """
    remote = _analyze(tmp_path, "s3", bucket, "--workers", "2")
    local = _analyze(tmp_path, "local", str(hive))
    assert remote["trace"]["path"] == bucket
    assert remote["trace"]["sha256"] is None
    assert remote["trace"]["requests"] == local["trace"]["requests"] == 12031
    assert _figures(remote) == _figures(local)
    assert remote["trace"]["notes"] == local["trace"]["notes"]


def test_streamed_past_the_memory_limit_s3_equals_local(bucket, hive, tmp_path) -> None:
    """Larger than --memory-limit: S3 streams batch by batch too, to the local stream's report."""
    stream = open_trace_stream(bucket)
    sizes = plan_analysis(stream.requests, stream.block_accesses, stream.table_bytes, 1 << 50)
    # Between the two estimates: too large to read whole, small enough for the exact curve.
    limit = (sizes.estimated_exact_stream_bytes + sizes.estimated_in_memory_bytes) // 2
    plan = plan_for_stream(stream, limit)
    assert plan.mode == "streaming" and plan.sample_rate is None
    remote = _analyze(tmp_path, "s3", bucket, "--memory-limit", str(limit))
    local = _analyze(tmp_path, "local", str(hive), "--memory-limit", str(limit))
    assert remote["prefix_cache"]["status"] == "exact"
    assert remote["trace"]["requests"] == 12031
    assert _figures(remote) == _figures(local)


def test_since_until_equals_a_hand_filtered_trace(bucket, sample, tmp_path) -> None:
    """--since/--until on S3 gives the report of the rows in the range, written out by hand."""
    arrival = sample["arrival_s"].to_numpy()
    keep = (arrival >= SINCE_S) & (arrival < UNTIL_S)
    by_hand = tmp_path / "traces.parquet"  # the name the recommended plan takes, as S3's
    pq.write_table(sample.filter(pa.array(keep)), by_hand)
    ranged = _analyze(tmp_path, "ranged", bucket, "--since", str(SINCE_S), "--until", str(UNTIL_S))
    want = _analyze(tmp_path, "by_hand", str(by_hand))
    assert ranged["trace"]["requests"] == want["trace"]["requests"] == int(keep.sum()) == 4030
    assert _figures(ranged) == _figures(want)
    assert ranged["trace"]["notes"] == [
        "--since 900 --until 2100: 4,030 of 12,031 requests kept (arrival_s as stored; row "
        "groups outside the range were not read)",
        "read from 6 parquet files",  # windows 1-3 (600-2400 s), two shards each
        "arrival_s shifted by 902.999000 s so the first request arrives at 0",
    ]


def test_the_range_skips_row_groups_outside_it(bucket, hive, sample) -> None:
    """Row groups wholly outside the range are never read; the partial ones are cut exactly."""
    stream = open_trace_stream(bucket, since_s=SINCE_S, until_s=UNTIL_S)
    kept = [f for cluster in stream._clusters for f in cluster]
    # Partitions 0 (0-600 s) and 4, 5 (2400 s on) hold no row in the range: not even listed.
    assert {Path(f.path).parent.name for f in kept} == {"window=1", "window=2", "window=3"}
    read = sum(len(f.row_groups) for f in kept)
    in_kept_files = sum(
        pq.read_metadata(hive / Path(f.path).relative_to(f"{BUCKET}/traces")).num_row_groups
        for f in kept
    )
    assert read < in_kept_files
    arrival = pa.Table.from_batches(list(stream))["arrival_s"].to_numpy()
    want = np.sort(sample["arrival_s"].to_numpy())
    want = want[(want >= SINCE_S) & (want < UNTIL_S)]
    np.testing.assert_array_equal(arrival, want - want[0])


def test_missing_bucket_or_prefix_is_one_line(bucket) -> None:
    """A bucket or prefix that is not there: exit 2, one line naming it."""
    for uri in ("s3://no-such-bucket-kvadvisor/traces/", f"s3://{BUCKET}/no/such/prefix/"):
        res = CliRunner().invoke(app, ["analyze", uri, "-q"])
        one_error_line(res, uri, "no such bucket, object or prefix")
    with pytest.raises(TraceNotFoundError):
        open_trace_stream(f"s3://{BUCKET}/nothing-here")


def test_credentials_in_a_uri_are_refused_and_never_shown() -> None:
    """A key in the URI's user part or its query: refused, and the secret not echoed."""
    for uri in (
        "s3://AKIAEXAMPLE:s3cr3tv4lue@bucket/traces/",
        "s3://bucket/traces/?access_key=AKIAEXAMPLE&secret_key=s3cr3tv4lue",
        "gs://bucket/traces/?access_token=s3cr3tv4lue",
    ):
        res = CliRunner().invoke(app, ["analyze", uri, "-q"])
        line = one_error_line(res, "refused")
        assert "s3cr3tv4lue" not in res.output and "AKIAEXAMPLE" not in res.output
        assert "s3cr3tv4lue" not in line
    assert redacted("s3://a:b@bucket/x?secret_key=c") == "s3://***@bucket/x?***"
    # Where the service is may be said in the URI; who the caller is may not.
    with pytest.raises(ConfigError, match="session_token"):
        locate("s3://bucket/x?region=us-east-1&session_token=abc")


def test_unknown_scheme_and_az_without_adlfs(monkeypatch) -> None:
    """http:// is no trace location; az:// without the [cloud] extra says how to get it."""
    res = CliRunner().invoke(app, ["analyze", "http://example.com/trace.parquet", "-q"])
    one_error_line(res, "http:// is not a trace location", "s3://, gs://, az://")
    monkeypatch.setitem(sys.modules, "adlfs", None)  # as if not installed
    res = CliRunner().invoke(app, ["analyze", "az://container/traces/", "-q"])
    one_error_line(res, "az://container/traces/", "adlfs", "kvadvisor[cloud]")


def test_since_until_need_canonical_parquet_and_a_range(tmp_path) -> None:
    """A range on a JSONL trace, or an empty range: exit 2, one line each."""
    jsonl = str(SAMPLES / "mooncake_conversation_head.jsonl.gz")
    res = CliRunner().invoke(app, ["analyze", jsonl, "--since", "10", "-q"])
    one_error_line(res, "--since/--until select rows of canonical parquet", "convert")
    res = CliRunner().invoke(
        app, ["analyze", str(MOONCAKE_TRACE), "--since", "20", "--until", "10", "-q"]
    )
    one_error_line(res, "--since 20 --until 10", "empty")
    res = CliRunner().invoke(app, ["analyze", str(MOONCAKE_TRACE), "--since", "99999", "-q"])
    one_error_line(res, "no request arrives in --since 99999", "12,031 requests")
