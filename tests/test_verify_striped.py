"""A striped tier (4 volumes) gets one fio job per device, run for real on 4 devices.

Each device job names its device path (``filename=${KVADVISOR_FIO_DEV_<i>}``), as on the target
host where it is the volume's block device. Here the 4 volumes are **loop devices** backed by
files when this process can make them (root, /dev/loop-control and losetup), else **4 plain
files** standing in for them; the run says which (a warning, and ``mode`` in the fixture that
test_the_devices_are_what_the_run_says checks). The tier's rates are split evenly over the
devices; fio reports each device (``new_group``) and `verify --results` sums them against the
tier's rates. A loop device takes O_DIRECT itself; plain files need a file system that does,
else the jobs run buffered and say so. tests/fio_prerun.py runs the jobs in the background from
the test run's start.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import fio_prerun
import pytest
from analysis_cache import device_to_itself
from typer.testing import CliRunner
from verify_fixtures import DISK_PLAN

from kvadvisor.cli import EXIT_OK, app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
DEVICES = fio_prerun.DEVICES
SIZE_BYTES = fio_prerun.STRIPED_SIZE_BYTES  # each volume's size, and fio's size on it
FIO = shutil.which("fio")
STRIPED_PLAN = fio_prerun.striped_plan()
IO2_PLAN = DISK_PLAN.replace(
    "storage: {kind: ssd, read_bandwidth: 200 MB/s, write_bandwidth: 200 MB/s, latency: 100 us}",
    f"storage: aws-ebs-io2-block-express\n        devices: {DEVICES}",
)


def _generate(base: Path, plan_text: str) -> Path:
    return fio_prerun.generate(base, plan_text)[2]


@pytest.fixture(scope="module")
def striped_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The striped jobs, run once with the real fio on 4 devices (tests/fio_prerun.py's run)."""
    if FIO is None:
        if os.environ.get("CI"):
            pytest.fail("fio is not installed (`.ci/run` installs Debian's fio)")
        pytest.skip("fio is not installed: apt-get install fio")
    here = tmp_path_factory.mktemp("verify-striped")
    out = fio_prerun.result("striped", here, lambda: device_to_itself(tmp_path_factory))
    for said in out["warnings"]:
        warnings.warn(said, stacklevel=1)
    folder = Path(out["folder"])
    return {
        **out,
        "folder": folder,
        "manifest": json.loads((folder / "verify.json").read_text()),
        "doc": json.loads((folder / "results" / "prefill.disk.json").read_text()),
    }


def _phase(run: dict, phase: str) -> dict:
    (spec,) = run["manifest"]["fio"]
    return next(p for p in spec["phases"] if p["phase"] == phase)


def test_one_job_per_device_on_its_device_path(striped_run: dict) -> None:
    """Every phase is 4 fio entries, one per device, each on its device's path (filename=)."""
    jobs = {j["jobname"]: j for j in striped_run["doc"]["jobs"]}
    (spec,) = striped_run["manifest"]["fio"]
    assert spec["devices"] == DEVICES
    for phase in spec["phases"]:
        names = phase["device_jobs"]
        assert names == [f"{phase['name']}.dev{i}" for i in range(DEVICES)]
        paths = [jobs[n]["job options"]["filename"] for n in names]
        assert paths == striped_run["devices"]
        assert all("directory" not in jobs[n]["job options"] for n in names)
    # Each volume is 16 MiB: the loop device's size, or the file fio laid out.
    assert striped_run["sizes"] == [SIZE_BYTES] * DEVICES


def test_the_devices_are_what_the_run_says(striped_run: dict) -> None:
    """Loop devices are block devices under /dev; the stand-in files are regular files."""
    import stat

    kinds = {stat.S_ISBLK(os.stat(d).st_mode) for d in striped_run["devices"] if os.path.exists(d)}
    if striped_run["mode"] == "loop devices":
        assert all(d.startswith("/dev/loop") for d in striped_run["devices"])
        assert kinds <= {True}  # detached after the run; any still there is a block device
    else:
        assert striped_run["why_not"], "a fall-back to plain files states why"
        assert not any(d.startswith("/dev/") for d in striped_run["devices"])


@pytest.mark.parametrize("phase", ["p99", "peak"])
def test_each_device_holds_a_quarter_and_the_sum_the_tier(striped_run: dict, phase: str) -> None:
    """Per device: the tier's rate / 4 (fio's limiter, within 3%); summed: the tier's rate."""
    spec = _phase(striped_run, phase)
    jobs = {j["jobname"]: j for j in striped_run["doc"]["jobs"]}
    for direction, rate in spec["rates_bytes_per_s"].items():
        got = [jobs[n][direction]["bw_bytes"] for n in spec["device_jobs"]]
        for one in got:
            assert one == pytest.approx(rate / DEVICES, rel=0.03), (direction, got)
        assert sum(got) == pytest.approx(rate, rel=0.03)


