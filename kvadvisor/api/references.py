"""The public API for the reference data advice rests on: rules and catalogs.

What the `rules` and `catalog` commands call; docs/api.md documents every function.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvadvisor.advice.inputs import load_advisor_inputs, load_rule_set, rule_dir_problems
from kvadvisor.catalog.checkfile import FileCheck, check_catalog_file
from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.catalog.loader import find_named
from kvadvisor.catalog.models import ModelSpec
from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.errors import RuleSyntaxError
from kvadvisor.rules import Rule, builtin_rules_dir
from kvadvisor.units import plural

PathLike = str | os.PathLike[str]
CatalogEntry = InstanceSpec | StorageSpec | GpuSpec | ModelSpec


def _strs(paths: Sequence[PathLike]) -> tuple[str, ...]:
    return tuple(os.fspath(p) for p in paths)


def load_rules(
    rules: Sequence[PathLike] = (),
    select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    *,
    builtin: bool = True,
) -> tuple[Rule, ...]:
    """The built-in rules (unless ``builtin`` is False) plus rule directories, then selected."""
    return load_rule_set(_strs(rules), tuple(select), tuple(ignore), builtin=builtin)


def check_rules(directory: PathLike) -> tuple[Rule, ...]:
    """A directory's rules, checked against the schema, the facts and the built-in rules.

    Its codes and names must not clash with the built-in rules (unless it is their directory).
    Every file is checked: a RuleSyntaxError names the first problem, counts the rest, and
    keeps them all in ``problems`` (`kvadvisor rules check` prints each one).
    """
    path = Path(directory)
    _, problems = rule_dir_problems(os.fspath(path))
    if problems:
        more = f" (and {plural(len(problems) - 1, 'more problem')})" if len(problems) > 1 else ""
        raise RuleSyntaxError(problems[0] + more, problems)
    own = load_rules([path], builtin=False)
    if not path.resolve().is_relative_to(builtin_rules_dir().resolve()):
        load_rules([path])
    return own


@dataclass(frozen=True)
class Catalogs:
    """Every catalog: storage options, GPU instances (with any extra files), GPUs and models."""

    storage: Mapping[str, StorageSpec]
    instances: Mapping[str, InstanceSpec]
    gpus: Mapping[str, GpuSpec]
    models: Mapping[str, ModelSpec]

    def find(self, name: str) -> CatalogEntry:
        """The entry of any catalog named ``name`` (or one of its aliases, in any case).

        Instances are looked up first; a typo is answered with the closest names of any catalog.
        """
        entries: dict[str, CatalogEntry] = dict(self.instances)
        for more in (self.storage, self.gpus, self.models):
            entries.update((k, v) for k, v in more.items() if k not in entries)
        return find_named(entries, name, "catalog entry")


def load_catalogs(catalogs: Sequence[PathLike] = ()) -> Catalogs:
    """The packaged catalogs with ``catalogs`` files layered on (routed by their ``kind``)."""
    inputs = load_advisor_inputs(catalog_files=_strs(catalogs))
    return Catalogs(inputs.storage, inputs.instances, inputs.perf.gpus, inputs.perf.models)


def check_catalog(path: PathLike, alongside: Sequence[PathLike] = ()) -> FileCheck:
    """A catalog file checked against the schema: every problem with its key path.

    ``alongside``: the other files checked (and loaded) with it, whose storage and GPU entries
    resolve the names this file gives.
    """
    return check_catalog_file(Path(path), [Path(p) for p in alongside])
