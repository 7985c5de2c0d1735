"""The store contract, part two: every text column of every store keeps the same text,
whatever the input held (``tests/test_store.py`` runs it on SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import re

import pytest
from store_contract import HELD, _message

from ragjury.agents.question_index import QuestionIndex
from ragjury.llm.usage import CallStats
from ragjury.store.base import ItemResults, Store

POISON = ["a\x00b", "lone \ud800 surrogate", "", "?!...", "\x00", "\udfff\x00\ud83d"]
"""Texts PostgreSQL's text type or UTF-8 cannot hold as they are, and texts with no words."""
STORED = ["a\ufffdb", "lone \ufffd surrogate", "", "?!...", "\ufffd", "\ufffd\ufffd\ufffd"]


@pytest.mark.parametrize(("given", "kept"), list(zip(POISON, STORED, strict=True)))
async def test_every_text_column_stores_nul_surrogates_and_empty_text_alike(
    store: Store, given: str, kept: str
) -> None:
    # keys, payloads and options of jobs and items; results; messages; join state; the
    # deduplicator's questions; the step cache; runs and LLM calls; errors; workers
    job = await store.submit(
        "generate", {"o": given}, lambda: [(f"d{given}", {"t": given}), ("d2", {"t": "x"})]
    )
    key = f"d{kept}"
    assert await store.item_payload(job.id, key) == {"t": given}  # JSON escapes them
    assert (await store.job(job.id)).options == {"o": given}
    pair = {"id": f"p{given}", "outcome": "kept", "question": given, "source": given}
    sample = {"id": f"s{given}", "answer": given}
    await store.put_messages([_message(job.id, key, given, given)])
    (message,) = (
        await store.claim_messages("w", [kept], 1, lease_seconds=HELD, max_attempts=5)
    ).messages
    assert (message.group, message.body, message.item_key) == (kept, kept, key)
    assert await store.join(job.id, key, {f"n{given}": given}, "n") == {f"n{kept}": kept}
    matcher = QuestionIndex(0.9)
    [decision] = await store.decide_questions(job.id, [(f"q{given}", given)], matcher)
    assert decision.pair_id == f"q{given}"  # the caller's own id, however it is stored
    assert await store.decide_questions(job.id, [(f"q{given}", given)], matcher) == [decision]
    assert await store.nack_message(message.id, given, max_attempts=5, retry_after=0.0) is False
    await store.finish_item(
        job.id, key, ItemResults(pairs=[pair], samples=[(sample, given)], report={"r": given})
    )
    assert await store.fail_item(job.id, "d2", given) is True
    # JSON escapes NUL (and, written as ASCII, surrogates too); records keep other text as is
    in_record = re.sub("[\ud800-\udfff]", "\ufffd", given)
    assert [r async for r in store.pairs([job.id])] == [
        {"id": f"p{in_record}", "outcome": "kept", "question": in_record, "source": in_record}
    ]
    assert [r async for r in store.samples([job.id])] == [
        {"id": f"s{in_record}", "answer": in_record}
    ]
    assert [json.loads(t) async for t in store.sample_texts(job.id)] == [
        {"id": f"s{in_record}", "answer": in_record}
    ]
    assert [s async for s in store.scored(job.id)] == [kept]
    assert [r async for r in store.reports(job.id)] == [{"r": given}]
    assert await store.failed_items(job.id) == [{"item": "d2", "error": kept}]
    await store.put_step(f"k{given}", given, given)
    assert await store.get_step(f"k{given}") == kept
    run_id = await store.start_run(given, {"s": given})
    await store.record_call(run_id, CallStats(stage=given, model=given), given)
    await store.finish_run(run_id, {"job": job.id, "s": given})
    run = await store.latest_run(job.id)
    assert run is not None
    assert (run.command, run.summary) == (kept, {"job": job.id, "s": given})
    await store.register_worker(f"w{given}", [given])
    assert [d["agents"] for d in (await store.status())["daemons"]] == [[kept]]
