"""The caller's own exception, out of the group a task group wraps it in."""

from __future__ import annotations

from collections.abc import Iterator

import anyio


def only_the_callers(group: BaseExceptionGroup[BaseException], exc: BaseException | None) -> bool:
    """Whether ``group`` holds nothing but ``exc`` (the exception the caller's code raised
    inside ``async with``) and cancellations: then ``exc`` should propagate as it was."""
    if exc is None:
        return False
    cancelled = anyio.get_cancelled_exc_class()
    return all(e is exc or isinstance(e, cancelled) for e in _leaves(group))


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for e in group.exceptions:
        if isinstance(e, BaseExceptionGroup):
            yield from _leaves(e)
        else:
            yield e
