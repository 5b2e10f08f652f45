"""Did-you-mean on every catalog lookup by name: a short prefix finds the full names it begins.

`catalog show p5e` gave no suggestion (difflib's ratio of "p5e" to "p5e.48xlarge" is 0.4);
every lookup of an instance, a storage option, a GPU or a model goes through one function,
checked here through each public path a user reaches it by.
"""

from __future__ import annotations

import pytest
from cli_checks import one_error_line
from typer.testing import CliRunner

import kvadvisor
from kvadvisor.catalog.instances import find_instance
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.catalog.storage import find_storage
from kvadvisor.checker import close_names
from kvadvisor.cli import app
from kvadvisor.errors import CatalogError

runner = CliRunner()
CATALOGS = kvadvisor.load_catalogs()


def test_catalog_show_p5e_names_the_sizes() -> None:
    """The issue's case: `catalog show p5e` suggests the p5e instances, as one error line."""
    line = one_error_line(runner.invoke(app, ["catalog", "show", "p5e"]), "did you mean")
    expected = sorted((n for n in CATALOGS.instances if n.startswith("p5e")), key=len)
    assert expected, "the catalog has no p5e instance"
    for name in expected[:3]:
        assert name in line


@pytest.mark.parametrize(
    ("find", "names"),
    [
        (lambda n: find_instance(CATALOGS.instances, n), CATALOGS.instances),
        (lambda n: find_storage(CATALOGS.storage, n), CATALOGS.storage),
        (PerfCatalogs.packaged().gpu, CATALOGS.gpus),
        (PerfCatalogs.packaged().model, CATALOGS.models),
        (CATALOGS.find, CATALOGS.instances),
    ],
    ids=["instance", "storage", "gpu", "model", "any"],
)
def test_every_lookup_suggests_from_a_prefix(find, names) -> None:  # type: ignore[no-untyped-def]
    """For every entry, its name less its last character is answered with that name."""
    for name in names:
        typo = name[:-1]
        aliases = {a.lower() for s in names.values() for a in getattr(s, "aliases", ())}
        if typo.lower() in {n.lower() for n in names} | aliases:
            continue  # the shorter name is an entry or alias of its own (h20 beside h200)
        with pytest.raises(CatalogError, match="did you mean") as err:
            find(typo)
        said = str(err.value).split("did you mean ", 1)[1].split("?", 1)[0].split(", ")
        said = [s.strip("'") for s in said]
        longer = sorted((n for n in names if n.lower().startswith(typo.lower())), key=len)
        # The shortest names the typo begins are offered (any of equal length may come first).
        assert len(said) == min(3, len(longer)) or name in said, (typo, said)
        assert name in said or all(len(s) <= len(name) for s in said), (typo, said)


def test_suggestions_order_and_case() -> None:
    """Prefix matches, shortest first, ahead of difflib's; case does not matter; three at most."""
    names = ["p5e.48xlarge", "p5en.48xlarge", "p5.48xlarge", "p4d.24xlarge"]
    assert close_names("P5E", names, 3) == ["p5e.48xlarge", "p5en.48xlarge"]
    assert close_names("p4d.24xlarg", names, 3)[0] == "p4d.24xlarge"
    assert close_names("48xl", names, 3)[:2] == ["p5.48xlarge", "p5e.48xlarge"]
    assert close_names("zzz", names, 3) == []
    assert close_names("", names, 3) == []
