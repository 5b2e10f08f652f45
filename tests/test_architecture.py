"""Import-direction contract: each package imports only what its row allows (docs/architecture.md).

Every top-level module and package of kvadvisor has a row; one without a row fails the test, so
new code states its place before it lands. A planted disallowed import makes the check fail
(the test for the test).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "kvadvisor"

# Shared leaves every other row may import; they (and jitcache) import nothing.
# termtext: text safe for a terminal (control characters escaped), for every printing layer.
# vocab: what a value means (a stage, a severity, a status), for inputs and results alike.
# quoting: names checked and quoted for every generated format (scripts, fio jobs, READMEs).
# Modules with a row of their own inside their package: the engine registry sits low (plan
# loading, the replay, emit and the review ask it), the engine modules beside it sit high (they
# import the emit toolkit); the registry loads them by name on first use, as a plugin table does.
OWN_ROWS = {"engines.registry", "engines.datafile"}
# checker: the one walk of YAML documents (plans, rules, catalogs) against a declared schema,
# and the one did-you-mean; it reads no file, so every layer that checks input may use it.
LEAVES = {
    "errors",
    "units",
    "vocab",
    "lazy",
    "firstuse",
    "phases",
    "termtext",
    "quoting",
    "checker",
}
ISOLATED = LEAVES | {"jitcache"}

ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "units": set(),
    "vocab": set(),
    # PEP 562 lazy package exports: keeps `import kvadvisor.cli` free of numpy and pyarrow.
    "lazy": set(),
    # One-time slow steps (numba compiling, matplotlib's font cache) announce themselves here.
    "firstuse": set(),
    # Long phases (reading, cache curves, search N of M, replay) announce themselves here.
    "phases": set(),
    "termtext": set(),
    # One checker for names and one quoter per generated format; it escapes as termtext does.
    "quoting": {"termtext"},
    "checker": {"errors", "quoting", "units"},
    # A writable cache directory for numba, set up by the package __init__: a leaf.
    "jitcache": set(),
    # Where the deployment search runs: here, or on Dask (imported only when asked for); the
    # package's __version__, which a cluster's workers must run too.
    "execute": {"__init__"},
    # The input boundaries: files checked before opening, YAML and JSON bounded before parsing.
    "io": {"errors"},
    # Inputs: readers and loaders, the only packages besides the CLI that touch files.
    "trace": {"io"},
    "catalog": {"io"},
    # The rule engine speaks the shared vocabulary (severities, stages: vocab.py, a leaf).
    "rules": {"io"},
    # A plan is loaded input, like a catalog: it may look names up in catalogs, nothing more.
    # Its engine files pass the same boundary as the plan (io: files, YAML, JSON strict).
    "plan": {"io", "catalog", "engines.registry"},
    # The table of serving engines (issue 29): names, hooks, settings schemas; it imports none.
    "engines.registry": {"io", "rules", "engines.datafile"},
    # The schema of the engines' data files (engines/data/<engine>.yaml), which the registry
    # checks on load with the one checker.
    "engines.datafile": set(),
    # The engine modules (kvadvisor/engines/<engine>.py): each engine's settings, writer, facts
    # and replay defaults in one place; only the registry loads them.
    "engines": {"engines.registry", "emit", "results", "plan", "planreview", "catalog"},
    # Synthetic traces: generated from a shape; builds canonical batches, so it sees trace.
    "synth": {"trace", "io"},
    # Measurements of a trace.
    "metrics": {"trace"},
    "cache": {"trace"},
    "perfmodel": {"catalog", "engines.registry"},
    # The fleet replay (issue 12): trace x deployment -> latencies, stage time, tier demand; it
    # sees no facts, rules or advice. Named `fleet`, not `replay`: `kvadvisor.replay` is the
    # public function, and importing a subpackage of that name would rebind it to the module.
    # It builds its result model (results.replay), as sections build theirs.
    "fleet": {"trace", "cache", "perfmodel", "plan", "catalog", "results", "engines.registry"},
    # What can be bought together (issue 14): instance + storage + caps + price.
    "deploy": {"catalog", "perfmodel", "plan"},
    # The result models (report, review): plain data every layer above reads.
    "results": set(),
    # Report sections built from the measurements (trace summary, stage profile, prefix cache).
    "sections": {"trace", "metrics", "cache", "perfmodel", "catalog", "fleet", "results"},
    # Facts: named numbers computed from the results; the rule engine's vocabulary.
    "facts": {"results", "rules", "engines.registry"},
    # The advisor: candidates from catalogs (and deployments, replayed), facts, rules, verdict.
    "advice": {
        "engines.registry",
        "execute",
        "facts",
        "rules",
        "catalog",
        "deploy",
        "fleet",
        "perfmodel",
        "plan",
        "results",
    },
    # Verify (issue 20): fio and serving-benchmark jobs from a plan's replayed demand, and their
    # results read back (its loader reads the folder; the rest is pure). Not named `verify`:
    # `kvadvisor.verify` is the public function.
    "verifyjobs": {
        "engines.registry",
        "planreview",
        "plan",
        "perfmodel",
        "metrics",
        "trace",
        "catalog",
        "results",
        "sections",
        "io",
    },
    # Plan review: a plan checked against the trace's replayed arrays.
    "planreview": {
        "plan",
        "perfmodel",
        "catalog",
        "deploy",
        "fleet",
        "facts",
        "rules",
        "results",
        "engines.registry",
    },
    # The pipelines: one entry per command; they read or stream the trace and call the rest.
    "pipeline": {
        "execute",
        "trace",
        "metrics",
        "cache",
        "perfmodel",
        "catalog",
        "plan",
        "rules",
        "fleet",
        "deploy",
        "sections",
        "facts",
        "advice",
        "planreview",
        "results",
        "verifyjobs",
    },
    # Renderers and engine-config writers read the result models only; emit writes its plan
    # files through the one plan writer (kvadvisor/plan/writer.py, issue 29).
    "report": {"results"},
    "emit": {"results", "engines.registry", "plan"},
    # The public API: kvadvisor/__init__.py names it and loads it on first use from the api
    # package: `advisor` turns what a user has (paths, option values) into one pipeline call
    # and a result with its renderings; `tracefiles` (convert, describe, synthesize) and
    # `references` (rules and catalogs) are the API of the other commands.
    "__init__": {
        "api",
        "pipeline",
        "trace",
        "plan",
        "synth",
        "rules",
        "jitcache",
    },
    "api": {
        "__init__",
        "execute",
        "pipeline",
        "advice",
        "cache",
        "plan",
        "trace",
        "results",
        "report",
        "verifyjobs",
        "rules",
        "synth",
        "io",
        "catalog",
    },
    # `python -m kvadvisor`.
    "__main__": {"cli"},
    # Refined module by module in CLI_MAY_IMPORT below.
    "cli": {
        "__init__",
        "report",
        "emit",
        "io",
        "rules",
        "facts",
        "catalog",
        "trace",
        "jitcache",
    },
}


# The CLI translates options into calls of the public API (``kvadvisor``) and renders what they
# return: besides the API it may import the renderers (reports, engine configurations, and the
# texts of rules, facts, catalogs and trace descriptions), errors, units and its own plumbing;
# nothing else.
CLI_MAY_IMPORT = (
    "kvadvisor.cli",
    "kvadvisor.report",
    "kvadvisor.emit",
    "kvadvisor.errors",
    "kvadvisor.units",
    "kvadvisor.io.fileio",
    "kvadvisor.lazy",
    "kvadvisor.firstuse",
    "kvadvisor.phases",
    "kvadvisor.jitcache",
    "kvadvisor.termtext",
    "kvadvisor.checker",
    "kvadvisor.rules.docs",
    "kvadvisor.facts.doc",
    "kvadvisor.catalog.listing",
    "kvadvisor.trace.describe",
)


def _is_module(name: str) -> bool:
    """Whether ``kvadvisor.<name>`` is a module or package (not a name of the public API)."""
    return (PKG / name).is_dir() or (PKG / f"{name}.py").is_file()


def top_of(rel: Path) -> str:
    """The row a file under kvadvisor/ belongs to: its top-level module or package, or its own."""
    own = ".".join(rel.with_suffix("").parts[:2])
    return own if own in OWN_ROWS else rel.parts[0].removesuffix(".py")


_OWN_ROW_PACKAGES = {r.split(".")[0] for r in OWN_ROWS}


def _row_of(dotted: str) -> str:
    """The row of ``kvadvisor.<dotted>`` (a module path below kvadvisor)."""
    parts = dotted.split(".")
    return ".".join(parts[:2]) if ".".join(parts[:2]) in OWN_ROWS else parts[0]


def kvadvisor_imports(tree: ast.AST) -> set[str]:
    """The top-level kvadvisor modules a module imports, anywhere in it (functions too)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] != "kvadvisor":
                continue
            if len(parts) > 2 or (len(parts) == 2 and parts[1] not in _OWN_ROW_PACKAGES):
                found.add(_row_of(".".join(parts[1:])))
            elif len(parts) == 2:  # from kvadvisor.engines import registry: a row of its own
                found.update(_row_of(f"{parts[1]}.{a.name}") for a in node.names)
            else:  # from kvadvisor import x: a submodule or a name of the public API
                found.update(a.name if _is_module(a.name) else "__init__" for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "kvadvisor":
                    found.add(_row_of(".".join(parts[1:])) if len(parts) > 1 else "__init__")
    return found


def violations(files: dict[Path, str]) -> list[str]:
    """Every import of a module's row does not allow, and every module without a row."""
    out = []
    for rel, text in sorted(files.items()):
        top = top_of(rel)
        if top not in ALLOWED:
            out.append(f"{rel}: kvadvisor.{top} has no row in ALLOWED")
            continue
        allowed = ALLOWED[top] | {top} | (set() if top in ISOLATED else LEAVES)
        for dep in sorted(kvadvisor_imports(ast.parse(text)) - allowed):
            out.append(f"{rel} imports kvadvisor.{dep}")
    return out


def dotted_imports(tree: ast.AST) -> set[str]:
    """The kvadvisor modules a module imports, by full dotted name (functions too)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "kvadvisor":
                found.update(
                    f"kvadvisor.{a.name}" if _is_module(a.name) else "kvadvisor" for a in node.names
                )
            elif node.module.startswith("kvadvisor."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "kvadvisor")
    return found


def cli_violations(files: dict[Path, str]) -> list[str]:
    """Every import of a CLI module outside CLI_MAY_IMPORT."""
    out = []
    for rel, text in sorted(files.items()):
        if top_of(rel) != "cli":
            continue
        for name in sorted(dotted_imports(ast.parse(text))):
            if name == "kvadvisor":  # the public API itself
                continue
            if not any(name == ok or name.startswith(ok + ".") for ok in CLI_MAY_IMPORT):
                out.append(f"{rel} imports {name}")
    return out


def package_files() -> dict[Path, str]:
    """Every module of the package, by its path under kvadvisor/."""
    return {p.relative_to(PKG): p.read_text(encoding="utf-8") for p in PKG.rglob("*.py")}


def test_import_directions() -> None:
    """No module imports a part of kvadvisor that its row does not allow."""
    assert not violations(package_files())


def test_the_cli_imports_only_the_api_renderers_and_its_plumbing() -> None:
    """The CLI reaches nothing of the library but through the public API and the renderers."""
    assert not cli_violations(package_files())
    files = package_files()
    files[Path("cli/analyze.py")] += (
        "\nfrom kvadvisor.catalog.loader import find_named\nimport kvadvisor.pipeline.analyze\n"
    )
    assert cli_violations(files) == [
        "cli/analyze.py imports kvadvisor.catalog.loader",
        "cli/analyze.py imports kvadvisor.pipeline.analyze",
    ]


# A Plan is the one deployment (issue 29): fleet/fromplan resolves it into the replay's inputs
# (fleet/resolved.py: step tables, pool tokens, rates after the load path), and only the fleet
# builds them or names their types; every other module hands the fleet a Plan and reads the
# replay's results. Tests and benchmarks, outside kvadvisor/, may import them: they replay toy
# step tables and set one mechanism's input directly, which a plan reaches only by defaults.
FLEET_PRIVATE_MODULES = {"kvadvisor.fleet.resolved"}
# The functions that make resolved inputs or take them (the public entries take a Plan).
FLEET_PRIVATE_FUNCTIONS = {"resolve_plan", "run_resolved", "run_stage"}


def fleet_private_names() -> set[str]:
    """The classes of fleet/resolved.py and the functions that make or take them."""
    tree = ast.parse((PKG / "fleet" / "resolved.py").read_text(encoding="utf-8"))
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    return classes | FLEET_PRIVATE_FUNCTIONS


def fleet_private_imports(files: dict[Path, str]) -> list[str]:
    """Every import of the fleet's resolved inputs by a module outside kvadvisor/fleet."""
    private = fleet_private_names()
    out = []
    for rel, text in sorted(files.items()):
        if rel.parts[0] == "fleet":
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "kvadvisor.fleet"
            ):
                for a in node.names:
                    # from the module itself, a private name, or the module as a name
                    names = {node.module, f"{node.module}.{a.name}"}
                    if a.name in private or names & FLEET_PRIVATE_MODULES:
                        out.append(f"{rel} imports {node.module}.{a.name}")
            elif isinstance(node, ast.Import):
                out += [
                    f"{rel} imports {a.name}" for a in node.names if a.name in FLEET_PRIVATE_MODULES
                ]
    return out


