"""Load rule files (one rule per YAML file) and check them against the rule schema.

Nothing in a rule file is executed: YAML goes through the safe loader, conditions become
``Compare``/``AllOf``/``AnyOf``/``Not`` values over a closed set of operators, and message
placeholders are checked to be plain fact names. kvadvisor.checker walks the rule's fields and
collects every problem with its key path and line; unknown facts, keys and values get the
closest known names.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvadvisor.checker import Checker, Field, choice_problem, did_you_mean, with_hint
from kvadvisor.errors import RuleError, RuleReferenceError, RuleSyntaxError
from kvadvisor.io.yamlio import load_yaml_lines
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

RULE_STAGES = (Stage.PREFILL, Stage.DECODE, Stage.BOTH)
DOCS_FIELDS = {
    "what": Field("text", required=True),
    "why": Field("text", required=True),
    "example": Field("text", required=True),
    "references": Field("list[str]", required=True),
}
RULE_FIELDS = {
    "code": Field("text", required=True),
    "name": Field("text", required=True),
    "groups": Field("any", required=True),
    "severity": Field("text", required=True, choices=tuple(s.value for s in Severity)),
    # A rule speaks about prefill, decode or both; "serving" names a plan's aggregated stage.
    "stage": Field("text", required=True, choices=tuple(s.value for s in RULE_STAGES)),
    "summary": Field("text", required=True),
    "when": Field("any", required=True),
    "message": Field("text", required=True),
    "recommend": Field("any"),
    "docs": Field("mapping", required=True, fields=DOCS_FIELDS),
    "scope": Field("text", choices=tuple(s.value for s in RuleScope)),
    "applies": Field("any"),
    "escalate": Field("any"),
    "passed": Field("text"),
    "evidence": Field("any"),
}
COMPARE_KEYS = ("fact", "op", "value", "ref", "factor")
RECOMMEND_KEYS = ("action", "catalog", "where", "rank_by")


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
class _RuleReader:
    """Reads one rule's conditions, messages and recommendation into the rule model.

    Every problem goes to the one checker (kvadvisor.checker), so the user fixes them in one
    pass; an unknown fact is a reference problem (RuleReferenceError when it is the only kind).
    """

    c: Checker
    facts: Mapping[str, FactSpec]
    scope: RuleScope = RuleScope.WORKLOAD

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
        self.c.add(where, what)

    def unknown_fact(self, where: str, name: str) -> None:
        hint = did_you_mean(name, self.facts, n=3, cutoff=0.6)
        self.c.add(
            where,
            with_hint(f"unknown fact {name!r}", hint) + " (`kvadvisor rules facts` lists them)",
            reference=True,
        )

    def text(self, data: Mapping[str, Any], key: str, where: str) -> str:
        value = self.c.value(f"{where}{key}", Field("text", required=True), data.get(key))
        return "" if value is None else value.strip()

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
        # A comparison has fact, op and value, or fact, op, ref and optionally factor.
        if set(node) - set(COMPARE_KEYS):
            self.c.unknown_keys(where, node, COMPARE_KEYS)
            return None
        fact = node.get("fact")
        if not isinstance(fact, str):
            self.bad(f"{where}.fact", "expected a fact name")
            return None
        ok = self.known(f"{where}.fact", fact)
        try:
            op = Op(node.get("op"))
        except ValueError:
            self.bad(f"{where}.op", choice_problem(node.get("op"), (o.value for o in Op)))
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
        self.c.unknown_keys(where, node, RECOMMEND_KEYS)
        action = self.text(node, "action", f"{where}.")
        catalog = node.get("catalog")
        if catalog is not None and catalog not in ("storage", "instances"):
            self.bad(f"{where}.catalog", choice_problem(catalog, ("storage", "instances")))
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
                    hint = did_you_mean(str(op), (o.value for o in Op))
                    self.bad(at, with_hint(f"unknown operator {op!r}", hint))
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
        """The whole rule: its declared fields, then the grammar of each part."""
        if not isinstance(data, dict):
            self.bad(
                "",
                "expected a mapping with code, name, groups, severity, stage, "
                "summary, when, message and docs",
            )
            return None
        d = self.c.record("", data, RULE_FIELDS)
        self.scope = RuleScope(d.get("scope", RuleScope.WORKLOAD.value))
        code, name, groups = self.identity(d)
        severity = Severity(d.get("severity", Severity.INFO.value))
        stage = next((s for s in RULE_STAGES if s.value == d.get("stage")), Stage.BOTH)
        summary = d.get("summary", "").strip()
        message = d.get("message", "").strip()
        if message:
            self.message(message, "message")
        when = self.condition(data["when"], "when") if "when" in d else None
        applies = self.condition(data["applies"], "applies") if "applies" in d else None
        passed = d.get("passed", "").strip()
        if passed:
            self.message(passed, "passed")
        escalate = self.escalation(data.get("escalate"), severity)
        shows = self.shows(data.get("evidence"))
        recommend = self.recommend(data.get("recommend"), "recommend")
        docs = self.docs(d.get("docs"))
        if self.c.problems or when is None or docs is None:
            return None
        return Rule(
            code=code,
            name=name,
            groups=groups,
            severity=severity,
            stage=stage,
            summary=summary,
            when=when,
            message=message,
            docs=docs,
            recommend=recommend,
            path=self.c.path,
            scope=self.scope,
            applies=applies,
            escalate=escalate,
            passed=passed,
            shows=shows,
        )

    def identity(self, d: Mapping[str, Any]) -> tuple[str, str, tuple[str, ...]]:
        """The rule's code, dotted name and groups, each in its pattern."""
        code, name, groups = d.get("code", ""), d.get("name", ""), d.get("groups")
        if code and not CODE_RE.match(code):
            self.bad(
                "code", f"expected two capital letters and two digits (e.g. ST01), got {code!r}"
            )
        if name and not NAME_RE.match(name):
            self.bad(
                "name",
                f"expected a dotted lower-case name (e.g. storage.write_bandwidth), got {name!r}",
            )
        if groups is not None and (
            not isinstance(groups, list)
            or not groups
            or not all(isinstance(g, str) and GROUP_RE.match(g) for g in groups)
        ):
            self.bad("groups", f"expected a list of lower-case group names, got {groups!r}")
            groups = None
        return code, name, tuple(groups or ())

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

    def docs(self, d: Mapping[str, Any] | None) -> RuleDocs | None:
        """The rule's documentation (checked as DOCS_FIELDS): what, why, example, references."""
        if d is None or len(d) < len(DOCS_FIELDS):
            return None  # the schema said what is missing
        refs = d["references"]
        if not refs or not all(r.strip() for r in refs):
            self.bad("docs.references", "expected a non-empty list of citations")
        return RuleDocs(
            d["what"].strip(),
            d["why"].strip(),
            d["example"].strip(),
            tuple(r.strip() for r in refs),
        )


def parse_rule(
    data: Any, path: str, facts: Mapping[str, FactSpec], lines: Mapping[str, int] | None = None
) -> Rule:
    """Check one parsed rule document; raise one error naming the file and every problem.

    ``lines``: the line of each key path (kvadvisor.io.yamlio.load_yaml_lines), for the messages.
    """
    reader = _RuleReader(Checker(path, lines), facts)
    rule = reader.rule(data)
    problems = reader.c.problems
    every = reader.c.lines_of_problems()
    if problems and all(p.reference for p in problems):
        more = f" (and {len(every) - 1} more)" if len(every) > 1 else ""
        raise RuleReferenceError(f"{every[0]}{more}", every)
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
    """Load and check one rule file (each problem names its line)."""
    path = Path(path)
    data, lines = load_yaml_lines(path, RuleSyntaxError)
    return parse_rule(data, str(path), facts, lines)


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
