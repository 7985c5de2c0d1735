"""Synthetic inputs the scripted fake can answer: documents that carry one Q:/A: pair, and
samples whose answers have a chosen number of statements, all with distinct wording."""

from __future__ import annotations

import random
from pathlib import Path

from ragjury.schemas import Sample
from ragjury.schemas.records import Document

_ONSETS = [
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "cr",
    "dr",
    "gl",
    "pl",
    "st",
    "tr",
]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou"]


class Words:
    """Made-up words from a seeded generator: questions built from them are never duplicates."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def word(self) -> str:
        syllables = self._rng.randint(2, 3)
        return "".join(
            self._rng.choice(_ONSETS) + self._rng.choice(_VOWELS) for _ in range(syllables)
        )

    def sentence(self, words: int = 10) -> str:
        return " ".join(self.word() for _ in range(words)).capitalize() + "."


def document_text(words: Words, index: int, filler_chars: int) -> str:
    """A page with one Q:/A: pair the scripted generator turns into a question, and filler."""
    subject, setting, value = words.word(), words.word(), words.word()
    question = f"Which {setting} does the {subject} {words.word()} use for {words.word()}?"
    filler: list[str] = []
    size = 0
    while size < filler_chars:
        filler.append(words.sentence())
        size += len(filler[-1]) + 1
    return (
        f"# Page {index}: the {subject}\n\nQ: {question}\nA: The {setting} is {value}.\n\n"
        + " ".join(filler)
        + "\n"
    )


def documents(count: int, *, filler_chars: int = 1500, seed: int = 0) -> list[Document]:
    words = Words(seed)
    return [
        Document(id=f"doc-{i}", source=f"doc-{i}.md", text=document_text(words, i, filler_chars))
        for i in range(count)
    ]


def write_documents(folder: Path, count: int, *, filler_chars: int, seed: int = 0) -> None:
    """``count`` Markdown files in ``folder``, one pair each (for the CLI)."""
    folder.mkdir(parents=True, exist_ok=True)
    words = Words(seed)
    for i in range(count):
        text = document_text(words, i, filler_chars)
        (folder / f"doc-{i:06d}.md").write_text(text, encoding="utf-8")


def samples(count: int, statements: int, *, seed: int = 0) -> list[Sample]:
    """Samples whose answer has ``statements`` sentences, each stated in the contexts."""
    words = Words(seed)
    out: list[Sample] = []
    for i in range(count):
        sentences = [words.sentence(8) for _ in range(statements)]
        answer = " ".join(sentences)
        half = len(sentences) // 2
        contexts = (
            " ".join([*sentences[:half], words.sentence(12)]),
            " ".join([words.sentence(12), *sentences[half:]]),
        )
        out.append(
            Sample(
                id=f"sample-{i}",
                question=f"What does the {words.word()} say about the {words.word()}?",
                answer=answer,
                contexts=contexts,
                reference=sentences[0],
            )
        )
    return out
