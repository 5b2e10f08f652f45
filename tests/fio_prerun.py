"""The verify tests' two real fio runs, started in the background as the test run begins.

fio's phases are timed (4 s a phase for tests/test_verify_fio.py, 3 s for
tests/test_verify_striped.py: about 38 s of wall together) and take almost no CPU. Run inside
their fixtures, they left that worker's core idle for those 38 s while the other worker went
on: on README's two workers, about 19 s of the suite's wall. Now the process that schedules the
tests (the xdist controller, or the one pytest process when run serially) starts this module as
a script once the collection holds either file, and each fixture reads its run's result,
waiting for it if it has not ended. The runs are the ones the fixtures made before, the same
jobs, sizes and runtimes, under the run's one fio lock (``analysis_cache.device_to_itself``
takes the same lock file), so a timed phase still has the disk alone.

Run alone (``pytest tests/test_verify_fio.py -p no:xdist`` or any selection without the
controller's start), a fixture runs its fio itself, as before, with the same function.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIO = shutil.which("fio")
# Where the controller's background runs write (one JSON per run, or a .failed text); set by
# tests/conftest.py's pytest_configure, so every worker inherits it.
ENV = "KVADVISOR_TEST_FIO_PRERUN"
# Long enough that a start-up stall of a fraction of a second on a busy machine stays within
# the 3 % a rate check allows (2 s phases fell 8 % short once on a loaded 2-core machine).
PLAIN_RUNTIME_S = 4
STRIPED_RUNTIME_S = 3
DEVICES = 4
STRIPED_SIZE_BYTES = 16 * 2**20  # each volume (a loop device's backing file) and fio's size on it
# The files whose fixtures read these runs.
FILES = {"plain": "test_verify_fio.py", "striped": "test_verify_striped.py"}
# A background run that never ends: its fixture fails after this long instead of hanging.
WAIT_S = 900


def lock_path(default_folder: Path) -> Path:
    """The run's one fio lock: in the background runs' folder when there is one."""
    folder = os.environ.get(ENV)
    return Path(folder) / "fio.lock" if folder else default_folder / "fio.lock"


def direct_io_dir(candidates: list[Path]) -> Path | None:
    """The first directory where an O_DIRECT write of one aligned page succeeds."""
    for folder in candidates:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".odirect-probe"
        try:
            fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
        except (OSError, AttributeError):
            continue
        try:
            os.write(fd, mmap.mmap(-1, 4096))  # mmap memory is page-aligned, as O_DIRECT needs
            return folder
        except OSError:
            continue
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    return None


def generate(base: Path, plan_text: str) -> tuple[Path, Path, Path]:
    """``kvadvisor verify`` on the bursty trace and ``plan_text``: (trace, plan, jobs folder)."""
    from typer.testing import CliRunner
    from verify_fixtures import write_bursty_trace

    from kvadvisor.cli import EXIT_OK, app

    trace = write_bursty_trace(base / "bursty.jsonl")
    plan = base / "plan.yaml"
    plan.write_text(plan_text)
    folder = base / "jobs"
    result = CliRunner().invoke(app, ["verify", str(trace), "--plan", str(plan), "-o", str(folder)])
    if result.exit_code != EXIT_OK:
        raise RuntimeError(f"kvadvisor verify exited {result.exit_code}: {result.output}")
    return trace, plan, folder


def run_plain(base: Path) -> dict:
    """The disk plan's jobs, run once with the real fio against a file on disk."""
    from verify_fixtures import DISK_PLAN

    trace, plan, folder = generate(base, DISK_PLAN)
    scratch = direct_io_dir([base / "scratch", REPO / ".fio-scratch"])
    job = folder / "fio" / "prefill.disk.fio"
    generated = job.read_text()
    warned: list[str] = []
    if scratch is None:
        scratch = base / "scratch"
        warned.append(
            "no directory here takes O_DIRECT: the fio jobs ran with direct=0 (buffered); "
            "their rates and sizes are still checked, latencies are the page cache's"
        )
        job.write_text(generated.replace("direct=1", "direct=0"))
    env = {
        **os.environ,
        "KVADVISOR_FIO_DIR": str(scratch),
        "KVADVISOR_FIO_SIZE": "64m",
        "KVADVISOR_FIO_RUNTIME": str(PLAIN_RUNTIME_S),
    }
    subprocess.run([str(folder / "run-fio.sh")], env=env, check=True, capture_output=True)
    shutil.rmtree(scratch / "kvadvisor.prefill.disk", ignore_errors=True)
    (scratch / "kvadvisor.prefill.disk").unlink(missing_ok=True)
    return {
        "base": str(base),
        "trace": str(trace),
        "plan": str(plan),
        "folder": str(folder),
        "generated": generated,
        "warnings": warned,
    }


def striped_plan() -> str:
    """The disk plan's tier as 4 block volumes of 50 MB/s each (200 MB/s for the tier)."""
    from verify_fixtures import DISK_PLAN

    return DISK_PLAN.replace(
        "storage: {kind: ssd, read_bandwidth: 200 MB/s, write_bandwidth: 200 MB/s, "
        "latency: 100 us}",
        "storage: {kind: block, read_bandwidth: 50 MB/s, write_bandwidth: 50 MB/s, "
        f"latency: 100 us}}\n        devices: {DEVICES}",
    )


