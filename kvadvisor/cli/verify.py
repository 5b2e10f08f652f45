"""`kvadvisor verify`: write fio and serving-benchmark jobs for a plan, or read their results."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

import kvadvisor
from kvadvisor.cli.common import (
    EXIT_FINDINGS,
    MAX_WINDOW_S,
    AllowOutsidePlanDirOpt,
    BlockTokensOpt,
    CatalogOpt,
    MapOpt,
    TraceFormatOpt,
    TraceReading,
    WarmupOpt,
    app,
    as_strs,
    command_inputs,
    echo,
    finite_option,
    handle_user_errors,
    trace_reading,
    write_output,
)
from kvadvisor.cli.review import FailOn
from kvadvisor.errors import ConfigError
from kvadvisor.io.fileio import check_writable
from kvadvisor.units import plural

CATALOG_NAME = "measured-catalog.yaml"
MANIFEST = "verify.json"


def check_folder(folder: Path, inputs: tuple[Path, ...] = ()) -> None:
    """Refuse a -o folder that could not be written, before the replay runs.

    The folder must be new, empty or an earlier verify folder (its files are replaced, its
    ``results/`` kept): a README.md or run script of another project is never overwritten.
    """
    check_writable(folder, "-o", directory=True)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder}: exists and is not a directory; give a folder for -o")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / MANIFEST).is_file():
        raise ConfigError(
            f"{folder}: not empty and not a verify folder (no {MANIFEST}); give a new or "
            "empty folder for -o"
        )
    for given in inputs:
        if folder.resolve() == given.resolve():
            raise ConfigError(f"{folder}: is the input {given}; write elsewhere")


def write_folder(folder: Path, files: dict[str, str], inputs: tuple[Path, ...]) -> None:
    """Write every file under ``folder``, all or none; scripts get the execute bit.

    The files are written into a new staging folder beside ``folder`` first; only when all
    are written are they moved in (the staging folder renamed to ``folder`` when it is new,
    else each file renamed over its old version). A failure (a full disk) removes the
    staging folder, which kvadvisor created, and leaves ``folder`` as it was: never a folder
    with half the jobs of a set.
    """
    check_folder(folder, inputs)
    targets = {(folder / rel).resolve() for rel in files}
    for given in inputs:
        if given.resolve() in targets:
            raise ConfigError(f"{folder}: would overwrite the input {given}; write elsewhere")
    parent = folder.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=parent))
    except OSError as exc:
        raise ConfigError(
            f"{folder}: cannot be written ({exc.strerror or exc}); choose another -o"
        ) from None
    try:
        for rel, text in sorted(files.items()):
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            mode = _umask_mode(0o777 if rel.endswith(".sh") else 0o666)
            os.chmod(path, mode)
        for sub in [staging, *(p for p in staging.rglob("*") if p.is_dir())]:
            os.chmod(sub, _umask_mode(0o777))
        if not folder.exists():
            os.rename(staging, folder)
            return
        for rel in sorted(files):
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, folder / rel)
    except OSError as exc:
        raise ConfigError(
            f"{folder}: cannot be written ({exc.strerror or exc}); nothing was written: free "
            "space or choose another -o"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _umask_mode(mode: int) -> int:
    """``mode`` under the process umask (what a plain open or mkdir would give)."""
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def _not_an_input(target: Path, folder: Path, inputs: tuple[str, ...]) -> None:
    """Refuse an output that would replace the manifest, a job file or a result read back."""
    read = {(folder / rel).resolve() for rel in (MANIFEST, *inputs)}
    if target.resolve() in read:
        raise ConfigError(f"{target}: is an input of the verify folder; write elsewhere")


@app.command("verify")
def verify_cmd(
    trace: Annotated[
        Path | None, typer.Argument(help="Request trace (to write the jobs).", show_default=False)
    ] = None,
    plan: Annotated[Path | None, typer.Option("--plan", help="Deployment plan (YAML).")] = None,
    output: Annotated[
        list[str] | None,
        typer.Option(
            "-o",
            "--output",
            help="With TRACE: the folder to write. With --results: the measured catalog "
            "(.yaml) and/or the report (.json).",
        ),
    ] = None,
    results: Annotated[
        list[Path] | None,
        typer.Option(
            "--results",
            help="A verify folder to read back; twice: a baseline and a candidate run (A/B).",
            file_okay=False,
        ),
    ] = None,
    gate: Annotated[
        str | None,
        typer.Option(
            "--gate",
            help="With two --results: the changes the candidate must reach, "
            "METRIC=CHANGE pairs joined by commas (ttft_p99=-25% for TTFT p99 down "
            "at least 25%, throughput=+29% for up at least 29%).",
        ),
    ] = None,
    fail_on: Annotated[
        FailOn, typer.Option("--fail-on", help="With --results: exit 1 at this severity.")
    ] = FailOn.error,
    tolerance: Annotated[
        float | None,
        typer.Option(
            help="Shortfall allowed below a required rate [default: 0.05].", min=0.0, max=0.5
        ),
    ] = None,
    window: Annotated[
        float,
        typer.Option(
            "--window",
            help="Demand window, seconds.",
            min=0.001,
            max=MAX_WINDOW_S,
            callback=finite_option,
        ),
    ] = 1.0,
    warmup_fraction: WarmupOpt = 0.5,
    bench_instances: Annotated[
        int | None,
        typer.Option(help="Instances whose load one benchmarked endpoint takes.", min=1),
    ] = None,
    bench_requests: Annotated[
        int | None, typer.Option(help="Replay only the first N requests.", min=1)
    ] = None,
    catalog: CatalogOpt = None,
    trace_format: TraceFormatOpt = None,
    maps: MapOpt = None,
    block_tokens: BlockTokensOpt = None,
    allow_outside_plan_dir: AllowOutsidePlanDirOpt = False,
) -> None:
    """Write fio and serving-benchmark jobs that test a plan, or judge their results."""
    failed = False
    with handle_user_errors():
        _check_modes(trace, plan, results, gate)
        if results and len(results) == 2:
            failed = _compare_runs(results, output, gate, tolerance, catalog, fail_on)
        elif results:
            failed = _read_results(results[0], output, tolerance, catalog, fail_on)
        else:
            _write_jobs(
                trace,
                plan,
                output,
                catalog,
                window_s=window,
                warmup_fraction=warmup_fraction,
                bench_instances=bench_instances,
                bench_requests=bench_requests,
                reading=trace_reading(trace_format, maps, block_tokens),
                allow_outside_plan_dir=allow_outside_plan_dir,
            )
    if failed:
        raise typer.Exit(EXIT_FINDINGS)


def _check_modes(
    trace: Path | None, plan: Path | None, results: list[Path] | None, gate: str | None
) -> None:
    """Refuse a mix of the three modes: write jobs, read one folder back, compare two."""
    if gate is not None and len(results or ()) != 2:
        raise ConfigError("--gate compares two runs: give --results BASELINE --results CANDIDATE")
    if results and len(results) > 2:
        raise ConfigError("--results: give one folder, or two (a baseline and a candidate)")
    if results and (trace is not None or plan is not None):
        raise ConfigError("--results reads a folder back: give it without TRACE and --plan")


def _compare_runs(
    results: list[Path],
    output: list[str] | None,
    gate: str | None,
    tolerance: float | None,
    catalog: list[Path] | None,
    fail_on: FailOn,
) -> bool:
    """A/B: judge the candidate run against the baseline; True when the candidate fails."""
    files = command_inputs(catalogs=catalog or (), results=results[0])
    command_inputs(results=results[1])
    for target in output or []:
        if Path(target).suffix.lower() != ".json":
            raise ConfigError(
                f"cannot write '{target}' for an A/B run: use .json (the comparison); "
                "a measured catalog comes from one folder's --results"
            )
    given = {} if tolerance is None else {"tolerance": tolerance}
    compared = kvadvisor.verify_compare(*results, gate=gate, catalogs=as_strs(catalog), **given)
    for target in output or []:
        for folder, report in zip(results, (compared.baseline, compared.candidate), strict=True):
            _not_an_input(Path(target), folder, report.inputs)
        write_output(target, compared.to_json(), files)
    echo(compared.to_text(), nl=False)
    # The baseline is the run without the change: its own checks may fail (a deployment
    # without the KV tier missing the SLO is the point); the candidate's count.
    return compared.fails(fail_on.value)


def _read_results(
    results_dir: Path,
    output: list[str] | None,
    tolerance: float | None,
    catalog: list[Path] | None,
    fail_on: FailOn,
) -> bool:
    """Judge one folder's results, writing the measured catalog and/or the report; True on fail."""
    files = command_inputs(catalogs=catalog or (), results=results_dir)
    given = {} if tolerance is None else {"tolerance": tolerance}
    report = kvadvisor.verify_results(results_dir, catalogs=as_strs(catalog), **given)
    catalog_path = None
    for target in output or [str(results_dir / CATALOG_NAME)]:
        _not_an_input(Path(target), results_dir, report.inputs)
        suffix = Path(target).suffix.lower()
        catalog_text = report.catalog_yaml()
        if suffix in (".yaml", ".yml"):
            if catalog_text is not None:
                write_output(target, catalog_text, files)
                catalog_path = target
        elif suffix == ".json":
            write_output(target, report.to_json(), files)
        else:
            raise ConfigError(
                f"cannot tell what to write to '{target}': use .yaml (measured catalog) "
                "or .json (report)"
            )
    echo(report.to_text(catalog_path), nl=False)
    return report.fails(fail_on.value)


