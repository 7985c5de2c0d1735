"""Split document text into overlapping chunks that follow the text's structure.

A chunk never exceeds ``chunk_size`` characters. Each cut is taken at the best kind of boundary
found in the window, in this order: a Markdown or reStructuredText heading, a blank line, a
sentence end, a line break, any whitespace, and only as a last resort mid-word. Among boundaries
of the best kind the latest is used, but not one in the first quarter of the window unless
nothing better exists. A chunk never ends on a heading: the heading moves to the next chunk.

Consecutive chunks share about ``overlap`` characters, starting at a sentence or word boundary,
or at a heading if one lies in the overlap. A cut made at a heading has no overlap, so the next
chunk starts with the heading. ``#`` lines inside fenced code blocks are not headings. Chunks
are stripped of surrounding whitespace; empty chunks are never returned.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from ragjury.schemas.records import Chunk, Document

# Kinds of boundary, best first; a boundary position is where the next chunk would start.
_BOUNDARY_PATTERNS = (
    re.compile(r"\n[ \t]*\n\s*"),  # blank line
    re.compile(r"[.!?][\"')\]*_]*\s+"),  # sentence end
    re.compile(r"\n\s*"),  # line break
    re.compile(r"\s+"),  # whitespace
)
_SENTENCE_LEVEL = 2  # headings, blank lines and sentence ends count as sentence starts

_ATX_HEADING = re.compile(r" {0,3}#{1,6}(?:[ \t]|$)")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_ADORNMENT = re.compile(r"([=\-~^\"'`*+#])\1{2,}\s*")  # RST/setext underline
_NON_SPACE = re.compile(r"\S")


def split_text(text: str, *, chunk_size: int, overlap: int) -> list[str]:
    """Split ``text`` into chunks of at most ``chunk_size`` characters overlapping by about
    ``overlap``. Raises ValueError unless ``chunk_size >= 1`` and ``0 <= overlap < chunk_size``.
    """
    _check_sizes(chunk_size, overlap)
    end = len(text.rstrip())
    start = _skip_space(text, 0, end)
    if start >= end:
        return []
    bounds = _find_boundaries(text)
    min_length = max(1, chunk_size // 4)
    chunks: list[str] = []
    previous_cut = start
    while end - start > chunk_size:
        cut = _choose_cut(bounds, start, previous_cut, chunk_size, min_length)
        cut = _move_before_trailing_headings(text, bounds, cut, floor=max(start, previous_cut))
        chunks.append(text[start:cut].rstrip())
        if overlap == 0 or cut in bounds.heading_ends:
            next_start = cut
        else:
            next_start = _overlap_start(bounds, cut, max(cut - overlap, start + 1), overlap)
        start = _skip_space(text, next_start, end)
        previous_cut = cut
    chunks.append(text[start:end])
    return [chunk for chunk in chunks if chunk]


def chunk_document(
    document: Document, *, chunk_size: int, overlap: int, whole: bool = False
) -> list[Chunk]:
    """Chunks of ``document`` with ids ``"{document.id}::{index}"``; ``whole=True`` gives one
    chunk holding the whole stripped text. The sizes are checked even when ``whole`` is set."""
    _check_sizes(chunk_size, overlap)
    if whole:
        texts = [document.text.strip()] if document.text.strip() else []
    else:
        texts = split_text(document.text, chunk_size=chunk_size, overlap=overlap)
    return [
        Chunk(
            id=f"{document.id}::{index}",
            document_id=document.id,
            source=document.source,
            index=index,
            text=text,
        )
        for index, text in enumerate(texts)
    ]


def _check_sizes(chunk_size: int, overlap: int) -> None:
    if chunk_size < 1:
        raise ValueError(
            f"chunk_size must be at least 1, got size={chunk_size}; raise --chunk-size"
        )
    if overlap < 0:
        raise ValueError(
            f"chunk_overlap must be 0 or more, got overlap={overlap}; set --chunk-overlap to 0 "
            "or more"
        )
    if overlap >= chunk_size:
        raise ValueError(
            f"chunk_overlap must be smaller than chunk_size, got overlap={overlap} and "
            f"size={chunk_size}; lower --chunk-overlap or raise --chunk-size"
        )


@dataclass(frozen=True)
class _Boundaries:
    """Sorted boundary positions per kind (index 0: headings), and where each heading ends."""

    levels: tuple[list[int], ...]
    heading_ends: dict[int, int]


def _find_boundaries(text: str) -> _Boundaries:
    heading_ends = _find_headings(text)
    best: dict[int, int] = dict.fromkeys(heading_ends, 0)
    for level, pattern in enumerate(_BOUNDARY_PATTERNS, start=1):
        for match in pattern.finditer(text):
            best.setdefault(match.end(), level)
    levels: tuple[list[int], ...] = tuple([] for _ in range(len(_BOUNDARY_PATTERNS) + 1))
    for position in sorted(best):
        levels[best[position]].append(position)
    return _Boundaries(levels=levels, heading_ends=heading_ends)


def _find_headings(text: str) -> dict[int, int]:
    """Start (first non-space character) -> end of every heading outside fenced code."""
    lines = text.split("\n")
    offsets: list[int] = []
    position = 0
    for line in lines:
        offsets.append(position)
        position += len(line) + 1
    headings: dict[int, int] = {}
    fence: str | None = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        if fence is not None:
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                fence = None
            continue
        if match := _FENCE.match(line):
            fence = match.group(1)
        elif _ATX_HEADING.match(line):
            headings[offsets[i] + len(line) - len(line.lstrip())] = offsets[i] + len(line)
        elif _is_underline(lines, i):
            top = i - 2 if i >= 2 and lines[i - 2].strip() else i - 1  # overline, if any
            first = lines[top]
            headings[offsets[top] + len(first) - len(first.lstrip())] = offsets[i] + len(line)
    return headings


def _is_underline(lines: Sequence[str], i: int) -> bool:
    """Whether line ``i`` underlines a title that follows a blank line or a matching overline."""
    if i == 0 or not _ADORNMENT.fullmatch(lines[i]):
        return False
    title = lines[i - 1]
    if not title.strip() or _ADORNMENT.fullmatch(title) or _ATX_HEADING.match(title):
        return False
    if i < 2 or not lines[i - 2].strip():
        return True
    above = lines[i - 2]
    return bool(_ADORNMENT.fullmatch(above)) and above[0] == lines[i][0]


def _choose_cut(
    bounds: _Boundaries, start: int, previous_cut: int, chunk_size: int, min_length: int
) -> int:
    """The best boundary in the window, past the previous cut so that every chunk adds text."""
    limit = start + chunk_size
    for low in (max(start + min_length, previous_cut + 1), max(start + 1, previous_cut + 1)):
        for positions in bounds.levels:
            cut = _latest(positions, low, limit)
            if cut is not None:
                return cut
    return limit


def _move_before_trailing_headings(text: str, bounds: _Boundaries, cut: int, floor: int) -> int:
    """Move ``cut`` back before any heading that would otherwise end the chunk."""
    headings = bounds.levels[0]
    i = bisect_left(headings, cut) - 1
    while (
        i >= 0 and headings[i] > floor and not text[bounds.heading_ends[headings[i]] : cut].strip()
    ):
        cut = headings[i]
        i -= 1
    return cut


def _overlap_start(bounds: _Boundaries, cut: int, target: int, overlap: int) -> int:
    """Where the next chunk starts so that it repeats about ``cut - target`` characters."""
    heading = _latest(bounds.levels[0], target, cut - 1)
    if heading is not None:
        return heading
    near = min(cut, target + overlap // 2 + 1)
    sentence = _earliest(bounds.levels[: _SENTENCE_LEVEL + 1], target, near)
    if sentence is not None:
        return sentence
    word = _earliest(bounds.levels, target, cut)
    return word if word is not None else target


def _latest(positions: list[int], low: int, high: int) -> int | None:
    """The largest position in ``[low, high]``, if any."""
    i = bisect_right(positions, high) - 1
    return positions[i] if i >= 0 and positions[i] >= low else None


def _earliest(levels: Sequence[list[int]], low: int, high: int) -> int | None:
    """The smallest position in ``[low, high)`` across ``levels``, if any."""
    found: int | None = None
    for positions in levels:
        i = bisect_left(positions, low)
        if i < len(positions) and positions[i] < high and (found is None or positions[i] < found):
            found = positions[i]
    return found


def _skip_space(text: str, position: int, end: int) -> int:
    match = _NON_SPACE.search(text, position, end)
    return match.start() if match else end
