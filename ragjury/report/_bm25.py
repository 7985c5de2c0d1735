"""Where a plain BM25 keyword search ranks a question's source chunks (the ``audit`` extra).

Importing this module raises ImportError when ``bm25s`` is not installed; the audit then
says how to install it and reports everything else.
"""

from __future__ import annotations

from collections.abc import Sequence

import bm25s
import numpy as np

from ragjury.report.audit_input import Corpus


def source_ranks(
    corpus: Corpus, questions: Sequence[tuple[str, Sequence[str]]]
) -> list[int | None]:
    """For each (question, its source chunk ids): the rank of the source chunk found last
    when the question searches every chunk of ``corpus`` with BM25 (English stop words
    dropped, no stemming), 1 being the top. Chunks scoring the same as a source chunk rank
    before it. None when a source chunk shares no searchable word with the question."""
    if not questions:
        return []
    ids = list(corpus.chunks)
    position = {chunk_id: i for i, chunk_id in enumerate(ids)}
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize([corpus.chunks[i] for i in ids], stopwords="en", show_progress=False),
        show_progress=False,
    )
    queries = bm25s.tokenize(
        [question for question, _ in questions],
        stopwords="en",
        show_progress=False,
        return_ids=False,
    )
    ranks: list[int | None] = []
    for tokens, (_, sources) in zip(queries, questions, strict=True):
        if not tokens:
            ranks.append(None)
            continue
        scores = np.asarray(retriever.get_scores(list(tokens)))
        worst: int | None = 0
        for source in sources:
            score = scores[position[source]]
            if score <= 0.0:
                worst = None
                break
            rank = int(np.count_nonzero(scores >= score))  # itself and every tie or better
            worst = max(worst or 0, rank)
        ranks.append(worst)
    return ranks
