"""Engine configuration files read back into plan engine settings (what review's lint checks).

A plan stage's ``engine_files`` name the files an operator starts the stage with; each is read
by its format and its keys land under the engine that owns them (``Engine.files`` in the
registry: a suffix, or a launch file's flag array, and the key its settings go under):

* ``*.yaml`` / ``*.yml``: a mapping of the owning engine's keys;
* ``*.env``: ``KEY=VALUE`` lines, each under the engine that documents the key;
* ``*.json``: a JSON object of the owning engine's keys;
* ``*.sh``: a bash launch file: ``export NAME=VALUE`` lines and one flag array, whose name says
  the engine; flags are ``--name value``, ``--name v1 v2`` or ``--name=value``;
* a router file (``ROUTER_ARGS`` or ``FRONTEND_ARGS``): the module it launches says the engine,
  and its flags (the launch line's ``--prefill``/``--decode`` workers too) go under ``router``;
  :func:`file_routers` reads the plan's router policy back from them.

Keys are kept as the engine spells them (flags without ``--``); values are parsed as JSON
scalars where they are numbers or booleans. A key no engine documents is kept under the file's
engine, so the plan's key check reports it with a suggestion.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import shlex
from collections.abc import Mapping
from typing import Any

from kvadvisor.engines import registry
from kvadvisor.errors import PlanError
from kvadvisor.io.jsonio import loads as json_loads
from kvadvisor.io.yamlio import parse_yaml

_ARRAY = re.compile(r"^([A-Z][A-Z0-9_]*)=\($", re.MULTILINE)
_EXPORT = re.compile(r"^export ([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.MULTILINE)


class EngineFileError(PlanError):
    """A file that is not in any engine configuration format this module reads.

    Its message names the file and the line or key, never the file's other content: a plan
    under review may name files its author cannot read, and the message goes to CI logs.
    """


# A JSON number: only text of this shape is parsed (never a nested or huge document).
_NUMBER = re.compile(r"-?(?:0|[1-9]\d{0,18})(?:\.\d+)?(?:[eE][+-]?\d{1,3})?")


def scalar(text: str) -> Any:
    """'12' -> 12, '0.5' -> 0.5, 'true' -> True; anything else stays text."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if _NUMBER.fullmatch(text.strip()) is None:
        return text
    number = json.loads(text)
    return number if math.isfinite(number) else text


# Mooncake's size text (mooncake-store/include/utils.h try_string_to_byte_size@3b5a594): a number
# and an optional unit, each unit binary ("GB" is 1024**3 bytes).
_MOONCAKE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20}
_MOONCAKE_UNITS.update({"G": 1 << 30, "GB": 1 << 30, "T": 1 << 40, "TB": 1 << 40})
_MOONCAKE_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")


def mooncake_bytes(value: Any) -> int | None:
    """Bytes of a Mooncake size (whole bytes, or text such as "4 GB" = 4 GiB); None if neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if not isinstance(value, str):
        return None
    match = _MOONCAKE_SIZE.match(value)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _MOONCAKE_UNITS:
        return None
    return int(float(match.group(1)) * _MOONCAKE_UNITS[unit])


def _flags(args: list[str], where: str) -> dict[str, Any]:
    """``--name value``, ``--name v1 v2``, ``--name=value`` and ``--name`` (True) as a mapping."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise EngineFileError(
                f"{where}: word {i + 1} of the flag array: expected a --flag (--name value)"
            )
        name, eq, value = arg[2:].partition("=")
        i += 1
        if eq:
            out[name] = scalar(value)
            continue
        values = []
        while i < len(args) and not args[i].startswith("--"):
            values.append(args[i])
            i += 1
        if not values:
            out[name] = True
        elif len(values) == 1:
            v = values[0]
            out[name] = (
                json_loads(v, f"{where}: --{name}", EngineFileError, strict=True)
                if v.startswith("{")
                else scalar(v)
            )
        else:
            out[name] = values
    return out


