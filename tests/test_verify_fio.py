"""The generated fio jobs run by the real fio: the measured pattern is the one each job asks for.

One folder is generated for a small disk plan and ``run-fio.sh`` runs it for 4 s a phase
(about 24 s in all) against a file on disk, in the background from the test run's start
(tests/fio_prerun.py); every test reads that real JSON output. Direct I/O
needs a file system that takes O_DIRECT: the first candidate directory that does is used, and
if none does the run falls back to buffered I/O with a warning saying so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import fio_prerun
import pytest
from analysis_cache import device_to_itself
from cli_checks import one_error_line
from typer.testing import CliRunner
from verify_fixtures import DISK_PLAN, write_bursty_trace

from kvadvisor.catalog.storage import load_storage
from kvadvisor.cli import EXIT_FINDINGS, EXIT_OK, app
from kvadvisor.plan import PlanCatalogs, load_plan

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
FIO = shutil.which("fio")
_direct_io_dir = fio_prerun.direct_io_dir  # the striped and gate tests import it from here


@pytest.fixture(scope="session")
def fio_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The jobs for the disk plan, run once with the real fio (tests/fio_prerun.py's run)."""
    if FIO is None:
        if os.environ.get("CI"):
            pytest.fail("fio is not installed (`.ci/run` installs Debian's fio)")
        pytest.skip("fio is not installed: apt-get install fio")
    here = tmp_path_factory.mktemp("verify-fio")
    out = fio_prerun.result("plain", here, lambda: device_to_itself(tmp_path_factory))
    for said in out["warnings"]:
        warnings.warn(said, stacklevel=1)
    folder = Path(out["folder"])
    doc = json.loads((folder / "results" / "prefill.disk.json").read_text())
    return {
        "base": Path(out["base"]),
        "trace": Path(out["trace"]),
        "plan": Path(out["plan"]),
        "folder": folder,
        "manifest": json.loads((folder / "verify.json").read_text()),
        "doc": doc,
        "generated": out["generated"],
        "jobs": {j["jobname"]: j for j in doc["jobs"]},
    }


def _spec(run: dict) -> dict:
    (spec,) = run["manifest"]["fio"]
    return spec


def test_every_phase_ran_with_the_job_sets_description(fio_run: dict) -> None:
    """Every phase is one fio entry, named as the manifest says, carrying the job set."""
    names = [p["name"] for p in _spec(fio_run)["phases"]]
    assert list(fio_run["jobs"]) == names
    assert names[:2] == ["prefill.disk.max-write", "prefill.disk.max-read"]
    set_id = fio_run["manifest"]["job_set_id"]
    assert all(j["desc"] == f"kvadvisor job-set {set_id}" for j in fio_run["jobs"].values())
    assert "direct=1" in fio_run["generated"]


def test_io_size_is_the_chunk(fio_run: dict) -> None:
    """Every I/O fio completed is one 256-token chunk of 256 B/token: 65,536 bytes."""
    assert _spec(fio_run)["io_bytes"] == 256 * 256
    for job in fio_run["jobs"].values():
        for direction in ("read", "write"):
            d = job[direction]
            if d["total_ios"]:
                assert d["io_bytes"] / d["total_ios"] == 256 * 256, (job["jobname"], direction)


@pytest.mark.parametrize("phase", ["p99", "peak"])
def test_rate_limits_hold_to_the_rate_asked(fio_run: dict, phase: str) -> None:
    """Capped phases move what the manifest requires per direction (fio rate, within 3%)."""
    spec = next(p for p in _spec(fio_run)["phases"] if p["phase"] == phase)
    job = fio_run["jobs"][spec["name"]]
    for direction, rate in spec["rates_bytes_per_s"].items():
        assert job[direction]["bw_bytes"] == pytest.approx(rate, rel=0.03), direction


def test_read_write_mix_is_the_demands(fio_run: dict) -> None:
    """The p99 phase's read share of bytes is the one its two rates give."""
    spec = next(p for p in _spec(fio_run)["phases"] if p["phase"] == "p99")
    rates = spec["rates_bytes_per_s"]
    job = fio_run["jobs"][spec["name"]]
    want = rates["read"] / (rates["read"] + rates["write"])
    got = job["read"]["bw_bytes"] / (job["read"]["bw_bytes"] + job["write"]["bw_bytes"])
    assert got == pytest.approx(want, abs=0.02)
    mix = re.search(r"rwmixread=(\d+)", fio_run["generated"].split("[prefill.disk.p99]")[1])
    assert mix is not None and int(mix.group(1)) == round(100 * want)