def test_results_sum_the_devices_against_the_tier(striped_run: dict, tmp_path: Path) -> None:
    """`verify --results` passes, and its measured figure is the sum of the 4 fio entries."""
    report = tmp_path / "report.json"
    result = runner.invoke(
        app, ["verify", "--results", str(striped_run["folder"]), "-o", str(report)]
    )
    assert result.exit_code == EXIT_OK, result.output
    assert "summed over 4 devices" in result.output
    doc = json.loads(report.read_text())
    jobs = {j["jobname"]: j for j in striped_run["doc"]["jobs"]}
    spec = _phase(striped_run, "p99")
    (p99,) = [p for p in doc["phases"] if p["phase"] == "p99"]
    assert p99["status"] == "pass"
    for direction, rate in spec["rates_bytes_per_s"].items():
        want = sum(jobs[n][direction]["bw_bytes"] for n in spec["device_jobs"])
        assert p99["measured"][direction]["bytes_per_s"] == pytest.approx(want)
        assert p99["required_bytes_per_s"][direction] == pytest.approx(rate)
        assert len(p99["devices"]) == DEVICES
    # The measured catalog is per device: the max-write sum over 4.
    entry = next(iter(doc["catalog"]["entries"].values()))
    summed = sum(
        jobs[n]["write"]["bw_bytes"] for n in _phase(striped_run, "max-write")["device_jobs"]
    )
    assert entry["write_mbps"] == pytest.approx(summed / DEVICES / 1e6, abs=0.1)


def test_a_missing_device_is_reported_not_summed(striped_run: dict, tmp_path: Path) -> None:
    """Drop device 3 of the p99 phase from the JSON: that phase is without results, naming it."""
    folder = tmp_path / "copy"
    shutil.copytree(striped_run["folder"], folder)
    path = folder / "results" / "prefill.disk.json"
    doc = json.loads(path.read_text())
    doc["jobs"] = [j for j in doc["jobs"] if j["jobname"] != "prefill.disk.p99.dev3"]
    path.write_text(json.dumps(doc))
    result = runner.invoke(app, ["verify", "--results", str(folder)])
    assert result.exit_code == EXIT_OK, result.output
    assert "skip VF02" in result.output and "prefill.disk.p99.dev3" in result.output
    assert "fio p99 on" not in result.output


def test_per_device_targets_and_limits_from_the_catalog(tmp_path: Path) -> None:
    """4 io2 volumes: each device's share and one volume's catalog limit (4,194.3 MB/s)."""
    folder = _generate(tmp_path, IO2_PLAN)
    text = (folder / "fio" / "prefill.disk.fio").read_text()
    manifest = json.loads((folder / "verify.json").read_text())
    p99 = _phase({"manifest": manifest}, "p99")
    rate = p99["rates_bytes_per_s"]["read"]
    per = int(-(-rate // DEVICES))  # fio's rate per job, rounded up as the job file writes it
    assert text.count(f"rate={per},") == DEVICES
    assert "one device's rated limit: read 4.19 GB/s, write 4.19 GB/s" in text
    assert "(catalog entry aws-ebs-io2-block-express)" in text
    assert "over the limit" not in text
    run = (folder / "run-fio.sh").read_text()
    assert all(f"KVADVISOR_FIO_DEV_{i}" in run for i in range(DEVICES))
    assert all(f"filename=${{KVADVISOR_FIO_DEV_{i}}}" in text for i in range(DEVICES))


def test_a_share_above_one_volumes_limit_is_stated(tmp_path: Path) -> None:
    """Volumes of 2 MB/s: a quarter of the ~20 MB/s peak read is over one: file and notes say."""
    plan = STRIPED_PLAN.replace("read_bandwidth: 50 MB/s", "read_bandwidth: 2 MB/s")
    folder = _generate(tmp_path, plan)
    text = (folder / "fio" / "prefill.disk.fio").read_text()
    manifest = json.loads((folder / "verify.json").read_text())
    peak = max(
        p["rates_bytes_per_s"]["read"]
        for p in manifest["fio"][0]["phases"]
        if p["rates_bytes_per_s"]
    )
    assert peak / DEVICES > 2e6
    assert "; over the limit: read" in text and "above one device's 2 MB/s" in text
    assert any("cannot carry its share" in n for n in manifest["notes"])


def test_a_share_above_one_volumes_iops_is_stated(tmp_path: Path) -> None:
    """Volumes of 50 IOPS: a quarter of the peak read at 64 KiB I/Os (over 70/s) is over one."""
    plan = STRIPED_PLAN.replace("latency: 100 us}", "latency: 100 us, read_iops: 50}")
    folder = _generate(tmp_path, plan)
    text = (folder / "fio" / "prefill.disk.fio").read_text()
    manifest = json.loads((folder / "verify.json").read_text())
    (spec,) = manifest["fio"]
    peak = max(p["rates_bytes_per_s"].get("read", 0) for p in spec["phases"])
    assert peak / DEVICES / spec["io_bytes"] > 50
    assert "above one device's 50 IOPS" in text
    assert "one device's rated limit: read 50 MB/s, write 50 MB/s, read 50 IOPS" in text
