"""`kvadvisor verify`: write fio and serving-benchmark jobs for a plan, or read their results."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated

import typer

from kvadvisor import __version__
from kvadvisor.cli.common import (
    EXIT_FINDINGS,
    BlockTokensOpt,
    CatalogOpt,
    MapOpt,
    TraceFormatOpt,
    WarmupOpt,
    app,
    file_sha256,
    handle_user_errors,
    plan_catalogs,
    read_with_options,
    utc_now,
    write_output,
)
from kvadvisor.cli.review import FailOn
from kvadvisor.errors import ConfigError
from kvadvisor.fileio import atomic_target
from kvadvisor.plan import load_plan
from kvadvisor.verify import VerifyOptions, verify_plan
from kvadvisor.verify.loader import load_folder
from kvadvisor.verify.render import render_catalog, render_json, render_text
from kvadvisor.verify.results import DEFAULT_TOLERANCE, fails, verify_results

CATALOG_NAME = "measured-catalog.yaml"


def write_folder(folder: Path, files: dict[str, str], inputs: tuple[Path, ...]) -> None:
    """Write every file under ``folder`` atomically; scripts get the execute bit."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder}: exists and is not a directory; give a folder for -o")
    for given in inputs:
        if given.resolve() == folder.resolve() or folder.resolve() in given.resolve().parents:
            raise ConfigError(f"{folder}: holds the input {given}; write the jobs elsewhere")
    for rel, text in sorted(files.items()):
        with atomic_target(folder / rel) as tmp:
            tmp.write_text(text, encoding="utf-8")
        if rel.endswith(".sh"):
            path = folder / rel
            os.chmod(path, path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


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
        Path | None,
        typer.Option("--results", help="A verify folder to read back.", file_okay=False),
    ] = None,
    fail_on: Annotated[
        FailOn, typer.Option("--fail-on", help="With --results: exit 1 at this severity.")
    ] = FailOn.error,
    tolerance: Annotated[
        float,
        typer.Option(help="Shortfall allowed below a required rate.", min=0.0, max=0.5),
    ] = DEFAULT_TOLERANCE,
    window: Annotated[
        float, typer.Option("--window", help="Demand window, seconds.", min=0.001)
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
) -> None:
    """Write fio and serving-benchmark jobs that test a plan, or judge their results."""
    failed = False
    with handle_user_errors():
        if results is not None:
            if trace is not None or plan is not None:
                raise ConfigError("--results reads a folder back: give it without TRACE and --plan")
            report = verify_results(load_folder(results), utc_now(), tolerance)
            targets = output or [str(results / CATALOG_NAME)]
            catalog_path = None
            for target in targets:
                suffix = Path(target).suffix.lower()
                if suffix in (".yaml", ".yml") and report.catalog is not None:
                    write_output(target, render_catalog(report.catalog))
                    catalog_path = target
                elif suffix == ".json":
                    write_output(target, render_json(report, utc_now(), __version__))
                elif suffix not in (".yaml", ".yml"):
                    raise ConfigError(
                        f"cannot tell what to write to '{target}': use .yaml (measured catalog) "
                        "or .json (report)"
                    )
            typer.echo(render_text(report, catalog_path), nl=False)
            failed = fails(report, fail_on.value)
        else:
            if trace is None or plan is None or not output or len(output) != 1:
                raise ConfigError(
                    "give TRACE --plan PLAN -o DIR to write the jobs, or --results DIR to read "
                    "them back"
                )
            catalogs = plan_catalogs(catalog)
            written = verify_plan(
                read_with_options(trace, trace_format, maps, block_tokens),
                load_plan(plan, catalogs),
                catalogs.storage,
                VerifyOptions(window, warmup_fraction, bench_instances, bench_requests),
                version=__version__,
                trace_sha256=file_sha256(trace),
            )
            folder = Path(output[0])
            write_folder(folder, written.files, (trace, plan))
            typer.echo(
                f"wrote {len(written.files)} files to {folder} (job set {written.job_set_id}): "
                f"{len(written.jobs)} fio job file(s), {len(written.benches)} benchmark(s); "
                f"what to run where: {folder / 'README.md'}"
            )
    if failed:
        raise typer.Exit(EXIT_FINDINGS)
