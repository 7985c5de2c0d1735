"""The yardstick of the keywords-only evaluate: a plain Python loop, no ragjury, that reads the
same JSONL file, runs the same keyword checks (substrings, case folded, must_not_start_with on
the answer without its leading whitespace), writes each record with its result as a JSON line
and prints the mean score. What it does not do is what ragjury adds: checking and repairing
every record, a durable job (resumable after a kill), a stored result per sample, a summary
with intervals. scale.py times it beside each keywords evaluate, in the same run, so the
ratio of the two says what ragjury's bookkeeping costs on this machine whatever its speed.

    python benchmarks/plain_keywords.py samples.jsonl results.jsonl
"""

from __future__ import annotations

import json
import sys
from typing import Any

RULES = ("must_contain", "must_not_contain", "must_not_start_with")


def checks(record: dict[str, Any]) -> list[dict[str, Any]]:
    text = str(record.get("answer") or "").casefold()
    opening = text.lstrip()
    found = []
    for rule in RULES:
        for keyword in record.get(rule) or ():
            needle = str(keyword).casefold()
            if rule == "must_contain":
                passed = needle in text
            elif rule == "must_not_contain":
                passed = needle not in text
            else:
                passed = not opening.startswith(needle)
            found.append({"type": rule, "keyword": keyword, "passed": passed})
    return found


def main(argv: list[str]) -> int:
    source, target = argv
    total = scored = 0.0
    with open(source, encoding="utf-8") as lines, open(target, "w", encoding="utf-8") as out:
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            found = checks(record)
            score = sum(c["passed"] is True for c in found) / len(found) if found else None
            if score is not None:
                total, scored = total + score, scored + 1
            record["keywords"] = {"score": score, "passing": score == 1.0, "checks": found}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"keywords mean {total / scored if scored else float('nan'):.4f} over {scored:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
