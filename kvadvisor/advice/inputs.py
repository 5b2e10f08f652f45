"""What the advisor reads besides the workload: the rule set and the catalogs, loaded once.

The loading (files: built-in and user rules, packaged and --catalog catalogs) lives here so the
advisor itself stays pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvadvisor.catalog.crossref import check_references
from kvadvisor.catalog.instances import InstanceSpec, load_instances
from kvadvisor.catalog.perfcatalogs import PerfCatalogs, load_perf_catalogs
from kvadvisor.catalog.storage import StorageSpec, catalog_files_by_kind, load_storage
from kvadvisor.facts.registry import FACTS
from kvadvisor.rules import Rule, load_rules, select_rules
from kvadvisor.rules.loader import check_rules


@dataclass(frozen=True)
class AdvisorInputs:
    """Everything the advisor reads besides the workload: rules and catalogs.

    ``perf`` holds the GPUs, models and step-model coefficients (with the user's files): the
    stage profiler, the replays and the advisor compute every step time from it.
    """

    rules: tuple[Rule, ...]
    storage: Mapping[str, StorageSpec]
    instances: Mapping[str, InstanceSpec]
    perf: PerfCatalogs = field(default_factory=PerfCatalogs.packaged)


def load_advisor_inputs(
    rules_dirs: Sequence[str] = (),
    select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    catalog_files: Sequence[str] = (),
) -> AdvisorInputs:
    """Load rules and catalogs for the advisor.

    Load the built-in rules plus ``rules_dirs`` (selected and ignored by code, name or
    group) and the packaged catalogs plus ``catalog_files`` (routed by their ``kind``).
    """
    by_kind = catalog_files_by_kind(catalog_files)
    storage, instances = load_storage(by_kind["storage"]), load_instances(by_kind["instances"])
    check_references(storage, instances)
    perf = load_perf_catalogs(by_kind["gpus"], by_kind["models"], by_kind["efficiency"])
    return AdvisorInputs(load_rule_set(rules_dirs, select, ignore), storage, instances, perf)


def rule_dir_problems(directory: str) -> tuple[int, tuple[str, ...]]:
    """Every problem of every rule file in ``directory`` against the facts and the built-ins.

    (rules that loaded, problems), file by file: see ``kvadvisor.rules.loader.check_rules``.
    """
    return check_rules(directory, FACTS)


def load_rule_set(
    rules_dirs: Sequence[str] = (),
    select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    *,
    builtin: bool = True,
) -> tuple[Rule, ...]:
    """Built-in rules plus ``rules_dirs``, checked against the fact registry, then selected."""
    return select_rules(load_rules(rules_dirs, FACTS, builtin=builtin), select, ignore)
