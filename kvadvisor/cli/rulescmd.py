"""`kvadvisor rules ...` and `kvadvisor catalog ...`: the rules and catalogs as data.

The loaders are imported inside the commands: registering them (for `kvadvisor --help`) loads
neither YAML nor the catalogs (tests/test_cli_startup.py).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

import kvadvisor
from kvadvisor.cli.common import (
    EXIT_USER_ERROR,
    CatalogOpt,
    IgnoreOpt,
    RulesDirOpt,
    SelectOpt,
    app,
    as_strs,
    command_inputs,
    echo,
    error_line,
    handle_user_errors,
    terminal_width,
    write_output,
)
from kvadvisor.errors import RuleError

rules_app = typer.Typer(
    help="List, show and check rules; print the rule and fact docs.", no_args_is_help=True
)
app.add_typer(rules_app, name="rules")


@rules_app.command("list")
def rules_list_cmd(
    rules_dir: RulesDirOpt = None, select: SelectOpt = None, ignore: IgnoreOpt = None
) -> None:
    """List the rules (built-in plus --rules), after --select / --ignore."""
    from kvadvisor.rules.docs import rules_table

    with handle_user_errors():
        command_inputs(rules_dirs=rules_dir or ())
        echo(
            rules_table(kvadvisor.load_rules(as_strs(rules_dir), as_strs(select), as_strs(ignore))),
            nl=False,
        )


@rules_app.command("show")
def rules_show_cmd(
    rule: Annotated[str, typer.Argument(help="Rule code or name.")], rules_dir: RulesDirOpt = None
) -> None:
    """Show one rule: condition, message, docs and references."""
    from kvadvisor.rules.docs import find_rule, rule_text

    with handle_user_errors():
        command_inputs(rules_dirs=rules_dir or ())
        echo(rule_text(find_rule(kvadvisor.load_rules(as_strs(rules_dir)), rule)), nl=False)


@rules_app.command("check")
def rules_check_cmd(
    directory: Annotated[Path, typer.Argument(help="Directory of rule files.")],
) -> None:
    """Check a directory of rule files against the schema, the facts and the built-in rules.

    Every problem of every file is listed, one `error:` line each (exit 2 if any).
    """
    with handle_user_errors():
        command_inputs(rules_dirs=[directory])
        try:
            checked = kvadvisor.check_rules(directory)
        except RuleError as exc:
            if len(exc.problems) < 2:
                raise
            for problem in exc.problems:
                error_line(f"error: {problem}")
            error_line(f"{directory}: {len(exc.problems)} problems")
            raise typer.Exit(EXIT_USER_ERROR) from None
        echo(f"{directory}: {len(checked)} rule(s) OK")


@rules_app.command("docs")
def rules_docs_cmd(
    output: Annotated[str, typer.Option("-o", "--output", help="File; '-' is stdout.")] = "-",
) -> None:
    """Write the rules reference (docs/rules.md) generated from the rule files."""
    from kvadvisor.rules.docs import render_rules_doc

    with handle_user_errors():
        files = command_inputs(rules_dirs=[kvadvisor.builtin_rules_dir()])
        write_output(output, render_rules_doc(kvadvisor.load_rules()), files, terminal=True)


@rules_app.command("facts")
def rules_facts_cmd(
    output: Annotated[str, typer.Option("-o", "--output", help="File; '-' is stdout.")] = "-",
) -> None:
    """Write the facts reference (docs/facts.md): every fact rules may read, with its unit."""
    from kvadvisor.facts.doc import render_facts_doc

    with handle_user_errors():
        write_output(output, render_facts_doc(), terminal=True)


catalog_app = typer.Typer(
    help="List, show and check catalogs: storage options, GPU instances, GPUs, models.",
    no_args_is_help=True,
)
app.add_typer(catalog_app, name="catalog")


class CatalogKind(str, Enum):
    """The catalogs `catalog list` can show."""

    storage = "storage"
    instances = "instances"
    gpus = "gpus"
    models = "models"


@catalog_app.command("list")
def catalog_list_cmd(
    kind: Annotated[CatalogKind, typer.Argument(help="Which catalog.")] = CatalogKind.storage,
    catalog: CatalogOpt = None,
) -> None:
    """List a catalog's entries with their key figures (with --catalog files layered on)."""
    from kvadvisor.catalog.listing import (
        gpus_rows,
        instances_rows,
        models_rows,
        storage_rows,
        table_text,
    )
    from kvadvisor.report.console import table_text as wrapped_table

    with handle_user_errors():
        command_inputs(catalogs=catalog or ())
        catalogs = kvadvisor.load_catalogs(as_strs(catalog))
        tables = {
            CatalogKind.storage: lambda: storage_rows(catalogs.storage),
            CatalogKind.instances: lambda: instances_rows(catalogs.instances),
            CatalogKind.gpus: lambda: gpus_rows(catalogs.gpus),
            CatalogKind.models: lambda: models_rows(catalogs.models),
        }
        header, *rows = tables[kind]()
        width = terminal_width()
        # A terminal (or COLUMNS) gets the table wrapped to its width; a pipe one line per
        # entry, for grep and sort.
        echo(
            table_text([header, *rows]) if width is None else wrapped_table(header, rows, width),
            nl=False,
        )


@catalog_app.command("show")
def catalog_show_cmd(
    name: Annotated[str, typer.Argument(help="Storage, instance, GPU or model name.")],
    catalog: CatalogOpt = None,
) -> None:
    """Show one entry in full, with its price and sources."""
    from kvadvisor.catalog.listing import entry_text

    with handle_user_errors():
        command_inputs(catalogs=catalog or ())
        echo(entry_text(kvadvisor.load_catalogs(as_strs(catalog)).find(name)), nl=False)


@catalog_app.command("check")
def catalog_check_cmd(
    files: Annotated[
        list[Path], typer.Argument(help="Catalog files to check.", exists=True, dir_okay=False)
    ],
) -> None:
    """Check your own catalog files: every problem listed with its key path (exit 2 if any)."""
    found = [kvadvisor.check_catalog(f, files) for f in files]
    for result in found:
        if result.ok:
            echo(f"{result.path}: ok ({result.entries} {result.kind} entries)")
        for problem in result.problems:
            error_line(f"error: {problem}")
    if not all(r.ok for r in found):
        raise typer.Exit(EXIT_USER_ERROR)