def test_only_the_fleet_imports_its_resolved_inputs() -> None:
    """Outside kvadvisor/fleet a module passes a Plan; planted imports of the inputs fail."""
    assert {"ResolvedFleet", "ResolvedStage", "ResolvedTier", "run_resolved"} <= (
        fleet_private_names()
    )
    assert not fleet_private_imports(package_files())
    files = package_files()
    files[Path("advice/sizing.py")] += "\nfrom kvadvisor.fleet.resolved import Scope\n"
    files[Path("pipeline/replay.py")] += "\nfrom kvadvisor.fleet.engine import run_resolved\n"
    files[Path("api/advisor.py")] += "\nfrom kvadvisor.fleet import resolved\n"
    files[Path("sections/profile.py")] += "\nimport kvadvisor.fleet.resolved\n"
    files[Path("fleet/sample.py")] += "\nfrom kvadvisor.fleet.resolved import ResolvedFleet\n"
    assert fleet_private_imports(files) == [
        "advice/sizing.py imports kvadvisor.fleet.resolved.Scope",
        "api/advisor.py imports kvadvisor.fleet.resolved",
        "pipeline/replay.py imports kvadvisor.fleet.engine.run_resolved",
        "sections/profile.py imports kvadvisor.fleet.resolved",
    ]


