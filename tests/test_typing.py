"""The public API type-checks: mypy --strict on kvadvisor's API and the result models it returns.

The configuration is pyproject's ``[tool.mypy]``: strict on the files named here; the rest of
the package is read for their types (follow_imports=silent) and not reported on. A user's
script is checked in the same run, so the test also shows that a misspelt or mistyped setting
is caught before anything runs (the test for the test).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The public API and what it returns: the result models, the verify models and the A/B gate,
# a trace's description, a synthetic trace's shape, the trace and reference facades, and the
# package's own names (kvadvisor.analyze is typed, not Any). catalog/checkfile.FileCheck is
# not yet: item 4's one checker rewrites its module.
CHECKED = (
    "kvadvisor/__init__.py",
    "kvadvisor/api/advisor.py",
    "kvadvisor/api/references.py",
    "kvadvisor/api/tracefiles.py",
    "kvadvisor/results",
    "kvadvisor/verifyjobs/model.py",
    "kvadvisor/verifyjobs/gate.py",
    "kvadvisor/trace/describe.py",
    "kvadvisor/synth/model.py",
    "kvadvisor/synth/writer.py",
)
USER_SCRIPT = """\
import kvadvisor

report = kvadvisor.analyze("t.jsonl", model="qwen3-32b", cache_tiers=["hbm=1M"], headroom="10%")
reveal_type(report.to_html())
advisor = kvadvisor.Advisor(catalogs=["extra.yaml"])
reveal_type(advisor.replay("t.jsonl", "plan.yaml").replay.requests.count)
kvadvisor.analyze("t.jsonl", modle="qwen3-32b")
kvadvisor.review("t.jsonl", ["plan.yaml"], window_s="1s")
"""


def test_the_api_and_its_results_type_check_strictly(tmp_path: Path) -> None:
    """No error in the package's API; a user's typo and wrong type are errors, with the types."""
    user = tmp_path / "user.py"
    user.write_text(USER_SCRIPT, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), *CHECKED, str(user)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line.replace(str(user), "user.py") for line in run.stdout.splitlines()]
    assert not [line for line in lines if line.startswith("kvadvisor")], run.stdout
    assert lines[:-1] == [
        'user.py:4: note: Revealed type is "str"',
        'user.py:6: note: Revealed type is "int"',
        'user.py:7: error: Unexpected keyword argument "modle" for "analyze"; did you mean '
        '"model"?  [call-arg]',
        'user.py:7: note: "analyze" defined in "kvadvisor.api.advisor"',
        'user.py:8: error: Argument "window_s" to "review" has incompatible type "str"; '
        'expected "float"  [arg-type]',
    ], run.stdout + run.stderr
    assert lines[-1].startswith("Found 2 errors in 1 file"), run.stdout
