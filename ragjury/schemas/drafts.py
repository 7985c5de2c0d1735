"""What the generator writes for the question types beyond factoids, and each type's rule for
a good draft, checked on the draft itself (instructor re-asks with the broken rule).

The validators read the drafted-from texts from the validation context (``chunks``: the
chunk's text first, then its related chunks'), which the generator sets for the call.

- ``reasoning``: its answer rests on quotes of the chunk from two or more sentences, and is
  not one of the chunk's sentences copied;
- ``multi_hop``: a quote from every text it was drafted from, each found in that text;
- ``comparative``: two different named things, each with a quote of the text that describes
  it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pydantic import Field, ValidationInfo, model_validator

from ragjury.schemas.responses import (
    DraftedPair,
    DraftedPairs,
    NonEmpty,
    _context,
    _Response,
    normalise_text,
    quote_occurs,
)

_SENTENCE_END = re.compile(r"(?<=[.!?:])\s+|\n\s*\n|\n(?=\s*(?:[-*+#>|]|\d+\.)\s)")
_COPIED_WORDS = 6
"""An answer this long or longer that stands word for word in the chunk is a copied one."""


def _texts(info: ValidationInfo) -> list[str]:
    chunks = _context(info).get("chunks")
    return [str(c) for c in chunks] if isinstance(chunks, Sequence) else []


def _text(info: ValidationInfo, number: int) -> str | None:
    texts = _texts(info)
    return texts[number - 1] if 1 <= number <= len(texts) else None


def sentences(text: str) -> list[str]:
    """``text`` cut at sentence ends, blank lines and list items, each normalised."""
    return [normalise_text(part) for part in _SENTENCE_END.split(text) if part.strip()]


def _head(quote: str) -> str:
    """The first words of a quote: what finds the sentence it starts in."""
    words = normalise_text(quote.replace("\u2026", " ").replace("...", " ")).split()
    return " ".join(words[:5]).strip(" .,;:'\"()[]")


class ReasoningPair(DraftedPair):
    """A question whose answer follows from several statements of the text."""

    steps: list[NonEmpty] = Field(
        min_length=2,
        description="Word-for-word quotes of the statements the answer rests on, each from a "
        "different sentence of the text.",
    )

    @model_validator(mode="after")
    def _spans_sentences(self, info: ValidationInfo) -> ReasoningPair:
        texts = _texts(info)
        if not texts:
            return self
        chunk = texts[0]
        whole = normalise_text(chunk)
        found: set[int] = set()
        parts = sentences(chunk)
        for number, quote in enumerate(self.steps):
            if not quote_occurs(quote, whole):
                raise ValueError(f"the step {quote!r} is not a word-for-word quote of the text")
            head = _head(quote)
            starts = {i for i, sentence in enumerate(parts) if head and head in sentence}
            # a quote whose first words cross a sentence end is a sentence of its own
            found.update(starts or {-1 - number})
        if len(found) < 2:
            raise ValueError(
                "every step quotes the same sentence of the text: a reasoning question needs "
                "statements from two or more sentences; ask something that combines them"
            )
        answer = normalise_text(self.answer)
        if len(answer.split()) >= _COPIED_WORDS and answer.strip(" .") in whole:
            raise ValueError(
                "the answer is a sentence of the text copied; a reasoning question's answer "
                "is worked out from the steps, so write it in your own words"
            )
        return self


class ReasoningPairs(DraftedPairs):
    pairs: list[ReasoningPair] = Field(min_length=1)  # type: ignore[assignment]  # narrower items


class TextEvidence(_Response):
    """A quote of one numbered text."""

    text_number: int = Field(ge=1, description="The number of the text quoted.")
    quote: NonEmpty = Field(description="Word for word from that text.")


class MultiHopPair(DraftedPair):
    """A question that needs a fact from every text it was drafted from."""

    evidence: list[TextEvidence] = Field(
        min_length=2, description="For every text, the fact the answer takes from it."
    )

    @model_validator(mode="after")
    def _needs_every_text(self, info: ValidationInfo) -> MultiHopPair:
        texts = _texts(info)
        if not texts:
            return self
        _check_quotes(self.evidence, info)
        missing = sorted(set(range(1, len(texts) + 1)) - {e.text_number for e in self.evidence})
        if missing:
            raise ValueError(
                f"no evidence from text {', '.join(map(str, missing))}: a multi-hop question "
                "needs a fact from every text; ask one that uses each of them"
            )
        return self


class MultiHopPairs(DraftedPairs):
    pairs: list[MultiHopPair] = Field(min_length=1)  # type: ignore[assignment]  # narrower items


class ComparedThing(TextEvidence):
    """One of the two things a comparative question compares."""

    name: NonEmpty = Field(description="What is compared, as the texts name it.")


class ComparativePair(DraftedPair):
    """A question comparing two things the texts describe."""

    compared: list[ComparedThing] = Field(
        min_length=2, max_length=2, description="The two things compared."
    )

    @model_validator(mode="after")
    def _two_things(self, info: ValidationInfo) -> ComparativePair:
        if not _texts(info):
            return self
        _check_quotes(self.compared, info)
        first, second = (normalise_text(thing.name) for thing in self.compared)
        if first == second:
            raise ValueError(
                f"both compared things are {self.compared[0].name!r}: compare two different "
                "things the texts describe"
            )
        return self


class ComparativePairs(DraftedPairs):
    pairs: list[ComparativePair] = Field(min_length=1)  # type: ignore[assignment]  # narrower items


def _check_quotes(quotes: Sequence[TextEvidence], info: ValidationInfo) -> None:
    for item in quotes:
        text = _text(info, item.text_number)
        if text is None:
            raise ValueError(
                f"there is no text {item.text_number}; the texts are numbered 1 to "
                f"{len(_texts(info))}"
            )
        if not quote_occurs(item.quote, normalise_text(text)):
            raise ValueError(
                f"{item.quote!r} is not a word-for-word quote of text {item.text_number}"
            )


DRAFT_MODELS: Mapping[str, type[DraftedPairs]] = {
    "factoid": DraftedPairs,
    "reasoning": ReasoningPairs,
    "multi_hop": MultiHopPairs,
    "comparative": ComparativePairs,
}
"""The response model of each question type."""
