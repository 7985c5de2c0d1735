"""Text that every later step can encode: lone surrogates and control characters repaired.

Python's ``json`` accepts ``"\\ud800"`` (a lone UTF-16 surrogate), and a JSON string may
carry NUL and other control characters; none of them can be written as UTF-8 or shown to a
model, and one such record used to crash every command. Intake repairs them (a lone
surrogate becomes U+FFFD, a control character other than tab and line breaks is dropped) and
says which record it repaired.
"""

from __future__ import annotations

import re
from typing import TypeVar, cast

V = TypeVar("V")

_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


_BAD = re.compile("[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Either kind: one scan finds the (rare) text that needs a repair."""

_CONTROL_BYTES = bytes([*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])


def _sound(text: str) -> bool:
    """Whether ``text`` has nothing :data:`_BAD` finds, checked as its UTF-8 bytes (a lone
    surrogate cannot be encoded; a control character is its own byte in UTF-8): a few
    times faster than the regular expression on the kilobytes of a context."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return len(data.translate(None, _CONTROL_BYTES)) == len(data)


def clean_text(text: str) -> tuple[str, list[str]]:
    """``text`` repaired, and what was repaired (empty when nothing was)."""
    if _BAD.search(text) is None:
        return text, []
    repairs = []
    text, surrogates = _SURROGATE.subn("\ufffd", text)
    if surrogates:
        repairs.append(f"{surrogates} lone surrogate(s) replaced by U+FFFD")
    text, controls = _CONTROL.subn("", text)
    if controls:
        repairs.append(f"{controls} control character(s) removed")
    return text, repairs


def clean_value(value: V) -> tuple[V, list[str]]:
    """Every string in ``value`` (nested lists and dicts, keys too) repaired, and what was;
    ``value``'s shape is kept (a string for a string, a list for a list...). Clean text (all
    but a rare record) is returned as it is, after one walk that copies nothing."""
    if _clean(value):
        return value, []
    return _repaired(value)


def _clean(value: object) -> bool:
    """Whether no string in ``value`` (nested lists and dicts, keys too) needs a repair:
    checked all at once, joined (a record's dozen or so keys and short values cost one
    check, not one each; joining makes no character and hides none)."""
    texts: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return _sound("".join(texts))


def _repaired(value: V) -> tuple[V, list[str]]:
    if isinstance(value, str):
        text, repairs = clean_text(value)
        return cast(V, text), repairs
    repairs = []
    if isinstance(value, list | tuple):
        items = []
        for item in value:
            cleaned, found = _repaired(item)
            items.append(cleaned)
            repairs += found
        return cast(V, type(value)(items)), repairs
    if isinstance(value, dict):
        mapping = {}
        for key, item in value.items():
            clean_key, found_key = _repaired(key)
            cleaned, found = _repaired(item)
            mapping[clean_key] = cleaned
            repairs += found_key + found
        return cast(V, mapping), repairs
    return value, repairs
