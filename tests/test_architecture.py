"""Import-direction contract: each subpackage imports only what LAYOUT.md allows."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "kvadvisor"

ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "units": set(),
    # Terminal-safe text (control characters escaped): a leaf every printing layer may use.
    "termtext": set(),
    # A writable cache directory for numba, set up by the package __init__: a leaf.
    "jitcache": set(),
    "progress": {"termtext"},  # terminal progress for the CLI's long steps: a near-leaf
    "yamlio": {"errors", "fileio", "termtext"},
    "fileio": {"errors"},
    # JSON with its nesting and size bounded before parsing: a leaf like yamlio.
    "jsonio": {"errors"},
    "config": {"errors", "yamlio"},
    "trace": {"errors", "units", "trace", "fileio", "jsonio"},
    "metrics": {"trace", "errors", "units", "metrics"},
    "cache": {"trace", "errors", "units", "cache"},
    "catalog": {"errors", "units", "catalog", "yamlio", "fileio", "jsonio"},
    "perfmodel": {"catalog", "errors", "units", "perfmodel"},
    "rules": {"errors", "units", "rules", "yamlio"},
    "advise": {
        "trace",
        "metrics",
        "cache",
        "catalog",
        "perfmodel",
        "rules",
        "config",
        "errors",
        "units",
        "advise",
        "yamlio",
        "plan",
    },
    # A plan is loaded input, like a catalog: it may look names up in catalogs, nothing more.
    "plan": {"errors", "units", "yamlio", "catalog", "plan"},
    # Engine configuration writers read the advice model only, like renderers.
    "emit": {"advise", "errors", "units", "emit"},
    "report": {"advise", "errors", "units", "report"},
    # Synthetic traces: generated from a shape; builds canonical batches, so it sees trace.
    "synth": {"trace", "errors", "units", "synth", "fileio"},
    "cli": {
        "advise",
        "report",
        "config",
        "errors",
        "trace",
        "catalog",
        "rules",
        "cache",
        "metrics",
        "perfmodel",
        "units",
        "__init__",
        "yamlio",
        "progress",
        "plan",
        "emit",
        "synth",
        "fileio",
        "termtext",
        "jitcache",
    },
}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "kvadvisor":
                found.add(parts[1] if len(parts) > 1 else "__init__")
    return found


def test_import_directions() -> None:
    """No module imports a part of kvadvisor that its layer may not see."""
    violations = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        top = rel.parts[0].removesuffix(".py")
        if top not in ALLOWED:
            continue
        for dep in _imports(path) - ALLOWED[top] - {top}:
            violations.append(f"{rel} imports kvadvisor.{dep}")
    assert not violations, violations


def test_rules_engine_does_not_use_pandas() -> None:
    """The rule engine sees facts, never a DataFrame."""
    for path in (PKG / "rules").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        mods |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not any(m.split(".")[0] == "pandas" for m in mods if m), path


def _advise_modules(path: Path) -> set[str]:
    """The kvadvisor.advise.* modules a file imports (``from kvadvisor.advise import x`` too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "kvadvisor.advise":
                found.update(f"advise.{a.name}" for a in node.names)
            elif node.module.startswith("kvadvisor.advise."):
                found.add(node.module.removeprefix("kvadvisor."))
        elif isinstance(node, ast.Import):
            found.update(
                a.name.removeprefix("kvadvisor.")
                for a in node.names
                if a.name.startswith("kvadvisor.advise")
            )
    return found


def test_renderers_and_emitters_see_only_the_advice_model() -> None:
    """report/ and emit/ read advise.model and nothing else of advise (LAYOUT.md)."""
    for sub in ("report", "emit"):
        for path in (PKG / sub).rglob("*.py"):
            assert _advise_modules(path) <= {"advise.model"}, path
