"""``--junit FILE``: a JUnit XML report that CI systems display.

One ``testsuite`` per metric (``ragjury.faithfulness``, ...) with one ``testcase`` per sample,
and a ``ragjury.gates`` suite with one case per gate, failed when its gate failed. A CI system
counts every ``failure`` and ``error`` against the build, so a case fails only by the rule the
user set (:class:`Rules`), the rule the exit code follows too:

- with no gate at all, each metric's pass mark is the rule: a sample scored below it is a
  ``failure`` (the reason, and the unsupported statements with theirs);
- with gates, they are the rule: a sample below its pass mark is a ``failure`` only when a
  gate on its metric failed (the samples then say why); otherwise the case passes and says,
  in its ``system-out``, that it is below the mark and which gate decides;
- a failed judgement is an ``error`` (stage, attempts, last raw output), unless a gate on the
  whole run (``--max-failed N``) allowed it, which its ``system-out`` then says (when every
  judgement failed, nothing allows them);
- ``skipped`` when not applicable.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ragjury._json import JSONData, json_list, json_object
from ragjury.report.gates import GateResult
from ragjury.report.load import metric_names

# Characters XML 1.0 cannot hold, even escaped; model output sometimes has them.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_NAME_CHARS = 80


def clean(text: JSONData) -> str:
    return _NOT_XML.sub("\ufffd", "" if text is None else str(text))


def _case_name(record: Mapping[str, JSONData]) -> str:
    question = " ".join(str(record.get("question") or "").split())
    if len(question) > _NAME_CHARS:
        question = question[: _NAME_CHARS - 1] + "…"
    return f"{record.get('id')}: {question}" if question else str(record.get("id"))


def failure_text(entry: Mapping[str, JSONData]) -> str:
    """The body of a failed case: score, reason, unsupported statements, checks."""
    lines = [f"score: {entry.get('score')}", f"reason: {entry.get('reason')}"]
    statements = [json_object(s) for s in json_list(entry.get("statements"))]
    unsupported = [s for s in statements if not s.get("supported")]
    if unsupported:
        lines.append("unsupported statements:")
        lines.extend(f"  - {s.get('text')} (reason: {s.get('reason')})" for s in unsupported)
    if entry.get("reasoning"):
        lines.append(f"reasoning: {entry['reasoning']}")
    for check in map(json_object, json_list(entry.get("checks"))):
        if not check.get("passed"):
            lines.append(f"keyword check failed: {check.get('type')} {check.get('keyword')!r}")
    return "\n".join(lines)


def _error_text(error: Mapping[str, JSONData]) -> str:
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


@dataclass(frozen=True)
class Rules:
    """What fails a case, from the gates the user set (see the module docstring)."""

    gates: Sequence[GateResult]
    nothing_judged: bool = False
    """Every judgement failed (the run exits 4 whatever the gates say)."""

    def below_mark_fails(self, metric: str) -> str | None:
        """None when a sample of ``metric`` below its pass mark is a failure; else why not."""
        if not self.gates:
            return None
        own = [g for g in self.gates if g.metric == metric]
        if any(not g.passed for g in own):
            return None
        if own:
            names = ", ".join(g.name for g in own)
            return f"below its pass mark, not a failure: the gate on {metric} passed ({names})"
        return f"below its pass mark, not a failure: {metric} has no gate, and the gates decide"

    def failed_judgement_is_error(self) -> str | None:
        """None when a failed judgement is an error; else the gate that allowed it."""
        whole_run = [g for g in self.gates if g.metric is None]
        if whole_run and all(g.passed for g in whole_run) and not self.nothing_judged:
            return "a failed judgement, allowed by " + ", ".join(g.name for g in whole_run)
        return None


def _add_result(
    suite: ET.Element,
    metric: str,
    record: Mapping[str, JSONData],
    entry: Mapping[str, JSONData],
    rules: Rules,
) -> None:
    case = _case(suite, _case_name(record))
    outcome, reason = entry.get("outcome"), clean(entry.get("reason") or "")
    if outcome == "failed":
        error = json_object(entry.get("error"))
        allowed = rules.failed_judgement_is_error()
        if allowed is None:
            node = ET.SubElement(case, "error", message=reason, type=clean(error.get("stage")))
            node.text = clean(_error_text(error))
        else:
            ET.SubElement(case, "system-out").text = clean(f"{allowed}\n{_error_text(error)}")
    elif outcome == "not_applicable":
        ET.SubElement(case, "skipped", message=reason or "not applicable")
    elif entry.get("passing") is False:
        informational = rules.below_mark_fails(metric)
        if informational is None:
            node = ET.SubElement(case, "failure", message=reason, type="below_threshold")
            node.text = clean(failure_text(entry))
        else:
            text = f"{informational}\n{failure_text(entry)}"
            ET.SubElement(case, "system-out").text = clean(text)


def _count(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    for tag, attribute in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(attribute, str(sum(c.find(tag) is not None for c in cases)))


def junit_tree(
    records: Iterable[Mapping[str, JSONData]], gates: Sequence[GateResult] = ()
) -> ET.ElementTree[ET.Element]:
    rows = list(records)
    outcomes = {
        entry.get("outcome")
        for record in rows
        for entry in json_object(record.get("metrics")).values()
        if isinstance(entry, Mapping)
    }
    rules = Rules(gates, nothing_judged=outcomes == {"failed"})
    root = ET.Element("testsuites", name="ragjury")
    for metric in metric_names(rows):
        suite = _suite(root, f"ragjury.{metric}")
        for record in rows:
            entry = json_object(record.get("metrics")).get(metric)
            if isinstance(entry, Mapping):
                _add_result(suite, metric, record, entry, rules)
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


def junit_xml(records: Iterable[Mapping[str, JSONData]], gates: Sequence[GateResult] = ()) -> str:
    """The ``--junit`` file's text."""
    tree = junit_tree(records, gates)
    ET.indent(tree)
    return ET.tostring(tree.getroot(), encoding="unicode", xml_declaration=True) + "\n"
