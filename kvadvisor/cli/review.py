"""`kvadvisor review`: check deployment plans against a trace, for CI."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

import kvadvisor
from kvadvisor.cli.common import (
    EXIT_FINDINGS,
    MAX_WINDOW_S,
    AllowOutsidePlanDirOpt,
    BlockTokensOpt,
    CatalogOpt,
    IgnoreOpt,
    MapOpt,
    RulesDirOpt,
    SelectOpt,
    TraceFormatOpt,
    TraceSourceArg,
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
from kvadvisor.errors import ConfigError

if TYPE_CHECKING:
    from kvadvisor.report.review_markdown import ReviewMarkdownRenderer, ReviewTextRenderer


class FailOn(str, Enum):
    """Lowest finding severity that makes `review` exit 1."""

    warning = "warning"
    error = "error"


def _review_renderer(target: str) -> ReviewMarkdownRenderer | ReviewTextRenderer:
    # Imported here: `kvadvisor --help` registers this command without loading renderers.
    from kvadvisor.report.review_markdown import ReviewMarkdownRenderer, ReviewTextRenderer

    suffix = Path(target).suffix.lower() if target != "-" else ".md"
    renderers = {".md": ReviewMarkdownRenderer, ".txt": ReviewTextRenderer}
    if suffix not in renderers:
        raise ConfigError(
            f"cannot tell the review format from '{target}': use .md or .txt "
            "(and --junit FILE.xml for JUnit)"
        )
    return renderers[suffix]()


@app.command("review")
def review_cmd(
    trace: TraceSourceArg,
    plan: Annotated[
        list[Path], typer.Option("--plan", help="Deployment plan (YAML). Repeat to compare.")
    ],
    fail_on: Annotated[
        FailOn, typer.Option("--fail-on", help="Exit 1 when a finding is at least this severe.")
    ] = FailOn.error,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Write JUnit XML: one test case per check.")
    ] = None,
    output: Annotated[
        list[str] | None,
        typer.Option("-o", "--output", help="Review file (.md: PR comment, .txt); '-' is stdout."),
    ] = None,
    trace_format: TraceFormatOpt = None,
    maps: MapOpt = None,
    block_tokens: BlockTokensOpt = None,
    warmup_fraction: WarmupOpt = 0.5,
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
    catalog: CatalogOpt = None,
    rules_dir: RulesDirOpt = None,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    results: Annotated[
        Path | None,
        typer.Option(
            "--results",
            help="A `kvadvisor verify` folder with results: its measured checks join the review.",
            file_okay=False,
        ),
    ] = None,
    allow_outside_plan_dir: AllowOutsidePlanDirOpt = False,
) -> None:
    """Check deployment plans against a trace; exit 1 on findings at --fail-on or above."""
    with handle_user_errors():
        files = command_inputs(
            trace,
            plans=plan,
            catalogs=catalog or (),
            results=results,
            rules_dirs=rules_dir or (),
        )
        renderers = [(o, _review_renderer(o)) for o in (output or [])]
        for target in [*(output or []), *([junit] if junit is not None else [])]:
            files.check_output(target, "--junit" if target is junit else "-o")
        report = kvadvisor.review(
            trace,
            plan,
            catalogs=as_strs(catalog),
            **trace_reading(trace_format, maps, block_tokens),
            warmup_fraction=warmup_fraction,
            window_s=window,
            results=results,
            rules=as_strs(rules_dir),
            select=as_strs(select),
            ignore=as_strs(ignore),
            allow_outside_plan_dir=allow_outside_plan_dir,
        )
        if junit is not None:
            write_output(str(junit), report.to_junit(), files)
        for target, renderer in renderers:
            write_output(target, renderer.render(report), files, terminal=True)
        if not any(o == "-" for o in (output or [])):
            echo(report.to_text(), nl=False)
    if report.fails(fail_on.value):
        raise typer.Exit(EXIT_FINDINGS)
