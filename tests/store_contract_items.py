"""The store contract, continued: reading back every item a job was submitted with (what
the generation pipeline relates chunks across documents from)."""

from __future__ import annotations

from ragjury._json import JSONObject
from ragjury.store._common import PAGE
from ragjury.store.base import ItemResults, Store, StoredLabel


async def test_item_payloads_come_back_whole_in_submission_order_a_page_at_a_time(
    store: Store,
) -> None:
    n = PAGE * 2 + 3
    items: list[tuple[str, JSONObject]] = [
        (f"doc-{n - i:04}", {"text": f"body {i}", "i": i}) for i in range(n)
    ]
    job = await store.submit("generate", {"x": 1}, lambda: items)
    await store.finish_item(job.id, items[5][0], ItemResults(report={}))  # state does not matter

    found = [item async for item in store.item_payloads(job.id)]

    assert found == items
    other = await store.submit("generate", {"x": 2}, lambda: items[:1])
    assert [key async for key, _ in store.item_payloads(other.id)] == [items[0][0]]


async def test_labels_are_kept_one_per_metric_and_sample_the_last_import_winning(
    store: Store,
) -> None:
    sample = '{"id": "s1", "question": "Où ? « 東京 »", "answer": "Tōkyō"}'
    await store.put_labels(
        [
            StoredLabel("faithfulness", "s1", "pass", sample, "a.json", "3"),
            StoredLabel("faithfulness", "s2", "fail", sample, "a.json"),
            StoredLabel("correctness", "s1", "4", sample, "a.json"),
        ]
    )
    await store.put_labels([StoredLabel("faithfulness", "s1", "fail", sample, "b.csv", "7")])

    found = await store.labels("faithfulness")
    assert {x.sample_id: (x.label, x.source, x.labelled_by) for x in found} == {
        "s1": ("fail", "b.csv", "7"),
        "s2": ("fail", "a.json", None),
    }
    assert found[0].sample == sample  # non-ASCII text comes back as it went in
    assert [x.metric for x in await store.labels()] == [
        "correctness",
        "faithfulness",
        "faithfulness",
    ]
    assert await store.labels("rubric") == []
