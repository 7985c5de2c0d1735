"""The store contract, continued: reading back every item a job was submitted with (what
the generation pipeline relates chunks across documents from)."""

from __future__ import annotations

from ragjury.store._common import PAGE
from ragjury.store.base import ItemResults, Store


async def test_item_payloads_come_back_whole_in_submission_order_a_page_at_a_time(
    store: Store,
) -> None:
    n = PAGE * 2 + 3
    items = [(f"doc-{n - i:04}", {"text": f"body {i}", "i": i}) for i in range(n)]
    job = await store.submit("generate", {"x": 1}, lambda: items)
    await store.finish_item(job.id, items[5][0], ItemResults(report={}))  # state does not matter

    found = [item async for item in store.item_payloads(job.id)]

    assert found == items
    other = await store.submit("generate", {"x": 2}, lambda: items[:1])
    assert [key async for key, _ in store.item_payloads(other.id)] == [items[0][0]]