def _write_jobs(
    trace: Path | None,
    plan: Path | None,
    output: list[str] | None,
    catalog: list[Path] | None,
    *,
    window_s: float,
    warmup_fraction: float,
    bench_instances: int | None,
    bench_requests: int | None,
    reading: TraceReading,
    allow_outside_plan_dir: bool,
) -> None:
    """Write the fio and benchmark jobs for ``plan`` against ``trace`` into the -o folder."""
    if trace is None or plan is None or not output or len(output) != 1:
        raise ConfigError(
            "give TRACE --plan PLAN -o DIR to write the jobs, or --results DIR to read them back"
        )
    files = command_inputs(trace, plans=[plan], catalogs=catalog or ())
    folder = Path(output[0])
    check_folder(folder, (trace, plan))
    written = kvadvisor.verify(
        trace,
        plan,
        catalogs=as_strs(catalog),
        window_s=window_s,
        warmup_fraction=warmup_fraction,
        bench_instances=bench_instances,
        bench_requests=bench_requests,
        allow_outside_plan_dir=allow_outside_plan_dir,
        **reading,
    )
    for rel in written.files:
        files.check_output(folder / rel)
    write_folder(folder, written.files, (trace, plan))
    echo(
        f"wrote {len(written.files)} files to {folder} (job set {written.job_set_id}): "
        f"{plural(len(written.jobs), 'fio job file')}, "
        f"{plural(len(written.benches), 'benchmark')}; "
        f"what to run where: {folder / 'README.md'}"
    )