def test_a_planted_disallowed_import_fails() -> None:
    """The check is not vacuous: a renderer importing the pipeline, an unlisted package, fail."""
    files = package_files()
    renderer = Path("report/console.py")
    files[renderer] += "\nfrom kvadvisor.pipeline import analyze\n"
    files[Path("newpkg/__init__.py")] = '"""A package nobody listed."""\n'
    found = violations(files)
    assert "report/console.py imports kvadvisor.pipeline" in found
    assert "newpkg/__init__.py: kvadvisor.newpkg has no row in ALLOWED" in found
    # An engine module is loaded by its registry only: emit's dispatch may not import one.
    files = package_files()
    files[Path("emit/writers.py")] += "\nfrom kvadvisor.engines.vllm import emit_vllm\n"
    files[Path("plan/loader.py")] += "\nfrom kvadvisor.engines import registry, kvbm\n"
    assert violations(files) == [
        "emit/writers.py imports kvadvisor.engines",
        "plan/loader.py imports kvadvisor.engines",
    ]
    # And a leaf importing anything but a leaf.
    files = package_files()
    files[Path("units/unit.py")] += "\nimport kvadvisor.trace\n"
    assert violations(files) == ["units/unit.py imports kvadvisor.trace"]


def row_problems(rows: dict[str, set[str]], files: dict[Path, str]) -> list[str]:
    """Every row or allowed import naming no module of the package (a stale row, a typo)."""
    present = {top_of(rel) for rel in files}
    out = [f"kvadvisor.{name} has a row but no module" for name in sorted(set(rows) - present)]
    for name, deps in sorted(rows.items()):
        out += [
            f"{name}'s row allows kvadvisor.{d}: no such module" for d in sorted(deps - present)
        ]
    return out


