"""Every registered fact is made somewhere, under its own name written out.

The registries (:mod:`kvadvisor.facts.registry` for analyze's workload and configuration facts,
:mod:`kvadvisor.facts.review` for `kvadvisor review`'s plan, stage, tier and engine facts) say
what a rule may read; a name registered there and made nowhere is a rule that can never fire.
So every registered name must appear as a string literal in a kvadvisor module other than the
two spec modules, where ``grep`` finds it being made. Fact names are never assembled (an
f-string or a concatenation as the name a fact set adds), which would hide them from both
``grep`` and this check.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from kvadvisor.facts.registry import FACT_SPECS

PACKAGE = Path(__file__).resolve().parents[1] / "kvadvisor"
SPEC_MODULES = {PACKAGE / "facts" / "registry.py", PACKAGE / "facts" / "review.py"}
# Modules that make facts: the workload's, the advisor's configuration, the review's scopes.
MAKERS = (
    PACKAGE / "facts" / "workload.py",
    PACKAGE / "advice" / "advisor.py",
    PACKAGE / "planreview" / "facts.py",
    PACKAGE / "planreview" / "settings.py",
)
# Facts made from a data table by design, whose names are therefore not literals in code.
# None today: the engine settings (lmcache_*, sglang_*, kvbm_*, mooncake_*, vllm_*) are each
# added under a literal name in kvadvisor/planreview/settings.py, not named after the engine
# and key at run time. A name added here must be registered and really absent from the code.
FROM_DATA_TABLES: frozenset[str] = frozenset()


def literals(paths: Iterable[Path]) -> set[str]:
    """Every string constant in the modules at ``paths``."""
    out: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.add(node.value)
    return out


def unmade(registered: Iterable[str], made: set[str]) -> list[str]:
    """Registered names that no module makes (and no data table names)."""
    return sorted(n for n in registered if n not in made and n not in FROM_DATA_TABLES)


def code_literals() -> set[str]:
    """String literals of every kvadvisor module except the spec modules."""
    return literals(p for p in PACKAGE.rglob("*.py") if p not in SPEC_MODULES)


def test_every_registered_fact_is_made() -> None:
    """Each workload, configuration and review fact's name is written where it is made."""
    names = [f.name for f in FACT_SPECS]
    assert len(names) == len(set(names))
    assert unmade(names, code_literals()) == []


def test_a_planted_spec_name_fails() -> None:
    """The test for the test: a name only a spec module knows is reported, a made one is not."""
    made = code_literals()
    planted = "decode_storage_read_iops"  # a fact that once was registered and made nowhere
    assert planted not in made
    assert unmade([*(f.name for f in FACT_SPECS), planted], made) == [planted]


def test_the_data_table_allow_list_is_honest() -> None:
    """Allowed names are registered facts that really have no literal in the code."""
    registered = {f.name for f in FACT_SPECS}
    made = code_literals()
    for name in FROM_DATA_TABLES:
        assert name in registered and name not in made, name


def assembled_names(path: Path) -> list[str]:
    """``X.add(...)`` calls in ``path`` whose fact name is an f-string or a concatenation."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add"
            and node.args
            and isinstance(node.args[0], (ast.JoinedStr, ast.BinOp))
        ):
            out.append(f"{path.name}:{node.lineno}")
    return out


def test_no_fact_name_is_assembled() -> None:
    """No fact set adds a fact under a name built at run time."""
    for path in MAKERS:
        assert path.is_file(), path
        assert assembled_names(path) == [], path


def test_an_assembled_name_is_caught(tmp_path: Path) -> None:
    """The test for the test: the f-string tier names this check replaced are reported."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        'def f(fs, d, q, v):\n    fs.add(f"tier_{d}_bytes_per_s_{q}", v)\n'
        '    fs.add("tier_" + d + "_iops_p99", v)\n    fs.add("tier_name", v)\n',
        encoding="utf-8",
    )
    assert assembled_names(planted) == ["planted.py:2", "planted.py:3"]
