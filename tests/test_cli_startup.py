"""Start-up: the command line loads no analysis library until a command needs one.

`kvadvisor --version` and `--help` must answer at once (issue 19: 3.3 s before). The timing is
benchmarks/bench_startup.py's job; these tests hold the cause: what importing the CLI loads.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import numba as nb
import pytest

from kvadvisor import firstuse
from kvadvisor.cli.traces import Arrival
from kvadvisor.synth import ArrivalProcess

# The slow imports: the analysis stack (numba, scipy, pandas, matplotlib) and what reading a
# trace or rendering a report needs (numpy, pyarrow, yaml, jinja2).
HEAVY = ("numba", "scipy", "matplotlib", "pandas", "numpy", "pyarrow", "yaml", "jinja2")


def _modules_after(code: str) -> set[str]:
    """Top-level packages loaded by ``code`` in a fresh interpreter."""
    listing = "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    probe = f"{code}\nimport sys, json\n{listing}"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_importing_the_cli_loads_no_analysis_library() -> None:
    """The assembled app (every command registered) imports none of the heavy packages."""
    loaded = _modules_after("from kvadvisor.cli import app; app.registered_commands")
    assert "typer" in loaded  # the probe did load the command line
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_help_loads_no_analysis_library() -> None:
    """`kvadvisor --help` renders every command's options without the analysis stack."""
    code = (
        "import sys\nsys.argv = ['kvadvisor', '--help']\nfrom kvadvisor.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    loaded = _modules_after(code)
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_version_answers_before_typer_loads() -> None:
    """`kvadvisor --version` prints the version without importing the command-line library."""
    code = (
        "import sys\nsys.argv = ['kvadvisor', '--version']\nfrom kvadvisor.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    loaded = _modules_after(code)
    assert "typer" not in loaded and "click" not in loaded
    out = subprocess.run(
        [sys.executable, "-m", "kvadvisor", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("kvadvisor ")


def test_first_numba_compile_is_announced_once(monkeypatch) -> None:
    """A cache miss (a kernel compiled) is said once; a function already compiled says nothing."""
    said: list[str] = []
    monkeypatch.setattr(firstuse, "_said", set())
    firstuse.listen(said.append)
    try:
        firstuse.watch_numba_compiles()

        @nb.njit(cache=False)
        def twice(x):  # pragma: no cover - compiled
            return 2 * x

        assert twice(3) == 6  # compiles: announced
        assert twice(4) == 8  # already compiled: no event
        firstuse.announce(firstuse.NUMBA_COMPILING)  # said already: not again
        assert said == [firstuse.NUMBA_COMPILING]
    finally:
        firstuse.listen(None)


def test_announcements_without_a_listener_are_silent(monkeypatch) -> None:
    """Library use (no listener) prints nothing and remembers nothing."""
    monkeypatch.setattr(firstuse, "_said", set())
    firstuse.listen(None)
    firstuse.announce("x")
    assert firstuse._said == set()


def test_arrival_choices_match_the_generator() -> None:
    """The CLI's --arrival choices are exactly the generator's arrival processes."""
    assert [a.value for a in Arrival] == [a.value for a in ArrivalProcess]


@pytest.mark.parametrize("package", ["kvadvisor.trace", "kvadvisor.cli"])
def test_lazy_names_never_shadow_a_submodule(package: str) -> None:
    """No lazily exported name is also a submodule's name.

    Such a name would become the module once the submodule is imported elsewhere (why
    kvadvisor.synth, which exports `generate`, stays eager).
    """
    pkg = importlib.import_module(package)
    submodules = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
    assert not set(pkg._EXPORTS) & submodules
    for name in pkg._EXPORTS:
        assert getattr(pkg, name) is not None
