"""``--junit FILE``: a JUnit XML report that CI systems display.

One ``testsuite`` per metric (``ragjury.faithfulness``, ...) with one ``testcase`` per sample:
passed; ``failure`` when scored below its threshold (the reason, and the unsupported
statements with theirs); ``error`` when the judgement failed (stage, attempts, last raw
output); ``skipped`` when not applicable. A ``ragjury.gates`` suite holds one case per gate.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from typing import Any

from ragjury.report.gates import GateResult
from ragjury.report.load import metric_names

# Characters XML 1.0 cannot hold, even escaped; model output sometimes has them.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_NAME_CHARS = 80


def clean(text: Any) -> str:
    return _NOT_XML.sub("\ufffd", "" if text is None else str(text))


def _case_name(record: dict[str, Any]) -> str:
    question = " ".join(str(record.get("question") or "").split())
    if len(question) > _NAME_CHARS:
        question = question[: _NAME_CHARS - 1] + "…"
    return f"{record.get('id')}: {question}" if question else str(record.get("id"))


def failure_text(entry: dict[str, Any]) -> str:
    """The body of a failed case: score, reason, unsupported statements, checks."""
    lines = [f"score: {entry.get('score')}", f"reason: {entry.get('reason')}"]
    unsupported = [s for s in entry.get("statements") or [] if not s.get("supported")]
    if unsupported:
        lines.append("unsupported statements:")
        lines.extend(f"  - {s.get('text')} (reason: {s.get('reason')})" for s in unsupported)
    if entry.get("reasoning"):
        lines.append(f"reasoning: {entry['reasoning']}")
    for check in entry.get("checks") or []:
        if not check.get("passed"):
            lines.append(f"keyword check failed: {check.get('type')} {check.get('keyword')!r}")
    return "\n".join(lines)


def _error_text(error: dict[str, Any]) -> str:
    return (
        f"stage: {error.get('stage')}\nattempts: {error.get('attempts')}\n"
        f"message: {error.get('message')}\nlast raw output:\n{error.get('last_raw_output')}"
    )


def _suite(parent: ET.Element, name: str) -> ET.Element:
    return ET.SubElement(parent, "testsuite", name=name, time="0")


def _case(suite: ET.Element, name: str) -> ET.Element:
    return ET.SubElement(
        suite, "testcase", name=clean(name), classname=suite.get("name", ""), time="0"
    )


def _add_result(suite: ET.Element, record: dict[str, Any], entry: dict[str, Any]) -> None:
    case = _case(suite, _case_name(record))
    outcome, reason = entry.get("outcome"), clean(entry.get("reason") or "")
    if outcome == "failed":
        error = entry.get("error") or {}
        node = ET.SubElement(case, "error", message=reason, type=clean(error.get("stage")))
        node.text = clean(_error_text(error))
    elif outcome == "not_applicable":
        ET.SubElement(case, "skipped", message=reason or "not applicable")
    elif entry.get("passing") is False:
        node = ET.SubElement(case, "failure", message=reason, type="below_threshold")
        node.text = clean(failure_text(entry))


def _count(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    for tag, attribute in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(attribute, str(sum(c.find(tag) is not None for c in cases)))


def junit_tree(
    records: Iterable[dict[str, Any]], gates: Sequence[GateResult] = ()
) -> ET.ElementTree[ET.Element]:
    rows = list(records)
    root = ET.Element("testsuites", name="ragjury")
    for metric in metric_names(rows):
        suite = _suite(root, f"ragjury.{metric}")
        for record in rows:
            entry = (record.get("metrics") or {}).get(metric)
            if isinstance(entry, dict):
                _add_result(suite, record, entry)
    if gates:
        suite = _suite(root, "ragjury.gates")
        for gate in gates:
            case = _case(suite, gate.name)
            if not gate.passed:
                ET.SubElement(case, "failure", message=clean(gate.message), type="gate")
    for suite in root.findall("testsuite"):
        _count(suite)
    for attribute in ("tests", "failures", "errors", "skipped"):
        total = sum(int(s.get(attribute, "0")) for s in root.findall("testsuite"))
        root.set(attribute, str(total))
    root.set("time", "0")
    return ET.ElementTree(root)


def junit_xml(records: Iterable[dict[str, Any]], gates: Sequence[GateResult] = ()) -> str:
    """The ``--junit`` file's text."""
    tree = junit_tree(records, gates)
    ET.indent(tree)
    return ET.tostring(tree.getroot(), encoding="unicode", xml_declaration=True) + "\n"
