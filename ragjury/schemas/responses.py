"""Response models the LLM must fill in; their validators carry the domain rules.

instructor re-asks the model with the validation error whenever one of these fails,
so every rule here is also an instruction the model gets a second chance to follow.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

# A question that leans on the text it came from cannot be asked by a real user.
_CONTEXT_REFERENCE = re.compile(
    r"\b(?:(?:the|this|that|above|given|provided|following)\s+"
    r"(?:context|passage|document|text|excerpt|article|paragraph|section|snippet|chunk)s?)\b"
    r"|\baccording to the\b",
    re.IGNORECASE,
)

NonEmpty = Annotated[str, Field(min_length=1)]


class _Response(BaseModel):
    model_config = ConfigDict(extra="ignore")


class DraftedPair(_Response):
    """One factoid question with its answer, as the generator writes it."""

    question: NonEmpty = Field(description="A question a user could type into a search box.")
    answer: NonEmpty = Field(description="The answer, taken from the context.")

    @field_validator("question", "answer")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()

    @field_validator("question")
    @classmethod
    def _standalone_wording(cls, value: str) -> str:
        match = _CONTEXT_REFERENCE.search(value)
        if match:
            raise ValueError(
                f"the question refers to {match.group(0)!r}; a reader will not have the "
                "source text, so name the subject directly instead"
            )
        return value


class DraftedPairs(_Response):
    """The generator's output for one chunk: exactly as many pairs as were asked for."""

    pairs: list[DraftedPair] = Field(min_length=1)

    @field_validator("pairs")
    @classmethod
    def _exact_count(cls, value: list[DraftedPair], info: ValidationInfo) -> list[DraftedPair]:
        wanted = (info.context or {}).get("questions_per_chunk")
        if isinstance(wanted, int) and len(value) != wanted:
            raise ValueError(f"expected exactly {wanted} pairs, got {len(value)}")
        return value


class Critique(_Response):
    """A critic's judgement: the rationale first, then an integer rating from 1 to 5."""

    rationale: NonEmpty = Field(description="Why the rating was given, in one or two sentences.")
    rating: int = Field(ge=1, le=5, description="1 (worst) to 5 (best).")
