"""Load rule files (one rule per YAML file) and check them against the rule schema.

Nothing in a rule file is executed: YAML goes through the safe loader, conditions become
``Compare``/``AllOf``/``AnyOf``/``Not`` values over a closed set of operators, and message
placeholders are checked to be plain fact names. Unknown facts are rejected with the closest
known names (difflib).
"""

from __future__ import annotations

import difflib
import importlib.resources
import os
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvadvisor.errors import RuleError, RuleReferenceError, RuleSyntaxError
from kvadvisor.io.yamlio import load_yaml
from kvadvisor.rules.model import (
    VISIBLE,
    AllOf,
    AnyOf,
    Compare,
    Condition,
    Escalation,
    FactSpec,
    Not,
    Op,
    Recommend,
    Rule,
    RuleDocs,
    RuleScope,
    Severity,
    Stage,
)
from kvadvisor.units import plural

CODE_RE = re.compile(r"^[A-Z]{2}[0-9]{2}$")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
GROUP_RE = re.compile(r"^[a-z][a-z0-9_]*$")
FIELD_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# Format specs a message may use on a number: width-free, e.g. ".1f", ",.0f", ".0%", ".2e".
SPEC_RE = re.compile(r"^,?(\.[0-9]{1,2})?[fe%g]?$")
# Nesting of all/any/not a rule may use; deeper conditions are a sign of a generated attack.
MAX_CONDITION_DEPTH = 8

TOP_KEYS = {
    "code",
    "name",
    "groups",
    "severity",
    "stage",
    "summary",
    "when",
    "message",
    "recommend",
    "docs",
    "scope",
    "applies",
    "escalate",
    "passed",
    "evidence",
}
REQUIRED_KEYS = TOP_KEYS - {"recommend", "scope", "applies", "escalate", "passed", "evidence"}
DOCS_KEYS = ("what", "why", "example", "references")

RULE_STAGES = (Stage.PREFILL, Stage.DECODE, Stage.BOTH)


def builtin_rules_dir() -> Path:
    """Where the built-in rules are: inside the installed package, else ``<repo>/rules``.

    A wheel carries the top-level ``rules/`` as ``kvadvisor/_builtin_rules`` (hatch
    force-include, see pyproject.toml); a source checkout has it beside the package.
    """
    packaged = importlib.resources.files("kvadvisor") / "_builtin_rules"
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[2] / "rules"
    if checkout.is_dir():
        return checkout
    raise RuleError(
        "the built-in rules are missing from this installation (neither "
        "kvadvisor/_builtin_rules nor a rules/ folder beside the package); reinstall kvadvisor"
    )


def rule_files(directory: Path) -> list[Path]:
    """Every ``*.yaml``/``*.yml`` file under ``directory``, in a stable order."""
    if not directory.is_dir():
        raise RuleSyntaxError(f"{directory}: not a directory of rule files")
    # os.walk, not rglob: a directory whose entries vanish while it is walked (/proc, a
    # folder being cleaned) skips them instead of raising FileNotFoundError mid-walk.
    files = [
        Path(root) / name
        for root, _, names in os.walk(directory, onerror=lambda _: None)
        for name in names
        if name.endswith((".yaml", ".yml")) and (Path(root) / name).is_file()
    ]
    return sorted(files, key=lambda p: str(p.relative_to(directory)))


