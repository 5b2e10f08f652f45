"""`kvadvisor review`: check deployment plans against a trace, for CI."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from kvadvisor import __version__
from kvadvisor.advise.review import review_trace
from kvadvisor.cli.common import (
    EXIT_FINDINGS,
    MAX_WINDOW_S,
    BlockTokensOpt,
    CatalogOpt,
    MapOpt,
    TraceArg,
    TraceFormatOpt,
    WarmupOpt,
    app,
    command_inputs,
    echo,
    finite_option,
    handle_user_errors,
    plan_catalogs,
    read_with_options,
    utc_now,
    write_output,
)
from kvadvisor.errors import ConfigError
from kvadvisor.plan import load_plan
from kvadvisor.report.junit import JUnitRenderer
from kvadvisor.report.review_markdown import ReviewMarkdownRenderer, ReviewTextRenderer


class FailOn(str, Enum):
    """Lowest finding severity that makes `review` exit 1."""

    warning = "warning"
    error = "error"


def _review_renderer(target: str) -> ReviewMarkdownRenderer | ReviewTextRenderer:
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
    trace: TraceArg,
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
) -> None:
    """Check deployment plans against a trace; exit 1 on findings at --fail-on or above."""
    with handle_user_errors():
        files = command_inputs(trace, plans=plan, catalogs=catalog or ())
        renderers = [(o, _review_renderer(o)) for o in (output or [])]
        for target in [*(output or []), *([junit] if junit is not None else [])]:
            files.check_output(target, "--junit" if target is junit else "-o")
        catalogs = plan_catalogs(catalog)
        plans = [load_plan(p, catalogs) for p in plan]
        report = review_trace(
            read_with_options(trace, trace_format, maps, block_tokens),
            plans,
            version=__version__,
            generated_at=utc_now(),
            warmup_fraction=warmup_fraction,
            window_s=window,
        )
        if junit is not None:
            write_output(str(junit), JUnitRenderer().render(report), files)
        for target, renderer in renderers:
            write_output(target, renderer.render(report), files, terminal=True)
        if not any(o == "-" for o in (output or [])):
            echo(ReviewTextRenderer().render(report), nl=False)
    if report.fails(fail_on.value):
        raise typer.Exit(EXIT_FINDINGS)
