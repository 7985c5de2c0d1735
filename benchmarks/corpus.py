"""Synthetic inputs the scripted fake can answer: documents that carry one Q:/A: pair, and
samples whose answers have a chosen number of statements, all with distinct wording."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
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


ROOT = Path(__file__).resolve().parent.parent
SHARED_CHUNKS = (
    ROOT.parent / "shared" / "data" / "corpus" / "anthropic-docs" / "anthropic_docs.json"
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def context_chunks(corpus: Path = SHARED_CHUNKS, *, low: int = 1000, high: int = 2000) -> list[str]:
    """Real documentation text cut into contexts of ``low`` to ``high`` characters: the
    anthropic-docs chunks of ../shared/data where they are (long chunks split at paragraphs,
    short ones joined), else the example corpus's Markdown pages (a fresh clone has them)."""
    if corpus.suffix == ".json" and corpus.exists():
        texts = [c["text"] for c in json.loads(corpus.read_text(encoding="utf-8"))]
    else:
        texts = [p.read_text(encoding="utf-8") for p in sorted(ROOT.glob("examples/*/*.md"))]
    out, current = [], ""
    for text in texts:
        for paragraph in text.split("\n\n"):
            paragraph = paragraph.strip()[:high]
            if current and len(current) + len(paragraph) + 2 > high:
                if len(current) >= low:
                    out.append(current)
                current = ""
            current = f"{current}\n\n{paragraph}" if current else paragraph
    if len(current) >= low:
        out.append(current)
    return out


def keyword_records(count: int, corpus: Path = SHARED_CHUNKS) -> Iterator[dict[str, object]]:
    """``count`` distinct keyword-test records with real-size contexts: two documentation
    contexts of 1-2 KB, an answer made of one of their sentences, and must / must-not contain
    checks on it (what a user's hand-written keyword tests look like; one in ten fails)."""
    texts = context_chunks(corpus)
    split = [
        [s[:300] for s in _SENTENCE.split(" ".join(text.split())) if len(s) > 20] or [text[:200]]
        for text in texts
    ]
    for i in range(count):
        first, second = texts[i % len(texts)], texts[(i * 7 + 3) % len(texts)]
        sentences = split[i % len(texts)]
        sentence = sentences[(i // len(texts)) % len(sentences)]
        words = [w for w in sentence.split() if w.isalpha()] or sentence.split()
        yield {
            "id": f"s{i}",
            "question": f"Question {i}: what does the documentation say about {words[0]}?",
            "answer": f"{sentence} (case {i})",
            "contexts": [first, second],
            "must_contain": [words[len(words) // 2], f"case {i}"],
            # one record in ten fails a check, as hand-written tests do now and then
            "must_not_contain": [words[0] if i % 10 == 9 else "I cannot answer"],
        }