@dataclass
class _Checker:
    """Collects every problem in one file, so the user fixes them in one pass."""

    path: str
    facts: Mapping[str, FactSpec]

    def __post_init__(self) -> None:
        self.problems: list[str] = []
        self.unknown: list[str] = []
        self.scope = RuleScope.WORKLOAD

    def known(self, where: str, name: str) -> bool:
        """Whether ``name`` is a registered fact this rule's scope may read (else say why)."""
        if name not in self.facts:
            self.unknown_fact(where, name)
            return False
        own = self.facts[name].scope
        if own not in VISIBLE[self.scope]:
            self.bad(
                where,
                f"fact {name!r} belongs to the {own} scope; a {self.scope} rule reads "
                f"{', '.join(sorted(str(s) for s in VISIBLE[self.scope]))} facts "
                "(set the rule's scope: to the fact's, or read another fact)",
            )
            return False
        return True

    def bad(self, where: str, what: str) -> None:
        self.problems.append(f"{where}: {what}" if where else what)

    def unknown_fact(self, where: str, name: str) -> None:
        close = difflib.get_close_matches(name, list(self.facts), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        self.unknown.append(
            f"{where}: unknown fact {name!r}{hint} (`kvadvisor rules facts` lists them)"
        )

    def text(self, data: Mapping[str, Any], key: str, where: str) -> str:
        value = data.get(key)
        if not isinstance(value, str) or not value.strip():
            self.bad(f"{where}{key}", "expected non-empty text")
            return ""
        return value.strip()

    # -- conditions ------------------------------------------------------------------------
    def condition(self, node: Any, where: str, depth: int = 1) -> Condition | None:
        if depth > MAX_CONDITION_DEPTH:
            self.bad(where, f"conditions nested deeper than {MAX_CONDITION_DEPTH} levels")
            return None
        if not isinstance(node, dict):
            self.bad(
                where,
                "expected a mapping: {all: [...]}, {any: [...]}, {not: {...}} or "
                "{fact: NAME, op: OP, value: X}",
            )
            return None
        logical = [k for k in ("all", "any", "not") if k in node]
        if logical:
            if len(node) != 1:
                self.bad(where, f"'{logical[0]}' must be the only key of its mapping")
                return None
            key = logical[0]
            if key == "not":
                part = self.condition(node["not"], f"{where}.not", depth + 1)
                return Not(part) if part is not None else None
            items = node[key]
            if not isinstance(items, list) or not items:
                self.bad(f"{where}.{key}", "expected a non-empty list of conditions")
                return None
            parts = [
                self.condition(c, f"{where}.{key}[{i}]", depth + 1) for i, c in enumerate(items)
            ]
            if any(p is None for p in parts):
                return None
            return (AllOf if key == "all" else AnyOf)(tuple(parts))  # type: ignore[arg-type]
        return self.compare(node, where)

    def compare(self, node: dict[str, Any], where: str) -> Compare | None:
        extra = set(node) - {"fact", "op", "value", "ref", "factor"}
        if extra:
            self.bad(
                where,
                f"unknown key(s) {', '.join(sorted(map(str, extra)))} (a comparison "
                "has fact, op and value, or fact, op, ref and optionally factor)",
            )
            return None
        fact = node.get("fact")
        if not isinstance(fact, str):
            self.bad(f"{where}.fact", "expected a fact name")
            return None
        ok = self.known(f"{where}.fact", fact)
        try:
            op = Op(node.get("op"))
        except ValueError:
            self.bad(
                f"{where}.op",
                f"expected one of {', '.join(o.value for o in Op)}, got {node.get('op')!r}",
            )
            return None
        has_value, has_ref = "value" in node, "ref" in node
        if has_value == has_ref:
            self.bad(
                where,
                "give exactly one of 'value' (a number or true/false) and 'ref' (another fact)",
            )
            return None
        if has_value:
            if "factor" in node:
                self.bad(f"{where}.factor", "only allowed with 'ref'")
                return None
            value = node["value"]
            is_bool_fact = ok and self.facts[fact].unit == "bool"
            is_text_fact = ok and self.facts[fact].unit == "text"
            if not ok and isinstance(value, (bool, str)):
                return None  # the unknown fact is the problem to report
            if is_text_fact:
                if not isinstance(value, str) or op not in (Op.EQ, Op.NE):
                    self.bad(
                        f"{where}.value", "a text fact compares with a text value, by == or !="
                    )
                    return None
            elif isinstance(value, str):
                self.bad(
                    f"{where}.value",
                    f"expected a plain number, got {value!r} (the fact's unit is fixed; write "
                    "no unit)",
                )
                return None
            elif isinstance(value, bool) or is_bool_fact:
                if not (isinstance(value, bool) and is_bool_fact) or op not in (Op.EQ, Op.NE):
                    self.bad(
                        f"{where}.value", "true/false compares only a bool fact, with == or !="
                    )
                    return None
            elif not isinstance(value, (int, float)) or value != value:
                self.bad(
                    f"{where}.value",
                    f"expected a plain number, got {value!r} (the "
                    "fact's unit is fixed; write no unit)",
                )
                return None
            return Compare(fact, op, value=value) if ok else None
        ref = node["ref"]
        if not isinstance(ref, str):
            self.bad(f"{where}.ref", "expected a fact name")
            return None
        if not self.known(f"{where}.ref", ref):
            ok = False
        factor = node.get("factor", 1.0)
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
            self.bad(f"{where}.factor", f"expected a positive number, got {factor!r}")
            return None
        if ok and "text" in (self.facts[fact].unit, self.facts[ref].unit):
            self.bad(where, "a text fact compares only with a value, never with 'ref'")
            return None
        if ok and self.facts[fact].unit != self.facts[ref].unit:
            self.bad(
                where,
                f"compares {fact} ({self.facts[fact].unit}) with {ref} "
                f"({self.facts[ref].unit}): units differ",
            )
            return None
        return Compare(fact, op, ref=ref, factor=float(factor)) if ok else None

    # -- message -------------------------------------------------------------------------
    def message(self, text: str, where: str) -> None:
        try:
            parts = list(string.Formatter().parse(text))
        except ValueError as exc:
            self.bad(where, f"bad placeholder: {exc}")
            return
        for _, name, spec, conversion in parts:
            if name is None:
                continue
            if not FIELD_RE.match(name):
                self.bad(where, f"placeholder {{{name}}} must be a plain fact name")
                continue
            if conversion is not None:
                self.bad(where, f"placeholder {{{name}}}: conversions (!r, !s) are not allowed")
            if spec and not SPEC_RE.match(spec):
                self.bad(
                    where,
                    f"placeholder {{{name}:{spec}}}: format must be like .1f, ,.0f, "
                    ".0% or empty (units are added automatically when empty)",
                )
            if self.known(where, name) and spec and self.facts[name].unit in ("text", "bool"):
                self.bad(
                    where,
                    f"placeholder {{{name}:{spec}}}: a {self.facts[name].unit} fact "
                    "takes no format",
                )

    # -- recommend -----------------------------------------------------------------------
    def recommend(self, node: Any, where: str) -> Recommend | None:
        if node is None:
            return None
        if not isinstance(node, dict):
            self.bad(
                where, "expected a mapping with action, and optionally catalog, where, rank_by"
            )
            return None
        extra = set(node) - {"action", "catalog", "where", "rank_by"}
        if extra:
            self.bad(where, f"unknown key(s) {', '.join(sorted(map(str, extra)))}")
        action = self.text(node, "action", f"{where}.")
        catalog = node.get("catalog")
        if catalog is not None and catalog not in ("storage", "instances"):
            self.bad(f"{where}.catalog", f"expected storage or instances, got {catalog!r}")
        where_clause: dict[str, dict[str, Any]] = {}
        raw = node.get("where") or {}
        if not isinstance(raw, dict):
            self.bad(f"{where}.where", "expected a mapping of field to {op: value}")
            raw = {}
        for field_name, test in raw.items():
            at = f"{where}.where.{field_name}"
            if not isinstance(field_name, str) or not FIELD_RE.match(field_name):
                self.bad(at, "expected a catalog field name")
                continue
            if not isinstance(test, dict) or not test:
                self.bad(at, "expected {op: value}, e.g. {'>=': 5000}")
                continue
            checked: dict[str, Any] = {}
            for op, value in test.items():
                if op not in {o.value for o in Op}:
                    self.bad(at, f"unknown operator {op!r}")
                    continue
                if isinstance(value, dict):
                    if set(value) - {"fact", "factor"} or not isinstance(value.get("fact"), str):
                        self.bad(at, "a fact-valued bound is {fact: NAME, factor: NUMBER}")
                        continue
                    if not self.known(at, value["fact"]):
                        continue
                    factor = value.get("factor", 1.0)
                    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
                        self.bad(at, "factor must be a number")
                        continue
                elif not isinstance(value, (int, float, str, bool)):
                    self.bad(at, f"expected a number, text or true/false, got {value!r}")
                    continue
                checked[op] = value
            where_clause[field_name] = checked
        rank_by = node.get("rank_by")
        if rank_by is not None and (
            not isinstance(rank_by, str) or not FIELD_RE.match(rank_by.lstrip("-"))
        ):
            self.bad(f"{where}.rank_by", "expected a catalog field name, '-' prefix for descending")
            rank_by = None
        return Recommend(action=action, catalog=catalog, where=where_clause, rank_by=rank_by)

    # -- the whole rule ------------------------------------------------------------------
    def rule(self, data: Any) -> Rule | None:
        if not isinstance(data, dict):
            self.bad(
                "",
                "expected a mapping with code, name, groups, severity, stage, "
                "summary, when, message and docs",
            )
            return None
        for key in sorted(map(str, set(data) - TOP_KEYS)):
            close = difflib.get_close_matches(key, sorted(TOP_KEYS), n=1)
            self.bad(key, "unknown key" + (f"; did you mean '{close[0]}'?" if close else ""))
        missing = REQUIRED_KEYS - set(data)
        for key in sorted(missing):
            self.bad(key, "is required")
        raw_scope = data.get("scope", RuleScope.WORKLOAD.value)
        try:
            self.scope = RuleScope(raw_scope)
        except ValueError:
            self.bad(
                "scope",
                f"expected one of {', '.join(s.value for s in RuleScope)}, got {raw_scope!r}",
            )
        # A missing key is said once ("is required"), not again as "got None" below.
        code = data.get("code")
        if "code" not in missing and (not isinstance(code, str) or not CODE_RE.match(code)):
            self.bad(
                "code", f"expected two capital letters and two digits (e.g. ST01), got {code!r}"
            )
        name = data.get("name")
        if "name" not in missing and (not isinstance(name, str) or not NAME_RE.match(name)):
            self.bad(
                "name",
                f"expected a dotted lower-case name (e.g. storage.write_bandwidth), got {name!r}",
            )
        groups = data.get("groups")
        if "groups" in missing:
            groups = []
        elif (
            not isinstance(groups, list)
            or not groups
            or not all(isinstance(g, str) and GROUP_RE.match(g) for g in groups)
        ):
            self.bad("groups", f"expected a list of lower-case group names, got {groups!r}")
            groups = []
        try:
            severity = Severity(data.get("severity"))
        except ValueError:
            if "severity" not in missing:
                self.bad(
                    "severity", f"expected info, warning or error, got {data.get('severity')!r}"
                )
            severity = Severity.INFO
        # A rule speaks about prefill, decode or both; "serving" names a plan's aggregated stage.
        stage = next((s for s in RULE_STAGES if s.value == data.get("stage")), None)
        if stage is None:
            if "stage" not in missing:
                self.bad("stage", f"expected prefill, decode or both, got {data.get('stage')!r}")
            stage = Stage.BOTH
        summary = self.text(data, "summary", "") if "summary" in data else ""
        message = self.text(data, "message", "") if "message" in data else ""
        if message:
            self.message(message, "message")
        when = self.condition(data["when"], "when") if "when" in data else None
        applies = self.condition(data["applies"], "applies") if "applies" in data else None
        passed = self.text(data, "passed", "") if "passed" in data else ""
        if passed:
            self.message(passed, "passed")
        escalate = self.escalation(data.get("escalate"), severity)
        shows = self.shows(data.get("evidence"))
        recommend = self.recommend(data.get("recommend"), "recommend")
        docs = self.docs(data.get("docs"))
        if self.problems or self.unknown or when is None or docs is None:
            return None
        return Rule(
            code=code,
            name=name,
            groups=tuple(groups),
            severity=severity,
            stage=stage,
            summary=summary,
            when=when,
            message=message,
            docs=docs,
            recommend=recommend,
            path=self.path,
            scope=self.scope,
            applies=applies,
            escalate=escalate,
            passed=passed,
            shows=shows,
        )

    def shows(self, node: Any) -> tuple[str, ...]:
        """``evidence: [fact, ...]``: facts a finding shows besides those it reads or quotes."""
        if node is None:
            return ()
        if not isinstance(node, list) or not all(isinstance(n, str) for n in node):
            self.bad("evidence", "expected a list of fact names")
            return ()
        return tuple(n for i, n in enumerate(node) if self.known(f"evidence[{i}]", n))

    def escalation(self, node: Any, base: Severity) -> tuple[Escalation, ...]:
        """``escalate``: one {severity, when, message}, or a list of them, gravest first."""
        if node is None:
            return ()
        items = node if isinstance(node, list) else [node]
        out: list[Escalation] = []
        for i, item in enumerate(items):
            at = "escalate" if not isinstance(node, list) else f"escalate[{i}]"
            if not isinstance(item, dict) or set(item) != {"severity", "when", "message"}:
                self.bad(at, "expected a mapping with exactly severity, when and message")
                continue
            try:
                severity = Severity(item["severity"])
            except ValueError:
                self.bad(f"{at}.severity", f"expected warning or error, got {item['severity']!r}")
                continue
            if severity.rank <= base.rank:
                self.bad(f"{at}.severity", f"must be graver than the rule's own ({base.value})")
                continue
            if out and severity.rank > out[-1].severity.rank:
                self.bad(f"{at}.severity", "list escalations gravest first")
                continue
            message = self.text(item, "message", f"{at}.")
            if message:
                self.message(message, f"{at}.message")
            when = self.condition(item["when"], f"{at}.when")
            if when is not None:
                out.append(Escalation(severity, when, message))
        return tuple(out)

    def docs(self, node: Any) -> RuleDocs | None:
        if node is None:
            return None
        if not isinstance(node, dict):
            self.bad("docs", "expected a mapping with what, why, example, references")
            return None
        for key in sorted(map(str, set(node) - set(DOCS_KEYS))):
            self.bad(f"docs.{key}", "unknown key")
        texts = [self.text(node, k, "docs.") for k in DOCS_KEYS[:3]]
        refs = node.get("references")
        if (
            not isinstance(refs, list)
            or not refs
            or not all(isinstance(r, str) and r.strip() for r in refs)
        ):
            self.bad("docs.references", "expected a non-empty list of citations")
            refs = []
        return RuleDocs(texts[0], texts[1], texts[2], tuple(r.strip() for r in refs))


def parse_rule(data: Any, path: str, facts: Mapping[str, FactSpec]) -> Rule:
    """Check one parsed rule document; raise one error naming the file and every problem."""
    checker = _Checker(path, facts)
    rule = checker.rule(data)
    every = tuple(f"{path}: {p}" for p in checker.problems + checker.unknown)
    if checker.unknown and not checker.problems:
        more = f" (and {len(checker.unknown) - 1} more)" if len(checker.unknown) > 1 else ""
        raise RuleReferenceError(f"{path}: {checker.unknown[0]}{more}", every)
    if every:
        more = (
            f" (and {plural(len(every) - 1, 'more problem')}; "
            "`kvadvisor rules check` lists them all)"
            if len(every) > 1
            else ""
        )
        raise RuleSyntaxError(f"{every[0]}{more}", every)
    assert rule is not None  # no problems means a rule was built
    return rule


def load_rule_file(path: str | Path, facts: Mapping[str, FactSpec]) -> Rule:
    """Load and check one rule file."""
    path = Path(path)
    return parse_rule(load_yaml(path, RuleSyntaxError), str(path), facts)


def check_rules(
    directory: str | Path, facts: Mapping[str, FactSpec], *, builtin: bool = True
) -> tuple[int, tuple[str, ...]]:
    """Every problem of every rule file under ``directory``: (rules that loaded, problems).

    Unlike :func:`load_rules`, which stops at the first bad file, each file is checked on its
    own and all problems are kept, so a user fixes them in one pass. With ``builtin``, codes
    and names must not clash with the built-in rules either.
    """
    folder = Path(directory)
    files = rule_files(folder)
    if not files:
        return 0, (f"{folder}: no rule files (*.yaml) in this directory",)
    seen_code: dict[str, str] = {}
    seen_name: dict[str, str] = {}
    if builtin and not folder.resolve().is_relative_to(builtin_rules_dir().resolve()):
        for rule in load_rules([], facts):
            seen_code[rule.code], seen_name[rule.name] = rule.path, rule.path
    problems: list[str] = []
    loaded = 0
    for path in files:
        try:
            rule = load_rule_file(path, facts)
        except RuleError as exc:
            problems += exc.problems
            continue
        loaded += 1
        for key, seen in ((rule.code, seen_code), (rule.name, seen_name)):
            if key in seen:
                problems.append(
                    f"{path}: {key} is already defined in {seen[key]}; codes and names must be "
                    "unique"
                )
            seen[key] = rule.path
    return loaded, tuple(problems)


def load_rules(
    dirs: Iterable[str | Path],
    facts: Mapping[str, FactSpec],
    *,
    builtin: bool = True,
) -> tuple[Rule, ...]:
    """The built-in rules (unless ``builtin`` is false) plus every rule under ``dirs``.

    Codes and names must be unique across all of them. ``facts`` is the registry of known
    fact names (``kvadvisor.facts.FACTS``); every name a rule reads must be in it.
    """
    folders = [(builtin_rules_dir(), True)] if builtin else []
    folders += [(Path(d), False) for d in dirs]
    rules: list[Rule] = []
    by_code: dict[str, Rule] = {}
    by_name: dict[str, Rule] = {}
    for folder, is_builtin in folders:
        files = rule_files(folder)
        if not files and not is_builtin:
            raise RuleSyntaxError(f"{folder}: no rule files (*.yaml) in this directory")
        for path in files:
            rule = load_rule_file(path, facts)
            for key, seen in ((rule.code, by_code), (rule.name, by_name)):
                if key in seen:
                    raise RuleSyntaxError(
                        f"{path}: {key} is already defined in {seen[key].path}; codes and names "
                        "must be unique"
                    )
                seen[key] = rule
            rules.append(rule)
    return tuple(sorted(rules, key=lambda r: r.code))