def test_burst_phase_runs_between_off_and_on_rates(fio_run: dict) -> None:
    """The burst group moves at least its always-on rate and no more than base plus burst."""
    spec = next(p for p in _spec(fio_run)["phases"] if p["phase"] == "burst")
    job = fio_run["jobs"][spec["name"]]
    for direction, burst in spec["bursts"].items():
        base = spec["rates_bytes_per_s"].get(direction, 0.0)
        got = job[direction]["bw_bytes"]
        assert base * 0.97 <= got <= (base + burst["extra_bytes_per_s"]) * 1.03, direction


def test_unthrottled_phases_measure_the_device(fio_run: dict) -> None:
    """max-write and max-read run without a rate and beat every capped phase's rate."""
    for direction in ("write", "read"):
        job = fio_run["jobs"][f"prefill.disk.max-{direction}"]
        assert "rate" not in job["job options"]
        capped = max(p["rates_bytes_per_s"].get(direction, 0) for p in _spec(fio_run)["phases"])
        assert job[direction]["bw_bytes"] > capped


def test_results_pass_and_write_a_loadable_catalog(fio_run: dict, tmp_path: Path) -> None:
    """`verify --results` passes every phase and its catalog loads and feeds a plan."""
    out = tmp_path / "measured.yaml"
    report = tmp_path / "report.json"
    result = runner.invoke(
        app, ["verify", "--results", str(fio_run["folder"]), "-o", str(out), "-o", str(report)]
    )
    assert result.exit_code == EXIT_OK, result.output
    assert "every measured check passes" in result.output
    check = runner.invoke(app, ["catalog", "check", str(out)])
    assert check.exit_code == EXIT_OK, check.output
    specs = load_storage([out])
    (name,) = [n for n in specs if n.startswith("measured-tiny-disk")]
    write = fio_run["jobs"]["prefill.disk.max-write"]["write"]["bw_bytes"]
    assert specs[name].write_mbps == pytest.approx(write / 1e6, abs=0.1)
    doc = json.loads(report.read_text())
    assert {p["status"] for p in doc["phases"]} == {"pass", "info"}
    # The measured entry used by name in a plan: its figures become the tier's capability.
    plan = tmp_path / "measured-plan.yaml"
    plan.write_text(
        DISK_PLAN.replace(
            "storage: {kind: ssd, read_bandwidth: 200 MB/s, write_bandwidth: 200 MB/s, "
            "latency: 100 us}",
            f"storage: {name}",
        )
    )
    loaded = load_plan(plan, PlanCatalogs.packaged((str(out),)))
    tier = loaded.stages[0].tiers[0]
    assert tier.storage.write_bytes_per_s == pytest.approx(specs[name].write_mbps * 1e6)


def test_review_gates_on_measured_results(fio_run: dict, tmp_path: Path) -> None:
    """`review --results` adds the VF01 checks; an SLO-tight copy fails them: exit 1."""
    args = ["review", str(fio_run["trace"]), "--plan", str(fio_run["plan"])]
    junit = tmp_path / "r.xml"
    result = runner.invoke(app, [*args, "--results", str(fio_run["folder"]), "--junit", str(junit)])
    assert result.exit_code == EXIT_OK, result.output
    assert junit.read_text().count('name="VF01.prefill.disk.') == 5
    # The same measured latencies against a target they cannot meet.
    tight = tmp_path / "tight"
    shutil.copytree(fio_run["folder"], tight)
    manifest = json.loads((tight / "verify.json").read_text())
    for phase in manifest["fio"][0]["phases"]:
        if phase["phase"] == "p99":
            phase["latency_target_s"] = {"read": 1e-9}
    (tight / "verify.json").write_text(json.dumps(manifest))
    result = runner.invoke(app, [*args, "--results", str(tight)])
    assert result.exit_code == EXIT_FINDINGS, result.output
    assert "p99 completion latency" in result.output


def test_fio_json_from_another_job_set_is_refused(fio_run: dict, tmp_path: Path) -> None:
    """Results of one job set copied into another's folder: exit 2 naming both sets."""
    plan = tmp_path / "other.yaml"
    plan.write_text(DISK_PLAN.replace("name: tiny-disk", "name: other-disk"))
    other = tmp_path / "other"
    result = runner.invoke(
        app, ["verify", str(fio_run["trace"]), "--plan", str(plan), "-o", str(other)]
    )
    assert result.exit_code == EXIT_OK, result.output
    (other / "results").mkdir()
    shutil.copy(fio_run["folder"] / "results" / "prefill.disk.json", other / "results")
    result = runner.invoke(app, ["verify", "--results", str(other)])
    theirs = fio_run["manifest"]["job_set_id"]
    ours = json.loads((other / "verify.json").read_text())["job_set_id"]
    one_error_line(result, "prefill.disk.json", f"ran job set {theirs}", f"is {ours}")