def _detach(devices: list[str]) -> None:
    for dev in devices:
        subprocess.run(["losetup", "-d", dev], capture_output=True, check=False)


def loop_devices(backing: list[Path]) -> tuple[list[str], str]:
    """Attach one loop device per backing file: (devices, '') or ([], why they cannot be made)."""
    losetup = shutil.which("losetup")
    if os.geteuid() != 0 or not Path("/dev/loop-control").exists() or losetup is None:
        return [], "not root, or no /dev/loop-control or losetup here"
    devices: list[str] = []
    for f in backing:
        f.write_bytes(b"")
        os.truncate(f, STRIPED_SIZE_BYTES)
        made = subprocess.run(
            [losetup, "--find", "--show", str(f)], capture_output=True, text=True, check=False
        )
        if made.returncode != 0:
            _detach(devices)
            return [], f"losetup failed: {made.stderr.strip()}"
        devices.append(made.stdout.strip())
    return devices, ""


def _size(path: str) -> int:
    """A file's size, or a block device's (seek to its end)."""
    with open(path, "rb") as f:
        return f.seek(0, os.SEEK_END)


def run_striped(base: Path) -> dict:
    """The striped plan's jobs, run once with the real fio on 4 devices (loop or plain files)."""
    _, _, folder = generate(base, striped_plan())
    job = folder / "fio" / "prefill.disk.fio"
    scratch = base / "scratch"
    scratch.mkdir()
    devices, why_not = loop_devices([scratch / f"volume{i}.img" for i in range(DEVICES)])
    warned: list[str] = []
    if devices:
        mode = "loop devices"
    else:
        # 4 plain files stand in for the volumes, on a file system that takes O_DIRECT if any.
        mode = "plain files"
        direct = direct_io_dir([scratch / "files", REPO / ".fio-scratch-striped"])
        files_dir = direct or scratch / "files"
        devices = [str(files_dir / f"volume{i}") for i in range(DEVICES)]
        buffered = "" if direct else "; no directory here takes O_DIRECT, so they ran buffered"
        warned.append(
            f"the striped fio jobs ran on {DEVICES} plain files, not loop devices ({why_not})"
            + buffered
        )
        if direct is None:
            job.write_text(job.read_text().replace("direct=1", "direct=0"))
    env = {
        **os.environ,
        "KVADVISOR_FIO_DIR": str(scratch),
        "KVADVISOR_FIO_SIZE": f"{STRIPED_SIZE_BYTES // 2**20}m",
        "KVADVISOR_FIO_RUNTIME": str(STRIPED_RUNTIME_S),
        **{f"KVADVISOR_FIO_DEV_{i}": d for i, d in enumerate(devices)},
    }
    try:
        subprocess.run([str(folder / "run-fio.sh")], env=env, check=True, capture_output=True)
        sizes = [_size(d) for d in devices]
    finally:
        if mode == "loop devices":
            _detach(devices)
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(REPO / ".fio-scratch-striped", ignore_errors=True)
    return {
        "folder": str(folder),
        "devices": devices,
        "sizes": sizes,
        "mode": mode,
        "why_not": why_not,
        "warnings": warned,
    }


RUNS: dict[str, Callable[[Path], dict]] = {"plain": run_plain, "striped": run_striped}


def main(folder: Path, names: list[str]) -> None:
    """Run each named fio run under the run's fio lock; its JSON, or why it failed, in folder."""
    with open(lock_path(folder), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        for name in names:
            base = folder / name
            base.mkdir()
            try:
                out = RUNS[name](base)
            except Exception as exc:  # the fixture reports it, with what fio said
                said = exc.stderr if isinstance(exc, subprocess.CalledProcessError) else b""
                text = traceback.format_exc() + (said or b"").decode(errors="replace")
                (folder / f"{name}.failed").write_text(text)
                continue
            part = folder / f"{name}.part"
            part.write_text(json.dumps(out))
            os.replace(part, folder / f"{name}.json")


def start(folder: Path, nodeids: list[str]) -> subprocess.Popen | None:
    """Start the runs the collected tests need, in the background; None when none is needed."""
    names = [n for n, f in FILES.items() if any(i.startswith(f"tests/{f}") for i in nodeids)]
    if not names or FIO is None:
        return None
    (folder / "started").write_text(" ".join(names))
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), str(folder), *names],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _background(name: str) -> Path | None:
    """The background runs' folder when the named run was started there, else None."""
    folder = os.environ.get(ENV)
    if not folder:
        return None
    started = Path(folder) / "started"
    if not started.exists() or name not in started.read_text().split():
        return None
    return Path(folder)


def result(name: str, here: Path, own_lock: Callable[[], ContextManager[None]]) -> dict:
    """The named run's result: the background run's, else one run now in ``here``.

    ``own_lock`` is the caller's context manager for the run's fio lock, held for a run made
    here.
    """
    folder = _background(name)
    if folder is None:
        with own_lock():
            return RUNS[name](here)
    done, failed = folder / f"{name}.json", folder / f"{name}.failed"
    deadline = time.monotonic() + WAIT_S
    while not (done.exists() or failed.exists()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the background fio run {name!r} did not end in {WAIT_S} s")
        time.sleep(0.2)
    if failed.exists():
        raise RuntimeError(f"the background fio run {name!r} failed:\n{failed.read_text()}")
    return json.loads(done.read_text())


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
