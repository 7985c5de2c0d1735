"""``--personas auto[:N]``: one LLM call reads a sample of the corpus and proposes N personas.

The sample is the first chunk of up to :data:`EXCERPTS` documents, chosen by a draw from the
seed and each document's id (so it does not depend on the order files are listed in), each
cut to :data:`EXCERPT_CHARS` characters. The proposal is validated (exactly N, distinct
names) and kept in the step cache, keyed by the model, the ``personas`` prompt, N and the
sample: running the same command again proposes the same personas at no cost, and so finds
the same job (the personas are part of it) and resumes it.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from pydantic import ValidationError

from ragjury.agents.question_plan import chunks_of
from ragjury.errors import LLMError, RagjuryError
from ragjury.prompts import Prompt
from ragjury.schemas.records import Document, Persona
from ragjury.schemas.responses import ProposedPersonas, counted
from ragjury.store.cache import fingerprint

if TYPE_CHECKING:
    from ragjury.config import GenerationOptions
    from ragjury.llm import LLM
    from ragjury.store.base import CallLog

ROLE = "persona_proposer"
EXCERPTS = 8
EXCERPT_CHARS = 1200


def corpus_sample(
    documents: Iterable[Document], options: GenerationOptions
) -> list[dict[str, str]]:
    """The excerpts the proposal reads: ``source`` and ``text`` of each, in draw order."""

    def draw(document: Document) -> bytes:
        return hashlib.sha256(f"{options.seed}\npersonas\n{document.id}".encode()).digest()

    chosen = heapq.nsmallest(EXCERPTS, documents, key=draw)
    excerpts = []
    for document in chosen:
        chunks = chunks_of(document, options)
        if chunks:
            text = chunks[0].text
            cut = text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + " ..."
            excerpts.append({"source": document.source, "text": cut})
    return excerpts


def proposal_messages(
    prompt: Prompt, excerpts: list[dict[str, str]], count: int
) -> list[dict[str, str]]:
    return prompt.render(excerpts=excerpts, count=count)


async def propose_personas(
    llm: LLM,
    cache: CallLog,
    documents: Iterable[Document],
    options: GenerationOptions,
    count: int,
    *,
    prompt: Prompt | None = None,
    use_cache: bool = True,
    model: str = "",
) -> tuple[Persona, ...]:
    """``count`` personas for the corpus ``documents``, from the step cache or one call.
    ``model``: the LLM's fingerprint (part of the cache key)."""
    prompt = prompt or Prompt.builtin("personas")
    excerpts = corpus_sample(documents, options)
    if not excerpts:
        raise RagjuryError("--personas auto: the documents have no text to propose personas from")
    messages = proposal_messages(prompt, excerpts, count)
    key = hashlib.sha256(
        "\n".join((ROLE, fingerprint(model, prompt.version, count), json.dumps(excerpts))).encode()
    ).hexdigest()
    if use_cache:
        stored = await cache.get_step(key)
        if stored is not None:
            try:
                return tuple(Persona.model_validate(p) for p in json.loads(stored))
            except (ValueError, ValidationError):
                pass  # not what this version stores: ask again
    try:
        proposed = await llm.structured(
            counted(ProposedPersonas, "personas", count), messages, stage=ROLE
        )
    except LLMError as exc:
        raise RagjuryError(
            f"--personas auto: the model did not propose {count} valid personas ({exc}); "
            "run again, or give them in a file with --personas FILE"
        ) from exc
    personas = tuple(
        Persona(name=p.name.strip(), description=p.description.strip()) for p in proposed.personas
    )
    if use_cache:
        await cache.put_step(key, ROLE, json.dumps([p.model_dump() for p in personas]))
    return personas


def with_personas(options: GenerationOptions, personas: Iterable[Persona]) -> GenerationOptions:
    """``options`` drafting for ``personas`` (validated again: distinct names)."""
    from ragjury.config import GenerationOptions

    dumped: Mapping[str, object] = options.model_dump()
    return GenerationOptions.model_validate({**dumped, "personas": tuple(personas)})
