"""examples/quickstart.ipynb runs headless (nbclient, a real kernel) and shows real values."""

from __future__ import annotations

import base64
import html
import os
import re
from pathlib import Path

import nbclient
import nbformat
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "examples" / "quickstart.ipynb"
TRACE = REPO / "sample_traces" / "mooncake_conversation.parquet"


@pytest.fixture(scope="module")
def cells() -> list[nbformat.NotebookNode]:
    """The notebook's code cells after one run, from its own folder (as Jupyter runs it)."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    # The kernel imports this checkout's kvadvisor, as every other test does. From the
    # notebook's folder it would import the installed copy (`pip install .` in CI), whose
    # source paths key no kernel in this worker's numba cache: it compiled every kernel cold,
    # about 18 s of CPU. The checkout's paths find the kernels the run compiled once.
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    client.execute(env={**os.environ, "PYTHONPATH": path})
    return [c for c in nb.cells if c.cell_type == "code"]


def _cell(cells: list, needle: str) -> nbformat.NotebookNode:
    """The one code cell whose source holds ``needle``."""
    (cell,) = [c for c in cells if needle in c.source]
    return cell


def _result(cell: nbformat.NotebookNode) -> dict:
    """The cell's displayed value (its mime bundle)."""
    (out,) = [o for o in cell.outputs if o.output_type == "execute_result"]
    return out.data


def _stdout(cell: nbformat.NotebookNode) -> str:
    return "".join(o.text for o in cell.outputs if o.output_type == "stream")


def test_the_notebook_is_committed_without_outputs() -> None:
    """Outputs come from running it: none are stored to drift from what the code gives."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_every_cell_runs(cells) -> None:
    """No cell raised."""
    errors = [o for c in cells for o in c.outputs if o.output_type == "error"]
    assert not errors, [(e.ename, e.evalue) for e in errors]


def test_the_trace_and_the_report_show_the_trace_s_requests(cells) -> None:
    """The trace's and the report's one-line titles count the file's rows (parquet footer)."""
    rows = pq.read_metadata(TRACE).num_rows
    trace = _result(_cell(cells, 'read_trace("../'))["text/plain"]
    assert f"{rows:,} requests" in trace and len(trace.splitlines()) == 1
    report = _result(_cell(cells, "report = kvadvisor.analyze"))
    text, page = report["text/plain"], report["text/html"]
    assert text.startswith(f"<kvadvisor report: {TRACE.name}, {rows:,} requests over")
    assert len(text.splitlines()) <= 6 and len(text) < 1500
    assert "Recommended" in text and "targets: TTFT p99" in text
    # Every line the text shows is in the HTML, escaped (the targets' reason holds a ">").
    for line in text.splitlines()[1:]:
        assert html.escape(line.strip(), quote=True) in page, line
    assert "<table>" in page


def test_the_verdict_names_the_provider_and_its_price(cells) -> None:
    """One provider was asked for: its pick is the primary, with a price in $/h."""
    data = _result(_cell(cells, "report.verdict"))
    assert data["text/plain"].startswith("<kvadvisor verdict: 1 provider,")
    assert re.search(r"primary: aws, .* × p\w+\.\w+ .*\$[\d,.]+/h", data["text/plain"])
    assert "<th" in data["text/html"] and "aws" in data["text/html"]


def test_the_requests_frame_has_one_row_per_request(cells) -> None:
    """report.requests() holds the trace's rows, with the replay's columns."""
    cell = _cell(cells, "requests = report.requests()")
    assert _stdout(cell) == f"rows: {pq.read_metadata(TRACE).num_rows}\n"
    head = _result(cell)["text/html"]
    for column in ("arrival_s", "input_tokens", "output_tokens", "ttft_s", "tpot_s", "queue_s"):
        assert f"<th>{column}</th>" in head


def test_the_rows_give_the_report_s_p99(cells) -> None:
    """The p99 recomputed from the rows is the report's, to the printed digit."""
    out = _stdout(_cell(cells, "inverted_cdf"))
    rows, report = re.findall(r"TTFT p99 .*: ([\d.]+) s", out)
    assert rows == report and float(rows) > 0


def test_the_charts_are_images(cells) -> None:
    """report.plot returns a Figure the kernel shows as a PNG."""
    for name in ("candidates", "cache_curve"):
        data = _result(_cell(cells, f'report.plot("{name}")'))
        assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG")


def test_mistakes_raise_python_s_own_exceptions(cells) -> None:
    """A missing trace is a FileNotFoundError, a wrong chart name a ValueError with a hint."""
    out = _stdout(_cell(cells, "no-such-trace"))
    assert "FileNotFoundError: no-such-trace.parquet: no such file\n" in out
    assert "ValueError: no chart named 'cache_curv'; did you mean 'cache_curve'?" in out
