"""The engine-lint examples fire exactly the rules their header comments promise.

`examples/plans/lint-*.yaml` each open with a comment naming, mistake by mistake, the EL rule
that catches it. Reviewed against the Mooncake sample with `--select lint`, the set of rules
that fire must be the set the comment names: a rule that stops firing, or one that starts
firing on a setting the comment does not call a mistake, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import kvadvisor

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "mooncake_conversation.parquet"
EXAMPLES = sorted((REPO / "examples" / "plans").glob("lint-*.yaml"))


def promised(path: Path) -> set[str]:
    """The EL codes named in the file's leading comment block."""
    header = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    return set(re.findall(r"\bEL\d\d\b", "\n".join(header)))


def test_there_are_lint_examples() -> None:
    """Both engine families have an example (a glob that matched nothing would pass below)."""
    assert {p.stem for p in EXAMPLES} >= {"lint-sglang-mooncake", "lint-vllm-kvbm"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_lint_example_fires_what_it_promises(path: Path) -> None:
    """Fired lint codes == the codes the header comment names (at least five of them)."""
    want = promised(path)
    assert len(want) >= 5, want
    review = kvadvisor.review(SAMPLE, [path], select=("lint",), generated_at="t")
    (plan,) = review.plans
    fired = {c.code for c in plan.findings}
    assert fired == want, (sorted(fired - want), sorted(want - fired))
