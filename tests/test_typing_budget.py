"""How loosely typed the package is: ``Any`` and ``dict[str, Any]`` counted and printed.

A ratchet, not a target to game: the counts may only fall (the core issue aims at fewer than
120 ``Any`` and 40 ``dict[str, Any]``); lower the ceilings here when they do."""

from __future__ import annotations

import re
from pathlib import Path

import ragjury

PACKAGE = Path(ragjury.__file__).parent
ANY_CEILING = 79
DICT_CEILING = 14


def _counts() -> tuple[int, int]:
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py")))
    return len(re.findall(r"\bAny\b", text)), len(re.findall(r"dict\[str, Any\]", text))


def test_the_package_grows_no_looser_typed() -> None:
    anys, dicts = _counts()
    print(f"Any: {anys} (ceiling {ANY_CEILING}); dict[str, Any]: {dicts} (ceiling {DICT_CEILING})")

    assert anys <= ANY_CEILING
    assert dicts <= DICT_CEILING
