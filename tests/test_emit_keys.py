"""Every name kvadvisor writes, or accepts in a plan, is on the engine's own key list.

The lists (tests/fixtures/engine_keys/) were copied from each engine's source at a commit named
there; a misspelt or invented key fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from emit_fixtures import FSX, HOST, NVME, POOL
from emit_fixtures import emit_report as _report

from kvadvisor.emit import TARGETS, emit_all
from kvadvisor.engines.router import is_router_file
from kvadvisor.plan import engine_settings_table
from kvadvisor.plan.engine_files import read_engine_file

KEYS_DIR = Path(__file__).parent / "fixtures" / "engine_keys"
# Names engine_settings.yaml accepts that the sources read do not show, and why they stay.
UNVERIFIED = {
    "hicache-host-memory-fraction": "SGLang PR #40135 per research/field.md; not in memory.py "
    "at 00fe477 (kept so existing plans load)",
    "DYN_KVBM_DISK_ALLOCATOR_TYPE": "research/field.md; not in the KVBM files read",
}
# kvadvisor's own keys in a plan: a Mooncake client JSON and master flags kept apart; and
# LMCache's extra_config, whose keys its Mooncake Store backend reads.
NESTED = {"client", "master", "extra_config"}
# ... and a router file's flags, on the router's own list (tests/test_emit_router.py checks them).
ROUTER = {"router"}
# Set in launch lines for every engine: which GPUs a replica uses (CUDA's own variable).
GENERIC_ENV = {"CUDA_VISIBLE_DEVICES"}


def _fixture(engine: str) -> dict[str, Any]:
    return yaml.safe_load((KEYS_DIR / f"{engine}.yaml").read_text())


KEYS = {
    engine: {k for group in _fixture(engine)["groups"] for k in group["keys"]}
    for engine in ("lmcache", "sglang-hicache", "vllm", "dynamo-kvbm", "mooncake")
}


def test_every_key_list_names_its_source() -> None:
    """Each group of keys says the repository, the file and the commit it was read from."""
    for path in KEYS_DIR.glob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        for group in doc["groups"]:
            src = group["source"]
            assert src["repo"] and src["path"] and src["commit"] and src["defines"], path
            assert group["keys"], path


REPORTS = {
    "local-nvme": _report(),
    "shared-fs": _report(prefill=(HOST, FSX), decode=(HOST, FSX)),
    "pool": _report(prefill=(HOST, POOL)),
    "aggregated": _report(decode=None, prefill=(HOST, NVME)),
}


def _files() -> dict[str, str]:
    out: dict[str, str] = {}
    for case, report in REPORTS.items():
        for name, text in emit_all(report, list(TARGETS), "kvadvisor").items():
            out[f"{case}/{name}"] = text
    return out


FILES = _files()


def _names(engine: str, settings: dict[str, Any]) -> set[str]:
    """Every name in ``engine``'s settings, nested ones (client JSON, connectors) included."""
    names = set(settings) - NESTED - ROUTER
    for nested in NESTED & set(settings):
        names |= set(settings[nested])
    cfg = settings.get("kv-transfer-config")
    stack = [cfg] if isinstance(cfg, dict) else []
    while stack:
        c = stack.pop()
        names |= set(c) | {c["kv_connector"]}
        extra = c.get("kv_connector_extra_config") or {}
        names |= set(extra)
        stack += extra.get("connectors", [])
    return names


# The routers in front of the replicas take no engine settings: tests/test_emit_router.py
# checks their options against the routers' own lists (tests/fixtures/router_keys/).
@pytest.mark.parametrize(
    "name",
    sorted(
        n for n in FILES if not n.endswith(".txt") and "/plan" not in n and not is_router_file(n)
    ),
)
def test_emitted_keys_are_the_engines_own(name) -> None:
    """Read each file back; every key, flag and connector is on its engine's list."""
    settings = read_engine_file(name, FILES[name], engine_settings_table())
    assert settings
    for engine, values in settings.items():
        unknown = _names(engine, values) - KEYS[engine]
        assert not unknown, (name, engine, unknown)


@pytest.mark.parametrize("name", sorted(n for n in FILES if n.endswith(".sh")))
def test_launch_environment_names_are_the_engines_own(name) -> None:
    """Variables the launch lines export (config paths, ports) are on some engine's list."""
    exported = set(re.findall(r"^\s*export ([A-Z_][A-Z0-9_]*)=", FILES[name], re.MULTILINE))
    known = set().union(*KEYS.values()) | GENERIC_ENV
    assert exported <= known, exported - known


def test_plan_settings_are_the_engines_own() -> None:
    """Every name a plan accepts under `engines:` is on the engine's list, or explained."""
    table = engine_settings_table()
    for engine, spec in table["engines"].items():
        unknown = set(spec["settings"]) - KEYS[engine] - NESTED - ROUTER - set(UNVERIFIED)
        assert not unknown, (engine, unknown)