def _owner(key: str, default: str, table: Mapping[str, Any]) -> str:
    """The engine whose documented settings include ``key`` (the file's own engine first)."""
    engines = table["engines"]
    if key in engines.get(default, {}).get("settings", {}):
        return default
    # A worker that takes another engine's arguments (dynamo.vllm: vLLM's) asks that one next,
    # so a key two engines spell alike (--kv-cache-dtype) goes to the one that reads it.
    base = engines.get(default, {}).get("flags_of")
    if base and key in engines.get(base, {}).get("settings", {}):
        return str(base)
    return next((e for e, spec in engines.items() if key in spec["settings"]), default)


# Router files (engines/router.py): the flag arrays they use; the module a file launches says
# the engine (its ``Engine.files`` names the module, and ``router`` as the key).
ROUTER_ARRAYS = ("ROUTER_ARGS", "FRONTEND_ARGS")
# A router's policy -> the plan's router it realises (the inverse of engines/router.py POLICIES
# and DYNAMO_MODES; power_of_two is how the files write least_outstanding).
ROUTER_POLICIES = {
    "cache_aware": "prefix_aware",
    "round_robin": "round_robin",
    "power_of_two": "least_outstanding",
    "round-robin": "round_robin",
}
_LAUNCH = re.compile(r"^python -m (\S+) \"\$\{(\w+)\[@\]\}\"(.*)$", re.MULTILINE | re.DOTALL)


def _router(text: str, name: str, start: int, where: str) -> dict[str, dict[str, Any]]:
    """A router file's flags (and its launch line's worker words) under its engine's ``router``."""
    end = text.find("\n)", start)
    if end < 0:
        raise EngineFileError(f"{where}: flag array {name} has no closing ')' line")
    launch = _LAUNCH.search(text, end)
    owner = registry.file_owner(launch.group(1)) if launch and launch.group(2) == name else None
    if launch is None or owner is None:
        modules = [k for k in registry.file_kinds() if "." in k[1:]]
        raise EngineFileError(
            f"{where}: flag array {name} is launched by no router this reader knows; expected "
            "python -m " + " or ".join(modules) + f' "${{{name}[@]}}"'
        )
    engine, under = owner
    flags = _flags(_words(text[start:end], where), where)
    # --prefill URL [bootstrap port] and --decode URL repeat once per worker: kept in order.
    words = _words(launch.group(3).replace("\\\n", " "), where)
    for i, word in enumerate(words):
        if word in ("--prefill", "--decode"):
            values = list(itertools.takewhile(lambda w: not w.startswith("--"), words[i + 1 :]))
            flags.setdefault(word[2:], []).append(" ".join(values))
    return {engine: {under: flags}}


def file_routers(settings: Mapping[str, Any]) -> dict[str, str]:
    """{stage or "*" (every stage): the plan's router} a router file's settings realise."""
    if "router-mode" in settings:  # Dynamo's frontend: one mode for the fleet
        mode = settings["router-mode"]
        weight = settings.get("router-kv-overlap-score-weight")
        plan = "least_outstanding" if mode == "kv" and weight == 0 else None
        plan = plan or ("prefix_aware" if mode == "kv" else ROUTER_POLICIES.get(mode, str(mode)))
        if not settings.get("enforce-disagg"):
            return {"*": plan}
        # Disaggregated: the mode routes the prefill workers; the decode workers are routed by
        # the same mode at overlap weight 0, on load (engines/router.py dynamo_decode_router).
        decode = "least_outstanding" if mode == "kv" else plan
        return {"prefill": plan, "decode": decode}
    out = {}
    for key, stage in (("policy", "*"), ("prefill-policy", "prefill"), ("decode-policy", "decode")):
        if key in settings:
            out[stage] = ROUTER_POLICIES.get(settings[key], str(settings[key]))
    return out


