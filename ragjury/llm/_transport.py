"""Which transport failures are worth retrying, and how long to wait before the next try."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

RETRYABLE_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))


def status_of(exc: BaseException) -> int | str:
    """The HTTP status of a failed request, or a short name for a failure without one."""
    import openai  # loaded with the client; imported here, not before

    if isinstance(exc, openai.APIStatusError):
        return exc.status_code
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    return type(exc).__name__


def is_retryable(exc: BaseException) -> bool:
    import openai  # loaded with the client; imported here, not before

    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRYABLE_STATUS
    return isinstance(exc, openai.APITimeoutError | openai.APIConnectionError)


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms`` or ``Retry-After``), if any."""
    import openai  # loaded with the client; imported here, not before

    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def backoff(attempt: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Exponential backoff with full jitter: uniform in [base/2, min(cap, base * 2**attempt)]."""
    ceiling = min(cap, base * (2**attempt))
    return rng.uniform(min(base / 2, ceiling), ceiling)
