"""`kvadvisor catalog check FILE`: every problem of a user's catalog file, each with its key path.

The file is checked as the loaders check it (fields, units, sources, dates, prices), and its
names are checked against the packaged catalogs it will be layered on, and against the other
files checked with it: an instance's own drive and host memory must name storage entries that
exist, its GPU a GPU entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvadvisor.catalog.crossref import gpu_problems, reference_problems
from kvadvisor.catalog.efficiency import EFFICIENCY_FIELDS, check_efficiency_entries
from kvadvisor.catalog.fabrics import parse_fabrics
from kvadvisor.catalog.gpus import GPU_FIELDS, GPUS_YAML, unconfirmed_problems
from kvadvisor.catalog.instances import load_instances, parse_instances
from kvadvisor.catalog.loader import load_catalog_file
from kvadvisor.catalog.models import MODEL_FIELDS, check_model_entries
from kvadvisor.catalog.storage import CATALOG_KINDS, catalog_kind, load_storage, parse_storage
from kvadvisor.checker import did_you_mean, with_hint
from kvadvisor.errors import CatalogError, CatalogProblems
from kvadvisor.io.yamlio import load_yaml, load_yaml_lines


@dataclass(frozen=True)
class FileCheck:
    """What checking one catalog file found: its kind, its entries, every problem."""

    path: str
    kind: str | None
    entries: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems


def _companions(
    path: str | Path, alongside: Sequence[str | Path]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The storage specs and raw GPU entries of the other files checked with ``path``.

    A file that does not load is left out here: its own check reports why.
    """
    storage: dict[str, Any] = {}
    gpus: dict[str, dict[str, Any]] = {}
    for other in alongside:
        if Path(other).resolve() == Path(path).resolve():
            continue
        try:
            kind = catalog_kind(other)
            if kind == "storage":
                storage.update(parse_storage(load_yaml(other, CatalogError), str(other)))
            elif kind == "gpus":
                gpus.update(load_catalog_file(other, "gpus", GPU_FIELDS))
        except CatalogError:
            continue
    return storage, gpus


def check_catalog_file(path: str | Path, alongside: Sequence[str | Path] = ()) -> FileCheck:
    """Check one catalog file of any kind; problems are collected, never raised.

    ``alongside``: the other files checked with it (as `catalog check A B` and `--catalog A
    --catalog B` layer them): their storage and GPU entries resolve this file's names too.
    """
    where = str(path)
    try:
        own_storage, own_gpus = _companions(path, alongside)
        kind = catalog_kind(path)
        # The fabric catalog ships with the package; `catalog check` checks it too.
        if kind not in (*CATALOG_KINDS, "fabrics"):
            raise CatalogError(
                with_hint(
                    f"{where}: unknown catalog kind {kind!r}; expected one of "
                    f"{', '.join(CATALOG_KINDS)}",
                    did_you_mean(str(kind), CATALOG_KINDS),
                )
            )
        if kind == "storage":
            data, lines = load_yaml_lines(path, CatalogError)
            specs: dict = parse_storage(data, where, lines)
            refs = reference_problems({**load_storage(), **own_storage, **specs}, load_instances())
        elif kind == "instances":
            data, lines = load_yaml_lines(path, CatalogError)
            specs = parse_instances(data, where, lines)
            refs = reference_problems({**load_storage(), **own_storage}, specs)
            gpus = {**load_catalog_file(GPUS_YAML, "gpus", GPU_FIELDS), **own_gpus}
            refs += gpu_problems(gpus, specs)
        elif kind == "gpus":
            specs = load_catalog_file(path, "gpus", GPU_FIELDS)
            refs = [f"{where}: {p}" for p in unconfirmed_problems(specs)]
        elif kind == "fabrics":
            specs = parse_fabrics(load_yaml(path, CatalogError), where)
            refs = []
        elif kind == "efficiency":
            specs = check_efficiency_entries(
                load_catalog_file(path, "efficiency", EFFICIENCY_FIELDS)
            )
            refs = []
        else:
            specs = check_model_entries(load_catalog_file(path, "models", MODEL_FIELDS), where)
            refs = []
    except CatalogProblems as exc:
        return FileCheck(where, None, 0, tuple(exc.problems))
    except CatalogError as exc:
        return FileCheck(where, None, 0, (str(exc),))
    return FileCheck(where, kind, len(specs), tuple(refs))
