"""The rule engine: rules are YAML data over named facts, evaluated without running any code."""

from kvadvisor.rules.engine import evaluate, format_fact, format_message
from kvadvisor.rules.loader import builtin_rules_dir, load_rule_file, load_rules, parse_rule
from kvadvisor.rules.model import (
    Evaluation,
    FactSpec,
    FactValue,
    Firing,
    Quiet,
    Rule,
    RuleScope,
    Severity,
    Stage,
)
from kvadvisor.rules.select import select_rules, workload_rules

__all__ = [
    "Evaluation",
    "FactSpec",
    "FactValue",
    "Firing",
    "Quiet",
    "Rule",
    "RuleScope",
    "Severity",
    "Stage",
    "builtin_rules_dir",
    "evaluate",
    "format_message",
    "format_fact",
    "load_rule_file",
    "load_rules",
    "parse_rule",
    "select_rules",
    "workload_rules",
]