def test_truncated_fio_json_is_refused(fio_run: dict, tmp_path: Path) -> None:
    """An interrupted run's half-written JSON: exit 2 naming the file and the line."""
    copy = tmp_path / "copy"
    shutil.copytree(fio_run["folder"], copy)
    path = copy / "results" / "prefill.disk.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    result = runner.invoke(app, ["verify", "--results", str(copy)])
    one_error_line(result, "prefill.disk.json", "not valid JSON at line", "truncated")


def test_a_phase_severity_outside_the_vocabulary_is_refused(fio_run: dict, tmp_path: Path) -> None:
    """A hand-edited manifest severity: exit 2 naming the phase and the severities there are."""
    copy = tmp_path / "copy"
    shutil.copytree(fio_run["folder"], copy)
    manifest = json.loads((copy / "verify.json").read_text())
    phase = manifest["fio"][0]["phases"][0]
    phase["severity"] = "fatal"
    (copy / "verify.json").write_text(json.dumps(manifest))
    result = runner.invoke(app, ["verify", "--results", str(copy)])
    one_error_line(result, f"'{phase['name']}'", "severity 'fatal'", "info, warning, error")


def test_stray_fio_output_of_another_set_is_refused(fio_run: dict, tmp_path: Path) -> None:
    """A fio JSON under another name in results/ must still be of this job set."""
    copy = tmp_path / "copy"
    shutil.copytree(fio_run["folder"], copy)
    doc = dict(fio_run["doc"])
    doc["jobs"] = [dict(j, desc="kvadvisor job-set 000000000000") for j in doc["jobs"]]
    (copy / "results" / "old-run.json").write_text(json.dumps(doc))
    result = runner.invoke(app, ["verify", "--results", str(copy)])
    one_error_line(result, "old-run.json", "job set 000000000000", "remove it")


def test_gds_variant_differs_only_in_engine_and_jobs(tmp_path: Path) -> None:
    """The libcufile file is the libaio one with the engine swapped and depth run as jobs.

    Debian's fio has no libcufile, so the variant cannot run here: with its engine lines put
    back to libaio, fio must parse it, which checks every other option.
    """
    if FIO is None:
        pytest.skip("fio is not installed")
    trace = write_bursty_trace(tmp_path / "t.jsonl")
    plan = tmp_path / "p.yaml"
    plan.write_text(
        DISK_PLAN.replace(
            "storage: {kind: ssd, read_bandwidth: 200 MB/s, write_bandwidth: 200 MB/s, "
            "latency: 100 us}",
            "storage: nvme-gen4-x4",
        )
    )
    out = tmp_path / "jobs"
    result = runner.invoke(app, ["verify", str(trace), "--plan", str(plan), "-o", str(out)])
    assert result.exit_code == EXIT_OK, result.output
    gds = (out / "fio" / "prefill.disk.gds.fio").read_text()
    plain = (out / "fio" / "prefill.disk.fio").read_text()
    assert "ioengine=libcufile" in gds and "cuda_io=cufile" in gds and "direct=1" in gds
    assert "iodepth=1\n" in gds
    back = re.sub(r"ioengine=libcufile\ncuda_io=cufile\ngpu_dev_ids=\S+", "ioengine=libaio", gds)
    env = {
        **os.environ,
        "KVADVISOR_FIO_DIR": str(tmp_path),
        "KVADVISOR_FIO_SIZE": "1m",
        "KVADVISOR_FIO_RUNTIME": "1",
    }
    path = tmp_path / "back.fio"
    path.write_text(back)
    subprocess.run([FIO, "--parse-only", str(path)], env=env, check=True, capture_output=True)

    # Same phases, same rates per job (numjobs are equal at queue depth 1).
    def rates(text: str) -> list[str]:
        return [ln for ln in text.splitlines() if ln.startswith("rate=")]

    def sections(text: str) -> int:
        return sum(ln.startswith("[prefill") for ln in text.splitlines())

    assert rates(back) == rates(plain)
    assert sections(back) == sections(plain)


@pytest.mark.parametrize(
    ("phase", "fail_on", "code"),
    [("p99", "error", EXIT_FINDINGS), ("peak", "error", EXIT_OK), ("peak", "warning", 1)],
)
def test_a_rate_the_device_did_not_move_fails_at_its_severity(
    fio_run: dict, tmp_path: Path, phase: str, fail_on: str, code: int
) -> None:
    """The measured rates against a requirement 10x theirs: p99 is an error, peak a warning."""
    copy = tmp_path / "copy"
    shutil.copytree(fio_run["folder"], copy)
    manifest = json.loads((copy / "verify.json").read_text())
    for p in manifest["fio"][0]["phases"]:
        if p["phase"] == phase:
            p["rates_bytes_per_s"] = {k: v * 10 for k, v in p["rates_bytes_per_s"].items()}
    (copy / "verify.json").write_text(json.dumps(manifest))
    result = runner.invoke(app, ["verify", "--results", str(copy), "--fail-on", fail_on])
    assert result.exit_code == code, result.output
    assert "below the" in result.output and "required" in result.output