def _shell(text: str, where: str, table: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    match = _ARRAY.search(text)
    if match is None:
        raise EngineFileError(f"{where}: no flag array (NAME=( ... )) found")
    name = match.group(1)
    if name in ROUTER_ARRAYS:
        return _router(text, name, match.end(), where)
    owner = registry.file_owner(name) if not name.startswith(".") else None
    if owner is None:
        raise EngineFileError(
            f"{where}: flag array {name} names no engine; expected one of "
            + ", ".join(k for k in registry.file_kinds() if "." not in k)
        )
    engine, under = owner
    end = text.find("\n)", match.end())
    if end < 0:
        raise EngineFileError(f"{where}: flag array {name} has no closing ')' line")
    flags = _flags(_words(text[match.end() : end], where), where)
    out: dict[str, dict[str, Any]] = {}
    if under:
        # A process of its own (a Mooncake master): its flags stay apart under their key.
        out[engine] = {under: flags}
        flags = {}
    for key, value in flags.items():
        out.setdefault(_owner(key, engine, table), {})[key] = value
    for key, value in _EXPORT.findall(text[: match.start()]):
        words = " ".join(_words(value, f"{where}: export {key}"))
        out.setdefault(_owner(key, engine, table), {})[key] = scalar(words)
    return out


def _words(text: str, where: str) -> list[str]:
    """Shell words of ``text`` (comments dropped); unbalanced quotes are the file's mistake."""
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise EngineFileError(f"{where}: not valid shell words ({exc})") from None


def read_engine_file(name: str, text: str, table: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{engine: settings} from one file's text; ``table`` is the documented engine settings.

    The file's suffix says its format and, through the registry, its engine (a ``.sh`` file's
    flag array says the engine). YAML goes through the plan's own checks (safe loader, no
    aliases, duplicate keys, 64-bit integers, finite numbers, nesting); JSON through the same
    checks (``jsonio`` strict).
    """
    if name.endswith(".sh"):
        return _shell(text, name, table)
    suffix = "." + name.rsplit(".", 1)[-1] if "." in name else ""
    owner = registry.file_owner(suffix) if suffix in _FORMATS else None
    if owner is None:
        kinds = [k for k in registry.file_kinds() if k.startswith(".")]
        raise EngineFileError(
            f"{name}: unknown engine file type; expected {', '.join(dict.fromkeys(kinds))} or .sh"
        )
    engine, under = owner
    label = f"{registry.engine(engine).label or engine} {under}".strip()
    settings = _FORMATS[suffix](name, text, label)
    if under:
        return {engine: {under: settings}}
    out: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        out.setdefault(_owner(key, engine, table) if suffix == ".env" else engine, {})[key] = value
    return out


def _yaml(name: str, text: str, label: str) -> dict[str, Any]:
    data = parse_yaml(text, name, EngineFileError)
    if not isinstance(data, dict):
        raise EngineFileError(f"{name}: expected a mapping of {label} keys")
    return dict(data)


def _env(name: str, text: str, label: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        if not eq:
            # The line itself is not shown: it may be anything (a password file's line).
            raise EngineFileError(f"{name}: line {number}: expected KEY=VALUE")
        out[key] = scalar(value)
    return out


def _json(name: str, text: str, label: str) -> dict[str, Any]:
    data = json_loads(text, name, EngineFileError, strict=True)
    if not isinstance(data, dict):
        raise EngineFileError(f"{name}: expected a JSON object of {label} keys")
    return data


# The file formats an engine's files may take (a suffix an engine owns reads in its format).
_FORMATS = {".yaml": _yaml, ".yml": _yaml, ".env": _env, ".json": _json}


def merge_engine_settings(
    into: dict[str, dict[str, Any]], more: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """``into`` with ``more``'s settings added engine by engine (``more`` wins on a clash)."""
    for engine, settings in more.items():
        into.setdefault(engine, {}).update(settings)
    return into
