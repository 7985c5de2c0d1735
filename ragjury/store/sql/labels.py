"""People's verdicts on judged samples, as ``ragjury review import`` reads them back
(:class:`~ragjury.store.base.Labels`): one label per metric and sample, the last import
winning, kept with the sample it was given on so ``calibrate`` can judge it again."""

from __future__ import annotations

from collections.abc import Sequence

from ragjury.store.base import StoredLabel
from ragjury.store.sql.driven import Driven
from ragjury.store.sql.steps import Steps, execute_many

_PUT = (
    "INSERT INTO labels (metric, sample_id, label, sample, source, labelled_by, imported_at) "
    "VALUES (?, ?, ?, ?, ?, ?, now_epoch()) ON CONFLICT (metric, sample_id) DO UPDATE SET "
    "label = excluded.label, sample = excluded.sample, source = excluded.source, "
    "labelled_by = excluded.labelled_by, imported_at = excluded.imported_at"
)


class LabelsSQL(Driven):
    async def put_labels(self, labels: Sequence[StoredLabel]) -> None:
        rows = [(x.metric, x.sample_id, x.label, x.sample, x.source, x.labelled_by) for x in labels]

        def put() -> Steps[None]:
            yield from execute_many(_PUT, rows)

        await self._write(put)

    async def labels(self, metric: str | None = None) -> list[StoredLabel]:
        where, params = ("WHERE metric = ?", (metric,)) if metric is not None else ("", ())
        rows = await self.read(
            "SELECT metric, sample_id, label, sample, source, labelled_by FROM labels "
            f"{where} ORDER BY metric, imported_at, sample_id",
            params,
        )
        return [
            StoredLabel(str(m), str(i), str(label), str(sample), str(source), by)
            for m, i, label, sample, source, by in rows
        ]
