"""The aggregating agents' join state per item, and the deduplicator's decisions with its
index of kept questions (:class:`~ragjury.store.base.Joins`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ragjury.store.base import (
    QuestionDecision,
    QuestionMatcher,
)
from ragjury.store.sql.driven import Driven
from ragjury.store.sql.steps import (
    Steps,
    execute,
    execute_many,
    fetch,
    fetch_one,
    lock,
    text,
)

JOIN_PARTS = (
    "INSERT INTO item_joins AS j (job_id, item_key, parts) VALUES (?, ?, ?) "
    "ON CONFLICT (job_id, item_key) DO UPDATE SET parts = json_merge(excluded.parts, j.parts)"
)
"""Add parts (a JSON object) to an item's join state; a name already there keeps its value."""
_JOIN = JOIN_PARTS + " RETURNING parts"


def join_parts(parts: Mapping[str, str]) -> str:
    """Join parts as the JSON object :data:`JOIN_PARTS` stores."""
    return json.dumps({text(k): text(v) for k, v in parts.items()}, ensure_ascii=False)


_JOINED = "SELECT parts FROM item_joins WHERE job_id = ? AND item_key = ?"


class JoinsSQL(Driven):
    async def join(
        self, job_id: str, item_key: str, parts: Mapping[str, str], prefix: str
    ) -> dict[str, str]:
        # One statement, atomic: the item's row of join state is created or merged with
        # the new parts (a name already there keeps its value) under the row's lock, so of
        # two joins at once the second sees the first's parts.
        if parts:
            merged = join_parts(parts)
            rows = await self._write(lambda: fetch(_JOIN, job_id, item_key, merged), single=True)
        else:
            rows = await self._read(lambda: fetch(_JOINED, job_id, item_key))
        state: dict[str, str] = json.loads(rows[0][0]) if rows else {}
        return {name: value for name, value in state.items() if name.startswith(text(prefix))}

    async def decide_questions(
        self, job_id: str, pairs: Sequence[tuple[str, str]], matcher: QuestionMatcher
    ) -> list[QuestionDecision]:
        ids = [pair_id for pair_id, _ in pairs]
        callers = {text(pair_id): pair_id for pair_id in ids}  # stored id -> the caller's

        def step() -> Steps[list[QuestionDecision]]:
            yield from lock(f"dedup/{job_id}")
            stored = {
                callers[row[0]]: QuestionDecision(callers[row[0]], row[1], row[2])
                for row in (
                    yield from fetch(
                        "SELECT pair_id, duplicate_of, similarity FROM questions "
                        "WHERE job_id = ? AND pair_id = ANY(?)",
                        *(job_id, ids),
                    )
                )
            }
            new = [(pid, q) for pid, q in pairs if pid not in stored]
            if not new:
                return [stored[pid] for pid in ids]
            yield from index_questions(job_id, matcher)
            keys = sorted({key for _, question in new for key in matcher.keys(question)})
            candidates = [
                (int(row[0]), str(row[1]), str(row[2]))
                for row in (
                    yield from fetch(
                        "SELECT DISTINCT q.id, q.pair_id, q.question FROM question_keys k "
                        "JOIN questions q ON q.id = k.question_id "
                        "WHERE k.job_id = ? AND k.key = ANY(?)",
                        *(job_id, keys),
                    )
                )
            ]
            decisions = matcher.decide(candidates, new)
            questions = dict(new)
            for d in decisions:
                [(row,)] = yield from fetch(
                    "INSERT INTO questions (job_id, pair_id, question, duplicate_of, similarity) "
                    "VALUES (?, ?, ?, ?, ?) RETURNING id",
                    *(job_id, d.pair_id, questions[d.pair_id], d.duplicate_of, d.similarity),
                )
                if d.duplicate_of is None:
                    yield from add_keys(job_id, [(int(row), questions[d.pair_id])], matcher)
            by_id = {**stored, **{d.pair_id: d for d in decisions}}
            return [by_id[pid] for pid in ids]

        return await self._write(step)


def index_questions(job_id: str, matcher: QuestionMatcher) -> Steps[None]:
    """Make sure the job's kept questions are indexed under ``matcher``'s keys: once per job,
    or again if they were indexed under another signature."""
    found = yield from fetch_one("SELECT signature FROM question_indexes WHERE job_id = ?", job_id)
    if found is not None and found[0] == matcher.signature:
        return
    yield from execute("DELETE FROM question_keys WHERE job_id = ?", job_id)
    after = -1
    while kept := (
        yield from fetch(
            "SELECT id, question FROM questions WHERE job_id = ? AND duplicate_of IS NULL "
            "AND id > ? ORDER BY id LIMIT 1000",
            *(job_id, after),
        )
    ):
        yield from add_keys(job_id, [(int(r[0]), str(r[1])) for r in kept], matcher)
        after = int(kept[-1][0])
    yield from execute(
        "INSERT INTO question_indexes (job_id, signature) VALUES (?, ?) "
        "ON CONFLICT (job_id) DO UPDATE SET signature = excluded.signature",
        *(job_id, matcher.signature),
    )


def add_keys(job_id: str, kept: Sequence[tuple[int, str]], matcher: QuestionMatcher) -> Steps[None]:
    yield from execute_many(
        "INSERT INTO question_keys (job_id, key, question_id) VALUES (?, ?, ?) "
        "ON CONFLICT DO NOTHING",
        [(job_id, key, row) for row, question in kept for key in matcher.keys(question)],
    )
