"""Meaning, not display, in the models (issue 17): stages and topologies are vocabulary enums.

Every dataclass field of kvadvisor that holds a stage (``stage``, ``role`` of a serving stage)
or a topology is annotated with :class:`kvadvisor.vocab.Stage` / ``Topology``, so code
compares meanings and a misspelt stage fails where it is made, not where it is compared. The
check reads annotations from the source (no import of every module), and a planted ``str``
annotation makes it fail (the test for the test).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kvadvisor.plan.loader import check_plan
from kvadvisor.vocab import Stage, Topology

PKG = Path(__file__).resolve().parents[1] / "kvadvisor"

# Field name -> the vocabulary it must use. ``role`` is a stage's role in a fleet; a tier's
# role is a TierRole and is checked by the same table under its class.
STAGE_FIELDS = {"stage", "role", "topology"}
# Fields of these names that are not stages: (class, field) -> why.
NOT_STAGES = {
    ("InputFile", "role"): "which input a file is (trace, plan, catalog): not a stage",
    ("Tier", "role"): "a tier's role: TierRole",
    ("VerdictCard", "role"): "what the stage does, in words (a display view)",
}
ALLOWED = {"stage": "Stage", "role": "Stage", "topology": "Topology"}


def _annotation(node: ast.expr | None) -> str:
    return "" if node is None else ast.unparse(node)


def stage_fields(source: str) -> list[tuple[str, str, str, int]]:
    """(class, field, annotation, line) of each dataclass field named like a stage."""
    out = []
    for cls in ast.walk(ast.parse(source)):
        if not isinstance(cls, ast.ClassDef):
            continue
        if not any("dataclass" in ast.unparse(d) for d in cls.decorator_list):
            continue
        for item in cls.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                name = item.target.id
                if name in STAGE_FIELDS:
                    out.append((cls.name, name, _annotation(item.annotation), item.lineno))
    return out


def offenders(source: str, where: str) -> list[str]:
    """Fields holding a stage or topology whose annotation is not the vocabulary's enum."""
    bad = []
    for cls, name, ann, line in stage_fields(source):
        if (cls, name) in NOT_STAGES:
            continue
        want = ALLOWED[name]
        if want not in ann.replace("|", " ").split():
            bad.append(f"{where}:{line}: {cls}.{name}: {ann} (use {want})")
    return bad


def test_stage_and_topology_fields_use_the_vocabulary() -> None:
    """Every dataclass field holding a stage or a topology is typed with the enum."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        bad += offenders(path.read_text(encoding="utf-8"), str(path.relative_to(PKG.parent)))
    assert not bad, "\n".join(bad)


def test_a_planted_string_stage_fails() -> None:
    """The test for the test: a ``stage: str`` field of a dataclass is caught."""
    planted = "@dataclass(frozen=True)\nclass X:\n    stage: str\n    topology: Topology\n"
    assert offenders(planted, "x.py") == ["x.py:3: X.stage: str (use Stage)"]


@pytest.mark.parametrize(
    ("stages", "topology"),
    [
        ({"serving": {"instance": "p5.48xlarge", "count": 1}}, Topology.AGGREGATED),
        (
            {
                "prefill": {"instance": "p5.48xlarge", "count": 1},
                "decode": {"instance": "p5.48xlarge", "count": 1},
            },
            Topology.DISAGGREGATED,
        ),
    ],
)
def test_a_loaded_plan_speaks_the_vocabulary(stages: dict, topology: Topology) -> None:
    """A plan read from YAML holds Stage and Topology members, not the strings it was given."""
    doc = {"model": {"name": "llama-3.1-70b", "tp": 8}, "stages": stages}
    plan = check_plan("plan.yaml", doc)
    assert plan.topology is topology
    assert [type(s.stage) for s in plan.stages] == [Stage] * len(stages)
    assert [s.stage.value for s in plan.stages] == list(stages)
    assert plan.stage(Stage(next(iter(stages)))) is plan.stages[0]