def test_rows_name_real_packages() -> None:
    """The rows are exactly the package's modules and packages: none stale, none missing.

    A module without a row fails test_import_directions; a row (or an allowed import) that
    names no module fails here, as a planted stale row shows.
    """
    files = package_files()
    assert not row_problems(ALLOWED, files)
    assert {top_of(rel) for rel in files} == set(ALLOWED)
    stale = {**ALLOWED, "config": {"errors", "io"}, "report": {"results", "reports"}}
    assert row_problems(stale, files) == [
        "kvadvisor.config has a row but no module",
        "report's row allows kvadvisor.reports: no such module",
    ]


def test_docs_list_every_row() -> None:
    """docs/architecture.md's table has a line for every row (``__init__`` is `kvadvisor`)."""
    doc = (PKG.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = doc.split("\n| package | job |", 1)[1].split("\n\n", 1)[0]
    listed = {
        name
        for line in table.splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`([\w.]+)`", line.split("|")[1])
    }
    listed = {"__init__" if n == "kvadvisor" else n for n in listed}
    assert set(ALLOWED) - listed == set()
    assert listed - set(ALLOWED) == set()


def test_rules_engine_does_not_use_pandas() -> None:
    """The rule engine sees facts, never a DataFrame."""
    for path in (PKG / "rules").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        mods |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not any(m.split(".")[0] == "pandas" for m in mods if m), path