def test_measured_entry_keeps_its_catalog_entrys_other_fields(
    fio_run: dict, tmp_path: Path
) -> None:
    """A tier naming nvme-gen4-x4 x 8: the entry keeps unit, GDS, capacity and sources.

    The figures are the real run's over 8 devices; the datasheet's speed fields go.
    """
    from kvadvisor.catalog.storage import STORAGE_FILE, parse_storage
    from kvadvisor.verifyjobs.loader import storage_entries
    from kvadvisor.verifyjobs.render import render_catalog
    from kvadvisor.verifyjobs.results import judge_fio, measured_catalog

    manifest = json.loads(json.dumps(fio_run["manifest"]))
    manifest["tiers"][0].update(catalog_name="nvme-gen4-x4", devices=8)
    docs = {"fio/prefill.disk.fio": ("prefill.disk.json", fio_run["doc"])}
    phases, _ = judge_fio(manifest, docs)
    entries, sources = storage_entries()
    doc = measured_catalog(manifest, phases, "2026-12-01T00:00:00+00:00", entries, sources)
    assert doc is not None
    entry = doc["entries"]["nvme-gen4-x4"]
    write = fio_run["jobs"]["prefill.disk.max-write"]["write"]["bw_bytes"]
    assert entry["write_mbps"] == pytest.approx(write / 8 / 1e6, abs=0.1)
    assert "unconfirmed" not in entry  # the datasheet's caveat on write_iops is gone
    assert entry["io_unit_bytes"] == 4096 and entry["gds_support"] is True
    assert entry["source"][0] == "MEASURED" and set(entry["source"][1:]) <= set(doc["sources"])
    (spec,) = parse_storage(doc, "measured.yaml").values()  # the loader's own checks
    assert spec.name == "nvme-gen4-x4" and spec.category == "local_nvme"
    assert STORAGE_FILE.exists()
    path = tmp_path / "measured.yaml"
    path.write_text(render_catalog(doc))
    check = runner.invoke(app, ["catalog", "check", str(path)])
    assert check.exit_code == EXIT_OK, check.output


@pytest.mark.parametrize(
    ("name", "scope"),
    [("aws-fsx-lustre-persistent2-125", "per_client"), ("aws-ebs-gp3", "per_volume")],
)
def test_measured_entry_says_its_scope_date_and_keeps_its_price(
    fio_run: dict, name: str, scope: str
) -> None:
    """Figures measured from one node are that node's, never per TiB or the whole pool's.

    The entry is dated the day the results were read, and a priced entry keeps its price with
    the price's own source (gp3: AWS's price, source W3).
    """
    from kvadvisor.catalog.storage import STORAGE_SCHEMA, parse_storage
    from kvadvisor.verifyjobs.loader import storage_entries
    from kvadvisor.verifyjobs.results import judge_fio, measured_catalog

    manifest = json.loads(json.dumps(fio_run["manifest"]))
    manifest["tiers"][0].update(catalog_name=name, devices=1)
    docs = {"fio/prefill.disk.fio": ("prefill.disk.json", fio_run["doc"])}
    phases, _ = judge_fio(manifest, docs)
    entries, sources = storage_entries()
    doc = measured_catalog(
        manifest, phases, "2026-12-02T10:00:00+00:00", entries, sources, tuple(STORAGE_SCHEMA)
    )
    assert doc is not None
    entry = doc["entries"][name]
    assert entry["scope"] == scope and str(entry["as_of"]) == "2026-12-02"
    (spec,) = parse_storage(doc, "measured.yaml").values()
    assert spec.scope == scope and not spec.per_gib  # no per-TiB formula left
    assert spec.available_on == ("aws",)
    if name == "aws-ebs-gp3":
        assert spec.price is not None and spec.price.usd_per_gb_month == 0.08
        assert spec.price.source_text  # its citation resolved in the measured file


def test_a_failed_background_run_fails_its_fixture_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background fio run that failed raises with what it wrote, instead of passing silently."""
    (tmp_path / "started").write_text("plain striped")
    (tmp_path / "plain.failed").write_text("fio: engine libaio not loadable")
    monkeypatch.setenv(fio_prerun.ENV, str(tmp_path))
    ran_here: list[str] = []

    def own_lock():  # a run made here would take the lock: it must not happen
        ran_here.append("lock")
        raise AssertionError("ran fio here instead of reading the background run")

    with pytest.raises(RuntimeError, match="engine libaio not loadable"):
        fio_prerun.result("plain", tmp_path / "here", own_lock)
    assert ran_here == []
