"""JUnit XML for a plan review: one test case per check, so CI shows every check by name."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from typing import Any

from kvadvisor.results.review import PlanReview, ReviewReport
from kvadvisor.vocab import CheckStatus

# XML 1.0 allows no C0 control character but tab, LF and CR, not even as a reference; text
# from a plan or a trace name holding one would make the document ill-formed.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(value: str) -> str:
    r"""Text an XML 1.0 document can hold: illegal characters shown as ``\xNN``."""
    return _XML_ILLEGAL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)


def _clean(element: ET.Element) -> None:
    """Make every attribute and text of the tree legal XML 1.0 (in place)."""
    for node in element.iter():
        node.attrib = {k: _xml_text(v) for k, v in node.attrib.items()}
        if node.text:
            node.text = _xml_text(node.text)


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _suite(review: ReviewReport, plan: PlanReview) -> ET.Element:
    checks = plan.checks
    suite = ET.Element(
        "testsuite",
        {
            "name": f"kvadvisor review: {plan.name}",
            "tests": str(len(checks)),
            "failures": str(sum(c.status is CheckStatus.FAIL for c in checks)),
            "skipped": str(sum(c.status is CheckStatus.SKIP for c in checks)),
            "errors": "0",
            "timestamp": review.meta.generated_at,
        },
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("plan", plan.path),
        ("trace", review.trace.path),
        ("traffic_scale", f"{plan.traffic_scale:g}"),  # exact: a JUnit property for machines
        ("kvadvisor_version", review.meta.kvadvisor_version),
    ):
        ET.SubElement(props, "property", {"name": name, "value": value})
    for check in checks:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": f"kvadvisor.review.{plan.name}",
                "name": f"{check.test_id} {check.name}",
            },
        )
        if check.status is CheckStatus.FAIL:
            node = ET.SubElement(
                case, "failure", {"type": str(check.severity), "message": check.message}
            )
            node.text = json.dumps(
                {"evidence": _plain(check.evidence), "source": check.source},
                sort_keys=True,
                indent=2,
            )
        elif check.status is CheckStatus.SKIP:
            ET.SubElement(case, "skipped", {"message": check.message})
        else:
            ET.SubElement(case, "system-out").text = check.message
    return suite


class JUnitRenderer:
    """Render a ReviewReport as JUnit XML (one testsuite per plan)."""

    name = "junit"
    file_extension = ".xml"

    def render(self, review: ReviewReport) -> str:
        """Return the XML document text."""
        root = ET.Element(
            "testsuites",
            {
                "name": "kvadvisor review",
                "tests": str(sum(len(p.checks) for p in review.plans)),
                "failures": str(
                    sum(c.status is CheckStatus.FAIL for p in review.plans for c in p.checks)
                ),
            },
        )
        for plan in review.plans:
            root.append(_suite(review, plan))
        _clean(root)
        ET.indent(root)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"
